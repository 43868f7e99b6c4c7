"""verl's optimizer keys on its Megatron backend, read as that backend trains with them.

verl's Megatron optimizer never reads `optim.betas`: it takes Adam's betas and eps from
Megatron's OptimizerConfig, at Megatron's defaults or as the run's
`optim.override_optimizer_config` sets them. Whether a run is on that backend is read off
its other keys (`on_megatron`), so these keys are read with the whole run, not by a rule of
trainer.verl_rules alone; they are one job (Adam's betas and eps, and the optimizer
overrides), called by `verl_keys.carry_over` for a key given and by `verl_keys.adopt_pairs`
and `mfsdp config from-verl` for betas not given (`megatron_adam_unset`).
"""

from __future__ import annotations

import logging
from typing import Any

from trainer.verl_hydra_files import selects_megatron
from trainer.verl_off_keys import MEGATRON_ADAM, MEGATRON_OPTIMIZER_DEFAULTS, same
from trainer.verl_rules import ACTOR, REF, NotCarried, normalise, note

log = logging.getLogger("mfsdp.config")

BETAS = "optim.betas"
OPTIMIZER_OVERRIDES = "optim.override_optimizer_config"
MCORE_OPTIMIZER = "McoreOptimizerConfig"  # the class verl builds its Megatron optim section as
# keys of verl's Megatron engine (engine/megatron.yaml) that none of its other engines has:
# verl's struct refuses them on another engine (`verl_hydra_order.struct_refusals`)
MEGATRON_ENGINE_ONLY = frozenset(
    {
        *("tensor_model_parallel_size", "pipeline_model_parallel_size"),
        *("virtual_pipeline_model_parallel_size", "expert_model_parallel_size"),
        *("expert_tensor_parallel_size", "use_megatron_fsdp", "use_mbridge", "vanilla_mbridge"),
        *("override_transformer_config", "override_mcore_model_config", "override_ddp_config"),
        *("use_dist_checkpointing", "use_distributed_optimizer"),
    }
)
MEGATRON_ADAM_WHERE = (
    "verl sets them in optim.override_optimizer_config's adam_beta1, adam_beta2, adam_eps"
)


def verls_betas(raw_key: str, given: dict[str, Any]) -> bool:
    """Whether `raw_key` (read as `optim.betas`) is verl's: the actor's, or a top-level one
    in an optimizer section of verl's Megatron class (a config verl printed) or of a run
    whose config files select Megatron's optimizer (`_megatron_selected`). mfsdp's own
    `optim.betas` is the user's setting, kept as given beside any of verl's keys: an
    engine's keys (`engine.tensor_model_parallel_size`) say nothing of whose optimizer
    section it is, and read as Megatron's they replaced the betas of mfsdp's own file."""
    return raw_key != BETAS or _mcore_optimizer(given) or _megatron_selected(given)


def _mcore_optimizer(given: dict[str, Any]) -> bool:
    """Whether the run's optimizer section is of verl's Megatron class (its printed config)."""
    target = given.get("optim._target_")
    return isinstance(target, str) and target.endswith(MCORE_OPTIMIZER)


def _megatron_selected(given: dict[str, Any]) -> bool:
    """Whether the run selects a config-group file of verl's Megatron backend
    (`model_engine=megatron`, `engine=megatron`, `optim=megatron`), given among its keys as
    Hydra's selections are written: only `mfsdp config from-verl` reads selections (a verl
    script's); `mfsdp train` refuses them, and leaves them out of the keys it reads here
    (`verl_keys.adopt_pairs`)."""
    return any(selects_megatron(key, value) for key, value in given.items())


def on_megatron(given: dict[str, Any]) -> bool:
    """Whether the run (`given`: its keys, the actor's optimizer read as `optim.`) trains
    on verl's Megatron backend, whose optimizer takes Adam's betas and eps from Megatron's
    OptimizerConfig, never from `optim.betas`: the actor's strategy where given (verl's
    main_ppo picks its workers by it), else the class of the optimizer section (verl's
    printed config, SFT's Megatron engine too), else a Megatron file a script selects
    (`_megatron_selected`), else a `megatron.*` setting of the actor or the reference model
    (a section only verl's Megatron configs have). SFT's `engine.*` keys alone are not
    read: they do not say which optimizer section the run has."""
    strategy = given.get(ACTOR + "strategy")
    if isinstance(strategy, str):
        return strategy == "megatron"
    if isinstance(given.get("optim._target_"), str):
        return _mcore_optimizer(given)
    return _megatron_selected(given) or any(
        key.startswith((ACTOR + "megatron.", REF + "megatron.")) for key in given
    )


