"""Which optimizer a checkpoint's per-parameter states come from, and what each parameter
must then hold.

An optimizer keeps a fixed set of tensors for each parameter it has stepped: Adam's two
moments, Adagrad's `sum`, RMSprop's `square_avg`, Adafactor's factored row and column
statistics. A check that expects Adam's moments calls every other optimizer's healthy
checkpoint broken, and one that expects nothing misses a lost moment. So the set is
recognised from the state names the checkpoint holds (`identify`), and each parameter is
then held to that set (`OptimizerStates.missing`); where parameters hold different known
sets (Muon on the matrices chained with Adam on the rest) each is held to its own
(`identify_each`). A set no optimizer here keeps is reported as unknown by the caller,
never judged against Adam's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from mfsdp_ckpt.check.printable import first_of


@dataclass(frozen=True)
class OptimizerStates:
    """One optimizer's per-parameter state names.

    `alternatives`: a stepped parameter holds one of these sets whole (Adafactor keeps
    factored row/column statistics for a matrix and one full one for a vector);
    `optional`: states some settings add (AMSGrad's `max_exp_avg_sq`, RMSprop's momentum);
    `bookkeeping`: counters and scalars, never required; `like_parameter`: the states shaped
    like their parameter, whose shapes are checked."""

    name: str
    alternatives: tuple[tuple[str, ...], ...]
    like_parameter: frozenset[str]
    optional: frozenset[str] = frozenset()
    bookkeeping: frozenset[str] = frozenset({"step"})

    @property
    def names(self) -> frozenset[str]:
        """Every state name this optimizer may keep."""
        required = {name for alternative in self.alternatives for name in alternative}
        return frozenset(required) | self.optional | self.bookkeeping

    def explains(self, held: Collection[str]) -> bool:
        """Whether `held` (the names over all parameters) is this optimizer's: one of its
        sets is there whole, and nothing it never keeps."""
        return set(held) <= self.names and any(set(a) <= set(held) for a in self.alternatives)

    def missing(self, held: Collection[str]) -> tuple[str, ...]:
        """What a parameter holding `held` lacks: nothing when one set is whole, else the
        rest of the set it holds most of (the first set when it holds none)."""
        if any(set(a) <= set(held) for a in self.alternatives):
            return ()
        closest = max(self.alternatives, key=lambda a: len(set(a) & set(held)))
        return tuple(name for name in closest if name not in held)


_ADAM = ("exp_avg", "exp_avg_sq")
# Megatron's distributed optimizer keeps each parameter's fp32 main weight beside its
# states (distrib_optimizer.py `_get_main_param_and_optimizer_states`: "param" and Adam's or
# Lion's states; `step` is not saved per parameter). Its torch_dist saves name it after
# their format, and Megatron-LM's checkpoint_inspector.py convert-torch-dist-to-fsdp-dtensor
# keeps that name: `fp32_param` in `fully_sharded_model_space` (the default fully-parallel
# save from June 2024 to December 2025), `param` in `fully_reshardable`.
_MAIN_PARAMS = frozenset({"param", "fp32_param"})

# First match wins. A set may fit two optimizers (Adam's moments alone also fit
# transformers' Adafactor with beta1 on vectors only): the common one comes first, and the
# names only one keeps (exp_avg_sq_row, acc_delta) decide the rest, since `explains`
# needs every held name known.
KNOWN_OPTIMIZERS: tuple[OptimizerStates, ...] = (
    OptimizerStates(
        "Adam",  # AdamW, NAdam and RAdam keep the same
        (_ADAM,),
        # max_exp_avg_sq: amsgrad; master_param: Megatron's precision-aware optimizer
        like_parameter=frozenset({*_ADAM, "max_exp_avg_sq", "master_param", *_MAIN_PARAMS}),
        optional=frozenset({"max_exp_avg_sq", "master_param", *_MAIN_PARAMS}),
        bookkeeping=frozenset({"step", "mu_product"}),  # mu_product: NAdam
    ),
    OptimizerStates("Adamax", (("exp_avg", "exp_inf"),), frozenset({"exp_avg", "exp_inf"})),
    OptimizerStates(
        "Adafactor (transformers)",
        (("exp_avg_sq_row", "exp_avg_sq_col"), ("exp_avg_sq",)),
        like_parameter=frozenset({"exp_avg", "exp_avg_sq"}),
        optional=frozenset({"exp_avg"}),  # with beta1
        bookkeeping=frozenset({"step", "RMS"}),
    ),
    OptimizerStates(
        "Adafactor (torch)", (("row_var", "col_var"), ("variance",)), frozenset({"variance"})
    ),
    OptimizerStates(
        "Adadelta", (("square_avg", "acc_delta"),), frozenset({"square_avg", "acc_delta"})
    ),
    OptimizerStates(
        "RMSprop",
        (("square_avg",),),
        like_parameter=frozenset({"square_avg", "momentum_buffer", "grad_avg"}),
        optional=frozenset({"momentum_buffer", "grad_avg"}),  # momentum, centered
    ),
    OptimizerStates("Adagrad", (("sum",),), frozenset({"sum"})),
    OptimizerStates("SGD", (("momentum_buffer",),), frozenset({"momentum_buffer"})),
    # Lion keeps no step: Adam's states with every exp_avg_sq lost are no Lion's
    OptimizerStates(
        "Lion",
        (("exp_avg",),),
        frozenset({"exp_avg", *_MAIN_PARAMS}),
        optional=_MAIN_PARAMS,
        bookkeeping=frozenset(),
    ),
)


def identify(held: Collection[str]) -> OptimizerStates | None:
    """The known optimizer whose states `held` (the names over all parameters) are, or
    None when no optimizer here keeps that set."""
    return next((kind for kind in KNOWN_OPTIMIZERS if kind.explains(held)), None)


# States kept per element of their parameter by some optimizer here: whatever optimizer
# wrote them, each is shaped like its parameter (an unknown or chained set included).
PER_ELEMENT: frozenset[str] = frozenset().union(*(k.like_parameter for k in KNOWN_OPTIMIZERS))

# Muon keeps SGD's momentum_buffer alone (torch.optim.Muon's `momentum_buffer`, Megatron-LM's
# `--optimizer muon` through emerging_optimizers' OrthogonalizedOptimizer), so the names
# cannot tell them apart: its stored param groups (`ns_steps`) or the run's record name it
# (`named_momentum`). Without them, momentum on matrices alone beside Adam's moments on the
# rest is Muon's layout (torch's Muon refuses any parameter not 2-D; Megatron-LM routes
# embeddings, the output layer and every non-2-D parameter to Adam), but SGD chained the
# same way keeps the very same state: such momentum is named as either. Momentum on a
# vector is SGD's: no Muon steps one.
MUON = "Muon"
SGD_OR_MUON = "momentum (SGD or Muon)"
_SGD = next(kind for kind in KNOWN_OPTIMIZERS if kind.name == "SGD")


def chained(members: Iterable[OptimizerStates]) -> OptimizerStates:
    """One set for optimizers chained over disjoint parameters (Megatron-LM's Muon on the
    linear weights beside Adam on the rest, torch's Muon beside AdamW): each parameter
    holds one member's set whole."""
    kinds = list(members)
    return OptimizerStates(
        " + ".join(kind.name for kind in kinds),
        tuple(a for kind in kinds for a in kind.alternatives),
        frozenset().union(*(kind.like_parameter for kind in kinds)),
        frozenset().union(*(kind.optional for kind in kinds)),
        frozenset().union(*(kind.bookkeeping for kind in kinds)),
    )


def identify_each(sets: Iterable[Collection[str]]) -> OptimizerStates | None:
    """The optimizer, or chain of optimizers, whose states the parameters hold, `sets`
    being each parameter's state names: `identify` of their union, else of each distinct
    set, chained. A set that is a strict part of another known one is that one's with
    states lost (Adam's exp_avg without its exp_avg_sq beside whole Adam sets), so it
    names no optimizer of its own; None when a set is no known optimizer's."""
    distinct = {frozenset(names) for names in sets}
    union = frozenset().union(*distinct)
    kind = identify(union)
    if kind is not None or not distinct:
        return kind
    known = {names: identify(names) for names in distinct}
    whole = [n for n in distinct if not any(n < m and known[m] for m in distinct)]
    if any(known[names] is None for names in whole):
        return None
    members = {known[names] for names in whole}
    chain = chained(k for k in KNOWN_OPTIMIZERS if k in members)
    return chain if chain.explains(union) else None


def named_momentum(kind: OptimizerStates, name: str) -> OptimizerStates:
    """`kind` with SGD's momentum_buffer named `name`: `MUON` where the checkpoint says Muon
    wrote it, `SGD_OR_MUON` where its layout fits both."""
    members = [name if member == "SGD" else member for member in kind.name.split(" + ")]
    return replace(kind, name=" + ".join(members))


def members(kind: OptimizerStates) -> tuple[OptimizerStates, ...]:
    """The optimizers chained in `kind` (itself, where it chains none), each with its own
    sets: a Muon or "SGD or Muon" member keeps SGD's momentum_buffer under its name."""
    by_name = {known.name: known for known in KNOWN_OPTIMIZERS}
    return tuple(by_name.get(name) or replace(_SGD, name=name) for name in kind.name.split(" + "))


def with_muon(kind: OptimizerStates) -> OptimizerStates:
    """`kind` as a record naming Muon says it is: its momentum_buffer named Muon's, or Muon
    chained to it where no parameter holds momentum any more (every one lost), so that a
    matrix without state is held to Muon's set rather than to the rest's."""
    if "SGD" in kind.name.split(" + "):
        return named_momentum(kind, MUON)
    if MUON in kind.name.split(" + "):
        return kind
    return chained([*members(kind), replace(_SGD, name=MUON)])


def lost_sets(
    kind: OptimizerStates, matrix: bool, muon_lost: bool, recorded: bool
) -> tuple[OptimizerStates, ...]:
    """Which members' sets a parameter the optimizer stepped, now holding no state, may
    have lost. A vector: the members' other than Muon's (Muon steps matrices only; momentum
    that may be SGD's stays). A matrix: Muon's alone where `muon_lost` (a record names Muon
    and no momentum_buffer is left anywhere, so Muon's were lost); every member's otherwise,
    and where no record names the optimizer (`recorded` False) and no member keeps
    momentum, also momentum (SGD or Muon)'s: a Muon run whose every momentum_buffer is lost
    leaves Adam's moments alone. More than one: nothing tells which, and the caller names
    each."""
    chain = members(kind)
    muon = tuple(member for member in chain if member.name == MUON)
    if not matrix:
        return tuple(member for member in chain if member.name != MUON) or chain
    if muon and muon_lost:
        return muon
    if recorded or any(member.name in {MUON, SGD_OR_MUON, "SGD"} for member in chain):
        return chain
    return (*chain, replace(_SGD, name=SGD_OR_MUON))


@dataclass(frozen=True)
class HeldStates:
    """Which optimizer's state a checkpoint holds, as inspect and validate report it:
    `name`, the optimizer `identify` recognises (None: no known one keeps that set), and
    `states`, the per-parameter state names held, sorted. A user resuming with another
    optimizer setting reads here what the checkpoint can give it."""

    name: str | None
    states: tuple[str, ...]

    def __str__(self) -> str:
        """`Adam (exp_avg, exp_avg_sq, step)`, or `no known optimizer's (qmap1, state1)`
        (a few names of an unknown set, and how many more)."""
        said = self.name if self.name is not None else "no known optimizer's"
        return f"{said} ({first_of(self.states, _SHOWN_NAMES)})"


_SHOWN_NAMES = 8  # any known optimizer's set fits; an unknown one is cut


def held_states(held: Collection[str], kind: OptimizerStates | None = None) -> HeldStates:
    """`held` (the state names over all parameters) with the optimizer they are: `kind`,
    where the caller recognised it per parameter (`identify_each`), else `identify`'s."""
    kind = kind or identify(held)
    return HeldStates(None if kind is None else kind.name, tuple(sorted(held)))


def known_names() -> str:
    """The optimizers `identify` knows, for a message that names none of them."""
    return ", ".join(kind.name for kind in KNOWN_OPTIMIZERS)


__all__ = [
    "KNOWN_OPTIMIZERS",
    "MUON",
    "PER_ELEMENT",
    "SGD_OR_MUON",
    "HeldStates",
    "OptimizerStates",
    "held_states",
    "identify",
    "identify_each",
    "known_names",
    "lost_sets",
    "members",
    "named_momentum",
    "with_muon",
]
