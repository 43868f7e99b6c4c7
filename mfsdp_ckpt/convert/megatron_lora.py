"""Megatron LoRA adapters (Megatron-Bridge's `LoRA`, which verl's Megatron backend uses) seen
as the Hugging Face PEFT adapter they are equal to.

Bridge wraps linear_qkv, linear_proj, linear_fc1 and linear_fc2 with a ParallelLinearAdapter
(megatron/bridge/peft/lora.py, utils.py): `<module>.adapter.linear_in.weight` is A (dim x in),
`<module>.adapter.linear_out.weight` is B (out x dim), and the adapter's output is scaled by
alpha / dim, so the module's weight becomes W + alpha / dim * B @ A. B's rows follow the
layout of the base weight they add to: for linear_qkv the per-query-group [q heads, k, v]
interleave, for linear_fc1 [gate; up]. Splitting B's rows the way the base weight is split
gives, for each Hugging Face module, A (shared) and its own rows of B: exactly PEFT's
lora_A / lora_B of q_proj, k_proj, v_proj (gate_proj, up_proj), with the same scale. So one
description serves a merged export (each HF weight plus its delta), a PEFT adapter export,
and a merge onto a base model read from elsewhere.

Canonical LoRA's separate q/k/v (gate/up) adapters are each one HF module's already.
Variants whose math differs (DoRA's magnitude vector, several adapters on one module) and
adapters on modules without a dense HF counterpart are refused in one line naming the
variant: exporting them as plain LoRA would write a different model. Linear_fc1's B is
[gate; up] per tensor-parallel rank, which the fsdp_dtensor save keeps in rank order without
splitting it into _w / _v as it does the base weight: its rows are split rank by rank as a
fused base weight's are, where the checkpoint's record proves that order
(`fused_tensors.GateUpOrder`), and refused where it does not (`check_b_splits`).

The same description holds a PEFT adapter saved as a DCP: Hugging Face's Trainer (and
TRL's) with FSDP's SHARDED_STATE_DICT saves a PEFT model's adapter alone
(`get_peft_model_state_dict`: `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`,
the `base_model.model.` going with the wrapper segments), each lora_A / lora_B already an HF
module's, scaled by lora_alpha / r. Its variants (DoRA's magnitude vector, LoRA on an
embedding) are refused by name as Megatron's are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.convert.export_errors import AdapterKindRefused
from mfsdp_ckpt.convert.fused_tensors import COPY, GATE_UP, QKV, Geometry, Transform
from mfsdp_ckpt.convert.mapping_errors import AdapterWeightsError, ShapeError, StoredShapeError
from mfsdp_ckpt.convert.weight_dtype import refuse_non_float_adapter

if TYPE_CHECKING:
    import torch

    from mfsdp_ckpt.convert.megatron_lora_ranks import DeclaredRanks
    from mfsdp_ckpt.format.dtypes import DType
    from mfsdp_ckpt.storage.reader import CheckpointReader

_ADAPTER_PATH = re.compile(r"\.adapters?\.")
_LORA_KEY = re.compile(
    r"^decoder\.layers\.(?P<layer>\d+)\.(?P<part>self_attention\.linear_qkv|"
    r"self_attention\.linear_proj|mlp\.linear_fc1|mlp\.linear_fc2)"
    r"\.adapter\.(?:adapter_(?P<sub>q|k|v|gate|up)\.)?linear_(?P<which>in|out)\.weight$"
)
# Adapters whose math is not W + scale * B @ A, by the names they add.
_VARIANTS = (
    (re.compile(r"\.adapter\.weight_magnitude$"), "DoRA (its weight_magnitude rescales W)"),
    (re.compile(r"\.adapters\."), "several adapters on one module"),
)
# The HF modules each adapted Megatron module stands for, and how B's rows split between them.
_HF_MODULES: dict[str, tuple[tuple[str, ...], Transform]] = {
    "self_attention.linear_qkv": (
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        QKV,
    ),
    "self_attention.linear_proj": (("self_attn.o_proj",), COPY),
    "mlp.linear_fc1": (("mlp.gate_proj", "mlp.up_proj"), GATE_UP),
    "mlp.linear_fc2": (("mlp.down_proj",), COPY),
}
# Canonical LoRA (peft/canonical_lora.py) adapts q, k, v (gate, up) apart: each adapter's
# output is already that HF module's, in Hugging Face row order (LoRALinearSplitQKV
# interleaves the three outputs per query group only when adding them to linear_qkv's).
_CANONICAL: dict[tuple[str, str], str] = {
    ("self_attention.linear_qkv", "q"): "self_attn.q_proj",
    ("self_attention.linear_qkv", "k"): "self_attn.k_proj",
    ("self_attention.linear_qkv", "v"): "self_attn.v_proj",
    ("mlp.linear_fc1", "gate"): "mlp.gate_proj",
    ("mlp.linear_fc1", "up"): "mlp.up_proj",
}
# A PEFT adapter's saved names, the wrapper segments gone: an HF module's lora_A / lora_B.
_PEFT_KEY = re.compile(r"^(?P<module>[\w.]+)\.lora_(?P<which>[AB])\.weight$")
# Names a saved PEFT adapter gives (no adapter-name segment: `lora_A.default.weight` is a
# live PeftModel's, as mfsdp's own LoRA checkpoints store it, read through their manifest).
_PEFT_PATH = re.compile(r"\.lora_(?:[AB]\.weight|embedding_[AB]|magnitude_vector(?:\.weight)?)$")
_PEFT_VARIANTS = (
    (re.compile(r"\.lora_magnitude_vector"), "DoRA (its lora_magnitude_vector rescales W)"),
    (re.compile(r"\.lora_embedding_[AB]$"), "LoRA on an embedding"),
    (  # peft's target_parameters on a fused [E, ...] expert weight (transformers 5.x MoE)
        re.compile(r"\.experts\.lora_[AB]\.weight$"),
        "LoRA on the fused expert parameters (peft's target_parameters)",
    ),
)
SUPPORTED_VARIANT = (
    "Megatron-Bridge LoRA and canonical LoRA (linear_in / linear_out adapters) and PEFT's"
    " plain LoRA (lora_A / lora_B)"
)


@dataclass(frozen=True)
class HFLoraTarget:
    """One HF module's LoRA: the stored A and B it comes from, and which part of B's rows."""

    module: str  # model.layers.0.self_attn.q_proj
    a_key: str
    b_key: str
    part: int  # index into the transform's outputs
    transform: Transform


@dataclass
class MegatronLora:
    """The adapter tensors of a Megatron checkpoint, by the HF module they adapt."""

    rank: int
    targets: dict[str, HFLoraTarget]  # by HF weight name (`...q_proj.weight`)
    adapter_keys: list[str]  # the stored keys, A and B of every adapted module
    first_key: str
    scale: float | None = None  # alpha / rank, once known (export needs it, validate not)
    alpha: float | None = None
    notes: list[str] = field(default_factory=list)

    def lora_a(self, reader: CheckpointReader, weight: str) -> torch.Tensor:
        return reader.read_tensor(self.targets[weight].a_key)

    def lora_b(self, reader: CheckpointReader, weight: str, geometry: Geometry) -> torch.Tensor:
        """This HF module's rows of the stored B (split as the base weight is)."""
        target = self.targets[weight]
        whole = reader.read_tensor(target.b_key)
        return target.transform.apply(whole, geometry)[target.part].contiguous()

    def delta(self, reader: CheckpointReader, weight: str, geometry: Geometry) -> torch.Tensor:
        """scale * B @ A in fp32: what the adapter adds to the HF weight `weight`."""
        if self.scale is None:
            raise ValueError("the LoRA scale is not known yet")
        a = self.lora_a(reader, weight).float()
        b = self.lora_b(reader, weight, geometry).float()
        return (b @ a) * self.scale

    def hf_modules(self) -> list[str]:
        return sorted(weight.removesuffix(".weight") for weight in self.targets)


