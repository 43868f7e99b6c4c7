"""What a GRPO resume checks beyond the step: its KL reference, edited prompts, its keys.

- Full-parameter GRPO with `actor.use_kl_loss` rebuilds its KL reference from `model.path`
  at every start. Other weights swapped into that directory between stop and resume were
  taken as the reference without a word (the KL term silently changed); the manifest now
  records the reference's weight files and a resume onto other ones is refused in one line
  naming the file and the recorded path. Checkpoints saved before resume as before.
- Prompts edited in place (ground truths unchanged) resumed without the warning that other
  edited rows get.
- A refusal for another batch size named the internal `global_batch_size`, not
  `data.train_batch_size`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.ckpt_edits import edit_manifest
from tests.support.grpo import grpo_config, write_rl_rows
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.reference import ReferenceRecord
from trainer.grpo.runner import run_grpo
from trainer.resume import ResumeMismatchError
from trainer.tiny import build_tiny_model_dir


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A KL run on the weights in `current` (a copy of model A) stopped at step 1, and
    model B: the same shapes and sizes, other weights."""
    root = tmp_path_factory.mktemp("reference")
    build_tiny_model_dir(root / "A", seed=0, with_weights=True)
    build_tiny_model_dir(root / "B", seed=1, with_weights=True)
    current = shutil.copytree(root / "A", root / "current")
    data = write_rl_rows(root / "rl.jsonl")
    run_grpo(grpo_config(data, root / "run", f"model.path={current}", "trainer.stop_at_step=1"))
    return root, current, data


def _swap(current: Path, other: Path) -> None:
    shutil.rmtree(current)
    shutil.copytree(other, current)


def test_the_manifest_records_the_reference_weights(stopped):
    root, current, _data = stopped
    info = json.loads((root / "run" / "global_step_1" / "manifest.json").read_text())["info"]
    files = info["reference_model"]["files"]
    assert list(files) == ["model.safetensors"], info
    assert files["model.safetensors"]["size"] == (current / "model.safetensors").stat().st_size
    assert info["run"] == "grpo"


def test_other_weights_in_model_path_are_refused_and_the_same_resume(stopped, tmp_path):
    root, current, data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    _swap(current, root / "B")
    try:
        with pytest.raises(ResumeMismatchError) as refused:
            run_grpo(grpo_config(data, run, f"model.path={current}"))
    finally:
        _swap(current, root / "A")
    assert str(refused.value) == (
        f"{run}/global_step_1/manifest.json: the checkpoint's KL reference (actor.use_kl_loss)"
        f" was the weights in {current}; in this run's model.path {current}, model.safetensors"
        " has other bytes of the same size (xxh3_128 differs); so its files changed since this"
        " step was saved: restore them, or use a new trainer.run_dir to start over"
    )
    assert not (run / "global_step_2").exists()
    result = run_grpo(grpo_config(data, run, f"model.path={current}"))  # A again: resumes
    assert result.resumed_from == 1 and result.final_step == 2


def test_a_checkpoint_saved_before_the_files_were_recorded_resumes_as_before(stopped, tmp_path):
    root, current, data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    edit_manifest(run / "global_step_1", lambda m: m["info"]["reference_model"].pop("files"))
    _swap(current, root / "B")
    try:
        result = run_grpo(grpo_config(data, run, f"model.path={current}"))
    finally:
        _swap(current, root / "A")
    assert result.resumed_from == 1 and result.final_step == 2


def test_only_a_separate_reference_records_weights():
    """With LoRA the reference is the base (the adapter's own check covers it); without
    actor.use_kl_loss there is none."""
    cfg = load_config(GRPOConfig, None, ["model.shape=tiny"])
    assert ReferenceRecord.of(cfg, lora=False).weights is not None
    assert ReferenceRecord.of(cfg, lora=True).weights is None
    no_kl = load_config(GRPOConfig, None, ["model.shape=tiny", "actor.use_kl_loss=false"])
    assert ReferenceRecord.of(no_kl, lora=False).weights is None
    assert ReferenceRecord.of(no_kl, lora=False).manifest_info() == {
        "path": None,
        "shape": "tiny",
        "random_init": False,
        "seed": 0,
    }


def test_edited_prompts_are_warned_about_once(stopped, tmp_path, capsys):
    """The ground truths, data sources and extra_info are unchanged: only the prompts
    differ, which the rows digest does not cover."""
    root, current, _data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    edited = write_rl_rows(tmp_path / "rl.jsonl")
    cfg = grpo_config(edited, run, f"model.path={current}", "trainer.total_steps=1")
    run_grpo(cfg)  # nothing left to train: the same rows, no warning
    assert "warning:" not in capsys.readouterr().err
    write_rl_rows(edited, prefix="Q: ")
    run_grpo(cfg)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    assert (
        f"[grpo] warning: {run}/global_step_1: data.train_files ({edited}) hold other prompts"
        " than the checkpoint was trained on: the steps after 1 read other rows than an"
        " uninterrupted run would (a new trainer.run_dir starts over)\n"
    ) in err


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ("data.train_batch_size=4", "actor.ppo_mini_batch_size=4"),
            "checkpoint was trained with data.train_batch_size=2, this run has"
            " data.train_batch_size=4;",
        ),
        (
            ("data.max_prompt_length=20",),  # drops the one prompt with a two-digit number
            "checkpoint was trained on 8 training rows, this run has 7 (data.train_files,"
            " data.max_prompt_length decide them);",
        ),
    ],
)
def test_a_data_position_refusal_names_the_keys(stopped, overrides, expected):
    root, current, data = stopped
    with pytest.raises(ResumeMismatchError) as refused:
        run_grpo(grpo_config(data, root / "run", f"model.path={current}", *overrides))
    assert str(refused.value).startswith(f"{root}/run/global_step_1/dist_ckpt: {expected}")
