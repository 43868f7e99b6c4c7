"""A path that is not there is said one way by every command that reads one: `PATH: no such
file or directory; relative paths are read from CWD`, exit 2, and the same as --json's
`error`. It was worded six ways, import-hf and config from-verl without the directory a
relative path was read from."""

from __future__ import annotations

import json

import pytest

from cli.main import main

MISSING = "nonexist"

COMMANDS = {
    "ckpt validate": ["ckpt", "validate", MISSING],
    "ckpt inspect": ["ckpt", "inspect", MISSING],
    "ckpt export-hf": ["ckpt", "export-hf", MISSING, "--out", "hf"],
    "ckpt import-hf": ["ckpt", "import-hf", MISSING, "--out", "ck"],
    "config from-verl": ["config", "from-verl", MISSING],
    "data gsm8k": ["data", "gsm8k", "--input", MISSING, "--out", "d"],
    "data math": ["data", "math", "--input", MISSING, "--out", "d"],
    "train sft": ["train", "sft", "--config", MISSING],
    "train grpo": ["train", "grpo", "--config", MISSING],
}
JSON_TAKERS = set(COMMANDS) - {"config from-verl"}


def _run(monkeypatch, capsys, args: list[str]) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    out, err = capsys.readouterr()
    return int(stopped.value.code), out, err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_relative_path_is_said_alike(monkeypatch, capsys, tmp_path, command):
    monkeypatch.chdir(tmp_path)
    said = f"{MISSING}: no such file or directory; relative paths are read from {tmp_path}"
    code, out, err = _run(monkeypatch, capsys, COMMANDS[command])
    assert (code, out, err) == (2, "", f"error: {said}\n")
    if command in JSON_TAKERS:
        code, out, _err = _run(monkeypatch, capsys, [*COMMANDS[command], "--json"])
        assert code == 2 and json.loads(out) == {"error": said, "exit_code": 2}
    assert list(tmp_path.iterdir()) == []  # nothing made on the way


def test_a_missing_absolute_path_names_no_directory(monkeypatch, capsys, tmp_path):
    code, _out, err = _run(monkeypatch, capsys, ["config", "from-verl", str(tmp_path / "x.sh")])
    assert (code, err) == (2, f"error: {tmp_path / 'x.sh'}: no such file or directory\n")
