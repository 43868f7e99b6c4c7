"""A machine of a `--nnodes 2` run that goes away once the run trains, two torchrun agents on
this machine as two "nodes". The survivor blamed the port ("is another run or program using
that port? pick another port") when the machine hosting the rendezvous store was killed, or
printed gloo's raw text (a build path, advice for gloo's developers, an emoji) when the other
machine was stopped by SIGTERM; neither named the step reached nor the checkpoint to resume
from. Now the survivor says another machine of the run went away, with both, exit 1."""

import contextlib
import os
import signal
import subprocess

import pytest

from tests.cli.test_multinode import sft_command
from tests.support.metrics import read_metrics
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from tests.support.waiting import wait_until
from trainer.distributed import free_port


def _node(data, run, rank: int, endpoint: str, err) -> subprocess.Popen:
    command = sft_command(
        data, run, "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint
    )
    command = [arg for arg in command if arg != "--json"]
    command[command.index("trainer.total_steps=3")] = "trainer.total_steps=3000"
    return subprocess.Popen(
        [*command, "--rdzv-id", f"t-{endpoint}", "checkpoint.save_every=3"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=err,
        text=True,
        start_new_session=True,  # its own group: the machine goes away whole
    )


def _steps(run) -> int:
    return max((row.get("step", 0) for row in read_metrics(run)), default=0)


def _end(nodes: list[subprocess.Popen]) -> None:
    for node in nodes:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
        node.wait()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gone", "sig"),
    [(0, signal.SIGKILL), (1, signal.SIGTERM)],
    ids=["store-host-killed", "other-machine-terminated"],
)
def test_the_survivor_names_the_lost_machine_and_the_checkpoint(tmp_path, gone, sig):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    run = tmp_path / "run"
    endpoint = f"127.0.0.1:{free_port()}"
    with contextlib.ExitStack() as stack:
        logs = [
            stack.enter_context(open(tmp_path / f"n{rank}.err", "w", encoding="utf-8"))
            for rank in (0, 1)
        ]
        nodes = [_node(data, run, rank, endpoint, logs[rank]) for rank in (0, 1)]
        stack.callback(_end, nodes)
        wait_until(lambda: _steps(run) >= 5, 240, lambda: _steps(run), nodes[1 - gone])
        os.killpg(nodes[gone].pid, sig)
        code = nodes[1 - gone].wait(timeout=60)
    said = (tmp_path / f"n{1 - gone}.err").read_text(encoding="utf-8")
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1, said[-3000:]
    line = errors[0]
    assert line.startswith("error: another machine of this run went away ("), line
    assert f"the newest checkpoint is {run}/global_step_" in line, line
    assert line.endswith(": start every machine's command again to resume from it"), line
    assert "pick another port" not in line and "pair.cc" not in line and "GLHF" not in line, line
