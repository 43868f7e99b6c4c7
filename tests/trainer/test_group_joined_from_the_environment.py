"""RANK and WORLD_SIZE in the environment without torchrun (srun, a Kubeflow pod, or a stale
`export` left in a shell) make `mfsdp train` join the group they describe: without
MASTER_ADDR/MASTER_PORT that is one usage line naming what is set and missing; with them
the process says which variables made it join, and waits for the other ranks a bounded
time (MFSDP_JOIN_TIMEOUT) instead of the 30-minute group timeout. Ranks started alike, as
srun starts them, still train together."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.support.cli_errors import error_prefixed_lines
from tests.support.fresh_python import MFSDP
from tests.support.paths import EXAMPLES, REPO
from tests.support.sft import write_chat_jsonl
from trainer.distributed import free_port

GROUP_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
TORCHRUN_VARIABLES = ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "MFSDP_JOIN_TIMEOUT")


def sft(tmp_path, data, run: str, **variables: str) -> subprocess.Popen:
    """`mfsdp train sft --json` on the tiny model, one step, with `variables` set and none of
    torchrun's left from this process's environment."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if name not in GROUP_VARIABLES + TORCHRUN_VARIABLES
    }
    command = [*MFSDP, "train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--json"]
    command += [f"data.train_files={data}", f"trainer.run_dir={tmp_path / run}"]
    command += ["trainer.total_steps=1", "data.global_batch_size=4", "trainer.progress_bar=false"]
    return subprocess.Popen(
        command,
        cwd=REPO,
        env={**kept, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **variables},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def data(tmp_path):
    return write_chat_jsonl(tmp_path / "train.jsonl", rows=16)


@pytest.mark.parametrize("rank", ["0", "1"])
def test_without_master_address_one_line_names_the_variables(tmp_path, data, rank):
    done = sft(tmp_path, data, "run", RANK=rank, WORLD_SIZE="2")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    [line] = error_prefixed_lines(err)
    assert f"RANK={rank} WORLD_SIZE=2 set but not MASTER_ADDR and MASTER_PORT" in line
    assert json.loads(out)["exit_code"] == 2


def test_ranks_that_never_come_end_the_wait_naming_the_variables(tmp_path, data):
    port = free_port()
    started = time.monotonic()
    done = sft(
        tmp_path, data, "run", RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port), MFSDP_JOIN_TIMEOUT="2",
    )  # fmt: skip
    out, err = done.communicate(timeout=90)
    assert done.returncode == 1, err[-3000:]
    assert time.monotonic() - started < 80
    joined = f"RANK=0 WORLD_SIZE=2 at MASTER_ADDR:MASTER_PORT=127.0.0.1:{port}"
    said = [line for line in err.splitlines() if "joining a process group" in line]
    assert len(said) == 1 and joined in said[0] and "not set by torchrun" in said[0], err
    [line] = error_prefixed_lines(err)
    assert joined in line and "did not join within 2 s" in line, line
    assert "unset them or start the other ranks" in line
    assert json.loads(out)["exit_code"] == 1


def test_a_join_timeout_that_is_no_number_is_refused(tmp_path, data):
    done = sft(
        tmp_path, data, "run", RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()), MFSDP_JOIN_TIMEOUT="soon",
    )  # fmt: skip
    _out, err = done.communicate(timeout=90)
    assert done.returncode == 2, err[-3000:]
    [line] = error_prefixed_lines(err)
    assert "MFSDP_JOIN_TIMEOUT=soon" in line


@pytest.mark.slow
def test_ranks_started_alike_as_srun_starts_them_train_together(tmp_path, data):
    port = str(free_port())
    ranks = [
        sft(
            tmp_path, data, "srun", RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
        )
        for rank in (0, 1)
    ]  # fmt: skip
    ended = [rank.communicate(timeout=300) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], ended[0][1][-3000:] + ended[1][1][-3000:]
    result = json.loads(ended[0][0])
    assert result["final_step"] == 1 and result["checkpoint"].endswith("global_step_1")
