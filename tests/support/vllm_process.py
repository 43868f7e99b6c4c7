"""vLLM in a fresh interpreter, set up as a run sets it up, for the rollout tests.

What these tests check lives for a whole process: an engine's finalizer runs at exit, vLLM
reads its environment variables once, as it is imported, and its logging config is applied
to the process's loggers. Each test runs a few lines in an interpreter of its own, through
the helpers here: a tiny model built in it, an engine run as a run runs it (in a process
group, its error said in one line), or vLLM's logging set up as a run's is.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from tests.support.paths import REPO, repo_env

# `tok` and `config`: the tiny tokenizer and a one-layer Qwen2 of `heads` query heads
TINY_QWEN = """
import sys
from transformers import Qwen2Config
from trainer.tiny import build_tokenizer

tok = build_tokenizer()
config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=64,
    num_hidden_layers=1, num_attention_heads={heads}, num_key_value_heads={kv_heads},
    max_position_embeddings=128, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
"""

# `body` in a process group as a run's is (destroyed on the way out), its error said as
# mfsdp says one: `error: ...` (on stdout here) and the error's exit code
_AS_A_RUN = """
from mfsdp_ckpt.errors import MfsdpError
from trainer.distributed import distributed_run

try:
    with distributed_run("cpu"):
{body}
except MfsdpError as err:
    print(f"error: {{err}}")
    sys.exit(err.exit_code)
"""

# mfsdp's logging as every command starts, then `setup`, then the config vLLM applies as an
# engine is created, then `lines` (vLLM's loggers, from `init_logger`)
_LOGGING_AS_A_RUN = """
import sys
from cli.verbosity import configure_logging
configure_logging()
{setup}
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging as engine_logging, init_logger
engine_logging(LoggingConfig())
{lines}
"""

ONE_ENGINE_ERROR = "error: rollout vllm (rollout.name=vllm, or auto"
WAY_ON = "use rollout.name=hf (the transformers engine)"


def tiny_qwen(heads: int, kv_heads: int) -> str:
    """Lines defining `tok` and `config` (see TINY_QWEN)."""
    return TINY_QWEN.format(heads=heads, kv_heads=kv_heads)


def engine_run(
    model_lines: str, body: str, folder: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`model_lines` then `body` (in a process group, as a run) in a fresh interpreter run in
    `folder`, its argv[1]; this environment with `env` added, one thread each for torch."""
    script = model_lines + _AS_A_RUN.format(body=textwrap.indent(body.strip(), " " * 8))
    return subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        capture_output=True,
        text=True,
        env={**repo_env(), "OMP_NUM_THREADS": "1", **(env or {})},
        cwd=folder.parent,
        timeout=300,
    )


def one_engine_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    """The single line `engine_run` printed: exit 1, mfsdp's line for a failed vLLM engine
    holding every needle, and no traceback on stderr."""
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stdout.strip()
    assert line.startswith(ONE_ENGINE_ERROR), line
    assert line.endswith(WAY_ON), line
    assert "\n" not in line, line
    for needle in needles:
        assert needle in line, line
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return line


def logged_as_a_run(
    setup: str, lines: str, *args: str, env: Mapping[str, str]
) -> subprocess.CompletedProcess:
    """`setup` and vLLM's `lines` with the logging set up as a run's (see _LOGGING_AS_A_RUN),
    in a fresh interpreter in `env` (whole: the caller decides every logging variable) with
    `args` as its argv[1:]; no engine is started."""
    script = _LOGGING_AS_A_RUN.format(setup=setup.strip(), lines=lines.strip())
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
    )
