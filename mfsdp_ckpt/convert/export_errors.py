"""Errors of export-hf by kind: usage (exit 2) and failed export (exit 1)."""

from __future__ import annotations

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.convert.mapping_errors import AdapterWeightsError
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError


class ExportUsageError(MfsdpUsageError, ValueError):
    """What was asked cannot be done as asked (exit 2): output exists, no config, bad layout."""


class ForeignWeightsError(ExportUsageError):
    """Weights of a kind export does not convert and no config describes (Megatron PEFT
    adapters): exit 2 for export; validate reports it as an error, since export refuses
    it under any config."""


class RefusedKind:
    """Marks export's refusal of a model or adapter KIND it does not convert (LayerNorm, an
    activation or position embedding it does not map, DoRA, rslora, an adapter on a module
    it does not map, a bias, a second adapter), raised only where the record states that
    kind as a well-formed value. validate's UNSUPPORTED verdict is this class alone: any
    other refusal (a value that is no valid value, one contradicting another or the
    tensors, a tensor missing or unpaired) is damage, INVALID."""


class AdapterKindRefused(AdapterWeightsError, RefusedKind):
    """An adapter tensor of a kind export does not convert (`megatron_lora`)."""


class UnsupportedAdapter(ForeignWeightsError, RefusedKind):
    """ForeignWeightsError (exit 2) for an adapter kind export does not convert."""


class UnconvertedNames(ExportUsageError, RefusedKind):
    """Tensors named as a kind of save export does not convert (a live PEFT model's
    base_layer and lora_A names, FSDP1's flattened parameter): intact, but unsupported
    (`export_plan.unknown_tensors_line`)."""


def foreign_weights(cause: Exception, message: str) -> ForeignWeightsError:
    """The usage error (exit 2) export raises for an adapter it refuses (`cause`), keeping
    whether `cause` is a kind refusal (`RefusedKind`): validate's verdict reads it."""
    kind = UnsupportedAdapter if isinstance(cause, RefusedKind) else ForeignWeightsError
    return kind(message)


class ExportError(MfsdpFailedError, ValueError):
    """The checkpoint cannot be exported (exit 1): no model, shapes contradict the config."""


class StoredDtypeError(ExportError):
    """A tensor export reads as a weight stored as no floating-point dtype (`weight_dtype`):
    damage of the checkpoint whatever config it is read with (validate says so at the
    checkpoint, not as a misfit with the config)."""


class NonFiniteError(ExportError):
    """A weight holds NaN or Inf (a diverged run), or a cast overflows the export dtype."""


class ExportVerifyError(ExportError):
    """--verify found written tensors that differ from their source."""

    def __init__(self, mismatches: list[str]):
        self.mismatches = mismatches
        shown = first_of(mismatches, 3, sep="; ")
        super().__init__(f"verify: {len(mismatches)} mismatch(es): {shown}")
