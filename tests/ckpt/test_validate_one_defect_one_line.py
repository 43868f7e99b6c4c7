"""One defect of a checkpoint is one error line of validate, naming the real problem.

A FIFO the manifest lists under huggingface/ was "listed in the manifest but missing" and
again "a FIFO, not a regular file" (the check of the files export copies); a directory in a
listed file's place was "missing"; a listed link out of the checkpoint was refused twice;
Megatron-LM `args` whose pickle calls os.system were named by the pickle check and again
as the record that could not be read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from tests.support.ckpt_edits import edit_manifest
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

LISTED = "huggingface/extra.txt"


def _fifo(path: Path, _outside: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path, _outside: Path) -> None:
    path.mkdir()


def _link_out(path: Path, outside: Path) -> None:
    path.symlink_to(outside)


CASES = {
    "fifo": (_fifo, "a FIFO, not a regular file"),
    "directory": (_directory, "a directory, not a regular file"),
    "link out": (_link_out, "resolves outside the checkpoint"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("deep", [False, True], ids=["cheap", "deep"])
def test_a_listed_file_that_is_no_regular_file_is_one_line(case, deep, tmp_path):
    make, words = CASES[case]
    run = tmp_path / "run"
    Checkpointer(run, strategy="none").save(1, {"model": {"w": torch.ones(4)}}, contents=("model",))
    step = layout.step_dir(run, 1)
    tiny_causal_lm("llama").config.save_pretrained(step / layout.HF_ASSETS_DIR)
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    make(step / LISTED, outside)
    edit_manifest(step, lambda m: m["files"].update({LISTED: {"size": 1, "xxh3_128": "0" * 32}}))
    code, stdout, err = run_cli("ckpt", "validate", step, *(["--deep"] if deep else []))
    named = [line for line in stdout.splitlines() if line.startswith(f"error: {step / LISTED}:")]
    assert code == 1 and len(named) == 1 and words in named[0], stdout + err
    assert "missing" not in named[0], named


class _System:
    """Pickles as a call of os.system (never made: the checkpoint is only read)."""

    def __reduce__(self):
        return (os.system, ("true",))


def test_args_whose_pickle_calls_os_system_are_one_error(tmp_path):
    model = tiny_causal_lm("qwen3")
    run = megatron_run(tmp_path, model, megatron_args(model))
    bad = megatron_run(tmp_path / "bad", model, _System())
    code, stdout, err = run_cli("ckpt", "validate", bad)
    errors = [line for line in stdout.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1 and "posix.system" in errors[0], stdout + err
    assert "[args]" in errors[0]
    code, stdout, err = run_cli("ckpt", "validate", run)  # the same run with its own args
    assert code == 0, stdout + err
