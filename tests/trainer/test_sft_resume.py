"""Resume is exact: 6 steps straight == 3 steps + resume + 3 steps (FSDP2, 2 gloo ranks, CPU),
and a checkpoint from 2 ranks continues on 1 rank with the same losses up to rounding."""

import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format.run_steps import list_complete_steps
from tests.support.distributed import run_distributed
from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

SETTINGS = (
    "trainer.total_steps=6",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "optim.warmup_steps=2",
)


def _losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in read_metrics(run_dir) if "train/loss" in r}


def _two_rank_runs(rank: int, world_size: int, root: str) -> None:
    root = Path(root)
    data = root / "train.jsonl"
    run_sft(tiny_config(data, root / "straight", *SETTINGS))
    first = run_sft(tiny_config(data, root / "split", *SETTINGS, "trainer.stop_at_step=3"))
    assert first.final_step == 3 and first.resumed_from is None
    second = run_sft(tiny_config(data, root / "split", *SETTINGS))
    assert second.resumed_from == 3 and second.final_step == 6


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    write_chat_jsonl(root / "train.jsonl", rows=40)
    run_distributed(_two_rank_runs, 2, str(root))
    return root


def test_six_steps_equal_three_plus_resume_plus_three(two_rank_runs):
    straight, split = _losses(two_rank_runs / "straight"), _losses(two_rank_runs / "split")
    assert sorted(straight) == sorted(split) == [1, 2, 3, 4, 5, 6]
    assert straight == split  # bitwise: same floats, not just close
    assert straight[6] < straight[1]
    assert list_complete_steps(two_rank_runs / "split") == [3, 6]
    assert validate_checkpoint(two_rank_runs / "split", deep=True).ok()


def test_resume_from_two_ranks_on_one_rank(two_rank_runs, tmp_path):
    run_dir = tmp_path / "one_rank"
    shutil.copytree(two_rank_runs / "split", run_dir)
    shutil.rmtree(run_dir / "global_step_6")
    (run_dir / "latest_checkpointed_iteration.txt").write_text("3\n")
    (run_dir / "metrics.jsonl").write_text("")
    result = run_sft(tiny_config(two_rank_runs / "train.jsonl", run_dir, *SETTINGS))
    assert result.resumed_from == 3 and result.final_step == 6
    straight = _losses(two_rank_runs / "straight")
    for step, loss in result.losses.items():
        assert loss == pytest.approx(straight[step], rel=1e-4), step


def test_resume_refuses_a_different_global_batch(two_rank_runs, tmp_path):
    run_dir = tmp_path / "changed"
    shutil.copytree(two_rank_runs / "split", run_dir)
    overrides = [s for s in SETTINGS if not s.startswith("data.global_batch_size")]
    expected = "data.global_batch_size=8, this run has data.global_batch_size=4"
    with pytest.raises(ResumeMismatchError, match=expected):
        run_sft(
            tiny_config(
                two_rank_runs / "train.jsonl",
                run_dir,
                *overrides,
                "data.global_batch_size=4",
                "trainer.total_steps=8",
            )
        )
