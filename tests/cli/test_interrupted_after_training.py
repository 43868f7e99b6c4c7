"""A Ctrl-C once training finished (the ranks shutting down, the demo validating or exporting
its run) says that training finished and what was interrupted, with the command that does
what was left, not how to resume the run.

Was: `interrupted after step 80 or later (...); the newest checkpoint is dc/sft/global_step_80:
run mfsdp train sft --config dc/sft/config.yaml to resume from it`, a command that started up
for seconds only to say `nothing left to train`. And a Ctrl-C landing in a launched rank's
atexit hooks (torch's take a while) raised there: `Exception ignored in atexit callback` and
a KeyboardInterrupt traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from cli.demo import EXPORTING, GENERATING, VALIDATING, _Phase
from cli.launch import CONFIG_CHECKED
from cli.run_report import interrupted_run
from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.paths import EXAMPLES, REPO, repo_env
from trainer.config import SFTConfig, load_config


def _saved(run: Path, step: int) -> None:
    Checkpointer(run, strategy="none").save(
        step, {"model": {"w": torch.ones(2)}}, contents=("model",)
    )


def test_a_run_interrupted_after_its_last_step_says_training_finished(tmp_path):
    run = tmp_path / "run"
    _saved(run, 4)
    cfg = load_config(SFTConfig, str(EXAMPLES / "sft_tiny_cpu.yaml"), [f"trainer.run_dir={run}"])
    cfg.trainer.total_steps = 4
    assert interrupted_run(cfg, 0) == (
        f"interrupted after training finished (step 4 of 4); its final checkpoint is"
        f" {run / 'global_step_4'}"
    )
    cfg.trainer.total_steps, cfg.trainer.stop_at_step = 10, 4  # ended early, as it was told
    assert "after training finished (step 4 of 4)" in interrupted_run(cfg, 0)
    cfg.trainer.stop_at_step = 0
    assert "to resume from it" in interrupted_run(cfg, 0)  # 6 steps are left to train
    cfg.trainer.total_steps = 0  # so many epochs: the last step is not known here
    assert "to resume from it" in interrupted_run(cfg, 0)


def test_the_demo_interrupted_after_training_names_the_commands_left(tmp_path):
    out = tmp_path / "dc"
    run, hf = out / "sft", out / "hf"
    _saved(run, 8)
    phase = _Phase(out, 8, 2)
    validate = f"`mfsdp ckpt validate --deep {run}` validates it"
    export = f"`mfsdp ckpt export-hf {run} --out {hf} --dtype fp32 --verify`"
    again = f"`mfsdp demo --out {out} --steps 8` again starts over"
    phase.now = "train"  # the ranks had saved the last step and were shutting down
    assert phase.interrupted() == (
        f"interrupted after training finished (step 8 of 8); its final checkpoint is"
        f" {run / 'global_step_8'}; {validate}, {export} exports it; {again}"
    )
    phase.now = VALIDATING
    assert phase.interrupted() == (
        f"interrupted while validating the checkpoint; training had finished, its run is kept"
        f" in {run}: {validate}, {export} exports it; {again}"
    )
    phase.now = EXPORTING
    assert phase.interrupted() == (
        f"interrupted while exporting the checkpoint; training had finished, its run is kept"
        f" in {run}: {export} redoes the export; {again}"
    )
    phase.now = GENERATING
    assert f"the export in {hf}" in phase.interrupted()


# A launched rank's command (as `python -m cli.train` runs one: the click group alone), held
# at exit by an atexit hook, where the Ctrl-C lands
_RANK_HELD_AT_EXIT = (
    "import atexit, sys, time\n"
    "atexit.register(time.sleep, 3)\n"
    "from cli.app import app\n"
    "print('ran', flush=True)\n"
    "app(['config', 'defaults', 'sft'], prog_name='mfsdp')\n"
)


def test_a_ctrl_c_in_a_finished_ranks_atexit_hooks_prints_no_traceback():
    env = {**repo_env(), "RANK": "0", CONFIG_CHECKED: "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", _RANK_HELD_AT_EXIT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "ran\n"
    while "model:" not in process.stdout.readline():  # the command's output: it ends at once
        pass
    time.sleep(0.5)  # in its atexit hook by now
    os.kill(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (0, ""), (process.returncode, err)
