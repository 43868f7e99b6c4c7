"""The `next:` command a finished LoRA run names works when run as given: on a random-init
base (the tiny default) the adapter alone (`--adapter-only`: there is no base on disk to
merge onto, and the merged export it named failed with exit 1); on a base with weights the
merged model."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from mfsdp_ckpt.command_as_run import DEV_SCRIPT
from tests.support.fresh_python import mfsdp
from tests.support.paths import repo_env
from tests.support.sft import TINY_CONFIG, write_chat_jsonl
from trainer.tiny import build_tiny_model_dir

# as a user runs it: `mfsdp` itself, not through ./dev (which names `./dev mfsdp`)
_ENV = {**{k: v for k, v in repo_env().items() if k != DEV_SCRIPT}, "OMP_NUM_THREADS": "1"}


def _next_command(tmp_path: Path, *extra: str) -> list[str]:
    """Train one LoRA step of `train sft` on the tiny config; the `next:` command it names,
    as arguments to `mfsdp`, writing to `out`."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    args = ["train", "sft", "--config", str(TINY_CONFIG), f"data.train_files=[{data}]"]
    args += ["trainer.run_dir=runs/r", "trainer.total_steps=1", "data.val_ratio=0"]
    args += ["trainer.eval_every=0", "trainer.progress_bar=false", "model.lora_rank=4", *extra]
    done = mfsdp(*args, cwd=tmp_path, env=_ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    named = re.search(r"; next: `mfsdp (.*)`$", done.stdout.rstrip())
    assert named, done.stdout
    return [arg if arg != "DIR" else "out" for arg in shlex.split(named.group(1))]


def test_a_random_init_base_is_told_the_adapter_only_export(tmp_path):
    command = _next_command(tmp_path)
    assert command == ["ckpt", "export-hf", "runs/r", "--out", "out", "--adapter-only"]
    done = mfsdp(*command, cwd=tmp_path, env=_ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "adapter_config.json").is_file()


def test_a_base_with_weights_is_told_the_merged_export(tmp_path):
    base = build_tiny_model_dir(tmp_path / "base", with_weights=True)
    command = _next_command(tmp_path, f"model.path={base}")
    assert command == ["ckpt", "export-hf", "runs/r", "--out", "out"]
    done = mfsdp(*command, cwd=tmp_path, env=_ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert not (tmp_path / "out" / "adapter_config.json").exists()
