"""The small SFT run every reliability case starts from: made once per module by
`make_pristine`, copied fresh for each case (`fresh_copy`), and hashed (`tree_digest`) so a
case can tell that a command wrote nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from mfsdp_ckpt.format import layout
from tests.reliability.outcome import run_in_process
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl

CONFIG = str(EXAMPLES / "sft_tiny_cpu.yaml")
BASE_STEP = 2  # the pristine run saves this one step
RUN_SETTINGS = (
    "data.val_ratio=0",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "optim.warmup_steps=0",
)


def sft_args(data: Path, run_dir: Path, *extra: str) -> list[str]:
    """`mfsdp train sft` arguments for the tiny default on `data`, writing `run_dir`."""
    return [
        "train",
        "sft",
        "--config",
        CONFIG,
        f"data.train_files={data}",
        f"trainer.run_dir={run_dir}",
        *RUN_SETTINGS,
        *extra,
    ]


def make_pristine(root: Path) -> Path:
    """A one-process SFT run with one complete checkpoint (step 2); returns the run dir."""
    data = write_chat_jsonl(root / "train.jsonl", rows=24)
    run = root / "run"
    result = run_in_process(sft_args(data, run, f"trainer.total_steps={BASE_STEP}"))
    if result.exit_code != 0:
        raise RuntimeError(f"pristine run failed: {result.output[-2000:]}") from result.exception
    return run


def fresh_copy(pristine: Path, scratch: Path) -> Path:
    """A copy of the pristine run (and its data) in `scratch`, to damage freely."""
    scratch.mkdir(parents=True, exist_ok=True)
    shutil.copy(pristine.parent / "train.jsonl", scratch / "train.jsonl")
    run = scratch / "run"
    shutil.copytree(pristine, run, symlinks=True)
    return run


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under root (symlinks as their target) -> sha256: "nothing was written"."""
    digest = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            digest[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            digest[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            digest[rel] = "dir"
    return digest


def step_dir(run: Path) -> Path:
    """The one step the pristine run saved."""
    return layout.step_dir(run, BASE_STEP)
