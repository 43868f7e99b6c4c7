"""What the two fields a LoRA step adds to its manifest must hold, read strictly in one place.

`lora` is the adapter's PEFT config (what adapter_config.json holds) and `base_model` the
record of the weights it adapts (`BaseModelRecord`). Validate, inspect and export each read
them; when each read them its own way, a manifest could pass validate and fail export
(`"r": 0`, `"r": "4"`) or be read wrong by both (`"use_rslora": "no"` taken as true: a
scale of alpha / sqrt(r) where alpha / r trained). `Manifest.from_json` therefore checks
them here as it parses a manifest, so every reader refuses the same manifest with the same
line, and each value is the JSON type PEFT writes: a bool is true or false, a count an
integer (not a bool, not a string), positive where a rank or a scale needs it.

Whether a base record names weights on disk is decided here too (`base_weights_dir`), for
the same reason: the merge, resuming and every refusal that advises an export each asked
it their own way, and told a step on a random init to run the merged export, which
refuses it.

Plain data only (no torch). `Manifest.from_json` imports it as it parses a manifest (not
at module level: this module raises the manifest's own error).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format.file_hash import FileRecord, FileRecordError
from mfsdp_ckpt.format.manifest import ManifestError

PEFT_TYPE = "LORA"


class LoraFieldError(MfsdpUsageError, ValueError):
    """A PEFT config holds what no plain LoRA config does; the message names the key, the
    caller names the file (a manifest's `lora` field, an adapter_config.json)."""


@dataclass(frozen=True)
class LoraSettings:
    """What merging needs from the recorded PEFT config (plain LoRA only)."""

    rank: int
    alpha: float
    use_rslora: bool

    @property
    def scale(self) -> float:
        """PEFT's scaling of B @ A: alpha / r, or alpha / sqrt(r) with rank-stabilised LoRA."""
        return self.alpha / (self.rank**0.5 if self.use_rslora else self.rank)


# peft LoraConfig settings under which an adapter is not plain LoRA (W + alpha / r * B @ A on
# the modules its lora_A / lora_B name), with the value that keeps it plain: training refuses
# them up front, export refuses a saved adapter_config.json that holds them.
NOT_PLAIN_LORA = {
    "use_dora": False,  # DoRA: a magnitude vector rescales W
    "rank_pattern": {},  # another r per module
    "alpha_pattern": {},  # another alpha per module
    "bias": "none",  # biases trained ("lora_only", "all") and saved beside the adapter
    "lora_bias": False,  # a bias on lora_B
    "modules_to_save": None,  # whole modules trained and saved beside the adapter
    "fan_in_fan_out": False,  # weights stored transposed (GPT-2's Conv1D)
    "layer_replication": None,  # layers repeated: the adapted model has more of them
    "trainable_token_indices": None,  # trained embedding rows saved beside the adapter
    "target_parameters": None,  # LoRA on parameters (fused experts), not modules
    "loftq_config": {},  # LoftQ: the base weights were replaced
}


def not_plain_lora(settings: Callable[[str, Any], Any]) -> tuple[str, Any] | None:
    """The first NOT_PLAIN_LORA setting whose value (`settings(name, plain)`: a config's
    attribute or key, `plain` when absent) is not plain, as (name, value); None, [] and {}
    all mean "none"."""
    for name, plain in NOT_PLAIN_LORA.items():
        value = settings(name, plain)
        if value != plain and (value or plain):
            return name, value
    return None


def plain_lora_init(init: Any) -> bool:
    """Whether `init` (LoraConfig's init_lora_weights) is plain LoRA's: B starts at zero or
    A and B start as saved (true, false, "gaussian"; absent). Any other (pissa, olora,
    corda, loftq, eva, ...) derives A and B from the base, and most rewrite the base weights
    in place as peft injects the adapter: a merge onto the base on disk, or GRPO's reference
    (the base with adapters off), is then not the model that trained."""
    if isinstance(init, str):
        return init.lower() == "gaussian"
    return init is None or isinstance(init, bool)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _shown(value: Any) -> str:
    return cut_to(repr(value), 60)


def _names(value: Any) -> bool:
    """target_modules as PEFT writes it: absent (None), a regex, or a list of names."""
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


def _is_init(value: Any) -> bool:
    return isinstance(value, (bool, str))


# The JSON type PEFT writes each key a plain-LoRA reader reads. A value of another type
# ("use_dora": "yes", "r": "8") is a damaged or hand-edited file, not a kind of adapter: it
# must be refused as such before any value is read as a kind (a truthy "yes" read as DoRA).
_JSON_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "r": (_is_int, "a positive integer"),
    "lora_alpha": (_is_number, "a positive number"),
    "use_rslora": (_is_bool, "true or false"),
    "init_lora_weights": (_is_init, "true, false or a name"),
    "target_modules": (_names, "a module name or a list of them"),
    **{
        name: (_is_bool, "true or false")
        for name, plain in NOT_PLAIN_LORA.items()
        if isinstance(plain, bool)
    },
}


