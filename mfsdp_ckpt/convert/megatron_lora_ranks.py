"""Whether an adapter's several ranks are declared by its own config or are damage.

peft's `rank_pattern` gives some modules a rank other than `r`, so an intact adapter saved
with it holds A tensors of several ranks. Its adapter_config.json, saved beside the
checkpoint, says so: those ranks are then a kind export does not convert (UNSUPPORTED,
naming rank_pattern), not tensors gone wrong. Where nothing declares them, several ranks
stay damage (`megatron_lora._single_rank`), and so does a rank the config declares for no
module (neither `r` nor a rank_pattern value: an A cut to another rank). Only a config read
whole and of the JSON types peft writes declares anything: one that cannot be read declares
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.lora_fields import LoraFieldError, check_value_types
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE
from mfsdp_ckpt.lora import MAX_ADAPTER_CONFIG_BYTES
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import loads_object

PEFT_DEFAULT_RANK = 8  # LoraConfig's `r` where a config leaves it out


@dataclass(frozen=True)
class DeclaredRanks:
    """A rank_pattern's declaration: `where` (`FILE: rank_pattern {...}`, for the refusal)
    and `ranks`, those it gives any module (`r` and each pattern value)."""

    where: str
    ranks: frozenset[int]

    def declares(self, found: Iterable[int]) -> bool:
        """Whether every rank in `found` is one the declaration gives some module."""
        return set(found) <= self.ranks


def declared_rank_pattern(folder: Path | None, root: Path | None) -> DeclaredRanks | None:
    """The declaration of the adapter_config.json in `folder` (the PEFT adapter saved beside
    the checkpoint, `export_plan.saved_peft_adapter`; `root`: the checkpoint's, reads stay
    inside it) where it holds a non-empty rank_pattern of integer ranks, else None."""
    if folder is None or root is None:
        return None
    file = folder / ADAPTER_CONFIG_FILE
    try:
        text = safe_files.read_text(file, MAX_ADAPTER_CONFIG_BYTES, root)
        data = loads_object(text, str(file), CheckpointFormatError)
        check_value_types(data, null_is_absent=True)
    except (CheckpointFileError, CheckpointFormatError, LoraFieldError):
        return None  # damage of its own, which the record checks report
    pattern = data.get("rank_pattern")
    if not isinstance(pattern, dict) or not pattern:
        return None
    ranks = [*pattern.values(), data.get("r") or PEFT_DEFAULT_RANK]
    if not all(isinstance(rank, int) and not isinstance(rank, bool) for rank in ranks):
        return None
    return DeclaredRanks(f"{file}: rank_pattern {cut_to(repr(pattern), 120)}", frozenset(ranks))
