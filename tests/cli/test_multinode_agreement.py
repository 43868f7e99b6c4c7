"""Machines of one `--nnodes` run that were started differently, two torchrun agents on this
machine as two "nodes": a config that differs (an override typed on one node) trained with
mixed learning rates, and run dirs that are not one directory (each machine's own disk)
committed checkpoints missing the other node's files; both ended exit 0. Now each is
refused on both nodes, exit 2, in one line, before any step, that names each machine by the
`--node-rank` it was launched with (torchrun's c10d rendezvous numbers them as they join)."""

import os
import re
import subprocess
from collections.abc import Callable

import pytest

from tests.cli.test_multinode import sft_command
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from trainer.distributed import free_port


def two_nodes(
    data,
    node_args: list[tuple[str, list[str]]],
    first: int = 0,
    command: Callable[..., list[str]] = sft_command,
) -> list[tuple[int, str]]:
    """Start node 0 and node 1, each from its own working dir with its own overrides (the
    run dir first), as `command(data, run_dir, *launch)` builds them (SFT's by default);
    return each node's exit code and stderr. Node `first` starts first, and the other
    only once it waits at the rendezvous: it joins first, and its ranks come first."""
    endpoint = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    nodes: dict[int, subprocess.Popen] = {}
    said: dict[int, str] = {}
    for rank in (first, 1 - first):
        cwd, overrides = node_args[rank]
        launch = ["--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint]
        launched = command(data, overrides[0], *launch, "--rdzv-id", f"t-{endpoint}")
        nodes[rank] = subprocess.Popen(
            launched + overrides[1:],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        said[rank] = "" if rank != first else _until_waiting(nodes[rank])
    try:
        outputs = {rank: nodes[rank].communicate(timeout=300) for rank in (0, 1)}
    finally:
        for node in nodes.values():
            if node.poll() is None:
                node.kill()
    return [(nodes[rank].returncode, said[rank] + outputs[rank][1]) for rank in (0, 1)]


def _until_waiting(node: subprocess.Popen) -> str:
    """What `node` said on stderr up to its line waiting for the other machine."""
    assert node.stderr is not None
    lines = []
    for line in node.stderr:
        lines.append(line)
        if "waiting for the run's 2 machines" in line:
            break
    return "".join(lines)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_a_different_learning_rate_on_one_node_is_refused_before_any_step(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    run = tmp_path / "run"
    ended = two_nodes(
        data, [(tmp_path, [str(run), "optim.lr=3e-3"]), (tmp_path, [str(run), "optim.lr=1e-2"])]
    )
    for code, stderr in ended:
        assert code == 2, stderr[-3000:]
        (line,) = error_lines(stderr)
        assert "optim.lr: the machines of this run were given different configs" in line
        assert re.search(r"machine --node-rank 0 \(host [^)]+\) was given optim\.lr=0\.003\b", line)
        assert re.search(r"machine --node-rank 1 \(host [^)]+\) was given optim\.lr=0\.01\b", line)
        assert "rank(s)" not in line
    assert not (run / "metrics.jsonl").exists()


@pytest.mark.slow
def test_run_dirs_that_differ_between_nodes_are_refused_before_any_step(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    runs = [tmp_path / "run_a", tmp_path / "run_b"]
    ended = two_nodes(data, [(tmp_path, [str(runs[0])]), (tmp_path, [str(runs[1])])])
    for code, stderr in ended:
        assert code == 2, stderr[-3000:]
        (line,) = error_lines(stderr)
        assert "trainer.run_dir: the machines of this run were given different configs" in line
    assert not any(run.glob("global_step_*") for run in runs if run.exists())


@pytest.mark.slow
def test_a_run_dir_a_node_does_not_see_is_refused_before_any_step(tmp_path):
    """The same relative `trainer.run_dir` from two working dirs: one path in the config,
    two directories, as on two machines' own disks."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    homes = [tmp_path / "node0", tmp_path / "node1"]
    for home in homes:
        home.mkdir()
    ended = two_nodes(data, [(home, ["runs/sft"]) for home in homes])
    for code, stderr in ended:
        assert code == 2, stderr[-3000:]
        (line,) = error_lines(stderr)
        assert "trainer.run_dir=runs/sft: machine --node-rank 1 (host " in line
        assert ") cannot see the files machine --node-rank 0 (host " in line
        assert "must be on storage every machine sees" in line
    made = [home / "runs" / "sft" for home in homes if (home / "runs").exists()]
    assert len(made) == 1 and list(made[0].iterdir()) == []  # rank 0's, its probe removed


@pytest.mark.slow
def test_machines_are_named_by_their_node_rank_whichever_joined_first(tmp_path):
    """`--node-rank 1` joins first: torchrun makes its rank global rank 0. The line still
    pairs each `--node-rank` with the value that machine was given."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    run = tmp_path / "run"
    ended = two_nodes(
        data,
        [(tmp_path, [str(run), "optim.lr=3e-3"]), (tmp_path, [str(run), "optim.lr=1e-2"])],
        first=1,
    )
    for code, stderr in ended:
        assert code == 2, stderr[-3000:]
        (line,) = error_lines(stderr)
        assert re.search(r"machine --node-rank 1 \(host [^)]+\) was given optim\.lr=0\.01; ", line)
        assert re.search(r"machine --node-rank 0 \(host [^)]+\) was given optim\.lr=0\.003\)", line)
    assert not (run / "metrics.jsonl").exists()
