"""A checkpoint is resumed only by the kind of run that wrote it.

`mfsdp train grpo` pointed at an SFT run dir resumed the SFT step and its Adam state as its
own (and SFT into a GRPO run dir likewise). Now it is refused in one line naming the step
and the command that wrote it, with what works instead: `model.path=<that step>` and a new
`trainer.run_dir`, which this test runs. The kind is recorded as `info.run`; checkpoints
saved before are told apart by what each kind saves. Starting GRPO from an SFT step, the
KL reference is that step: other weights swapped in under its path are refused too.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.ckpt_edits import edit_manifest
from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.grpo.runner import run_grpo
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "trainer.total_steps=2", "checkpoint.save_every=1")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """An SFT run saved at steps 1 and 2, a GRPO run saved at step 1, and their data."""
    root = tmp_path_factory.mktemp("kinds")
    write_chat_jsonl(root / "chat.jsonl", rows=16)
    write_rl_rows(root / "rl.jsonl")
    run_sft(tiny_config(root / "chat.jsonl", root / "sft", *SETTINGS))
    run_grpo(grpo_config(root / "rl.jsonl", root / "grpo", "trainer.stop_at_step=1"))
    return root


def _unrecorded(run: Path, step: int) -> None:
    """As checkpoints saved before the kind was recorded: no `info.run`."""
    edit_manifest(run / f"global_step_{step}", lambda m: m["info"].pop("run"))


@pytest.mark.parametrize("older", [False, True], ids=["recorded", "saved-before"])
def test_grpo_into_an_sft_run_dir_is_refused(runs, tmp_path, older):
    run = shutil.copytree(runs / "sft", tmp_path / "sft")
    if older:
        _unrecorded(run, 2)
    config = (run / "config.yaml").read_text()
    with pytest.raises(ResumeMismatchError) as refused:
        run_grpo(grpo_config(runs / "rl.jsonl", run))
    step = run / "global_step_2"
    assert str(refused.value) == (
        f"{step}: `mfsdp train sft` wrote this checkpoint; `mfsdp train grpo` does not resume"
        " its step and optimizer state as its own: to start grpo from its weights, give"
        f" model.path={step} and a new trainer.run_dir"
    )
    assert (run / "config.yaml").read_text() == config and not (run / "global_step_3").exists()


@pytest.mark.parametrize("older", [False, True], ids=["recorded", "saved-before"])
def test_sft_into_a_grpo_run_dir_is_refused(runs, tmp_path, older):
    run = shutil.copytree(runs / "grpo", tmp_path / "grpo")
    if older:
        _unrecorded(run, 1)
    with pytest.raises(ResumeMismatchError) as refused:
        run_sft(tiny_config(runs / "chat.jsonl", run, *SETTINGS))
    step = run / "global_step_1"
    assert str(refused.value) == (
        f"{step}: `mfsdp train grpo` wrote this checkpoint; `mfsdp train sft` does not resume"
        " its step and optimizer state as its own: to start sft from its weights, give"
        f" model.path={step} and a new trainer.run_dir"
    )


def test_an_explicit_resume_path_and_a_lora_step_get_their_own_advice(runs, tmp_path):
    from trainer.grpo.runner import GRPO_RUN
    from trainer.resume import check_run_kind

    step = shutil.copytree(runs / "sft" / "global_step_1", tmp_path / "global_step_1")
    with pytest.raises(ResumeMismatchError, match=r"and checkpoint\.resume=auto$"):
        run_grpo(grpo_config(runs / "rl.jsonl", tmp_path / "new", f"checkpoint.resume={step}"))
    # model.path refuses an adapter alone (a LoRA step): its export is what to start from,
    # when there is a base to merge it onto (tests/trainer/test_resume_run_kind_lora.py)
    edit_manifest(step, lambda m: m.update(lora={"peft_type": "LORA", "r": 4, "lora_alpha": 8}))
    with pytest.raises(ResumeMismatchError) as refused:
        check_run_kind(resolve_checkpoint(step), "auto", GRPO_RUN)
    assert str(refused.value).endswith(
        "a LoRA adapter on a random-init base: no weights to start from (export-hf has nothing"
        " to merge it onto); give a new trainer.run_dir"
    )


def test_the_kind_of_checkpoints_saved_before_it_was_recorded():
    from trainer.resume import run_kind_of

    assert run_kind_of({"train_loss": 5.8, "total_steps": 6}) == "sft"
    assert run_kind_of({"train_loss": None, "total_steps": 6}) == "sft"
    grpo = {"reference_model": {"path": None}, "total_steps": 4, "reward_mean": 0.1}
    assert run_kind_of({**grpo, "rollout": "hf"}) == "grpo"
    assert run_kind_of({"rollout": "vllm"}) == "grpo"
    assert run_kind_of({}) is None  # another writer (an import, verl): not refused
    assert run_kind_of({"run": "sft", "rollout": "hf"}) == "sft"


def test_grpo_starts_from_an_sft_step_as_the_refusal_says_and_keeps_its_reference(runs, tmp_path):
    """model.path=<the SFT step> trains; that step is the KL reference, so other weights
    under its path on resume are refused, naming the checkpoint file that differs."""
    start = shutil.copytree(runs / "sft" / "global_step_1", tmp_path / "start")
    run = tmp_path / "grpo"
    first = run_grpo(
        grpo_config(runs / "rl.jsonl", run, f"model.path={start}", "trainer.stop_at_step=1")
    )
    assert first.final_step == 1
    info = json.loads((run / "global_step_1" / "manifest.json").read_text())["info"]
    assert info["reference_model"]["files"] and info["run"] == "grpo"
    shutil.rmtree(start)
    shutil.copytree(runs / "sft" / "global_step_2", start)  # the same shapes, trained on
    with pytest.raises(ResumeMismatchError) as refused:
        run_grpo(grpo_config(runs / "rl.jsonl", run, f"model.path={start}"))
    message = str(refused.value)
    assert message.startswith(
        f"{run}/global_step_1/manifest.json: the checkpoint's KL reference (actor.use_kl_loss)"
        f" was the weights in {start}; "
    )
    differing = r"(\.metadata|__0_\d+\.distcp)"  # the first, by name, of the files that differ
    named = f"in this run's model.path {re.escape(str(start))}/dist_ckpt, {differing} "
    assert re.search(named, message), message


def test_a_reference_checkpoint_without_our_manifest_is_recorded_by_its_files(runs, tmp_path):
    """model.path a step another tool wrote (no mfsdp manifest: verl, Megatron-LM): the
    reference was recorded with no files, and other weights put there resumed silently."""
    start = shutil.copytree(runs / "sft" / "global_step_1", tmp_path / "start")
    (start / "manifest.json").unlink()
    run = tmp_path / "grpo"
    run_grpo(grpo_config(runs / "rl.jsonl", run, f"model.path={start}", "trainer.stop_at_step=1"))
    info = json.loads((run / "global_step_1" / "manifest.json").read_text())["info"]
    assert {".metadata", "__0_0.distcp"} <= set(info["reference_model"]["files"]), info
    shutil.rmtree(start / "dist_ckpt")
    shutil.copytree(runs / "sft" / "global_step_2" / "dist_ckpt", start / "dist_ckpt")
    with pytest.raises(ResumeMismatchError, match="KL reference"):
        run_grpo(grpo_config(runs / "rl.jsonl", run, f"model.path={start}"))
