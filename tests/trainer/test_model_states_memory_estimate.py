"""A model whose float32 weights, grads and AdamW moments cannot fit in the memory the
process may use is said before it is built, and its out-of-memory error says the model
states are the cause: it failed at its first step, minutes in, advised to lower the batch or
sequence length, which frees nothing near enough. The limit is a real one (RLIMIT_AS, set in
a fresh interpreter, as `ulimit -v` sets it), or a room given to the check."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from transformers import LlamaConfig

from mfsdp_ckpt.errors import MfsdpUsageError
from tests.support.cli_errors import one_error
from tests.support.paths import REPO
from trainer.memory_estimate import (
    BYTES_PER_TRAINED_PARAM,
    MemoryRoom,
    ModelStates,
    check_model_states,
    model_states,
    ranks_here,
    states_advice,
)
from trainer.model import count_parameters

# A Llama of about 30M parameters: 0.5 GB of model states
SHAPE = dict(
    vocab_size=1024,
    hidden_size=512,
    intermediate_size=2048,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=8,
    tie_word_embeddings=False,
)
# A fresh interpreter: imports first, then RLIMIT_AS set to what it maps now plus ROOM
# bytes, then the runner's check before the model is built; its rooms printed on stdout
UNDER_A_LIMIT = """
import json, resource, sys
from pathlib import Path
from transformers import LlamaConfig
from mfsdp_ckpt.format.layout import CheckpointPaths
from trainer.config import SFTConfig
from trainer.memory_estimate import host_memory_rooms
from trainer.runner import warn_of_model_states
from trainer.sft import SFT_RUN
room, lora, shape = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
at, total = int(sys.argv[4]), int(sys.argv[5])  # the step resumed (-1: none), the run's steps
step = Path(f"run/global_step_{at}")
resumed = None if at < 0 else CheckpointPaths(step / "dist_ckpt", step_dir=step)
status = open("/proc/self/status").read().splitlines()
mapped = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (mapped + room, resource.RLIM_INFINITY))
cfg = SFTConfig()
cfg.trainer.device, cfg.model.lora_rank = "cpu", lora
warn_of_model_states(SFT_RUN, cfg, LlamaConfig(**shape), resumed, total)
print(json.dumps([[r.size, r.said, r.shared] for r in host_memory_rooms()]))
"""


def _params() -> int:
    counts = count_parameters(LlamaConfig(**SHAPE))
    return counts["matmul"] + counts["embedding"]


def _under_a_limit(
    room: int, lora: int = 0, resumed_at: int = -1, total: int = 10
) -> tuple[str, list]:
    done = subprocess.run(
        [sys.executable, "-c", UNDER_A_LIMIT, str(room), str(lora), json.dumps(SHAPE)]
        + [str(resumed_at), str(total)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done.stderr, json.loads(done.stdout)


@pytest.fixture(autouse=True)
def no_verdict_left():
    """Each test starts and ends with no verdict kept (one process is one run in use)."""
    check_model_states(ModelStates(0, BYTES_PER_TRAINED_PARAM), [])
    yield
    check_model_states(ModelStates(0, BYTES_PER_TRAINED_PARAM), [])


def test_model_states_past_ulimit_v_are_said_before_the_model_is_built():
    stderr, rooms = _under_a_limit(100 << 20)
    need = _params() * BYTES_PER_TRAINED_PARAM
    assert need > 400 << 20  # the shape is large enough to tell
    process = [room for room in rooms if not room[2]]
    assert len(process) == 1 and process[0][0] <= 100 << 20, rooms
    assert "ulimit -v" in process[0][1], rooms
    line = next(line for line in stderr.splitlines() if line.startswith("[sft] warning:"))
    assert line == (
        f"[sft] warning: model states need at least ~{need / 1e9:.1f} GB"
        f" ({_params() / 1e6:.1f}M params x 16 bytes), more than {process[0][1]}: the run will"
        " likely fail out of memory; use a smaller model, LoRA (model.lora_rank) or more ranks"
        " (--nproc-per-node, --nnodes) to shard them over"
    )


@pytest.mark.parametrize(("resumed_at", "warned"), [(9, True), (10, False)])
def test_a_run_resumed_with_nothing_left_to_train_is_not_warned(resumed_at, warned):
    """A rerun of a finished run (for its --json values) was told it would likely fail out
    of memory, then that nothing was left to train."""
    stderr, _ = _under_a_limit(100 << 20, resumed_at=resumed_at, total=10)
    assert ("[sft] warning: model states need" in stderr) == warned, stderr


@pytest.mark.parametrize(
    ("world_size", "local", "ranks"),
    [(1, "100000", 1), (1, "x", 1), (4, None, 1), (4, "2", 2), (4, "100000", 4)],
)
def test_ranks_here_are_the_launchers_within_the_run(monkeypatch, world_size, local, ranks):
    """LOCAL_WORLD_SIZE counts only the ranks of a run that has them: a process training
    alone under a stale `export LOCAL_WORLD_SIZE=100000` was warned for 100000 ranks."""
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    assert ranks_here(world_size) == ranks


def test_a_malformed_local_world_size_of_a_launched_run_is_named(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(MfsdpUsageError, match="LOCAL_WORLD_SIZE='two'"):
        ranks_here(2)


def test_states_that_fit_are_not_said():
    stderr, rooms = _under_a_limit(8 << 30)
    assert "warning" not in stderr, stderr
    assert any(room[0] > _params() * BYTES_PER_TRAINED_PARAM for room in rooms)


def test_lora_counts_the_frozen_weights_alone():
    need = _params() * 4
    stderr, _ = _under_a_limit(need // 2, lora=8)
    assert f"({_params() / 1e6:.1f}M params x 4 bytes)" in stderr, stderr
    assert "LoRA" not in stderr, stderr
    stderr, _ = _under_a_limit(need * 3, lora=8)
    assert "warning" not in stderr, stderr  # fits frozen
    stderr, _ = _under_a_limit(need * 3)
    assert "x 16 bytes" in stderr, stderr  # but not trained whole


def test_shared_memory_counts_every_rank_of_the_machine():
    states = model_states(1_500_000_000, lora=False, shards=2)
    room = MemoryRoom(20 * 10**9, "the 20.0 GB this machine has available", True)
    assert check_model_states(states, [room], ranks_here=1) is None  # 12 GB of 20
    line = check_model_states(states, [room], ranks_here=2)  # 2 x 12 GB of 20
    assert line is not None and line.startswith(
        "model states need at least ~24.0 GB for 2 ranks here, 12.0 GB each"
        " (1.5B params x 16 bytes / 2 ranks), more than the 20.0 GB this machine has available"
    ), line
    assert line.endswith("or more machines (--nnodes) to shard them over"), line


@pytest.mark.parametrize("alone", [False, True], ids=["mfsdp", "rank"])
def test_out_of_memory_advice_names_the_model_states(monkeypatch, alone):
    import cli.train
    from cli.app import app

    room = MemoryRoom(8 * 10**9, "the 8.0 GB this machine has available", True)
    assert check_model_states(model_states(1_500_000_000, lora=False, shards=1), [room])

    def out_of_memory(*_args, **_kwargs):
        raise MemoryError

    monkeypatch.setattr(cli.train, "run_command", out_of_memory)
    command, args = (cli.train.train, ["sft"]) if alone else (app, ["train", "sft"])
    result = CliRunner().invoke(command, args, prog_name="mfsdp train" if alone else "mfsdp")
    assert result.exit_code == 1
    line = one_error(result.stderr, "out of memory")
    assert line.endswith(
        "(the model states alone need at least 24.0 GB, more than the 8.0 GB this machine has"
        " available: use a smaller model, LoRA (model.lora_rank) or more machines (--nnodes)"
        " to shard them over; a smaller batch cannot free that much)"
    ), line
    assert states_advice() is not None and "lower the batch" not in line
