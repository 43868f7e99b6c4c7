"""Log lines quoting values users chose, jsonl rows giving a key twice, chat templates that
are no regular file, and Bridge tokenizer files over the asset cap:

* log lines and warnings quoting values users chose (`note: verl's ... is
  checkpoint.resume=PATH here`): without `-v` Python's fallback handler printed them raw, so
  a newline forged a line and an ANSI escape recoloured the terminal; `mfsdp config
  from-verl` wrote the same notes as YAML comments, where a newline ended the comment and
  wrote the rest as keys of the config; an override or config holding a character YAML does
  not allow (an escape) was a traceback;
* jsonl rows giving a key twice (`{"messages": [...], "messages": "x"}`): Python's json
  kept the last value silently, for training and for `mfsdp data`;
* a model dir's chat_template.jinja that is a FIFO (or a directory, or a link out of the
  dir): transformers skipped it as absent, so training said "no chat template" instead of
  naming the file; export already named it;
* a Megatron-Bridge checkpoint's `tokenizer/` file over export's MAX_ASSET_BYTES: export
  refused it, training handed it to transformers to read whole.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import bridge_run
from tests.support.model_dirs import drop_chat_template, train_args, train_from
from tests.support.one_python import Ran, mfsdp_each
from tests.support.paths import REPO
from tests.support.terminal import FORGED, no_forged_lines


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
        no_forged_lines(done.stderr)
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
    no_forged_lines(done.stderr)
    assert "UserWarning: /nonexist\\x0aerror: forged" in done.stderr, done.stderr


def test_from_verl_notes_stay_comments(tmp_path):
    config = _verl_config(tmp_path, "/x\nmodel:\n  path: /evil\n")
    done = mfsdp("config", "from-verl", str(config))
    assert done.returncode == 0, done.stderr
    converted = yaml.safe_load(done.stdout)
    assert "path" not in converted.get("model", {}), done.stdout
    assert converted["checkpoint"]["resume"] == "/x\nmodel:\n  path: /evil\n"
    assert all(line.startswith("# ") for line in done.stdout.splitlines()[:2]), done.stdout


def test_yaml_with_a_character_yaml_refuses_is_a_usage_error(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("trainer:\n  run_dir: a\x1bb\n")
    done = mfsdp("train", "sft", "--config", str(config))
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, "not valid YAML", "unacceptable character #x001b")
    done = mfsdp("train", "sft", "trainer.run_dir=a\x1bb")  # refused before YAML reads it
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, "trainer.run_dir", "control character (\\x1b)")


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


@pytest.fixture(scope="module")
def key_twice_runs(tmp_path_factory) -> tuple[Path, dict[str, Ran]]:
    """`mfsdp train sft` on each TWICE case's rows (ROOT/CASE/train.jsonl, into ROOT/CASE/run),
    both in one interpreter (`mfsdp_each`): each loads the tokenizer before it reads its rows."""
    root = tmp_path_factory.mktemp("key_twice")
    commands = {}
    for case, (row, _key) in TWICE.items():
        data = root / case / "train.jsonl"
        data.parent.mkdir()
        data.write_text(f"{GOOD_SFT}\n{row}\n" + f"{GOOD_SFT}\n" * 14)
        commands[case] = train_args(
            "sft", f"data.train_files={data}", f"trainer.run_dir={root / case / 'run'}"
        )
    return root, mfsdp_each(commands)


@pytest.mark.parametrize("case", list(TWICE))
def test_training_refuses_a_row_giving_a_key_twice(key_twice_runs, case):
    """Python's json kept the last value silently: a row meant one way trained another."""
    root, runs = key_twice_runs
    _row, key = TWICE[case]
    assert runs[case].returncode == 2, runs[case].stderr
    one_error(runs[case].stderr, f"{root / case / 'train.jsonl'}:2:", f"key {key} appears twice")
    assert not (root / case / "run").exists()


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


# --------------------------------------------------------------------------- model dir files
def _template_fifo(path) -> None:
    os.mkfifo(path)


def _template_dir(path) -> None:
    path.mkdir()
    (path / "x").write_text("{{ messages }}")


def _template_link_out(path) -> None:
    path.symlink_to("/dev/zero")


TEMPLATE_KINDS = {
    "fifo": (_template_fifo, "chat_template.jinja: a FIFO, not a regular file"),
    "directory": (_template_dir, "chat_template.jinja: a directory, not a regular file"),
    "link-out": (_template_link_out, "chat_template.jinja: resolves outside the model dir"),
}


@pytest.mark.parametrize("case", list(TEMPLATE_KINDS))
def test_a_chat_template_that_is_no_file_is_named(tmp_path, trainable, case):
    """Was: "the tokenizer ... has no chat template" (exit 2), the file never named. Now
    named before launch, a usage error as every model file's (exit 2)."""
    source, table = trainable
    model = tmp_path / "model"
    shutil.copytree(source, model)
    drop_chat_template(model)
    make, words = TEMPLATE_KINDS[case]
    make(model / "chat_template.jinja")
    code, err = train_from(model, table, tmp_path / "run")
    assert code == 2, err
    one_error(err, str(model / "chat_template.jinja"), words.split(": ", 1)[1])
    assert not (tmp_path / "run").exists()


def test_a_bridge_tokenizer_file_over_the_asset_cap_is_refused_as_export_refuses_it(tmp_path):
    """Export refused a tokenizer file over MAX_ASSET_BYTES (exit 1); training handed it to
    transformers to read whole. Both now refuse it in the same line."""
    from mfsdp_ckpt.convert.export_source import MAX_ASSET_BYTES

    run = bridge_run(tmp_path, tiny_causal_lm("llama"), steps=(10,))
    big = run / "iter_0000010" / "tokenizer" / "tokenizer.json"
    os.truncate(big, MAX_ASSET_BYTES + 1)  # sparse: no disk used
    data = tmp_path / "train.jsonl"
    data.write_text(f"{GOOD_SFT}\n" * 16)
    words = f"{MAX_ASSET_BYTES + 1} bytes, more than the "  # export caps JSON assets lower
    exported = mfsdp("ckpt", "export-hf", str(run), "--out", str(tmp_path / "hf"))
    trained = mfsdp(
        "train", "sft", "--config", "examples/sft_tiny_cpu.yaml", f"model.path={run}",
        f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}",
    )  # fmt: skip
    for done in (exported, trained):
        assert done.returncode == 1, done.stderr
        one_error(done.stderr, str(big), words)
    assert not (tmp_path / "hf").exists() and not (tmp_path / "run").exists()
