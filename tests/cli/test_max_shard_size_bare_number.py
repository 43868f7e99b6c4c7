"""`export-hf --max-shard-size 5` (no unit) counts bytes, as transformers reads it, and wrote
one file per tensor without a word; a bare number under 1 MB is now said on stderr, once,
asking whether GB was meant. A size with a unit, or a bare one of 1 MB or more, says nothing."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.hf_model_files import saved_hf_model


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("shard_size")
    import_hf(saved_hf_model(root, "qwen2", tied=True), root / "run", layout_name="hf")
    return str(root / "run")


def _export(run: str, out, size: str):
    done = CliRunner().invoke(
        app, ["ckpt", "export-hf", run, "--out", str(out), "--max-shard-size", size]
    )
    assert done.exit_code == 0, done.output + done.stderr
    return done


@pytest.mark.parametrize(("size", "unit"), [("5", "GB"), ("999999", "KB"), (" 7.5 ", "GB")])
def test_a_small_bare_number_is_noted_and_kept(run, tmp_path, size, unit):
    done = _export(run, tmp_path / "hf", size)
    given = size.strip()
    notes = [line for line in done.stderr.splitlines() if "--max-shard-size" in line]
    assert notes == [
        f"note: --max-shard-size {given}: {int(float(given))} bytes; did you mean {given}{unit}?"
    ]


def test_the_size_is_still_bytes_as_transformers_reads_it(run, tmp_path):
    _export(run, tmp_path / "hf", "5")
    assert len(list((tmp_path / "hf").glob("model-*.safetensors"))) > 1


@pytest.mark.parametrize("size", ["5GB", "1000000", "1MB", "2KiB"])
def test_a_unit_or_a_large_bare_number_says_nothing(run, tmp_path, size):
    done = _export(run, tmp_path / "hf", size)
    assert "--max-shard-size" not in done.stderr, done.stderr


def test_the_help_says_what_a_bare_number_means():
    done = CliRunner().invoke(app, ["ckpt", "export-hf", "--help"])
    assert "A bare number counts bytes" in " ".join(done.output.split())
