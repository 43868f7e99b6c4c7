"""The errors of mapping weight names and shapes between checkpoint layouts.

Their own module because every step of a conversion raises them (the name tables, the
fused-tensor shapes, the planners of export and import, the LoRA and MTP handling) and
callers catch them as one family: the lowest layer holds them so none of those modules
imports another only for its errors.
"""

from __future__ import annotations

from mfsdp_ckpt.errors import MfsdpFailedError


class MappingError(MfsdpFailedError, ValueError):
    """Names that no rule of the layout/family explains; the message names them."""


class UnsupportedModelError(MappingError):
    """A model kind export does not convert (MoE layers under a dense config or in a layout
    no table has, virtual-pipeline chunks): exit 1 naming the first tensor, never a
    silently partial export."""


class AdapterWeightsError(MappingError):
    """Megatron PEFT adapter weights export cannot convert as asked (a DoRA adapter, an
    adapter without its base): a usage error naming the variant or what supplies the base
    (`megatron_lora`)."""


class ShapeError(MappingError):
    """A stored shape the config contradicts: the config is what is wrong when the user
    gave it (export-hf --hf-config: exit 2), the checkpoint when the config is its own
    (its record, its huggingface/: exit 1)."""


class StoredShapeError(ShapeError):
    """A stored shape wrong whatever the config says (rows other than its own record states,
    a fused tensor that does not split, an order its record leaves unknown): the
    checkpoint's fault (exit 1). Callers that add the tensor's name keep the class."""
