"""The torchrun flags of `mfsdp train sft|grpo`, checked before any process starts: a node
rank outside 0..nnodes-1 (`--nnodes 2 --node-rank 5`) waited for peers until killed, an
endpoint without a port (`--rdzv-endpoint notaport`) repeated c10d's `gai error` warning
forever, and an id naming a path was torchrun's traceback. Each is one line naming the flag,
exit 2, and torchrun is never started."""

from __future__ import annotations

import os
from unittest import mock

import pytest
from click.testing import CliRunner

from cli.launch import Launch
from cli.launch_flags import check_launch
from cli.main import app
from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl


def config_args(command: str, tmp_path) -> list[str]:
    """The tiny example config of `command` on a data file that exists, so the launch flags
    are what is wrong (the file's rows are not read before torchrun would start)."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    return [
        "--config",
        str(EXAMPLES / f"{command}_tiny_cpu.yaml"),
        f"data.train_files={data}",
        f"trainer.run_dir={tmp_path / 'run'}",
    ]


@pytest.fixture
def no_torchrun(monkeypatch):
    """torchrun started means the check did not stop the run: fail instead of hanging."""

    def started(command, **popen):
        raise AssertionError(f"torchrun started: {command}")

    monkeypatch.setattr("cli.launch.run_ranks", started)


@pytest.mark.parametrize(
    "flags, needles",
    [
        (
            ["--nnodes", "2", "--node-rank", "5", "--rdzv-endpoint", "localhost:29555"],
            ["--node-rank 5", "0..1"],
        ),
        (
            ["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "localhost:29555"],
            ["--node-rank 2", "0..1"],
        ),
        (["--node-rank", "1"], ["--node-rank 1", "--nnodes"]),
        (["--node-rank", "1", "--rdzv-endpoint", "localhost:29555"], ["--node-rank 1"]),
        (["--rdzv-endpoint", "notaport"], ["--rdzv-endpoint 'notaport'", "no port"]),
        (["--nnodes", "2", "--rdzv-endpoint", "node0"], ["--rdzv-endpoint 'node0'", "no port"]),
        (["--rdzv-endpoint", "node0:0"], ["--rdzv-endpoint", "1..65535"]),
        (["--rdzv-endpoint", "node0:65536"], ["--rdzv-endpoint", "1..65535"]),
        (["--rdzv-endpoint", "node0:http"], ["--rdzv-endpoint", "1..65535"]),
        (["--rdzv-endpoint", ":29500"], ["--rdzv-endpoint", "no host"]),
        (["--rdzv-endpoint", ""], ["--rdzv-endpoint", "empty"]),
        (["--rdzv-endpoint", "no de:29500"], ["--rdzv-endpoint", "not a host name"]),
        (["--rdzv-endpoint", "300.1.1.1:29500"], ["--rdzv-endpoint", "not an IPv4 address"]),
        (["--rdzv-endpoint", "::1:29500"], ["--rdzv-endpoint", "in brackets"]),
        (["--rdzv-endpoint", "[::1]"], ["--rdzv-endpoint", "no port"]),
        (["--rdzv-endpoint", "[nope]:29500"], ["--rdzv-endpoint", "not an IPv6 address"]),
        (["--rdzv-endpoint", "localhost:29555", "--rdzv-id", "a/b"], ["--rdzv-id 'a/b'"]),
        (["--rdzv-endpoint", "localhost:29555", "--rdzv-id", ""], ["--rdzv-id ''"]),
        (["--rdzv-endpoint", "localhost:29555", "--rdzv-id", "x" * 300], ["--rdzv-id"]),
        (["--nnodes", "0"], ["--nnodes must be >= 1"]),
    ],
)
@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_a_launch_mistake_is_one_line_exit_2_before_torchrun(
    command, flags, needles, tmp_path, no_torchrun
):
    done = CliRunner().invoke(app, ["train", command, *flags, *config_args(command, tmp_path)])
    assert done.exit_code == 2, (done.output, done.exception)
    one_error(done.stderr, *needles)


@pytest.mark.parametrize(
    "launch",
    [
        Launch(nnodes=2, node_rank=1, rdzv_endpoint="node0:29500", rdzv_id="sft1"),
        Launch(nnodes=2, rdzv_endpoint="[::1]:29500", rdzv_id="test-127.0.0.1:29500"),
        Launch(nnodes=4, node_rank=3, rdzv_endpoint="10.0.0.1:65535", rdzv_id="1234_5"),
        Launch(nnodes=1, node_rank=0, rdzv_endpoint="node-0.cluster.local:1"),  # a Slurm job of 1
        Launch(nproc_per_node=2),
        Launch(),
    ],
)
def test_what_the_docs_show_passes(launch):
    check_launch(launch)


def test_the_repro_exits_at_once_in_a_fresh_process(tmp_path):
    """`mfsdp train sft --nnodes 2 --node-rank 5 --rdzv-endpoint localhost:29555` ran until
    killed; now it stops before torch loads (mfsdp() times out after 120 s)."""
    flags = ["--nnodes", "2", "--node-rank", "5", "--rdzv-endpoint", "localhost:29555"]
    done = mfsdp("train", "sft", *flags, *config_args("sft", tmp_path))
    assert done.returncode == 2
    one_error(done.stderr, "--node-rank 5")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("left", [{"RANK": "0", "WORLD_SIZE": "2"}, {"TORCHELASTIC_RUN_ID": "x"}])
@pytest.mark.parametrize(
    "flags", [["--nproc-per-node", "2"], ["--nnodes", "2", "--rdzv-endpoint", "node0:29500"]]
)
def test_launch_flags_launch_with_a_rank_in_the_environment_not_from_torchrun(
    flags, left, tmp_path, monkeypatch
):
    """RANK and WORLD_SIZE that torchrun did not set (a job system's per machine, as Kubeflow
    sets them, or an export left over) made the launch flags train in this one process,
    waiting for ranks nobody started; so did a TORCHELASTIC_RUN_ID without RANK (exported
    from a torchelastic job's shell). torchrun launches, setting each rank's own."""
    launched = []

    def started(command, **popen):
        launched.append(command)
        return 0

    monkeypatch.setattr("cli.launch.run_ranks", started)
    for name in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in left.items():
        monkeypatch.setenv(name, value)
    # the launch sets what its ranks inherit (the config checked, threads, PYTHONPATH): kept
    # from the tests after this one in the process, which would read as launched ranks
    with mock.patch.dict(os.environ):
        done = CliRunner().invoke(app, ["train", "sft", *flags, *config_args("sft", tmp_path)])
    assert done.exit_code == 0, (done.output, done.exception)
    assert len(launched) == 1 and "cli.torchrun" in launched[0]