def _megatron_adam(given: dict[str, Any]) -> dict[str, Any]:
    """Adam's betas and eps as verl's Megatron backend trains with them (mfsdp keys):
    Megatron's defaults, overridden by the run's `optim.override_optimizer_config`, given
    whole or key by key (`override_optimizer_config.adam_beta2=0.95`)."""
    adam = dict(MEGATRON_ADAM)
    prefix = OPTIMIZER_OVERRIDES + "."
    for key, value in given.items():
        if key == OPTIMIZER_OVERRIDES and isinstance(value, dict):
            adam |= {name: setting for name, setting in value.items() if name in adam}
        elif key.startswith(prefix) and key[len(prefix) :] in adam:
            adam[key[len(prefix) :]] = value
    return {BETAS: [adam["adam_beta1"], adam["adam_beta2"]], "optim.eps": adam["adam_eps"]}


def megatron_adam_unset(cls: type, pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Megatron's Adam betas and eps (mfsdp keys) for a run (`pairs`: all its keys) on
    verl's Megatron backend that sets neither `optim.betas` nor the optimizer's overrides,
    where mfsdp's defaults for `cls` differ (SFT's beta2 0.95): verl trains with Megatron's
    then, and a hand-written SFT YAML naming McoreOptimizerConfig without betas kept
    mfsdp's. A key written on the way out is one the rules for given betas or overrides
    would have written (`betas_on_megatron`, `optimizer_overrides_on_megatron`)."""
    given = {normalise(key.lstrip("+")): value for key, value in pairs}
    overrides = (OPTIMIZER_OVERRIDES, OPTIMIZER_OVERRIDES + ".")
    if not on_megatron(given) or any(key == BETAS or key.startswith(overrides) for key in given):
        return []
    own = cls().optim
    mfsdps = {BETAS: list(own.betas), "optim.eps": own.eps}
    unset = {
        key: value
        for key, value in _megatron_adam(given).items()
        if key not in given and not same(value, mfsdps[key])
    }
    if unset:
        shown = ", ".join(f"{key}={value}" for key, value in unset.items())
        log.warning(
            "note: %s here: verl's Megatron backend trains with Megatron's Adam settings,"
            " not mfsdp's defaults (%s)",
            shown,
            MEGATRON_ADAM_WHERE,
        )
    return list(unset.items())


def betas_on_megatron(raw_key: str, value: Any, given: dict[str, Any]) -> list[tuple[str, Any]]:
    """verl's `optim.betas` on its Megatron backend, which never reads it: not carried; the
    betas here are the ones that run trains with (`_megatron_adam`)."""
    betas = _megatron_adam(given)[BETAS]
    log.warning(
        "note: verl's %s=%s is not read by verl's Megatron backend, which trains with"
        " Megatron's Adam betas: optim.betas=%s here (%s)",
        raw_key,
        value,
        betas,
        MEGATRON_ADAM_WHERE,
    )
    return [(BETAS, betas)]


def _number_or_unknown(value: Any) -> bool:
    """Whether `value` is a number, or text holding shell syntax (`$LR`), whose value is
    known only when the script runs (flagged so, not refused)."""
    if isinstance(value, str):
        return "$" in value or "`" in value
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def optimizer_overrides_on_megatron(
    raw_key: str, value: Any, given: dict[str, Any]
) -> list[tuple[str, Any]]:
    """verl's `optim.override_optimizer_config` on its Megatron backend: fields of
    Megatron's OptimizerConfig set over verl's. adam_beta1, adam_beta2 and adam_eps are
    optim.betas and optim.eps here; a field at Megatron's default changes nothing; any
    other is refused. Null or `{}` leaves Megatron's defaults, written here too (mfsdp's
    SFT default betas are not Megatron's). Adam's fields at a value Hydra leaves text
    (`095e-2`) are refused: the loader here read it as 0.95, where verl passes the text on."""
    overrides = {} if value is None else value
    texts = [
        f"{name}={setting!r}"
        for name, setting in (overrides.items() if isinstance(overrides, dict) else [])
        if name in MEGATRON_ADAM and not _number_or_unknown(setting)
    ]
    if texts:
        why = (
            f"{', '.join(texts)} is not a number as Hydra reads it (verl passes the text to"
            " Megatron's Adam, which fails on it): write the number plainly (0.95)"
        )
        raise NotCarried(f"verl key '{raw_key}={value}' has no equivalent here: {why}", why)
    if not isinstance(overrides, dict) or not all(
        name in MEGATRON_ADAM
        or (
            name in MEGATRON_OPTIMIZER_DEFAULTS and same(setting, MEGATRON_OPTIMIZER_DEFAULTS[name])
        )
        for name, setting in overrides.items()
    ):
        defaults = ", ".join(
            f"{name}={setting}" for name, setting in MEGATRON_OPTIMIZER_DEFAULTS.items()
        )
        why = (
            "Megatron optimizer overrides here are adam_beta1, adam_beta2 and adam_eps"
            f" (optim.betas, optim.eps), and {defaults} (Megatron's defaults)"
        )
        raise NotCarried(f"verl key '{raw_key}={value}' has no equivalent here: {why}", why)
    mapped = _megatron_adam(given)
    note(raw_key, mapped, "")
    return list(mapped.items())
