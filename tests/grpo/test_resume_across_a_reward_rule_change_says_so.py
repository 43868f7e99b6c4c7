"""A GRPO step records the built-in reward rules that scored it; a resume across a change says so.

The DAPO rule changed on 2026-12-06 (a response with no `Answer:` line is scored by its last
`\\boxed{}`, verl bf48903d9; it scored -1.0). A run on DAPO rows resumed by this mfsdp then
rewarded the same responses otherwise, with the same config, and nothing was said. Now each
step's manifest records the rules' version (`info.reward_rules`), and a resume of a step that
records none, on rows a change since then scores otherwise, prints one warning line naming the
step, the change and docs/upgrading.md, and goes on. With `reward.path`, with no such rows, or
on a step that records this version, nothing is said.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.ckpt_edits import edit_manifest
from tests.support.grpo import grpo_config, write_rl_rows
from trainer.grpo.reward_rules import INFO_KEY, rules_change_warning
from trainer.grpo.runner import run_grpo
from trainer.rewards.rule_history import CURRENT

SOURCES = ("math_dapo", "aime2024")
REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.5\n"
)


def _dapo_rows(path: Path) -> Path:
    """The tests' RL rows, half routed to the DAPO rule by each of its kinds of source."""
    write_rl_rows(path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows[: len(SOURCES) * 2]):
        row["data_source"] = SOURCES[i % len(SOURCES)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _info(step: Path) -> dict:
    return json.loads((step / "manifest.json").read_text())["info"]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[Path, Path]:
    """A run on DAPO rows with the built-in rules, stopped at step 1 of 2."""
    root = tmp_path_factory.mktemp("rules")
    data = _dapo_rows(root / "rl.jsonl")
    run_grpo(grpo_config(data, root / "run", "trainer.stop_at_step=1"))
    return root, data


def _as_saved_before_the_record(run: Path) -> None:
    """Step 1 as an mfsdp before the record wrote it: no `info.reward_rules`."""
    edit_manifest(run / "global_step_1", lambda manifest: manifest["info"].pop(INFO_KEY))


def test_each_step_records_the_rules_that_scored_it(stopped):
    root, _ = stopped
    assert _info(root / "run" / "global_step_1")[INFO_KEY] == CURRENT == "verl-1dda039b"


def test_a_step_saved_before_the_record_resumes_with_a_warning(stopped, tmp_path, capsys):
    root, data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    _as_saved_before_the_record(run)
    capsys.readouterr()
    result = run_grpo(grpo_config(data, run))
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert warnings == [
        f"[grpo] warning: {run / 'global_step_1' / 'manifest.json'}: step 1 records no version"
        " of the built-in reward rules that scored it (info.reward_rules: saved by an mfsdp"
        " before 2026-12-06), this run scores with those of verl-1dda039b: the DAPO rule"
        " (data_source math_dapo, math, math_dapo_reasoning, aime*) scores a response with no"
        " `Answer:` line by its last \\boxed{} in its last 100 characters (DAPO box fallback,"
        " verl bf48903d9), where it scored -1.0 (this run's data holds such rows: data_source"
        " 'aime2024'); the steps after 1 may reward the same responses otherwise than the"
        " steps before did (docs/upgrading.md: how to keep the earlier rule)"
    ], err
    assert result.final_step == 2  # resumed, not refused
    # the step it saved records this run's rules: a later resume of it says nothing
    assert _info(run / "global_step_2")[INFO_KEY] == CURRENT


def test_a_step_that_records_these_rules_resumes_without_a_line(stopped, tmp_path, capsys):
    root, data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    capsys.readouterr()
    run_grpo(grpo_config(data, run))
    err = capsys.readouterr().err
    assert "warning:" not in err and "reward rules" not in err, err


def test_a_run_with_reward_path_is_not_warned(stopped, tmp_path, capsys):
    """Its function scores every row: the built-in rules' change meets none of them."""
    root, data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    _as_saved_before_the_record(run)
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    capsys.readouterr()
    run_grpo(grpo_config(data, run, f"reward.path={reward}"))
    err = capsys.readouterr().err
    assert "reward rules" not in err and "warning:" not in err, err
    assert INFO_KEY not in _info(run / "global_step_2")  # nor does its step record the rules


def test_what_the_line_depends_on(stopped, tmp_path):
    """Data no change scores otherwise, and another version than this one recorded."""
    root, _ = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    _as_saved_before_the_record(run)
    found = resolve_checkpoint(str(run / "global_step_1"))
    assert rules_change_warning(found, 1, False, ["openai/gsm8k", "lighteval/MATH"]) is None
    assert rules_change_warning(found, 1, True, SOURCES) is None
    assert "records no version" in (rules_change_warning(found, 1, False, ["math"]) or "")
    edit_manifest(run / "global_step_1", lambda manifest: manifest["info"].update(reward_rules=7))
    line = rules_change_warning(found, 1, False, ["math_dapo_reasoning"])
    assert line is not None and "rules 7, a version this mfsdp does not know, " in line, line
    assert "'math_dapo_reasoning'" in line and "DAPO box fallback" in line, line
