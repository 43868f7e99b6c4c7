"""A train save that a full disk fails says which file, as `PATH: reason`. Was: `saving step
1 failed: Exception: No space left on device (os error 28)` (tokenizers' Rust error, no
file) and `saving step 1 failed: OSError: [Errno 28] No space left on device: '.../manifest.json'`
(Python's repr)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
import torch

from tests.support.paths import repo_env

STATE = {"model": {"w": torch.ones(2)}}

SAVING = """
import resource, sys
from pathlib import Path
import torch
from transformers import Qwen2Config
from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
from mfsdp_ckpt.checkpointer import Checkpointer
from trainer.model import write_hf_assets
from trainer.tiny import build_tokenizer, tiny_config_kwargs
run, limit = Path(sys.argv[1]), int(sys.argv[2])
tokenizer = build_tokenizer()
config = Qwen2Config(**tiny_config_kwargs(len(tokenizer)))
saver = Checkpointer(run, strategy="none")
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    saver.save(
        1,
        {"model": {"w": torch.ones(2)}},
        contents=("model",),
        hf_assets=lambda target: write_hf_assets(target, config, tokenizer, None),
    )
except CheckpointSaveError as err:
    print(err)
"""


def test_a_tokenizer_the_disk_cannot_hold_names_tokenizer_json(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", SAVING, str(run), str(8 << 10)],  # tokenizer.json is larger
        capture_output=True,
        text=True,
        timeout=120,
        env=repo_env(),
    )
    tmp = run / "global_step_1.tmp"
    assert done.stdout.strip() == (
        f"{tmp}: saving step 1 failed: {tmp}/huggingface/tokenizer.json: not written"
        " (File too large)"
    ), done.stderr


def test_a_manifest_the_disk_cannot_hold_is_named_without_python_s_repr(tmp_path, monkeypatch):
    from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
    from mfsdp_ckpt.checkpointer import Checkpointer

    fsync = os.fsync

    def full_disk_at_the_manifest(fd: int) -> None:  # ENOSPC as delayed allocation gives it
        if os.readlink(f"/proc/self/fd/{fd}").endswith("manifest.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk_at_the_manifest)
    run = tmp_path / "run"
    with pytest.raises(CheckpointSaveError) as caught:
        Checkpointer(run, strategy="none").save(1, STATE, contents=("model",))
    tmp = run / "global_step_1.tmp"
    assert str(caught.value) == (
        f"{tmp}: saving step 1 failed: {tmp}/manifest.json: not written (No space left on device)"
    )
    assert not tmp.exists()