def check_value_types(config: dict, null_is_absent: bool = False) -> None:
    """LoraFieldError naming the first key of `config` whose value is not the JSON type PEFT
    writes there; absent keys pass, and null ones too with `null_is_absent` (an
    adapter_config.json, where peft writes null for a default)."""
    for key, (fits, kind) in _JSON_TYPES.items():
        value = config.get(key)
        if key in config and not (value is None and null_is_absent) and not fits(value):
            raise LoraFieldError(f"{key!r} is {_shown(value)}, not {kind}")


def lora_settings(config: Any) -> LoraSettings:
    """The merge settings of a PEFT config (a manifest's `lora` field, an
    adapter_config.json), each key export, validate or inspect reads checked for its JSON
    type first; LoraFieldError naming the key otherwise."""
    if not isinstance(config, dict) or config.get("peft_type") != PEFT_TYPE:
        raise LoraFieldError("not a PEFT LoRA config (its peft_type is not 'LORA')")
    rank: Any = config.get("r")
    alpha: Any = config.get("lora_alpha")
    if not _is_int(rank) or rank < 1:
        raise LoraFieldError(f"'r' is {_shown(rank)}, not a positive integer")
    if not _is_number(alpha) or alpha <= 0:
        raise LoraFieldError(f"'lora_alpha' is {_shown(alpha)}, not a positive number")
    check_value_types(config)
    found = not_plain_lora(config.get)
    if found is not None:
        raise LoraFieldError(
            f"{found[0]!r} is {_shown(found[1])}: not plain LoRA, which is all a merge computes"
        )
    return LoraSettings(rank, float(alpha), config.get("use_rslora", False))


def recorded_lora_settings(config: Any, source: str = "manifest.json") -> LoraSettings:
    """`lora_settings` of the `lora` field of the manifest `source`, or ManifestError
    naming the manifest, the field and the key."""
    try:
        return lora_settings(config)
    except LoraFieldError as err:
        raise ManifestError(f"{source}: field 'lora': {err}") from None


@dataclass
class BaseModelRecord:
    """The manifest's `base_model`: where the frozen weights came from.

    `path` is None (and `files` empty) when the base was a random init of a named shape:
    then only the seed identifies it and nothing on disk can be checked.
    """

    path: str | None
    random_init: bool
    seed: int | None
    files: dict[str, FileRecord] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "random_init": self.random_init,
            "seed": self.seed,
            "files": {name: r.to_json() for name, r in sorted(self.files.items())},
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "manifest.json") -> BaseModelRecord:
        """The record in the `base_model` field of a manifest (`source`), or ManifestError
        naming the key."""
        where = f"{source}: field 'base_model'"
        if not isinstance(data, dict):
            raise ManifestError(f"{where}: not an object")
        path, seed, random_init = data.get("path"), data.get("seed"), data.get("random_init", False)
        if path is not None and not isinstance(path, str):
            raise ManifestError(f"{where}: 'path' is not a string")
        if seed is not None and not _is_int(seed):
            raise ManifestError(f"{where}: 'seed' is not an integer")
        if not isinstance(random_init, bool):
            raise ManifestError(f"{where}: 'random_init' is not true or false")
        files = data.get("files", {})
        if not isinstance(files, dict):
            raise ManifestError(f"{where}: 'files' is not an object")
        records = {}
        for name, record in files.items():
            if not _is_plain_name(name):
                raise ManifestError(
                    f"{where}: file name {cut_to(repr(name), 100)} is not a plain file name"
                )
            try:
                records[name] = FileRecord.from_json(record)
            except FileRecordError as err:
                raise ManifestError(
                    f"{where}: record for {cut_to(repr(name), 100)} {err}"
                ) from None
        return cls(path, random_init, seed, records)


def base_weights_dir(base: BaseModelRecord | None) -> str | None:
    """The dir of a LoRA step's base weights on disk, as its record names it: what a merged
    export merges the adapter onto. None where the base has no weights there: a random
    init, whose seed alone identifies it, or a step without a record (read as one). The
    merged export refuses such a step ("nothing to merge onto"), so every command that
    would advise it checks here first and names `adapter_only_advice` instead."""
    if base is None or base.random_init:
        return None
    return base.path


# How a LoRA step's run goes on: resumed from its own run dir (model.path refuses an
# adapter alone)
RESUME_ADVICE = "to go on training it, give its run dir as trainer.run_dir (it resumes)"


def adapter_only_advice(checkpoint: str | os.PathLike) -> str:
    """What goes on from the LoRA step `checkpoint` whose base has no weights on disk
    (`base_weights_dir` None): resuming its run, or exporting the adapter alone. The merged
    export it was sent to only refused it."""
    export = mfsdp_command("ckpt export-hf", checkpoint, "--out DIR --adapter-only")
    return f"{RESUME_ADVICE}; for the adapter alone, {export}"


def _is_plain_name(name: Any) -> bool:
    """A file directly in the base dir: no path separators, no `..`."""
    return isinstance(name, str) and name not in ("", ".", "..") and not set(name) & {"/", "\x00"}
