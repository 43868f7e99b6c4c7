"""verl's trainer.rollout_data_dir and validation_data_dir: DIR/<step>.jsonl of the step's
samples, one line a response, verl's fields (input, output, gts, score, step) then acc and,
for training, advantage.

mfsdp wrote nothing of prompts, responses, scores or advantages, and `mfsdp config
from-verl` dropped the two keys as "logging only": a verl user who set them got no files.
"""

from __future__ import annotations

import json

import pytest

from tests.grpo.test_grpo_runner import _overrides, task  # noqa: F401  (task: a fixture)
from tests.support.metrics import read_metrics
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo
from trainer.verl_import import convert_verl

FIELDS = ["input", "output", "gts", "score", "step", "acc"]


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_one_step_run_writes_its_samples_and_its_validations(task):  # noqa: F811
    root, files, reward = task
    dumps, val_dumps = root / "dumps", root / "val_dumps"
    overrides = _overrides(root, files, reward, "dumped", steps=1) + [
        f"trainer.rollout_data_dir={dumps}",
        f"trainer.validation_data_dir={val_dumps}",
        "trainer.val_before_train=true",
    ]
    run_grpo(load_config(GRPOConfig, None, overrides))
    records = read_metrics(root / "dumped")
    (step,) = [r for r in records if "reward/mean" in r]
    samples = lines(dumps / "1.jsonl")
    assert [sorted(s) for s in samples] == [sorted([*FIELDS, "advantage"])] * 16  # 4 prompts x 4
    assert [list(s)[:5] for s in samples] == [FIELDS[:5]] * 16
    assert {s["step"] for s in samples} == {1}
    mean = sum(s["score"] for s in samples) / len(samples)
    assert mean == pytest.approx(step["reward/mean"], abs=1e-6)
    for prompt in {s["input"] for s in samples}:  # a group's advantages sum to 0
        group = [s for s in samples if s["input"] == prompt]
        assert len(group) == 4 and all(s["gts"] == group[0]["gts"] for s in group)
        assert sum(s["advantage"] for s in group) == pytest.approx(0.0, abs=1e-5)
    assert sorted(p.name for p in dumps.iterdir()) == ["1.jsonl"]  # no temp file left
    assert sorted(p.name for p in val_dumps.iterdir()) == ["0.jsonl", "1.jsonl"]
    checked = lines(val_dumps / "1.jsonl")
    assert len(checked) == len(lines(val_dumps / "0.jsonl")) > 0  # every validation prompt
    assert [sorted(s) for s in checked] == [sorted(FIELDS)] * len(checked)
    val_mean = sum(s["score"] for s in checked) / len(checked)
    assert val_mean == pytest.approx(step["val/reward"], abs=1e-6)  # validated after step 1


def test_from_verl_carries_the_two_keys_over(tmp_path):
    script = tmp_path / "run.sh"
    words = [
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo",
        "trainer.rollout_data_dir=/data/rollouts",
        "trainer.validation_data_dir=/data/validations",
    ]
    script.write_text(" \\\n    ".join(words) + "\n")
    conversion = convert_verl(script)
    assert conversion.tree["trainer"]["rollout_data_dir"] == "/data/rollouts"
    assert conversion.tree["trainer"]["validation_data_dir"] == "/data/validations"
    said = conversion.notes + conversion.dropped
    assert not [line for line in said if "data_dir" in line]
