"""The runner skeleton (trainer/runner.py) that SFT and GRPO share: what a run reports after
its last step, when that step was also a scheduled save."""

from __future__ import annotations

from mfsdp_ckpt.format.layout import step_dir
from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft


def test_a_save_on_the_last_step_still_gets_the_final_evaluation(tmp_path):
    """Saving moves the checkpoint's step forward; the loop must still know where it started, or
    it takes a run that saved on its last step for one that ran no step at all."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        data,
        run_dir,
        "trainer.total_steps=2",
        "checkpoint.save_every=2",
        "data.val_ratio=0.2",
        "trainer.device=cpu",
        "strategy.name=fsdp2",
    )

    result = run_sft(cfg)

    assert (result.final_step, result.resumed_from) == (2, None)
    assert list(result.eval_losses) == [2]
    assert result.last_checkpoint == step_dir(run_dir, 2)
    assert any(row["step"] == 2 and "val/loss" in row for row in read_metrics(run_dir))


def test_a_warmup_longer_than_the_run_is_warned_of(tmp_path, capsys):
    """The learning rate never reached optim.lr, and nothing said so."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    cfg = tiny_config(
        data,
        tmp_path / "run",
        "trainer.total_steps=2",
        "optim.warmup_steps=4",
        "data.global_batch_size=8",
        "trainer.device=cpu",
    )
    run_sft(cfg)
    assert (
        "[sft] warning: optim.warmup_steps=4 is not less than the run's 2 steps: the learning rate"
        " never reaches optim.lr=0.003 (the last step's is 0.00075)\n"
    ) in capsys.readouterr().err


def test_a_validation_between_logged_steps_is_recorded(tmp_path):
    """eval_every 2 under log_every 3: step 2's validation ran and was never written (only
    steps log_every divides, and the last, were), leaving holes in the val curve."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        data,
        run_dir,
        "trainer.total_steps=3",
        "trainer.log_every=3",
        "trainer.eval_every=2",
        "checkpoint.save_every=0",
        "data.val_ratio=0.2",
        "trainer.device=cpu",
        "strategy.name=fsdp2",
    )

    result = run_sft(cfg)

    logged = {row["step"]: row for row in read_metrics(run_dir)}
    assert sorted(result.eval_losses) == [2, 3]
    assert sorted(logged) == [2, 3] and logged[2]["val/loss"] == result.eval_losses[2], logged
