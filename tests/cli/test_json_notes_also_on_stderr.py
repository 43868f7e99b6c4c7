"""Under --json, every command whose object has a `note` or `notes` field prints those notes on
stderr too, as docs/json.md says, and stdout stays one JSON object: a script that logs stderr
keeps import-hf's note naming --hf-config and the note of which run a parent dir was read as
(export-hf and import-hf printed theirs in the object alone)."""

import json

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.hf_model_files import saved_hf_model


def _json_command(*args: str) -> tuple[dict, list[str]]:
    """`mfsdp ckpt ARGS --json`: its one JSON object (stdout read whole), and its stderr lines."""
    result = CliRunner().invoke(app, ["ckpt", *args, "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    found = json.loads(result.stdout)
    assert isinstance(found, dict)
    return found, result.stderr.splitlines()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A parent dir holding one imported run (`RUNS/sft`), and what import-hf said."""
    tmp = tmp_path_factory.mktemp("notes")
    source = saved_hf_model(tmp, "qwen2", tied=True)
    imported = _json_command(
        "import-hf", str(source), "--out", str(tmp / "runs" / "sft"), "--layout", "hf"
    )
    return tmp / "runs", imported


def test_import_hf_notes_on_stderr(runs):
    _parent, (found, err) = runs
    assert found["notes"], "the tied model's import has a note to print"
    assert [f"note: {note}" for note in found["notes"]] == [
        line for line in err if line.startswith("note: ")
    ]


def test_export_hf_notes_on_stderr(runs, tmp_path):
    parent, _imported = runs
    found, err = _json_command("export-hf", str(parent), "--out", str(tmp_path / "hf"))
    assert any("holds one run" in note for note in found["notes"])
    assert [f"note: {note}" for note in found["notes"]] == [
        line for line in err if line.startswith("note: ")
    ]


@pytest.mark.parametrize("command", ["validate", "inspect"])
def test_note_field_on_stderr(runs, command):
    parent, _imported = runs
    found, err = _json_command(command, str(parent))
    assert "holds one run" in found["note"]
    assert f"note: {found['note']}" in err