def check_b_splits(
    lora: MegatronLora, shapes: dict[str, tuple[int, ...]], geometry: Geometry
) -> None:
    """Each stored B (`shapes`: by stored key) splits into its HF modules' rows as its base
    weight would under `geometry`: ShapeError naming the first that does not, a fused
    linear_fc1's B whose order over tensor-parallel ranks the record does not prove
    included (its rows would be split by a guess)."""
    for target in lora.targets.values():
        if target.transform is GATE_UP and geometry.gate_up.unknown is not None:
            raise StoredShapeError(
                f"[{target.b_key}]: the LoRA B of {geometry.gate_up.unknown}; not exported"
            )
        try:
            target.transform.shapes(shapes[target.b_key], geometry)
        except ShapeError as err:
            raise type(err)(f"[{target.b_key}]: {err}") from None


def _is_adapter(path: str) -> bool:
    return bool(_ADAPTER_PATH.search(path) or _PEFT_PATH.search(path))


MEGATRON_KIND, PEFT_KIND = "Megatron PEFT", "Hugging Face PEFT"


def adapter_kind(adapter_paths: Iterable[str]) -> str:
    """Whose adapter these tensors are, for messages: Megatron's PEFT or Hugging Face's."""
    megatron = any(_ADAPTER_PATH.search(path) for path in adapter_paths)
    return MEGATRON_KIND if megatron else PEFT_KIND


