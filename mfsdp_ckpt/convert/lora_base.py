"""The base a LoRA step's merged export adds its adapter to, as Hugging Face tensors.

A LoRA run's base is what its `model.path` named: a model dir, whose safetensors
transformers loaded (`SafetensorsSource`), or a checkpoint (an SFT step, a run, an
import-hf result, a bare DCP dir), whose weights streamed into the model through
export's own planning (`trainer.model_source.load_checkpoint_weights`). The merge reads
either as the run did: a checkpoint base through the same plan (`CheckpointBase`), one
stored tensor at a time, so SFT -> GRPO LoRA -> merged model needs no export of the SFT
step in between. Before a byte is read the base is hashed against the step's record
(`open_base`): merging onto other weights would silently be another model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError
from mfsdp_ckpt.convert.export_plan import convert, plan_export
from mfsdp_ckpt.convert.export_source import JsonConfig, source_for
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.format.lora_fields import base_weights_dir
from mfsdp_ckpt.lora import (
    BaseModelRecord,
    ByteProgress,
    base_model_problems,
    records_dcp,
)
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from mfsdp_ckpt.convert.name_maps import MappedTensor


@dataclass(frozen=True)
class BaseTensor:
    """One Hugging Face tensor of a checkpoint base: the checkpoint file its stored bytes
    start in (tensors are read in that order), its shape and its stored dtype."""

    file: str
    shape: tuple[int, ...]
    dtype: DType


class CheckpointBase:
    """A checkpoint's model weights under Hugging Face names, as export-hf writes them and
    a run started from that checkpoint loaded them (`plan_export` with the merged model's
    config; multi-token prediction layers left out, as training leaves them). A stored
    tensor that splits into several (Megatron's fused QKV) is read once for all of them:
    the parts not yet asked for are kept until they are, one stored tensor's worth."""

    def __init__(self, dist_ckpt: Path, config: JsonConfig | PretrainedConfig):
        paths = resolve_checkpoint(dist_ckpt)
        self.root = paths.dist_ckpt
        reader = CheckpointReader(paths.dist_ckpt)
        self.plan = plan_export(source_for(paths, reader), config, dtype="fp32", drop_mtp=True)
        self.tensors: dict[str, BaseTensor] = {}
        self._items: dict[str, MappedTensor] = {}
        for item in self.plan.ordered_items():
            entry = self.plan.entry(item)
            first = min((chunk.file for chunk in entry.chunks if chunk.file), default="")
            for target, shape in zip(item.targets, item.shapes):
                self.tensors[target] = BaseTensor(first, tuple(shape), entry.dtype)
                self._items[target] = item
        self._converted: dict[str, torch.Tensor] = {}

    def read(self, name: str) -> torch.Tensor:
        """Tensor `name` as the plan converts it (fp32 for a floating one)."""
        if name not in self._converted:
            self._converted = dict(convert(self.plan, self._items[name]))
        return self._converted.pop(name)


def open_base(
    base: BaseModelRecord | None,
    config: JsonConfig | PretrainedConfig,
    progress: ByteProgress | None,
) -> SafetensorsSource | CheckpointBase:
    """The base's weights as training loaded them: a model dir's safetensors (the files
    transformers picks: a stray model_old.safetensors or Mistral's consolidated file beside
    them is not read; its files may lead anywhere, as in training), or a checkpoint's
    (`CheckpointBase`, read with `config`), after checking that the base on disk is, byte
    for byte, the one the adapter was trained on (hashing all of it, reported to
    `progress`). ExportError naming why where the base on disk cannot be merged onto;
    ExportUsageError (exit 2) for a random-init base: the checkpoint is sound (validate
    passes it) and its adapter exports as asked with --adapter-only."""
    weights = base_weights_dir(base)
    if weights is None:
        raise ExportUsageError(
            "the base model was a random init: there is nothing to merge onto;"
            " give --adapter-only to export the adapter alone"
        )
    assert base is not None  # a dir is named by a record only
    errors, notes = base_model_problems(base, deep=True, progress=progress)
    if errors or notes:
        where, what = errors[0] if errors else (weights, notes[0])
        moved = (
            "that exact base checkpoint"
            if records_dcp(base)
            else "that exact base (--hf-config DIR names where it is now)"
        )
        raise ExportError(f"{where}: {what}; a merged export needs {moved}, or use --adapter-only")
    if records_dcp(base):
        return CheckpointBase(Path(weights), config)
    return SafetensorsSource(weights, links_anywhere=True)
