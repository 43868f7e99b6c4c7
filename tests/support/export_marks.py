"""A weights file as an export writes it, for tests of what `--overwrite` may replace: its
safetensors header carries the export's mark (`carries_export_mark`), which a file written
any other way lacks."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.storage.safetensors_writer import SINGLE_FILE, ShardedSafetensorsWriter


def marked_weights(directory: Path, tensor: str = "w", name: str = SINGLE_FILE) -> Path:
    """`directory/name`: safetensors written by the export's writer, holding one empty
    float32 tensor named `tensor` (its name tells two such files apart)."""
    with tempfile.TemporaryDirectory(dir=directory) as work:  # beside what `directory` holds
        writer = ShardedSafetensorsWriter(work, [(tensor, BY_NAME["float32"], (0,))], 1 << 30)
        writer.open()
        writer.write_range(tensor, memoryview(b""), 0, True)
        writer.close()
        path = directory / name
        (Path(work) / SINGLE_FILE).rename(path)
    return path
