"""Running the same train command again once its run finished says "nothing left to train"
before torch loads, with the result and exit code it gave when it loaded everything first.

Was: the rerun loaded torch and transformers, built the model, read the data and loaded the
step (seconds on CPU, minutes for a large model) only to say that. A setting changed since
the step still starts the run, which compares and refuses as before, and so does a step
whose files no longer match its manifest (refused naming the file, exit 1).
"""

from __future__ import annotations

import json
import subprocess

from tests.support.fresh_python import MFSDP
from tests.support.grpo import write_rl_rows
from tests.support.paths import repo_env
from tests.support.sft import TINY_CONFIG, write_chat_jsonl

SFT = ["sft", "--config", str(TINY_CONFIG), "data.train_files=[train.jsonl]"]
# the smallest GRPO run that trains (tests/support/grpo.py)
GRPO = ["grpo", "data.train_files=rl.jsonl", "data.max_prompt_length=32"]
GRPO += ["data.train_batch_size=2", "actor.ppo_mini_batch_size=2", "rollout.n=2"]
GRPO += ["actor.ppo_micro_batch_size_per_gpu=4", "actor.log_prob_micro_batch_size_per_gpu=4"]
GRPO += ["rollout.max_response_length=4", "rollout.name=hf", "trainer.device=cpu"]


def _train(tmp_path, *extra: str, kind: list[str] = SFT) -> subprocess.CompletedProcess:
    """`mfsdp train KIND` of one step into tmp_path/run, its imports timed (-X importtime)."""
    args = ["train", *kind, "trainer.run_dir=run", "trainer.total_steps=1"]
    args += ["trainer.progress_bar=false"]
    command = [MFSDP[0], "-X", "importtime", *MFSDP[1:], *args, *extra]
    env = {**repo_env(), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def _imported(ended: subprocess.CompletedProcess, module: str) -> bool:
    """Whether `module` was imported (a line of -X importtime: `import time: us | us | name`,
    the name indented by its depth)."""
    lines = ended.stderr.splitlines()
    return any(
        line.startswith("import time:") and line.split("|")[-1].strip() == module for line in lines
    )


def _said(ended: subprocess.CompletedProcess) -> list[str]:
    return [line for line in ended.stderr.splitlines() if not line.startswith("import time:")]


def test_a_rerun_of_a_finished_run_says_so_without_torch(tmp_path):
    write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    first = _train(tmp_path)
    assert first.returncode == 0, _said(first)
    assert _imported(first, "torch")  # the check below can see torch imported

    again = _train(tmp_path)
    assert again.returncode == 0, _said(again)
    assert again.stdout == first.stdout  # the same result line, its values from metrics.jsonl
    assert _said(again) == [
        "[sft] run/global_step_1 is at step 1 and trainer.total_steps=1: nothing left to train"
        " (raise trainer.total_steps to train on, or give another trainer.run_dir to start"
        " afresh)"
    ]
    assert not _imported(again, "torch") and not _imported(again, "transformers")

    as_json = _train(tmp_path, "--json")
    assert as_json.returncode == 0, _said(as_json)
    summary = json.loads(as_json.stdout)
    assert (summary["final_step"], summary["resumed_from"], summary["total_steps"]) == (1, 1, 1)
    assert summary["checkpoint"] == "run/global_step_1" and summary["final_loss"] is not None
    assert not _imported(as_json, "torch")


def test_a_changed_setting_still_starts_the_run_which_compares_it(tmp_path):
    write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    assert _train(tmp_path).returncode == 0
    lower = _train(tmp_path, "optim.lr=1e-3")  # no refusal: told as before, after loading
    assert lower.returncode == 0, _said(lower)
    assert _imported(lower, "torch")
    assert _said(lower)[-1].endswith("nothing left to train (raise trainer.total_steps to"
                                     " train on, or give another trainer.run_dir to start"
                                     " afresh)"), _said(lower)  # fmt: skip
    seed = _train(tmp_path, "trainer.seed=1")  # refused on resume, as before
    assert seed.returncode == 2, _said(seed)
    assert "trainer.seed" in _said(seed)[-1], _said(seed)


def test_a_damaged_last_step_is_still_refused_naming_the_file(tmp_path):
    write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    assert _train(tmp_path).returncode == 0
    damaged = sorted((tmp_path / "run" / "global_step_1" / "dist_ckpt").glob("*.distcp"))[0]
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    again = _train(tmp_path)
    assert again.returncode == 1, _said(again)
    assert damaged.name in _said(again)[-1], _said(again)
    assert not any("nothing left to train" in line for line in _said(again)), _said(again)


def test_a_rerun_of_a_finished_grpo_run_says_so_without_torch(tmp_path):
    write_rl_rows(tmp_path / "rl.jsonl", rows=8)
    first = _train(tmp_path, kind=GRPO)
    assert first.returncode == 0, _said(first)
    again = _train(tmp_path, kind=GRPO)
    assert again.returncode == 0, _said(again)
    assert again.stdout == first.stdout
    assert _said(again) == [
        "[grpo] run/global_step_1 is at step 1 and trainer.total_steps=1: nothing left to train"
        " (raise trainer.total_steps to train on, or give another trainer.run_dir to start"
        " afresh)"
    ]
    assert _imported(first, "torch") and not _imported(again, "torch")
