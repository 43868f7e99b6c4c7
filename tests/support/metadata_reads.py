"""Counting the `.metadata` files a piece of code reads."""

from __future__ import annotations

import pytest


def metadata_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The `.metadata` files read from now on, one entry per read (the reader's own parse,
    counted on its way through)."""
    from mfsdp_ckpt.storage import reader as reader_module

    reads: list[str] = []
    load = reader_module.load_plain_metadata_bytes

    def counted(data: bytes, source: str = "<bytes>"):
        reads.append(source)
        return load(data, source)

    monkeypatch.setattr(reader_module, "load_plain_metadata_bytes", counted)
    return reads
