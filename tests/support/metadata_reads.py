"""Counting the `.metadata` files a piece of code reads."""

from __future__ import annotations

from typing import BinaryIO

import pytest


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
