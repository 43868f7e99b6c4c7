"""The vllm rollout engine's log lines: on stderr (a run's stdout is its result, one JSON
object under --json) and escaped as mfsdp's own lines are, though vLLM prints them through
its own handler and formatter. Checked in a fresh interpreter with the logging set up as a
run sets it (mfsdp's, then the engine's own config, applied when it is created); no engine
is started."""

from __future__ import annotations

import os

import pytest

from tests.support.vllm_process import logged_as_a_run
from trainer.rollout.vllm_engine import vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)

ENGINE_SETUP = """
from trainer.rollout.vllm_engine import vllm_logs_to_stderr
vllm_logs_to_stderr()  # as the engine does before it creates vLLM's LLM
"""
LINES = """
init_logger("vllm.v1.engine.core").info("Initializing with config: model=%r", sys.argv[1])
init_logger("vllm.config").warning("model dir %s", sys.argv[1])
"""
HOSTILE = "/runs/a\nerror: forged\x1b]0;retitled\x07\x1b[2J"


def test_vllm_lines_go_to_stderr_escaped():
    """Was: on stdout (`mfsdp train grpo --json` printed them before its JSON object)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_LOGGING")}
    done = logged_as_a_run(ENGINE_SETUP, LINES, HOSTILE, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if "model" in line]
    assert len(lines) == 2, done.stderr
    assert lines[1].endswith("model dir /runs/a\\x0aerror: forged\\x1b]0;retitled\\x07\\x1b[2J")
    assert not any(char in done.stderr for char in "\x1b\x07\r"), done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("error:")]
