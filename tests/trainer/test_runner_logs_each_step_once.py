"""What the shared loop (`TrainingRun.loop`) logs and prints: each step once in
metrics.jsonl, SFT's last validation in its step's record; nothing, and no tracker started,
where a rerun has nothing left to train; no step lines without `console` in
`trainer.logger`, and one note where `jsonl` is left out.

Was: SFT's final validation was a second record of the last step; every rerun of a
finished run opened a TensorBoard events file (and an empty wandb run); `trainer.logger=[]`
still printed a line per step and said nothing of metrics.jsonl."""

from __future__ import annotations

from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

CPU = ["trainer.device=cpu", "strategy.name=fsdp2"]


def test_the_last_validation_is_in_the_last_steps_record(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    cfg = tiny_config(
        data,
        tmp_path / "run",
        "trainer.total_steps=3",
        "trainer.eval_every=2",
        "checkpoint.save_every=0",
        "data.val_ratio=0.2",
        *CPU,
    )
    result = run_sft(cfg)
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2, 3], records
    assert records[2]["val/loss"] == result.eval_losses[3] and "train/loss" in records[2]


def test_a_rerun_with_nothing_left_logs_nothing_and_starts_no_tracker(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    cfg = tiny_config(
        data, run, "trainer.total_steps=1", "trainer.logger=[console,jsonl,tensorboard]", *CPU
    )
    run_sft(cfg)
    logged, events = (run / "metrics.jsonl").read_bytes(), sorted((run / "tensorboard").iterdir())
    again = run_sft(cfg)
    assert again.final_step == 1 and again.resumed_from == 1
    assert (run / "metrics.jsonl").read_bytes() == logged
    assert sorted((run / "tensorboard").iterdir()) == events


def test_without_console_no_step_lines_and_without_jsonl_one_note(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run_sft(
        tiny_config(data, tmp_path / "quiet", "trainer.total_steps=2", "trainer.logger=[]", *CPU)
    )
    err = capsys.readouterr().err
    assert "[sft] step " not in err, err
    notes = [line for line in err.splitlines() if "trainer.logger has no jsonl" in line]
    assert len(notes) == 1, err
    assert [r["step"] for r in read_metrics(tmp_path / "quiet")] == [1, 2]
    run_sft(tiny_config(data, tmp_path / "said", "trainer.total_steps=2", *CPU))
    err = capsys.readouterr().err
    assert "[sft] step 1/2 " in err and "[sft] step 2/2 " in err, err
    assert "trainer.logger has no jsonl" not in err
