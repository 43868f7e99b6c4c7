"""A GRPO run on 2 processes whose model vLLM cannot run: every rank's engine refuses it alike,
and the `error:` line came once per rank (or, under --json, as `rank 1: ...` while stderr's
line had no prefix), depending on which rank torchrun saw fail first."""

from __future__ import annotations

import json

from tests.support.launched_rank import VLLM_REASON, run_two_ranks
from trainer.rollout.vllm_engine import VLLMRolloutError

REFUSAL = str(VLLMRolloutError.of(VLLM_REASON))


def test_the_refusal_is_one_line():
    done = run_two_ranks("vllm-refuses")
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert errors == [f"error: {REFUSAL}"], done.stderr


def test_under_json_the_refusal_is_one_object_without_a_rank():
    done = run_two_ranks("vllm-refuses", "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {"error": REFUSAL, "exit_code": 1}, done.stdout
