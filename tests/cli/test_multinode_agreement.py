"""Machines of one `--nnodes` run that were started differently, two torchrun agents on this
machine as two "nodes": a config that differs (an override typed on one node) trained with
mixed learning rates, and run dirs that are not one directory (each machine's own disk)
committed checkpoints missing the other node's files; both ended exit 0. Now each is
refused on both nodes, exit 2, in one line, before any step."""

import os
import re
import subprocess

import pytest

from tests.cli.test_multinode import sft_command
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from trainer.distributed import free_port


def two_nodes(data, node_args: list[tuple[str, list[str]]]) -> list[tuple[int, str]]:
    """Start node 0 and node 1, each from its own working dir with its own overrides;
    return each node's exit code and stderr."""
    endpoint = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    nodes = []
    for rank, (cwd, overrides) in enumerate(node_args):
        launch = ["--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint]
        command = sft_command(data, overrides[0], *launch, "--rdzv-id", f"t-{endpoint}")
        nodes.append(
            subprocess.Popen(
                command + overrides[1:],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        outputs = [node.communicate(timeout=300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    return [(node.returncode, err) for node, (_, err) in zip(nodes, outputs, strict=True)]


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
        values = (
            r"optim\.lr=0\.(003|01) on rank\(s\) 0 \(.+\); optim\.lr=0\.(01|003) on rank\(s\) 1"
        )
        assert re.search(values, line)
        assert "optim.lr=0.003" in line and "optim.lr=0.01 " in line
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
        assert "trainer.run_dir=runs/sft: the machine(s) of rank(s) 1 (" in line
        assert "cannot see the files rank 0" in line
        assert "must be on storage every machine sees" in line
    made = [home / "runs" / "sft" for home in homes if (home / "runs").exists()]
    assert len(made) == 1 and list(made[0].iterdir()) == []  # rank 0's, its probe removed
