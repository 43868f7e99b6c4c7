"""An exception whose own `__str__` raises (a user's class with a typo in it) is reported
in one line, its type named and `<str() failed>`: turning it into text raised again while
it was reported, and a reward function raising one ended the run in four chained
tracebacks and no `--json` object."""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.check.printable import STR_FAILED, error_line, said_by
from mfsdp_ckpt.errors import EXIT_FAILED
from mfsdp_ckpt.storage.tensor_memory import is_allocation_failure, memory_failure
from tests.grpo.test_rewards import VERL_SIGNATURE, _one_grpo_step_scored_by
from tests.support.interop_layouts import one_error_line
from trainer.rewards.custom import RewardFunctionError
from trainer.rewards.dispatch import RewardScorer

CHECKER_ERROR = (
    "class CheckerError(RuntimeError):\n"
    "    def __str__(self):\n"
    "        return f'checker failed with {self.message}'  # no such attribute\n\n"
)


class CheckerError(RuntimeError):
    def __str__(self):
        raise AttributeError("'CheckerError' object has no attribute 'message'")


def test_every_way_an_exception_becomes_text_survives_a_failing_str():
    err = CheckerError()
    assert said_by(err) == STR_FAILED
    assert error_line(err) == f"CheckerError: {STR_FAILED}"
    assert not is_allocation_failure(err)
    chained = ValueError("outer")
    chained.__cause__ = err
    assert memory_failure(chained) is None


def test_a_reward_function_raising_one_fails_its_row_in_one_line(tmp_path):
    file = tmp_path / "bad_str.py"
    file.write_text(
        f"{CHECKER_ERROR}def compute_score({VERL_SIGNATURE}):\n    raise CheckerError(3)\n"
    )
    with pytest.raises(RewardFunctionError) as raised:
        RewardScorer(str(file))(["ok"], ["7"], ["7"], [{"index": 2}])
    assert str(raised.value) == (
        f"reward.path {str(file)!r}, data_source 'ok' (index 2): compute_score raised"
        f" CheckerError: {STR_FAILED}"
    )


def test_a_grpo_run_whose_reward_raises_one_ends_in_one_line_and_json(tmp_path):
    body = (
        "class E(Exception):\n"
        "        def __str__(self):\n"
        "            return self.message\n"
        "    raise E(3)"
    )
    _reward, (code, out, err) = _one_grpo_step_scored_by(tmp_path, body)
    assert code == EXIT_FAILED, err
    line = one_error_line(err)
    assert line.endswith(f"compute_score raised E: {STR_FAILED}"), line
    assert "Traceback" not in err
    assert json.loads(out) == {"error": line.removeprefix("error: "), "exit_code": EXIT_FAILED}
