"""A validation loss that is not finite gets one `warning:` line naming the step; the run's
exit code stays (as verl's does).

Was: `optim.lr=1e9` with one step printed `sft: step 1, loss ..., val loss nan` and exited 0
with nothing else said: the weights were finite, their outputs overflowed.
"""

from __future__ import annotations

from tests.support.fresh_python import mfsdp
from tests.support.sft import TINY_CONFIG, write_chat_jsonl


def _run(tmp_path, lr: str):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    return mfsdp(
        "train", "sft", "--config", str(TINY_CONFIG), f"data.train_files=[{data}]",
        f"trainer.run_dir={tmp_path / 'run'}", f"optim.lr={lr}", "trainer.total_steps=1",
        "data.val_ratio=0.2", "trainer.progress_bar=false",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip


def test_a_nan_validation_loss_is_warned_of_once_and_the_run_exits_0(tmp_path):
    ended = _run(tmp_path, "1e9")
    assert ended.returncode == 0, ended.stderr
    assert "val loss nan" in ended.stdout, ended.stdout
    warnings = [line for line in ended.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, ended.stderr
    assert warnings[0].startswith("warning: step 1: val/loss is nan: "), warnings
    assert "overflow" in warnings[0] and "weights themselves may be finite" in warnings[0]


def test_a_finite_validation_loss_says_nothing(tmp_path):
    ended = _run(tmp_path, "3e-3")
    assert ended.returncode == 0, ended.stderr
    assert "val loss nan" not in ended.stdout, ended.stdout
    assert "warning:" not in ended.stderr, ended.stderr
