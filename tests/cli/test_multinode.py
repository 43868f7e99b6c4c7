"""Multi-node for real: two torchrun agents on this machine, started as two "nodes" through
`mfsdp train sft --nnodes 2 --node-rank N --rdzv-endpoint 127.0.0.1:PORT` (c10d rendezvous,
one CPU process each), train to the same losses as one node with two processes."""

import json
import subprocess
import sys

import pytest

from tests.support.metrics import read_metrics
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from trainer.distributed import free_port

CONFIG = str(REPO / "examples" / "sft_tiny_cpu.yaml")


def sft_command(data, run_dir, *launch: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cli.train",
        "sft",
        "--config",
        CONFIG,
        *launch,
        "--json",
        f"data.train_files={data}",
        f"trainer.run_dir={run_dir}",
        "trainer.total_steps=3",
        "data.val_ratio=0",
        "data.global_batch_size=8",
        "trainer.progress_bar=false",
        "trainer.eval_every=0",
    ]


def losses(run_dir) -> dict[int, float]:
    return {row["step"]: row["train/loss"] for row in read_metrics(run_dir) if "train/loss" in row}


@pytest.mark.slow
def test_two_nodes_train_like_one_node_with_two_processes(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    one_node = subprocess.run(
        sft_command(data, tmp_path / "one_node", "--nproc-per-node", "2"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert one_node.returncode == 0, one_node.stderr[-3000:]

    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [
        subprocess.Popen(
            sft_command(
                data,
                tmp_path / "two_nodes",
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                f"test-{endpoint}",
            ),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [node.communicate(timeout=300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    for node, (_, stderr) in zip(nodes, outputs):
        assert node.returncode == 0, stderr[-3000:]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs if out.strip()]
    assert len(summaries) == 1 and summaries[0]["final_step"] == 3  # printed once, by global rank 0
    assert "fsdp2 on 2 x cpu" in "".join(stderr for _, stderr in outputs)

    expected = losses(tmp_path / "one_node")
    assert sorted(expected) == [1, 2, 3]
    assert losses(tmp_path / "two_nodes") == pytest.approx(expected, rel=1e-6, abs=0)
