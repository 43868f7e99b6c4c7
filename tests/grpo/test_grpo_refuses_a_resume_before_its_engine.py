"""`mfsdp train grpo` refuses the step `checkpoint.resume` names before it builds its models
and rollout engine, where the step's files alone say it cannot be resumed, and closes the
engine while the process group exists when a refusal can only come after it.

Was: a verl run's step given as `checkpoint.resume` (what `config from-verl` wrote for verl's
`resume_mode=resume_path`) started the rollout engine (vLLM: its model dir written into the
verl run dir, minutes of start-up on a real model), and only then was refused, with vLLM's
shutdown traceback under the error line once the process group was gone; SFT refuses the
same step with the same line.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch.distributed as dist

from mfsdp_ckpt.checkpointer import CheckpointContentsError
from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.interop_layouts import verl_run_of_import
from trainer.grpo import runner
from trainer.grpo.runner import run_grpo
from trainer.resume import ResumeMismatchError
from trainer.rollout.hf import HFRolloutEngine
from trainer.tiny import build_tiny_model_dir


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A verl run dir (an import as its actor's dist_ckpt, as docs/interop.md builds one),
    an mfsdp import (weights alone) and RL rows."""
    root = tmp_path_factory.mktemp("foreign")
    model = build_tiny_model_dir(root / "hf", seed=0, with_weights=True)
    import_hf(model, root / "mcore", layout_name="mcore")
    verl_run_of_import(root / "mcore", model, root / "verl", 2)
    import_hf(model, root / "imported", layout_name="hf")
    return root, model, write_rl_rows(root / "rl.jsonl")


@pytest.fixture
def engines(monkeypatch) -> list[str]:
    """What happens to rollout engines in the test: "built", and "closed in the group" or
    "closed without the group" (whether the process group still existed then)."""
    said: list[str] = []
    build, close = runner.build_rollout_engine, HFRolloutEngine.close

    def built(*args, **kwargs):
        said.append("built")
        return build(*args, **kwargs)

    def closed(self):
        said.append("closed in the group" if dist.is_initialized() else "closed without it")
        close(self)

    monkeypatch.setattr(runner, "build_rollout_engine", built)
    monkeypatch.setattr(HFRolloutEngine, "close", closed)
    return said


def _files(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize("given", ["step", "run dir"])
def test_a_verl_step_is_refused_before_the_engine_and_nothing_is_written(
    made, tmp_path, engines, given
):
    root, model, data = made
    verl = shutil.copytree(root / "verl", tmp_path / "verl")  # the run dir, as from-verl maps it
    step = verl / "global_step_2"
    before = _files(verl)
    resume = step if given == "step" else verl
    cfg = grpo_config(data, verl, f"model.path={model}", f"checkpoint.resume={resume}")
    with pytest.raises(CheckpointContentsError) as refused:
        run_grpo(cfg)
    assert str(refused.value) == (
        f"{step}: a checkpoint of layout verl-rl-v1, not a step of an mfsdp training run: it"
        " has no mfsdp optimizer or extra state to resume; to start training from its"
        f" weights, give model.path={step} instead of checkpoint.resume"
    )
    assert engines == []
    assert _files(verl) == before


def test_a_weights_only_import_is_refused_before_the_engine(made, tmp_path, engines):
    root, model, data = made
    step = root / "imported" / "global_step_0"
    cfg = grpo_config(data, tmp_path / "run", f"model.path={model}", f"checkpoint.resume={step}")
    with pytest.raises(CheckpointContentsError) as refused:
        run_grpo(cfg)
    assert str(refused.value).endswith(
        "; it holds weights alone: to start training from them, give its step dir as"
        " model.path and a new trainer.run_dir"
    )
    assert engines == []


def test_an_sft_step_is_refused_before_the_engine(made, tmp_path, engines):
    """Another kind of run's step: refused by its manifest, before any model is built."""
    from tests.support.sft import tiny_config, write_chat_jsonl
    from trainer.sft import run_sft

    _root, model, data = made
    chat = write_chat_jsonl(tmp_path / "chat.jsonl", rows=8)
    sft = tiny_config(
        chat,
        tmp_path / "sft",
        f"model.path={model}",
        "trainer.total_steps=1",
        "data.global_batch_size=4",
    )
    run_sft(sft)
    cfg = grpo_config(data, tmp_path / "sft", f"model.path={model}")
    with pytest.raises(ResumeMismatchError, match="`mfsdp train sft` wrote this checkpoint"):
        run_grpo(cfg)
    assert engines == []


def test_a_refusal_after_the_engine_closes_it_while_the_group_exists(made, tmp_path, engines):
    """Another batch size is known only once the step's trainer state is loaded, after the
    engine started: the engine is closed before the process group is destroyed."""
    _root, model, data = made
    run = tmp_path / "run"
    run_grpo(grpo_config(data, run, f"model.path={model}", "trainer.stop_at_step=1"))
    engines.clear()
    other = grpo_config(data, run, f"model.path={model}", "data.train_batch_size=4")
    with pytest.raises(ResumeMismatchError, match=re.escape("data.train_batch_size=2")):
        run_grpo(other)
    assert engines == ["built", "closed in the group"]
