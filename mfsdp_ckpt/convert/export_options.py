"""What an export is asked for: the options `export_hf` hands whole to each step.

Kept apart from the driver so that the LoRA exports (`lora_export_kind`) and the CLI read the
same options and defaults without importing the export that runs them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from mfsdp_ckpt.convert.export_errors import ExportUsageError
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.format.file_hash import ByteProgress


def parse_size(text: str) -> int:
    """`5GB`, `500MB`, `2GiB`, `1000000` -> bytes (decimal units as in transformers)."""
    # `i` only after a prefix: `5iB` (a typo of 5GiB) matched, and crashed the lookup below
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*((?:[KMGT]i?)?B?)\s*", text, re.IGNORECASE)
    if not match:
        raise ExportUsageError(
            f"--max-shard-size {text!r}: expected e.g. 5GB, 500MB or a byte count"
        )
    number, unit = float(match.group(1)), match.group(2).upper().rstrip("B")
    scale = {
        "": 1,
        "K": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "KI": 2**10,
        "MI": 2**20,
        "GI": 2**30,
        "TI": 2**40,
    }[unit]
    if number * scale < 1:
        raise ExportUsageError(f"--max-shard-size {text!r}: must be at least one byte")
    return int(number * scale)


DEFAULT_MAX_SHARD_SIZE = 5 * 10**9  # transformers' save_pretrained default


def refuse_hf_config_dir_without_config(
    hf_config: str | os.PathLike | None, ckpt: str | os.PathLike, role: str | None = None
) -> None:
    """ExportUsageError (exit 2) for an --hf-config dir with no config.json in it, before
    anything lists it. A model dir's files (config, tokenizer) are found by walking it, and
    the check for config.json came after that walk: `--hf-config /` (or a home dir) walked
    the disk until "more than 100000 entries". Only `DIR/config.json` is looked at here; a
    dir holding one is a model dir, listed as before. `ckpt` (and `role`): the checkpoint
    exported, which the line names when the dir is one of its levels."""
    from mfsdp_ckpt.convert.export_source import no_config_json
    from mfsdp_ckpt.errors import MfsdpError
    from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
    from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
    from mfsdp_ckpt.storage.tensorstore_store import is_url

    if hf_config is None or is_url(str(hf_config)) or not os.path.isdir(hf_config):
        return
    if os.path.lexists(os.path.join(hf_config, HF_CONFIG_FILE)):
        return
    try:
        exported = None if is_url(str(ckpt)) else resolve_checkpoint(ckpt, role=role)
    except (MfsdpError, OSError):  # the export names what is wrong with it
        exported = None
    raise no_config_json(str(hf_config), hf_config, exported)


DEFAULT_WORKERS = 4


@dataclass(frozen=True)
class ExportOptions:
    """What `export_hf` was asked for beyond the checkpoint and --out, handed whole to
    each step (and to the LoRA exports, `lora_export_kind.export_lora_kind`), so a step names
    the options it reads rather than a dozen parameters of their own.

    `max_shard_size` and `workers` stay None unless given, so that an export with no use
    for one refuses it instead of ignoring it; `shard_size` and `threads` are what an
    export that takes them uses."""

    dtype: str
    max_shard_size: int | None
    hf_config: str | os.PathLike | None
    layout_name: str
    workers: int | None
    verify: bool
    overwrite: bool
    io: str
    buffer_bytes: int
    progress: Progress | None
    role: str | None
    allow_nonfinite: bool
    adapter_only: bool
    base_progress: ByteProgress | None
    lora_alpha: float | None
    drop_mtp: bool
    verify_progress: Progress | None

    @property
    def shard_size(self) -> int:
        return DEFAULT_MAX_SHARD_SIZE if self.max_shard_size is None else self.max_shard_size

    @property
    def threads(self) -> int:
        return DEFAULT_WORKERS if self.workers is None else self.workers
