"""`unset -f NAME` in a block that may not run leaves the function defined or not, as the
block runs: bash then runs no body at a call (`NAME: command not found`), so a verl command
the call starts is known only when the script runs. It was read as if the function stood,
without a word; now each key of that launch is to check, named with the line of the unset.
A definition that surely runs after it defines the function again. Each script is also
run by bash, with the verl command replaced by an echo, to show bash does as read here."""

from __future__ import annotations

import subprocess
from pathlib import Path

from trainer.verl_import import convert_verl

LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size={}"
MAYBE_UNSET = 'if [ "$DROP" = 1 ]; then unset -f train; fi\n'
DEFINE = "train() {{\n    " + LAUNCH + "\n}}\n"


def converted(tmp_path: Path, text: str):
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


def bash_starts(text: str, drop: str) -> list[str]:
    """The verl commands bash starts for `text` (each replaced by an echo) with DROP set."""
    echoed = text.replace("python3 -m verl.trainer.main_ppo", "echo STARTS")
    ran = subprocess.run(
        ["bash", "-c", echoed],
        env={"DROP": drop, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in ran.stdout.splitlines() if line.startswith("STARTS")]


def flagged(done) -> bool:
    return any("train (which starts verl) may be unset on line" in note for note in done.notes)


def test_a_call_after_a_maybe_unset_is_to_check(tmp_path):
    text = DEFINE.format(8) + MAYBE_UNSET + "train\n"
    assert bash_starts(text, "0") and not bash_starts(text, "1")

    done = converted(tmp_path, text)

    assert done.tree["data"]["train_batch_size"] == 8
    assert flagged(done)
    assert "data.train_batch_size=8" in done.incomplete
    assert any("may be unset on line 4 in a block that may not run" in n for n in done.notes)


def test_a_definition_that_surely_runs_defines_it_again(tmp_path):
    text = DEFINE.format(8) + MAYBE_UNSET + DEFINE.format(16) + "train\n"
    assert (
        bash_starts(text, "0")
        == bash_starts(text, "1")
        == ["STARTS algorithm.adv_estimator=grpo data.train_batch_size=16"]
    )

    done = converted(tmp_path, text)

    assert done.tree["data"]["train_batch_size"] == 16
    assert not flagged(done) and done.incomplete == []


def test_a_definition_that_may_not_run_leaves_it_maybe_unset(tmp_path):
    again = 'if [ "$AGAIN" = 1 ]; then\n' + DEFINE.format(16) + "fi\n"
    text = DEFINE.format(8) + MAYBE_UNSET + again + "train\n"
    assert not bash_starts(text, "1")

    assert flagged(converted(tmp_path, text))


def test_a_surely_run_unset_still_removes_the_function(tmp_path):
    text = DEFINE.format(8) + "unset -f train\ntrain\n" + LAUNCH.format(4) + "\n"
    done = converted(tmp_path, text)
    assert done.tree["data"]["train_batch_size"] == 4 and not flagged(done)
