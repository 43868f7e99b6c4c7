"""Hostile inputs the earlier rounds left open:

* log lines and warnings quoting values users chose (`note: verl's ... is
  checkpoint.resume=PATH here`): without `-v` Python's fallback handler printed them raw, so
  a newline forged a line and an ANSI escape recoloured the terminal; `mfsdp config
  from-verl` wrote the same notes as YAML comments, where a newline ended the comment and
  wrote the rest as keys of the config; an override or config holding a character YAML does
  not allow (an escape) was a traceback;
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO

FORGED = "/nonexist\nerror: forged\x1b[31m\x1b]0;pwned\x07"


def _no_forged_lines(stderr: str) -> None:
    assert not any(c in stderr for c in "\x1b\x07"), stderr
    assert not any(line.startswith("error: forged") for line in stderr.splitlines()), stderr


# --------------------------------------------------------------------------- log lines
def _verl_config(tmp_path, value: str):
    config = tmp_path / "verl.yaml"
    tree = {"trainer": {"resume_mode": "resume_path", "resume_from_path": value}}
    config.write_text(yaml.safe_dump(tree))
    return config


def test_log_notes_print_config_values_escaped(tmp_path):
    config = _verl_config(tmp_path, FORGED)
    for verbose in ([], ["-v"]):
        done = mfsdp(*verbose, "train", "sft", "--config", str(config))
        assert done.returncode == 2, done.stderr  # no data files: a usage error after the note
        _no_forged_lines(done.stderr)
        notes = [line for line in done.stderr.splitlines() if "note: verl's" in line]
        assert len(notes) == 1 and "\\x0aerror: forged\\x1b" in notes[0], done.stderr


def test_warnings_print_escaped():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli.verbosity import configure_logging; configure_logging(); import warnings; "
            f"warnings.warn({FORGED!r})",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    _no_forged_lines(done.stderr)
    assert "UserWarning: /nonexist\\x0aerror: forged" in done.stderr, done.stderr


def test_from_verl_notes_stay_comments(tmp_path):
    config = _verl_config(tmp_path, "/x\nmodel:\n  path: /evil\n")
    done = mfsdp("config", "from-verl", str(config))
    assert done.returncode == 0, done.stderr
    converted = yaml.safe_load(done.stdout)
    assert "model" not in converted, done.stdout
    assert converted["checkpoint"]["resume"] == "/x\nmodel:\n  path: /evil\n"
    assert all(line.startswith("# ") for line in done.stdout.splitlines()[:2]), done.stdout


def test_yaml_with_a_character_yaml_refuses_is_a_usage_error(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("trainer:\n  run_dir: a\x1bb\n")
    for args in (
        ("--config", str(config)),
        ("trainer.run_dir=a\x1bb",),
    ):
        done = mfsdp("train", "sft", *args)
        assert done.returncode == 2, done.stderr
        one_error(done.stderr, "not valid YAML", "unacceptable character #x001b")


# --------------------------------------------------------------------------- data rows
GOOD_SFT = (
    '{"messages": [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]}'
)
TWICE = {
    "top-level": ('{"messages": [], "messages": "x"}', "'messages'"),
    "in-a-turn": (
        '{"messages": [{"role": "user", "content": "a", "content": "b"}, '
        '{"role": "assistant", "content": "2"}]}',
        "'content'",
    ),
}


@pytest.mark.parametrize("case", list(TWICE))
def test_training_refuses_a_row_giving_a_key_twice(tmp_path, case):
    """Python's json kept the last value silently: a row meant one way trained another."""
    row, key = TWICE[case]
    data = tmp_path / "train.jsonl"
    data.write_text(f"{GOOD_SFT}\n{row}\n" + f"{GOOD_SFT}\n" * 14)
    done = mfsdp(
        "train", "sft", "--config", "examples/sft_tiny_cpu.yaml",
        f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, f"{data}:2:", f"key {key} appears twice")
    assert not (tmp_path / "run").exists()


def test_data_conversion_refuses_a_row_giving_a_key_twice(tmp_path):
    source = tmp_path / "train.jsonl"
    source.write_text(
        '{"question": "1+1", "answer": "#### 2"}\n'
        '{"question": "2+2", "answer": "#### 4", "answer": "#### 5"}\n'
    )
    done = mfsdp("data", "gsm8k", "--input", str(source), "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, f"{source}:2:", "key 'answer' appears twice")
    assert not (tmp_path / "out").exists()
