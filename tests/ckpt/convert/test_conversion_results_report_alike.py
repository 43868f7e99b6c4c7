"""export-hf's and import-hf's results are one kind of result: the same leading fields and
the same rate and "converting" phrase, so their --json and summary lines cannot drift apart."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.convert.conversion_result import ConversionResult
from mfsdp_ckpt.convert.export_hf import ExportResult
from mfsdp_ckpt.convert.import_hf import ImportResult

SHARED = dict(out_dir="out", layout="hf", model_type="qwen2", dtype="bf16", tensors=3)


def _both(nbytes: int, seconds: float, convert_seconds: float | None):
    exported = ExportResult(
        **SHARED,
        bytes=nbytes,
        files=["model.safetensors"],
        seconds=seconds,
        convert_seconds=convert_seconds,
    )
    imported = ImportResult(
        **SHARED, bytes=nbytes, seconds=seconds, checkpoint="out", convert_seconds=convert_seconds
    )
    return exported, imported


@pytest.mark.parametrize("convert_seconds", [None, 0.5])
def test_export_and_import_report_the_conversion_alike(convert_seconds):
    exported, imported = _both(3 * 2**20, 2.0, convert_seconds)
    assert isinstance(exported, ConversionResult) and isinstance(imported, ConversionResult)
    assert exported.converted() == imported.converted()
    assert exported.convert_gb_per_s == imported.convert_gb_per_s
    assert exported.summary().startswith(f"exported {exported.converted()}, 2.0 s in all,")
    assert imported.summary().startswith(f"imported {imported.converted()}, 2.0 s in all,")


def test_the_phrase_times_the_tensors_alone_where_they_were_timed_apart():
    untimed, _ = _both(3 * 2**20, 2.0, None)
    timed, _ = _both(3 * 2**20, 2.0, 0.5)
    assert untimed.converted().endswith(" in 2.0 s (1.6 MB/s)")
    assert timed.converted().endswith(" in 0.5 s (6.3 MB/s)")
    assert untimed.convert_gb_per_s is None
    assert timed.convert_gb_per_s == 3 * 2**20 / 1e9 / 0.5


def test_a_small_rate_reads_in_kilobytes_not_as_zero():
    """0.35 MiB converted in 7.9 s of a busy machine's start-up read "(0.0 MB/s)"."""
    slow, _ = _both(367_001, 7.9, None)
    assert slow.converted().endswith(" in 7.9 s (46.5 kB/s)")
