"""A run's rendezvous that cannot form ends in one `error:` line naming the endpoint, in
bounded time: a one-machine run whose `--rdzv-endpoint` port something on this machine
already holds (another run's rendezvous store, any other program) is refused before any
rank starts; torchrun's own rendezvous failures (machines that never joined, a store that
was another program) are said as such, not as torch's traceback."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import torch.distributed as dist

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES, REPO, repo_env
from tests.support.sft import write_chat_jsonl
from trainer.distributed import free_port
from trainer.node_rank import NODE_RANK


@contextlib.contextmanager
def program_listening(port: int) -> Iterator[None]:
    """Another program's socket listening at `port`, accepting nothing."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


@contextlib.contextmanager
def another_runs_store(port: int) -> Iterator[None]:
    """A rendezvous store at `port`, as another run's torchrun hosts it."""
    store = dist.TCPStore(
        "127.0.0.1", port, is_master=True, wait_for_workers=False, multi_tenant=True
    )
    try:
        yield
    finally:
        del store


@contextlib.contextmanager
def program_hanging_up(port: int) -> Iterator[None]:
    """A program at `port` that closes every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen()
    server.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                server.accept()[0].close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        server.close()


@pytest.mark.parametrize("holder", [program_listening, another_runs_store])
def test_a_one_machine_endpoint_in_use_is_refused_before_the_ranks_start(tmp_path, holder):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    with holder(port):
        started = time.monotonic()
        done = mfsdp(
            "train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--json",
            "--nproc-per-node", "2", "--rdzv-endpoint", endpoint,
            f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}",
            timeout=60,
        )  # fmt: skip
        took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    line = one_error(done.stderr, f"--rdzv-endpoint {endpoint}", f"port {port} is in use")
    assert "pick a free port" in line
    assert json.loads(done.stdout) == {"error": line.removeprefix("error: "), "exit_code": 1}
    assert took < 45
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def torchrun_nodes(
    endpoint: str, *conf: str, node_rank: int = 0, timeout: float = 60
) -> subprocess.CompletedProcess:
    """mfsdp's torchrun as machine `node_rank` of 2 at `endpoint`, the rendezvous settings
    `conf`."""
    command = [
        sys.executable, "-m", "cli.torchrun", "--nproc-per-node=1", "--nnodes=2",
        f"--node-rank={node_rank}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
        "--rdzv-id=job7",
        f"--rdzv-conf={','.join(conf)}", "-m", "cli.train", "sft",
        "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"),
    ]  # fmt: skip
    return subprocess.run(
        command, cwd=REPO, env=repo_env(), capture_output=True, text=True, timeout=timeout
    )


def test_machines_that_never_join_end_in_one_line_naming_the_rendezvous(monkeypatch):
    monkeypatch.setenv(NODE_RANK, "1")  # as `mfsdp train --node-rank 1` hands it on
    endpoint = f"127.0.0.1:{free_port()}"
    done = torchrun_nodes(endpoint, "join_timeout=3")
    assert done.returncode == 1, done.stderr[-3000:]
    waiting = f"--node-rank 1 waiting for the run's 2 machines at --rdzv-endpoint {endpoint}"
    assert waiting in done.stderr
    line = one_error(
        done.stderr,
        f"--rdzv-endpoint {endpoint} (--rdzv-id job7)",
        "not all 2 machines joined in time",
    )
    assert line.endswith("and its own --node-rank")


def test_a_store_that_is_another_program_ends_in_one_line():
    """Machine 1 joins the store as a client (machine 0 hosts it, elsewhere as a rule)."""
    port = free_port()
    with program_hanging_up(port):
        done = torchrun_nodes(f"127.0.0.1:{port}", "read_timeout=3", "join_timeout=10", node_rank=1)
    assert done.returncode == 1, done.stderr[-3000:]
    line = one_error(done.stderr, f"--rdzv-endpoint 127.0.0.1:{port}", "did not answer")
    assert "another run or program using that port" in line


@pytest.mark.parametrize("holder", [program_listening, another_runs_store])
def test_the_first_machines_endpoint_in_use_is_refused_before_it_waits(holder):
    """`--node-rank 0`, its endpoint an address of this machine, hosts the store: a port
    another program holds (one accepting nothing left it waiting past its join timeout, a
    SIGTERM acting only after a minute), or another run's store, is refused at once."""
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    with holder(port):
        started = time.monotonic()
        done = torchrun_nodes(endpoint, "join_timeout=600", timeout=60)
        took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    line = one_error(
        done.stderr, f"--rdzv-endpoint {endpoint} (--rdzv-id job7)", f"port {port} is in use"
    )
    assert "--node-rank 0 hosts the run's rendezvous there: pick a free port" in line
    assert "waiting for the run's 2 machines" not in done.stderr
    assert took < 30
