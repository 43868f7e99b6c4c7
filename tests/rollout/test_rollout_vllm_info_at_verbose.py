"""vLLM's INFO lines show only where mfsdp's own do (`mfsdp -v`); its warnings always, and a
VLLM_LOGGING_LEVEL the user set wins. A short GRPO run on CPU printed some 30 vLLM lines
around its own handful. Checked in a fresh interpreter with the logging set up as a run sets
it (mfsdp's, then the engine's own config, applied when it is created); no engine is
started."""

from __future__ import annotations

import os

import pytest

from tests.support.vllm_process import logged_as_a_run
from trainer.rollout.vllm_engine import vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)

ENGINE_SETUP = """
from trainer.rollout.vllm_engine import vllm_available, vllm_info_only_when_verbose
assert vllm_available()  # as rollout.name=auto asks, importing vLLM
vllm_info_only_when_verbose()  # as the engine does before it creates vLLM's LLM
"""
LINES = """
init_logger("vllm.v1.engine.core").info("an info line")
init_logger("vllm.config").warning("a warning line")
"""


@pytest.mark.parametrize(
    ("ours", "theirs", "info_shown"),
    [(None, None, False), ("INFO", None, True), (None, "INFO", True)],
)
def test_vllm_info_lines_follow_mfsdp_verbosity(ours, theirs, info_shown):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_LOGGING", "MFSDP_LOG"))}
    env.update({k: v for k, v in (("MFSDP_LOG_LEVEL", ours), ("VLLM_LOGGING_LEVEL", theirs)) if v})
    done = logged_as_a_run(ENGINE_SETUP, LINES, env=env)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert ("an info line" in said) == info_shown, said
    assert "a warning line" in said
