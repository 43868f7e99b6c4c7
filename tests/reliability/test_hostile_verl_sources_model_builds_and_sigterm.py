"""Hostile inputs to `config from-verl` and to the model build, and SIGTERM mid-write:

* `mfsdp config from-verl` of a FIFO nobody writes to (a named pipe, `<(...)` whose writer
  is gone) blocked forever in open(); a socket or a device (/dev/zero) was opened and read
  too. Only a regular file is read now, as `--config` takes only one: one line naming the
  file and what it is (exit 2), at once;
* `mfsdp train` from a model dir whose config.json holds a value transformers reads without
  complaint but cannot build the model from (an unknown `hidden_act`, a rope factor that is a
  string), or with such a `model.overrides`: a traceback of 80 lines in the rank. Now one
  line naming config.json (exit 1) or model.overrides (exit 2) and what transformers said.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from mfsdp_ckpt.check.printable import printable
from tests.support.cli_errors import one_error
from tests.support.model_dirs import config_edit, train
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.model import ModelFilesError, build_hf_config, build_model, load_tokenizer

# Long enough for Python and click to start on a busy machine, far shorter than "forever".
QUICK_SECONDS = 60


def _mfsdp_within(seconds: float, *args: str) -> subprocess.CompletedProcess:
    """`mfsdp ARGS` in a fresh interpreter that must end within `seconds` (a hang fails the
    test instead of stalling the suite)."""
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=seconds,
        stdin=subprocess.DEVNULL,
    )


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(path))


def _dev_zero(path):
    path.symlink_to("/dev/zero")


SPECIAL_SOURCES = {
    "fifo": (_fifo, "a FIFO, not a regular file"),
    "socket": (_socket, "a socket, not a regular file"),
    "dev-zero": (_dev_zero, "a character device, not a regular file"),
}


@pytest.mark.parametrize("case", list(SPECIAL_SOURCES))
def test_from_verl_reads_only_a_regular_file(tmp_path, case):
    make, words = SPECIAL_SOURCES[case]
    source = tmp_path / "run.sh"
    make(source)
    done = _mfsdp_within(QUICK_SECONDS, "config", "from-verl", source)
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, str(source), words)
    assert done.stdout == ""


# --------------------------------------------------------------------------- model builds
def _build(model_cfg: ModelConfig) -> None:
    tokenizer = load_tokenizer(model_cfg)
    build_model(model_cfg, build_hf_config(model_cfg, tokenizer), torch.device("cpu"), seed=0)


BAD_BUILDS = {
    # transformers reads both configs without a word and fails in the module's __init__
    "unknown-activation": ({"hidden_act": "\x1b[2Jswish9"}, "KeyError: '\\x1b[2Jswish9'"),
    "rope-factor-a-string": (
        {"rope_scaling": {"rope_type": "yarn", "factor": "x"}},
        "TypeError: '<=' not supported",
    ),
}


@pytest.mark.parametrize("case", list(BAD_BUILDS))
def test_a_model_dir_config_transformers_cannot_build_is_named(tmp_path, trainable, case):
    changes, words = BAD_BUILDS[case]
    model = tmp_path / "model"
    shutil.copytree(trainable[0], model)
    config_edit(**changes)(model)
    with pytest.raises(ModelFilesError) as caught:
        _build(ModelConfig(path=str(model)))
    message = printable(str(caught.value))
    assert message.startswith(f"{model / 'config.json'}: transformers cannot build the model")
    assert words in message and "\n" not in message, message


@pytest.mark.parametrize("case", list(BAD_BUILDS))
def test_overrides_transformers_cannot_build_are_a_usage_error(case):
    changes, words = BAD_BUILDS[case]
    with pytest.raises(ConfigError) as caught:
        _build(ModelConfig(overrides=changes))
    assert str(caught.value).startswith("model.overrides: transformers cannot build the model")
    assert words in printable(str(caught.value)), caught.value


def test_a_run_whose_model_cannot_be_built_ends_in_one_line(tmp_path):
    """Was a traceback of 80 lines (the rank's, prefixed [rank0]:) and exit 1."""
    code, err = train(
        "sft",
        "model.overrides={hidden_act: nope}",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.total_steps=1",
        f"data.train_files={write_chat_jsonl(tmp_path / 'train.jsonl', rows=24)}",
    )
    assert code == 2, err
    one_error(err, "model.overrides: transformers cannot build the model (KeyError: 'nope')")


def test_a_model_that_builds_still_builds(trainable):
    _build(ModelConfig(path=str(trainable[0])))
    _build(ModelConfig(overrides={"hidden_act": "gelu"}))
