"""The note on a bare `--max-shard-size N` is one of the export's notes: under `--json` it is
in `notes` (docs/json.md: "the notes also printed on stderr"), and the unit it suggests puts
N in a plausible shard size (1 MB to 1 TB).

Was: the note was printed on stderr alone (`notes` was `[]`), and every bare number under
1 MB was asked whether GB was meant: `400000` -> `400000GB`, 400 TB.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.export_options import parse_size
from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.hf_model_files import saved_hf_model

PLAUSIBLE_SHARD_BYTES = (10**6, 10**12)  # 1 MB to 1 TB
SUGGESTED = re.compile(r"--max-shard-size (\S+): (\d+) bytes; did you mean (\S+)\?")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("shard_note")
    import_hf(saved_hf_model(root, "qwen2", tied=True), root / "run", layout_name="hf")
    return str(root / "run")


def _export_json(run: str, out, size: str) -> tuple[dict, str]:
    done = CliRunner().invoke(
        app, ["ckpt", "export-hf", run, "--out", str(out), "--max-shard-size", size, "--json"]
    )
    assert done.exit_code == 0, done.output + done.stderr
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("size", ["5", "400000"])
def test_the_note_is_in_json_notes_and_on_stderr_once(run, tmp_path, size):
    result, err = _export_json(run, tmp_path / "hf", size)
    noted = [n for n in result["notes"] if n.startswith("--max-shard-size")]
    assert len(noted) == 1 and SUGGESTED.fullmatch(noted[0]), result["notes"]
    printed = [line for line in err.splitlines() if "--max-shard-size" in line]
    assert printed == [f"note: {noted[0]}"], err


def test_five_is_asked_about_5gb(run, tmp_path):
    result, _err = _export_json(run, tmp_path / "hf", "5")
    assert "--max-shard-size 5: 5 bytes; did you mean 5GB?" in result["notes"]


@pytest.mark.parametrize("size", ["1", "7.5", "50", "500", "1000", "400000", "999999"])
def test_the_suggested_size_is_a_plausible_shard(run, tmp_path, size):
    result, _err = _export_json(run, tmp_path / "hf", size)
    found = [m for m in map(SUGGESTED.fullmatch, result["notes"]) if m]
    assert len(found) == 1, result["notes"]
    given, count, meant = found[0].groups()
    assert given == size and int(count) == parse_size(size)
    assert meant.startswith(size) and meant[len(size) :].isalpha(), meant
    low, high = PLAUSIBLE_SHARD_BYTES
    assert low <= parse_size(meant) <= high, meant


@pytest.mark.parametrize("size", ["1000000", "2000000000", "400KB"])
def test_a_plausible_or_unit_size_has_no_note(run, tmp_path, size):
    result, err = _export_json(run, tmp_path / "hf", size)
    assert not any("--max-shard-size" in n for n in result["notes"]), result["notes"]
    assert "--max-shard-size" not in err, err
