"""Multi-token prediction (MTP) layers: found among a checkpoint's weights, left out on request.

Megatron-LM's `--mtp-num-layers N` (and verl's Megatron `model.mtp.enable`, through
Megatron-Bridge) builds a `MultiTokenPredictionBlock` beside the decoder; the fsdp_dtensor
save holds it as `mtp.layers.<i>.{enorm, hnorm, eh_proj, transformer_layer.*,
final_layernorm}` (megatron/core/transformer/multi_token_prediction.py; the save renames
the inner `mtp_model_layer` back to `transformer_layer`). The MTP layers share the main
model's embedding and output layer and hold nothing else outside `mtp.`, so the main model
is complete without them. None of the transformers families export writes has an MTP
module, so export refuses them unless asked to leave them out (`--drop-mtp`): then they are
never read, and a note says what was left out. `mfsdp train` from such a checkpoint always
leaves them out (it trains a transformers model), with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.mapping_errors import MappingError, UnsupportedModelError
from mfsdp_ckpt.convert.name_maps import model_tensors

if TYPE_CHECKING:
    from mfsdp_ckpt.storage.reader import CheckpointReader

DROP_MTP_FLAG = "--drop-mtp"
_MTP_ROOT = "mtp."
_LAYER = re.compile(r"^mtp\.layers\.(\d+)\.")


@dataclass(frozen=True)
class MtpLayers:
    """The MTP tensors of a checkpoint: {module path: stored key}, and their layer numbers."""

    tensors: dict[str, str]
    layers: tuple[int, ...]

    @property
    def first_key(self) -> str:
        return min(self.tensors.values())

    def summary(self) -> str:
        """`2 multi-token prediction (MTP) layers (26 tensors)`."""
        count = len(self.layers)
        layers = f"{count} multi-token prediction (MTP) layer{'s' * (count != 1)}"
        return f"{layers} ({len(self.tensors)} tensor{'s' * (len(self.tensors) != 1)})"

    def counts(self) -> dict[str, int]:
        """What `export-hf --json` reports as `dropped_mtp`."""
        return {"layers": len(self.layers), "tensors": len(self.tensors)}

    def dropped_note(self) -> str:
        return (
            f"{DROP_MTP_FLAG}: left out {self.summary()}, not read; the export is the main"
            " model without them"
        )

    def left_out_of_training(self, checkpoint: str) -> str:
        """What `mfsdp train` says when it starts from `checkpoint`'s main model: the model
        it builds has no MTP module, so the MTP layers cannot be trained there; the
        checkpoint keeps them, the run's own checkpoints are of the main model alone."""
        return (
            f"warning: model.path: {checkpoint} holds {self.summary()}, which the model trained"
            " here has none of: left out, not read (the checkpoint keeps them; this run's"
            " checkpoints will not have them)"
        )

    def refusal(self) -> UnsupportedModelError:
        """Exit 1 naming the first MTP tensor and the flag that exports the main model."""
        return UnsupportedModelError(
            f"[{self.first_key}]: {self.summary()}, which the transformers models export"
            f" writes have none of; pass {DROP_MTP_FLAG} to export the main model without them"
        )


def split_mtp(stored: dict[str, str]) -> tuple[dict[str, str], MtpLayers | None]:
    """(the other weights, the MTP layers or None) of {module path: stored key}."""
    mtp = {path: key for path, key in stored.items() if path.startswith(_MTP_ROOT)}
    if not mtp:
        return stored, None
    layers = sorted({int(m.group(1)) for path in mtp if (m := _LAYER.match(path))})
    rest = {path: key for path, key in stored.items() if path not in mtp}
    return rest, MtpLayers(mtp, tuple(layers))


def stored_mtp(reader: CheckpointReader) -> MtpLayers | None:
    """The MTP layers among a checkpoint's weights, for inspect (names that cannot be told
    apart: None, export and validate report them)."""
    try:
        return split_mtp(model_tensors(reader.tensors))[1]
    except MappingError:
        return None