def holds_adapters(module_paths: Iterable[str]) -> bool:
    """Whether any of a checkpoint's model names is a Megatron or PEFT adapter's."""
    return any(_is_adapter(path) for path in module_paths)


def adapter_summary(shapes: dict[str, tuple[int, ...]]) -> str | None:
    """One line for inspect and validate about the Megatron or PEFT adapter among a
    checkpoint's model weights (module path -> shape), or None when there is none: its kind,
    rank, modules and whether the base weights are saved beside it."""
    adapters = [path for path in shapes if _is_adapter(path)]
    if not adapters:
        return None
    base = "beside the base weights" if len(adapters) < len(shapes) else "adapter only, no base"
    if not any(_ADAPTER_PATH.search(path) for path in adapters):
        return _peft_summary(adapters, shapes, base)
    variant = next(
        (name for pattern, name in _VARIANTS for path in adapters if pattern.search(path)), None
    )
    if variant is not None:
        return f"Megatron PEFT adapter: {variant}, {len(adapters)} tensors, {base}"
    inputs = [(m, shapes[p]) for p in adapters if (m := _LORA_KEY.match(p)) and m["which"] == "in"]
    ranks = sorted({shape[0] for _, shape in inputs if shape})
    parts = sorted({match["part"].rsplit(".", 1)[-1] for match, _ in inputs})
    rank = "/".join(map(str, ranks)) or "?"
    kind = "canonical LoRA" if any(match["sub"] for match, _ in inputs) else "LoRA"
    return f"Megatron {kind} rank {rank} on {len(inputs)} modules ({', '.join(parts)}), {base}"


def _peft_summary(adapters: list[str], shapes: dict[str, tuple[int, ...]], base: str) -> str:
    variant = next(
        (name for pattern, name in _PEFT_VARIANTS for path in adapters if pattern.search(path)),
        None,
    )
    if variant is not None:
        return f"PEFT adapter: {variant}, {len(adapters)} tensors, {base}"
    inputs = [(m, shapes[p]) for p in adapters if (m := _PEFT_KEY.match(p)) and m["which"] == "A"]
    rank = "/".join(map(str, sorted({shape[0] for _, shape in inputs if shape}))) or "?"
    parts = sorted({match["module"].rsplit(".", 1)[-1] for match, _ in inputs})
    return f"PEFT LoRA rank {rank} on {len(inputs)} modules ({', '.join(parts)}), {base}"


def stored_adapter_summary(reader: CheckpointReader) -> str | None:
    """`adapter_summary` of a checkpoint (names that cannot be told apart: None, the
    config check reports them)."""
    from mfsdp_ckpt.convert.mapping_errors import MappingError
    from mfsdp_ckpt.convert.name_maps import model_tensors

    try:
        stored = model_tensors(reader.tensors)
    except MappingError:
        return None
    return adapter_summary({path: reader.tensors[key].shape for path, key in stored.items()})


def split_adapters(
    paths: dict[str, tuple[int, ...]],
    stored: dict[str, str],
    dtypes: Mapping[str, DType],
    rank_pattern: DeclaredRanks | None = None,
) -> tuple[dict[str, tuple[int, ...]], dict[str, str], dict[str, str]]:
    """(base paths, base keys, adapter paths -> keys): the adapter tensors (Megatron's or
    PEFT's) taken out of a checkpoint's module paths (`dtypes`: by stored key).
    AdapterWeightsError names a variant or module this export cannot reproduce exactly,
    once the adapter is known to be intact (`_refuse_damage`; StoredDtypeError for a tensor
    of no float, `refuse_non_float_adapter`): a kind refusal reads as a sound adapter of
    another kind. `rank_pattern`: what declares per-module ranks (`declared_rank_pattern`),
    under which several ranks are that kind, not damage."""
    adapters = {p: k for p, k in stored.items() if _is_adapter(p)}
    # damage wins: found whatever kind the adapter is
    refuse_non_float_adapter(adapters.values(), dtypes, adapter_kind(adapters))
    _refuse_damage(adapters, paths, rank_pattern)
    for path in sorted(adapters):
        _check_adapter_name(path, adapters[path])
    base_paths = {p: s for p, s in paths.items() if p not in adapters}
    base_keys = {p: k for p, k in stored.items() if p not in adapters}
    if adapters and adapter_kind(adapters) == PEFT_KIND:
        _refuse_peft_extras(base_keys)
    return base_paths, base_keys, adapters


