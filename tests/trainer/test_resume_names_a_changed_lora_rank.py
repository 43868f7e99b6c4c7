"""A resume with another adapter rank than the step was trained with (model.lora_rank added
to a full-parameter run, changed on a LoRA run, or set to 0 on one) is refused naming
model.lora_rank, as a changed model.lora_alpha is: the load refused it by tensor names or
shapes ("112 key(s) of this run missing from the checkpoint", "lora_A.default.weight has
shape (8, 256) in the checkpoint, (4, 256) in this run")."""

from __future__ import annotations

import re

import pytest

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

SETTINGS = (
    "trainer.total_steps=4",
    "checkpoint.save_every=2",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
)


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    """(data, base, {lora rank: run dir holding its step 2}) for a full-parameter run (0)
    and a LoRA run of rank 8."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_rank")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=24)
    runs = {}
    for rank in (0, 8):
        runs[rank] = root / f"rank_{rank}"
        overrides = (f"model.path={base}", f"model.lora_rank={rank}", "trainer.stop_at_step=2")
        assert run_sft(tiny_config(data, runs[rank], *SETTINGS, *overrides)).final_step == 2
    return data, base, runs


@pytest.mark.parametrize(
    "trained, now, was, has",
    [
        (0, 8, "without LoRA (model.lora_rank=0)", "model.lora_rank=8"),
        (8, 4, "with model.lora_rank=8", "model.lora_rank=4"),
        (8, 0, "with model.lora_rank=8", "model.lora_rank=0 (no LoRA)"),
    ],
)
def test_a_changed_lora_rank_is_refused_naming_the_key(steps, trained, now, was, has):
    data, base, runs = steps
    manifest = runs[trained] / "global_step_2" / "manifest.json"
    overrides = (f"model.path={base}", f"model.lora_rank={now}")
    with pytest.raises(ResumeMismatchError) as refused:
        run_sft(tiny_config(data, runs[trained], *SETTINGS, *overrides))
    assert str(refused.value) == (
        f"{manifest}: checkpoint was trained {was}, this run has {has}: set it back"
        " (or a new trainer.run_dir to start over)"
    )
    assert not re.search(r"lora_[AB]|shape|missing", str(refused.value))
