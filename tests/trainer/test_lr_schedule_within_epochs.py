"""`trainer.steps_within_epochs` ends a run at its last epoch's end, before
`trainer.total_steps`, and leaves the learning-rate schedule as long as `trainer.total_steps`:
verl's PPO/GRPO trainer (ray_trainer.py copies trainer.total_training_steps into
actor.optim.total_training_steps, which fsdp_workers.py sizes the warmup and the cosine by) and
its sft_trainer stop at the epochs' end but schedule over total_training_steps. The run's
shorter step count had set the schedule too, squeezing warmup and decay into it. So the steps
that run take the learning rates of the same config without the flag, resumed or not.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.grpo.runner import run_grpo
from trainer.sft import run_sft

ROWS, BATCH = 16, 8  # two steps an epoch
EPOCHS, TOTAL_STEPS = 2, 40  # the epochs end at step 4, long before the schedule's 40 steps
SCHEDULE = (
    f"trainer.epochs={EPOCHS}",
    f"trainer.total_steps={TOTAL_STEPS}",
    "optim.warmup_ratio=0.1",
    "optim.warmup_steps=0",
    "optim.scheduler=cosine",
)
WITHIN_EPOCHS = "trainer.steps_within_epochs=true"
EPOCHS_END = EPOCHS * (ROWS // BATCH)
# the same config run to the epochs' end without the flag: the reference schedule
REFERENCE = ("trainer.steps_within_epochs=false", f"trainer.stop_at_step={EPOCHS_END}")


def logged_lrs(run_dir: Path, key: str) -> dict[int, float]:
    """The learning rate each step of `run_dir` logged under `key`."""
    return {record["step"]: record[key] for record in read_metrics(run_dir) if key in record}


def sft_run(tmp_path: Path, name: str, *overrides: str):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=ROWS)
    cfg = tiny_config(
        data,
        tmp_path / name,
        f"data.global_batch_size={BATCH}",
        "trainer.device=cpu",
        "checkpoint.save_every=0",
        *SCHEDULE,
        *overrides,
    )
    return run_sft(cfg)


def test_sft_within_epochs_keeps_the_lr_of_the_full_schedule(tmp_path, capsys):
    within = sft_run(tmp_path, "within", WITHIN_EPOCHS)
    announced = capsys.readouterr().err
    sft_run(tmp_path, "reference", *REFERENCE)

    assert within.final_step == EPOCHS_END
    assert f"steps 0 -> {EPOCHS_END}" in announced
    lrs = logged_lrs(tmp_path / "within", "train/lr")
    assert sorted(lrs) == list(range(1, EPOCHS_END + 1))
    assert lrs == logged_lrs(tmp_path / "reference", "train/lr")


def test_sft_within_epochs_resumed_keeps_the_same_schedule(tmp_path, capsys):
    sft_run(tmp_path, "within", WITHIN_EPOCHS, "trainer.stop_at_step=1")
    resumed = sft_run(tmp_path, "within", WITHIN_EPOCHS)
    sft_run(tmp_path, "reference", *REFERENCE)

    assert resumed.resumed_from == 1
    assert resumed.final_step == EPOCHS_END
    assert logged_lrs(tmp_path / "within", "train/lr") == logged_lrs(
        tmp_path / "reference", "train/lr"
    )
    capsys.readouterr()
    sft_run(tmp_path, "within", WITHIN_EPOCHS)  # again: the epochs, not the schedule, end it
    assert f"and trainer.epochs={EPOCHS}: nothing left to train" in capsys.readouterr().err


def test_warmup_warning_counts_the_warmup_of_the_full_schedule(tmp_path, capsys):
    """A warmup of 10% of 40 steps (4) takes the whole 4-step run: the learning rate never
    reaches optim.lr, as in verl, and the run says so (over the run's own 4 steps the
    warmup was 0 steps, and nothing was said)."""
    sft_run(tmp_path, "within", WITHIN_EPOCHS)
    warmup = int(0.1 * TOTAL_STEPS)
    said = f"({warmup} steps) is not less than the run's {EPOCHS_END} steps"
    assert said in capsys.readouterr().err


def test_grpo_within_epochs_keeps_the_lr_of_the_full_schedule(tmp_path):
    data = write_rl_rows(tmp_path / "rl.jsonl", rows=4)  # two steps of grpo_config's 2 prompts

    def grpo_run(name: str, *overrides: str):
        cfg = grpo_config(data, tmp_path / name, "checkpoint.save_every=0", *SCHEDULE, *overrides)
        return run_grpo(cfg)

    within = grpo_run("within", WITHIN_EPOCHS)
    grpo_run("reference", *REFERENCE)

    assert within.final_step == EPOCHS_END
    lrs = logged_lrs(tmp_path / "within", "actor/lr")
    assert sorted(lrs) == list(range(1, EPOCHS_END + 1))
    assert lrs == logged_lrs(tmp_path / "reference", "actor/lr")