def _refuse_peft_extras(others: dict[str, str]) -> None:
    """A PEFT adapter save (`get_peft_model_state_dict`) holds lora_A / lora_B and, beside
    them, only what else the adapter trained: biases (`bias="lora_only"` / `"all"`,
    `...base_layer.bias`), LoRA biases (`lora_bias=True`, `...lora_B.bias`), whole modules
    (`modules_to_save`), embedding rows (`trainable_token_indices`), or an adapted lm_head's
    or embedding's own weight (`save_embedding_layers`, which may hold a resized
    vocabulary). Merged or written as an adapter without them, the model would differ:
    refused, naming the first."""
    if not others:
        return
    path = min(others)
    if re.search(r"\.lora_[AB]\.bias$", path):
        what = "a bias on lora_B (peft's lora_bias=True)"
    elif path.endswith(".bias"):
        what = 'a trained bias (peft\'s bias="lora_only" or "all")'
    elif path.endswith(".base_layer.weight"):
        what = "an adapted module's own weight (peft saves an adapted lm_head's or embedding's"
        what += " beside its adapter: save_embedding_layers)"
    else:
        what = "a trained module or tokens saved beside the adapter (peft's modules_to_save or"
        what += " trainable_token_indices)"
    named = first_of([f"[{others[extra]}]" for extra in sorted(others)], 1)
    raise AdapterKindRefused(
        f"{named}: a PEFT adapter save that also holds {what}; export-hf"
        f" converts {SUPPORTED_VARIANT} only, and would leave it out"
    )


# Per kind of adapter: what it is, its variants, the names export maps and what those are.
_NAME_RULES = {
    "megatron": (
        "a Megatron PEFT adapter",
        _VARIANTS,
        _LORA_KEY,
        "on a module export-hf does not map (it maps linear_in / linear_out adapters of a"
        " decoder layer's linear_qkv, linear_proj, linear_fc1 and linear_fc2)",
    ),
    "peft": (
        "a PEFT adapter",
        _PEFT_VARIANTS,
        _PEFT_KEY,
        "under a name export-hf does not map (it maps MODULE.lora_A.weight /"
        " MODULE.lora_B.weight, as PEFT saves one adapter)",
    ),
}


def _check_adapter_name(path: str, key: str) -> None:
    """AdapterWeightsError naming the variant or module of an adapter tensor this export
    cannot reproduce exactly."""
    kind, variants, mapped, what_maps = _NAME_RULES[
        "megatron" if _ADAPTER_PATH.search(path) else "peft"
    ]
    for pattern, variant in variants:
        if pattern.search(path):
            raise AdapterKindRefused(
                f"[{key}]: {kind} of kind {variant}; export-hf converts {SUPPORTED_VARIANT} only"
            )
    if mapped.match(path) is None:
        raise AdapterKindRefused(f"[{key}]: {kind} tensor {what_maps}")


def _refuse_damage(
    adapters: dict[str, str],
    paths: dict[str, tuple[int, ...]],
    rank_pattern: DeclaredRanks | None = None,
) -> None:
    """Damage in adapter tensors (module path -> stored key; `paths`: their shapes) that
    needs no config, raised before any kind refusal (validate reads a kind refusal as an
    intact adapter of another kind): PEFT tensors beside Megatron ones, a canonical part on
    a module without it, half of an A/B pair gone, a pair of no LoRA's shapes, several
    ranks that nothing declares (`rank_pattern`: what does; its ranks are a kind, refused
    after the other kinds). Tensors of a refused variant (DoRA's magnitude, ...) or an
    unmapped name are left to the kind refusal; the pairs among the rest are checked
    whatever they sit beside."""
    if not adapters:
        return
    peft = {path: key for path, key in adapters.items() if not _ADAPTER_PATH.search(path)}
    if peft and len(peft) < len(adapters):
        raise AdapterWeightsError(
            f"[{min(peft.values())}]: PEFT adapter tensors beside Megatron ones; one"
            " checkpoint holds one kind of adapter"
        )
    rule = "peft" if peft else "megatron"
    _, variants, mapped, _ = _NAME_RULES[rule]
    plain = {
        path: key
        for path, key in adapters.items()
        if mapped.match(path) and not any(pattern.search(path) for pattern, _ in variants)
    }
    which, prefix = (("A", "B"), "lora_") if peft else (("in", "out"), "linear_")
    ranks: dict[int, list[str]] = {}
    for pair in _pairs(plain, bool(peft)).values():
        try:
            a, _ = _pair_shapes(pair, plain, paths, which, prefix)
        except AdapterWeightsError:
            raise
        except ValueError as err:
            raise ShapeError(str(err)) from None
        ranks.setdefault(a[0], []).append(plain[pair[which[0]]])
    if len(ranks) > 1 and (rank_pattern is None or not rank_pattern.declares(ranks)):
        _single_rank(plain, {}, ranks)  # raises, naming the ranks


