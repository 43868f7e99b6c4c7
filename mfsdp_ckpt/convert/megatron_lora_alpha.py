"""What a Megatron LoRA checkpoint records about its adapter beyond the tensors: alpha (the
scale is alpha / dim). (How a linear_fc1 adapter's B rows lie over tensor-parallel ranks is
the record's too: `recorded_layout`, read where the base weights are split.)

The adapter's dim is its tensors' shape; alpha is in no tensor. Megatron-Bridge writes its
PEFT config into each iteration's run_config.yaml (`peft:` with `_target_`
megatron.bridge.peft.lora.LoRA, `dim`, `alpha`, `target_modules`, `dropout`); verl passes
`actor_rollout_ref.model.lora.{rank, alpha}` to Bridge's LoRA and records neither in its
checkpoint (transformer_config.json is Megatron's TransformerConfig, without PEFT), but the
Hugging Face PEFT adapter mbridge saves beside it (model/huggingface/adapter/) holds
`r` and `lora_alpha`. Without either, the user's `--lora-alpha` supplies it: a guessed
alpha would write a different model without a sign.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.convert.export_errors import (
    ExportUsageError,
    ForeignWeightsError,
    UnsupportedAdapter,
)
from mfsdp_ckpt.convert.export_plan import saved_peft_adapter
from mfsdp_ckpt.convert.megatron_lora import SUPPORTED_VARIANT, MegatronLora
from mfsdp_ckpt.convert.megatron_record import run_config_data
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.lora_fields import LoraFieldError, check_value_types
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE
from mfsdp_ckpt.lora import MAX_ADAPTER_CONFIG_BYTES, not_plain_lora, plain_lora_init
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.unique_json import loads_object

# Bridge PEFT classes (the last part of `_target_`) whose scale is alpha / dim on W + B @ A:
# VLMLoRA only chooses which towers to adapt, CanonicalLoRA adapts q, k, v apart.
_PLAIN_LORA = ("LoRA", "VLMLoRA", "CanonicalLoRA")


def _positive(value: Any) -> float | None:
    plain = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if plain and math.isfinite(value) and value > 0 else None


@dataclass(frozen=True)
class RecordedAlpha:
    """An alpha a record holds, as it holds it (`value`), the record (`where`: a file, or
    run_config.yaml's peft section) and its key there."""

    value: Any
    where: str
    key: str

    @property
    def alpha(self) -> float | None:
        """The alpha, or None where the value is no positive number (-8, 0, '8')."""
        return _positive(self.value)

    def unusable(self) -> str:
        """What is wrong with a value that gives no alpha."""
        return f"{self.where}: {self.key} {cut_to(repr(self.value), 60)} is not a positive number"


def _recorded_alpha(value: Any, where: str, key: str) -> RecordedAlpha | None:
    """A record's alpha, None where the record has none."""
    return None if value is None else RecordedAlpha(value, where, key)


def _from_run_config(paths: layout.CheckpointPaths, lora: MegatronLora) -> RecordedAlpha | None:
    """Bridge's `peft:` section's alpha, where it describes plain LoRA of this rank and
    gives one (any other kind or rank is refused, whatever alpha --lora-alpha gives)."""
    if paths.run_config is None:
        return None
    peft = run_config_data(paths.run_config, paths.root).get("peft")
    if not isinstance(peft, dict):
        return None
    where = f"{paths.run_config} peft"
    kind = str(peft.get("_target_", "")).rsplit(".", 1)[-1]
    if kind not in _PLAIN_LORA:
        raise UnsupportedAdapter(
            f"{where}: _target_ {peft.get('_target_')!r} is not plain LoRA;"
            f" export-hf converts {SUPPORTED_VARIANT} only"
        )
    if peft.get("dim") != lora.rank:
        raise ForeignWeightsError(
            f"{where}: dim {peft.get('dim')!r}, but the adapter tensors have rank {lora.rank}"
        )
    return _recorded_alpha(peft.get("alpha"), where, "alpha")


def _saved_adapter_config(folder: Path | None, root: Path) -> tuple[dict, Path] | None:
    """The adapter_config.json of the Hugging Face PEFT adapter saved beside the checkpoint,
    with every setting this export cannot reproduce refused (ForeignWeightsError naming it,
    whatever alpha --lora-alpha gives)."""
    if folder is None:
        return None
    file = folder / ADAPTER_CONFIG_FILE
    text = safe_files.read_text(file, MAX_ADAPTER_CONFIG_BYTES, root)
    data = loads_object(text, str(file), CheckpointFormatError)
    try:  # a value of the wrong type is damage, found before any value is read as a kind
        check_value_types(data, null_is_absent=True)
    except LoraFieldError as err:
        raise CheckpointFormatError(f"{file}: {err}") from None
    found = not_plain_lora(data.get)
    if found is None and data.get("peft_type", "LORA") != "LORA":
        found = "peft_type", data["peft_type"]
    if found is None and data.get("use_rslora"):  # scale alpha / sqrt(r): not Megatron's
        found = "use_rslora", data["use_rslora"]
    if found is not None:
        raise UnsupportedAdapter(
            f"{file}: {found[0]} {cut_to(repr(found[1]), 120)}; export-hf converts"
            f" {SUPPORTED_VARIANT} only"
        )
    init = data.get("init_lora_weights")
    if not plain_lora_init(init):
        raise UnsupportedAdapter(
            f"{file}: init_lora_weights {cut_to(repr(init), 120)} is not plain LoRA's init (pissa,"
            " olora"
            " and the like replace the base weights the adapter is added to, and peft redoes"
            " that when it loads the adapter; a merge does not); export-hf converts"
            f" {SUPPORTED_VARIANT} only"
        )
    return data, file


def _from_saved_adapter(
    saved: tuple[dict, Path] | None, lora: MegatronLora
) -> RecordedAlpha | None:
    """The saved adapter config's alpha (`r` must be the tensors' rank)."""
    if saved is None:
        return None
    data, file = saved
    if data.get("r") != lora.rank:
        raise ForeignWeightsError(
            f"{file}: r {data.get('r')!r}, but the checkpoint's adapter tensors have rank"
            f" {lora.rank}: it was saved from another run"
        )
    return _recorded_alpha(data.get("lora_alpha"), str(file), "lora_alpha")


def _recorded_alphas(
    lora: MegatronLora, location: str, paths: layout.CheckpointPaths | None
) -> list[RecordedAlpha]:
    """Every alpha the checkpoint records: run_config.yaml's peft section and the PEFT
    adapter saved beside it (both are read for their settings even where one gives alpha)."""
    if paths is None:  # not a local checkpoint: no records beside the tensors
        return []
    saved = _saved_adapter_config(saved_peft_adapter(location), paths.root)
    found = (_from_run_config(paths, lora), _from_saved_adapter(saved, lora))
    return [record for record in found if record is not None]


def refuse_recorded_variant(
    lora: MegatronLora, location: str, paths: layout.CheckpointPaths | None
) -> list[str]:
    """What the checkpoint records about its adapter that export-hf refuses whatever
    --lora-alpha is given (another PEFT kind or dim in run_config.yaml, a saved
    adapter_config.json of another rank or not plain LoRA): ForeignWeightsError naming the
    file and key, read exactly as `set_lora_scale` reads it, so validate refuses what export
    refuses. Returned: a warning per recorded alpha that is no positive number, which export
    refuses unless --lora-alpha supplies one (validate's warning, --strict exit 1)."""
    return [
        f"{record.unusable()}: export-hf needs --lora-alpha A (the alpha the run trained with)"
        for record in _recorded_alphas(lora, location, paths)
        if record.alpha is None
    ]


def _alpha(value: float) -> str:
    """`value` short (`16`), but never rounded to another value's spelling: `16.0000001`
    shown as `16` beside a recorded 16 read as the same alpha."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _listed(records: list[tuple[float, str]]) -> str:
    return " and ".join(f"{where} records alpha {_alpha(alpha)}" for alpha, where in records)


def set_lora_scale(
    lora: MegatronLora,
    location: str,
    paths: layout.CheckpointPaths | None,
    lora_alpha: float | None,
) -> None:
    """Fill in `lora.alpha` and `lora.scale` (alpha / rank) with a note saying where alpha
    came from: the checkpoint's own records, else `--lora-alpha`. A `--lora-alpha` no record
    agrees with is refused (ExportUsageError, exit 2): the merge would add another multiple of
    the update the run trained, with exit 0 (a habitual Bridge default of 32 against a
    recorded 8 wrote 4x the update). Two records that disagree are refused unless
    --lora-alpha picks one; nothing recorded and no --lora-alpha asks for it (exit 2). A
    recorded alpha that is no positive number (-8, 0, '8') is refused naming the record
    unless --lora-alpha is given, whose note then says which record it overrode."""
    if lora_alpha is not None and _positive(lora_alpha) is None:
        raise ExportUsageError(f"--lora-alpha {lora_alpha!r}: must be a positive number")
    recorded = _recorded_alphas(lora, location, paths)
    unusable = [record for record in recorded if record.alpha is None]
    if unusable and lora_alpha is None:
        raise ForeignWeightsError(
            f"{unusable[0].unusable()}; pass --lora-alpha A with the alpha the run trained with"
        )
    records = [(alpha, record.where) for record in recorded if (alpha := record.alpha) is not None]
    if lora_alpha is not None:
        if records and all(alpha != float(lora_alpha) for alpha, _ in records):
            raise ExportUsageError(
                f"--lora-alpha {_alpha(float(lora_alpha))}: {_listed(records)}, the alpha the run"
                " trained with; leave --lora-alpha out"
            )
        lora.alpha = float(lora_alpha)
        note = f"LoRA alpha {_alpha(lora.alpha)} from --lora-alpha"
        note += "".join(f", over {record.unusable()}" for record in unusable)
    elif len({alpha for alpha, _ in records}) > 1:
        raise ForeignWeightsError(
            f"{location}: {_listed(records)}: two records of one adapter disagree; pass"
            " --lora-alpha A with the alpha the run trained with"
        )
    elif records:
        lora.alpha, where = records[0]
        note = f"LoRA alpha {_alpha(lora.alpha)} from {where}"
    else:
        raise ExportUsageError(
            f"{location}: a LoRA adapter of rank {lora.rank} on"
            f" {len(lora.targets)} Hugging Face module(s), but the checkpoint records no LoRA"
            " alpha (neither a run_config.yaml peft section nor a saved adapter_config.json"
            " gives one); pass --lora-alpha A (the run's alpha; the merge adds"
            f" alpha / {lora.rank} * B @ A)"
        )
    lora.scale = lora.alpha / lora.rank
    lora.notes.append(f"{note} (scale alpha / dim = {lora.scale:g})")
