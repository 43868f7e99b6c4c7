"""`train sft|grpo --json` on a run with nothing left to train reports the values the run
logged, as docs/json.md defines them ("of the last logged step", "of the last
validation"): they were null, the invocation having trained none, though metrics.jsonl
held them, so a script rerunning an idempotent train command read null."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.grpo import write_rl_rows
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl

_RUNS = {
    "sft": (
        "sft_tiny_cpu.yaml",
        {"final_loss": "train/loss", "val_loss": "val/loss"},
        ["data.val_ratio=0.25", "trainer.eval_every=1"],
    ),
    "grpo": (
        "grpo_tiny_cpu.yaml",
        {"reward_mean": "reward/mean", "val_accuracy": "val/accuracy"},
        [],
    ),
}


def _data(kind: str, root: Path) -> list[str]:
    """The run's data files, as overrides."""
    if kind == "sft":
        return [f"data.train_files={write_chat_jsonl(root / 'train.jsonl', rows=16)}"]
    return [
        f"data.train_files={write_rl_rows(root / 'train.jsonl')}",
        f"data.val_files={write_rl_rows(root / 'val.jsonl', rows=4)}",
    ]


def _train(kind: str, run: Path, cwd: Path) -> dict:
    config, _keys, more = _RUNS[kind]
    done = mfsdp(
        "train",
        kind,
        "--config",
        str(EXAMPLES / config),
        "--json",
        "trainer.total_steps=1",
        f"trainer.run_dir={run}",
        "trainer.progress_bar=false",
        *_data(kind, cwd),
        *more,
        cwd=cwd,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _logged(run: Path, key: str) -> float:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [record[key] for record in records if key in record][-1]


@pytest.mark.parametrize("kind", sorted(_RUNS))
def test_a_rerun_with_nothing_left_reports_the_logged_values(kind, tmp_path):
    run = tmp_path / "run"
    first = _train(kind, run, tmp_path)
    again = _train(kind, run, tmp_path)
    assert again["resumed_from"] == again["final_step"] == 1, again
    for field, key in _RUNS[kind][1].items():
        assert again[field] is not None, again
        assert again[field] == first[field] == pytest.approx(_logged(run, key)), (field, again)
