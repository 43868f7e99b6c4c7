"""Reading `.metadata` in tests: counting the files a piece of code reads, and a pickle's
bytes as DCP's own `Metadata` (the product reads DCP's classes from a file only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO

import pytest

if TYPE_CHECKING:
    from torch.distributed.checkpoint.metadata import Metadata


def load_metadata_bytes(data: bytes, source: str = "<bytes>") -> Metadata:
    """`data` read as `load_metadata` reads a file (DCP's classes, the allow-list, the
    schema), for tests that compare with DCP's own objects or feed it hostile bytes."""
    from mfsdp_ckpt.format.dcp_metadata import _unpickle, allowed_classes

    return _unpickle(data, source, allowed_classes("dcp"))[0]


def metadata_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The `.metadata` files read from now on, one entry per read (the reader's own parse,
    counted on its way through)."""
    from mfsdp_ckpt.storage import reader as reader_module

    reads: list[str] = []
    load = reader_module.load_plain_metadata_file

    def counted(file: BinaryIO, size: int, source: str):
        reads.append(source)
        return load(file, size, source)

    monkeypatch.setattr(reader_module, "load_plain_metadata_file", counted)
    return reads
