"""Errors of export-hf by kind: usage (exit 2) and failed export (exit 1)."""

from __future__ import annotations

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError


class ExportUsageError(MfsdpUsageError, ValueError):
    """What was asked cannot be done as asked (exit 2): output exists, no config, bad layout."""


class ForeignWeightsError(ExportUsageError):
    """Weights of a kind export does not convert and no config describes (Megatron PEFT
    adapters): exit 2 for export; validate reports it as an error, since export refuses
    it under any config."""


class AdapterRecordMismatch(ForeignWeightsError):
    """A record of the adapter (its rank) that contradicts the adapter tensors stored: export
    refuses it as it refuses a variant (exit 2), but validate calls it damage, not a model
    export does not convert: the record was saved from another run."""


class ExportError(MfsdpFailedError, ValueError):
    """The checkpoint cannot be exported (exit 1): no model, shapes contradict the config."""


class NonFiniteError(ExportError):
    """A weight holds NaN or Inf (a diverged run), or a cast overflows the export dtype."""


class ExportVerifyError(ExportError):
    """--verify found written tensors that differ from their source."""

    def __init__(self, mismatches: list[str]):
        self.mismatches = mismatches
        shown = first_of(mismatches, 3, sep="; ")
        super().__init__(f"verify: {len(mismatches)} mismatch(es): {shown}")
