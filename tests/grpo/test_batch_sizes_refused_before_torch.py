"""GRPO batch sizes that do not divide (`data.train_batch_size` by `actor.ppo_mini_batch_size`,
a rank's mini-batch by `actor.ppo_micro_batch_size_per_gpu`, the mini-batch over the ranks)
are refused by `mfsdp config check grpo` and by train's launcher before torch loads, in the
one line (exit 2) each rank gave once torch had loaded: config check said `ok` to them, and
`--nproc-per-node 2` started both ranks before either refused the split.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.config_check import check_config
from cli.launch import load_checked_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.fresh_python import mfsdp
from tests.support.grpo import write_rl_rows
from trainer.grpo.config import GRPOConfig

# the tiny shape on CPU, prompt and response within its context
LENGTHS = ("data.max_prompt_length=32", "rollout.max_response_length=6", "trainer.device=cpu")
UNEVEN = ("data.train_batch_size=3", "actor.ppo_mini_batch_size=3", "rollout.n=2")  # 2 ranks
UNEVEN_LINE = "actor.ppo_mini_batch_size=3 prompts must split evenly over 2 ranks"
HALVES = ("actor.ppo_mini_batch_size=2", "rollout.n=1", "actor.ppo_micro_batch_size_per_gpu=2")
HALVES_LINE = (
    "a rank's mini-batch (1 prompts x rollout.n=1) must be a multiple of"
    " actor.ppo_micro_batch_size_per_gpu=2"
)


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    return write_rl_rows(tmp_path_factory.mktemp("rl") / "rl.jsonl")


def given(rows: Path, run: Path, *overrides: str) -> list[str]:
    return [f"data.train_files=[{rows}]", f"trainer.run_dir={run}", *LENGTHS, *overrides]


@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            ["data.train_batch_size=3", "actor.ppo_mini_batch_size=2"],
            "data.train_batch_size=3 must be a multiple of actor.ppo_mini_batch_size=2",
        ),
        (
            ["data.train_batch_size=2", "actor.ppo_mini_batch_size=4"],
            "data.train_batch_size=2 must be a multiple of actor.ppo_mini_batch_size=4",
        ),
        (
            [
                "rollout.n=3",
                "actor.ppo_micro_batch_size_per_gpu=4",
                "data.train_batch_size=2",
                "actor.ppo_mini_batch_size=2",
            ],
            "a rank's mini-batch (2 prompts x rollout.n=3) must be a multiple of"
            " actor.ppo_micro_batch_size_per_gpu=4",
        ),
    ],
)
def test_config_check_refuses_what_a_rank_refused(rows, tmp_path, overrides, line):
    with pytest.raises(MfsdpError) as caught:
        check_config("grpo", None, given(rows, tmp_path / "run", *overrides))
    assert (str(caught.value), caught.value.exit_code) == (line, 2)


def test_the_split_over_ranks_is_checked_for_the_ranks_launched(rows, tmp_path):
    """One rank passes what two refuse: a mini-batch of 3 prompts, and one of 2 prompts
    whose half is 1 response, fewer than a micro-batch of 2."""
    from cli.launch import check_batch_sizes  # the launcher's check of the ranks it starts

    for overrides, line in ((UNEVEN, UNEVEN_LINE), (HALVES, HALVES_LINE)):
        cfg = load_checked_config(GRPOConfig, None, given(rows, tmp_path / "run", *overrides))
        with pytest.raises(MfsdpError) as caught:
            check_batch_sizes(cfg, 2)
        assert (str(caught.value), caught.value.exit_code) == (line, 2)


@pytest.mark.parametrize("overrides, line", [(UNEVEN, UNEVEN_LINE), (HALVES, HALVES_LINE)])
def test_train_refuses_an_uneven_split_before_it_launches(rows, tmp_path, overrides, line):
    """The command itself: its one line, and no "launching 2 processes" before it."""
    run = tmp_path / "run"
    done = mfsdp("train", "grpo", "--nproc-per-node", "2", *given(rows, run, *overrides))
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"error: {line}"])
    assert not run.exists()