def _pairs(adapters: dict[str, str], peft: bool) -> dict[tuple[str, ...], dict[str, str]]:
    """The adapted modules' tensors, {which ("A"/"B", "in"/"out"): path} by module (PEFT's
    module path; Megatron's (layer, part, canonical sub or "")), of names `split_adapters`
    maps; AdapterWeightsError for a canonical part on a module that has no such part."""
    pairs: dict[tuple[str, ...], dict[str, str]] = {}
    for path in adapters:
        match = (_PEFT_KEY if peft else _LORA_KEY).match(path)
        assert match is not None  # split_adapters refused every other name
        if peft:
            pairs.setdefault((match["module"],), {})[match["which"]] = path
            continue
        if match["sub"] and (match["part"], match["sub"]) not in _CANONICAL:
            raise AdapterWeightsError(
                f"[{adapters[path]}]: a canonical LoRA adapter_{match['sub']} on"
                f" {match['part']}, which has no such part"
            )
        key = (match["layer"], match["part"], match["sub"] or "")
        pairs.setdefault(key, {})[match["which"]] = path
    return pairs


def _pair_shapes(
    pair: dict[str, str],
    adapters: dict[str, str],
    shapes: dict[str, tuple[int, ...]],
    which: tuple[str, str],
    prefix: str,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of one module's A and B (`which`: their keys in `pair`, named `prefix` +
    key in messages), checked to be both there and a LoRA pair (rank x in, out x rank) of a
    rank below the weight's sizes."""
    first, second = which
    if set(pair) != set(which):
        (only,) = pair
        raise AdapterWeightsError(
            f"[{adapters[pair[only]]}]: {prefix}{only} only, not both {prefix}{first} and"
            f" {prefix}{second}"
        )
    a, b = shapes[pair[first]], shapes[pair[second]]
    if len(a) != 2 or len(b) != 2 or a[0] != b[1]:
        raise ValueError(
            f"[{adapters[pair[first]]}]: {prefix}{first} {a} and {prefix}{second} {b} are not"
            " a LoRA pair (rank x in, out x rank)"
        )
    if a[0] > max(a[1], b[0]):  # a LoRA's rank is below its weight's sizes
        raise ValueError(
            f"[{adapters[pair[first]]}]: rank {a[0]} exceeds the {b[0]} x {a[1]} weight it"
            " adapts; not a LoRA adapter"
        )
    return a, b


def _describe_peft(
    adapters: dict[str, str],
    shapes: dict[str, tuple[int, ...]],
    expected: dict[str, tuple[int, ...]],
) -> tuple[dict[str, HFLoraTarget], dict[int, list[str]]]:
    """PEFT's lora_A / lora_B pairs by the HF weight they adapt, checked against its shape
    (A: r x in, B: out x r); and their ranks (the stored A keys of each)."""
    targets: dict[str, HFLoraTarget] = {}
    ranks: dict[int, list[str]] = {}
    for (module,), pair in sorted(_pairs(adapters, peft=True).items()):
        a, b = _pair_shapes(pair, adapters, shapes, ("A", "B"), "lora_")
        weight = f"{module}.weight"
        if weight not in expected:
            raise ValueError(f"[{adapters[pair['A']]}]: the config has no {weight}")
        if (b[0], a[1]) != tuple(expected[weight]):
            raise ValueError(
                f"[{adapters[pair['B']]}]: adapter {b[0]} x {a[1]} does not fit the"
                f" {' x '.join(map(str, expected[weight]))} weight the config gives {module}"
            )
        ranks.setdefault(a[0], []).append(adapters[pair["A"]])
        targets[weight] = HFLoraTarget(module, adapters[pair["A"]], adapters[pair["B"]], 0, COPY)
    return targets, ranks


