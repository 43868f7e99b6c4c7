"""With dropout on, a resumed run computes what an uninterrupted one does (SFT and GRPO, one
rank, CPU): every step's random draws are a function of (seed, step, rank), so a run stopped at
step k and resumed draws at step k+1 the masks an uninterrupted run drew there. The global RNG
was seeded once at build and never saved: a resumed run restarted its dropout stream from the
build's state, and every step after the resume trained on other masks."""

from pathlib import Path

import torch

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.grpo.runner import run_grpo
from trainer.sft import run_sft

DROPOUT = "model.overrides={attention_dropout: 0.3}"
SFT_SETTINGS = (
    DROPOUT,
    "trainer.total_steps=4",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "optim.warmup_steps=0",
)


def _model_tensors(step_dir: Path) -> dict[str, torch.Tensor]:
    reader = CheckpointReader(step_dir / "dist_ckpt")
    return {name: reader.read_tensor(name) for name in reader.tensors if name.startswith("model.")}


def _assert_same_weights(straight: Path, resumed: Path) -> None:
    a, b = _model_tensors(straight), _model_tensors(resumed)
    assert a.keys() == b.keys() and a
    for name in a:
        assert torch.equal(a[name], b[name]), name


def _records(run_dir: Path, key: str) -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(run_dir) if key in r}


def test_sft_resume_with_dropout_is_bitwise_an_uninterrupted_run(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    straight = run_sft(tiny_config(data, tmp_path / "straight", *SFT_SETTINGS))
    run_sft(tiny_config(data, tmp_path / "split", *SFT_SETTINGS, "trainer.stop_at_step=2"))
    resumed = run_sft(tiny_config(data, tmp_path / "split", *SFT_SETTINGS))
    assert resumed.resumed_from == 2 and resumed.final_step == 4
    without = run_sft(
        tiny_config(data, tmp_path / "no_dropout", *SFT_SETTINGS[1:], "trainer.total_steps=1")
    )
    assert straight.losses[1] != without.losses[1]  # the dropout is on: it changes the loss
    assert resumed.losses == {3: straight.losses[3], 4: straight.losses[4]}  # bitwise
    _assert_same_weights(straight.last_checkpoint, resumed.last_checkpoint)


def test_grpo_resume_with_dropout_is_bitwise_an_uninterrupted_run(tmp_path):
    data = write_rl_rows(tmp_path / "train.jsonl")
    settings = (
        DROPOUT,
        f"data.val_files={data}",
        "data.val_max_samples=2",
        "trainer.eval_every=1",  # validation between steps draws nothing a step draws
        "trainer.total_steps=3",
    )
    straight = run_grpo(grpo_config(data, tmp_path / "straight", *settings))
    run_grpo(grpo_config(data, tmp_path / "split", *settings, "trainer.stop_at_step=1"))
    resumed = run_grpo(grpo_config(data, tmp_path / "split", *settings))
    assert resumed.resumed_from == 1 and resumed.final_step == 3
    a = _records(tmp_path / "straight", "actor/pg_loss")
    b = _records(tmp_path / "split", "actor/pg_loss")
    assert sorted(a) == sorted(b) == [1, 2, 3]
    for step in (2, 3):
        for key in ("reward/mean", "actor/pg_loss", "actor/entropy", "actor/grad_norm"):
            assert b[step][key] == a[step][key], (step, key)  # bitwise
    _assert_same_weights(straight.last_checkpoint, resumed.last_checkpoint)