def describe_adapters(
    adapters: dict[str, str],
    shapes: dict[str, tuple[int, ...]],
    expected: dict[str, tuple[int, ...]],
    rank_pattern: DeclaredRanks | None = None,
) -> MegatronLora:
    """Pair each module's linear_in / linear_out (PEFT's lora_A / lora_B), check them
    against one rank and against the HF weight shapes the config gives (`expected`), and
    map them to HF modules. AdapterWeightsError (exit 2) for an unpaired adapter or one
    checkpoint holding both kinds; AdapterKindRefused for several ranks `rank_pattern`
    declares; ValueError for shapes that do not fit (the caller names the checkpoint)."""
    _refuse_damage(adapters, shapes, rank_pattern)
    if adapter_kind(adapters) == PEFT_KIND:
        return _single_rank(adapters, *_describe_peft(adapters, shapes, expected), rank_pattern)
    pairs = _pairs(adapters, peft=False)
    fused = {(layer, part) for layer, part, sub in pairs if not sub}
    both = next(((n, p) for n, p, sub in pairs if sub and (n, p) in fused), None)
    if both is not None:
        raise AdapterKindRefused(
            f"decoder.layers.{both[0]}.{both[1]}: both a LoRA adapter and canonical LoRA"
            " adapters on one module"
        )
    ranks: dict[int, list[str]] = {}
    targets: dict[str, HFLoraTarget] = {}
    for (layer, part, sub), pair in sorted(
        pairs.items(), key=lambda kv: (int(kv[0][0]), kv[0][1:])
    ):
        a, b = _pair_shapes(pair, adapters, shapes, ("in", "out"), "linear_")
        ranks.setdefault(a[0], []).append(adapters[pair["in"]])
        modules, transform = _HF_MODULES[part] if not sub else ((_CANONICAL[part, sub],), COPY)
        weights = [f"model.layers.{layer}.{module}.weight" for module in modules]
        missing = [w for w in weights if w not in expected]
        if missing:
            raise ValueError(f"[{adapters[pair['in']]}]: the config has no {missing[0]}")
        outs = sum(expected[w][0] for w in weights)
        if b[0] != outs or any(expected[w][1] != a[1] for w in weights):
            raise ValueError(
                f"[{adapters[pair['out']]}]: adapter {b[0]} x {a[1]} does not fit the"
                f" {outs} x {expected[weights[0]][1]} weight the config gives {part}"
            )
        for index, weight in enumerate(weights):
            targets[weight] = HFLoraTarget(
                weight.removesuffix(".weight"),
                adapters[pair["in"]],
                adapters[pair["out"]],
                index,
                transform,
            )
    return _single_rank(adapters, targets, ranks, rank_pattern)


def _single_rank(
    adapters: dict[str, str],
    targets: dict[str, HFLoraTarget],
    ranks: dict[int, list[str]],
    rank_pattern: DeclaredRanks | None = None,
) -> MegatronLora:
    """The adapter, of the one rank its A tensors have (`ranks`: their stored keys by
    rank). Several ranks are refused naming an A of each, the rarest first: the odd
    tensor is the one a user must find, and a name of the common rank shows nothing. They
    are damage (AdapterWeightsError) unless `rank_pattern` declares each of them: then a
    kind export does not convert (AdapterKindRefused, naming the declaration)."""
    if len(ranks) > 1:
        (odd, odd_keys), *rest = sorted(ranks.items(), key=lambda kv: (len(kv[1]), kv[0]))
        others = ", ".join(f"rank {r} in {len(k)} (e.g. [{min(k)}])" for r, k in rest)
        found = (
            f"[{min(odd_keys)}]: rank {odd} in {len(odd_keys)} adapter(s), {others}: adapters"
            f" of ranks {sorted(ranks)} in one checkpoint"
        )
        if rank_pattern is not None and rank_pattern.declares(ranks):
            raise AdapterKindRefused(
                f"{found} ({rank_pattern.where}); export-hf converts a single-rank LoRA only"
            )
        raise AdapterWeightsError(f"{found}; export-hf converts a single-rank LoRA only")
    (rank,) = ranks
    keys = sorted(adapters.values())
    if rank < 1:  # its scale alpha / rank would divide by zero
        raise ValueError(
            f"[{keys[0]}]: adapters of rank 0 (no rows in A): not a LoRA adapter, nothing to add"
        )
    return MegatronLora(rank, targets, keys, keys[0])
