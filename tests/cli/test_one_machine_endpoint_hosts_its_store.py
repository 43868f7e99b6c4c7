"""A one-machine run (`--nnodes 1`) given `--rdzv-endpoint` hosts its rendezvous store
itself. torch decided that from the endpoint's host name alone, and did not know this
machine's address on a NIC its host name does not resolve to (`hostname -I`'s first one,
the usual way a script spells it): no agent hosted the store, and the run waited minutes,
then blamed "another program on that port"."""

from __future__ import annotations

import socket
import subprocess

from cli.launch import Launch, torchrun_command
from tests.cli.test_rendezvous_failures_said_in_one_line import program_listening
from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl
from trainer.distributed import free_port

HOSTS_STORE = "--rdzv-conf=is_host=true"


def this_machines_address() -> str:
    """This machine's first address `hostname -I` lists that connects back here, else
    127.0.0.1 (a machine with no other address)."""
    try:
        listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10)
        addresses = [a for a in listed.stdout.split() if ":" not in a]
    except (OSError, subprocess.SubprocessError):
        addresses = []
    for address in addresses:
        with socket.socket() as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                continue
            return address
    return "127.0.0.1"


def test_the_launcher_makes_a_one_machine_run_host_its_store():
    one = Launch(nnodes=1, rdzv_endpoint="192.0.2.9:29500", rdzv_id="a")
    assert HOSTS_STORE in torchrun_command("sft", one, None, False, [])
    several = Launch(nnodes=2, node_rank=0, rdzv_endpoint="192.0.2.9:29500", rdzv_id="a")
    assert HOSTS_STORE not in torchrun_command("sft", several, None, False, [])  # torch decides
    assert HOSTS_STORE not in torchrun_command("sft", Launch(nproc_per_node=2), None, False, [])


def test_node_0_of_several_hosts_its_store_at_an_address_torch_misses():
    """torch takes an address for this machine only through its host name; node 0 of several
    given this machine's own address hosts the store whether or not torch sees it."""
    from cli.own_address import names_this_machine, torch_sees_as_this_machine

    address = this_machines_address()
    assert names_this_machine(address) and not names_this_machine("192.0.2.9")
    node_0 = Launch(nnodes=2, node_rank=0, rdzv_endpoint=f"{address}:29500", rdzv_id="a")
    told = HOSTS_STORE in torchrun_command("sft", node_0, None, False, [])
    assert told == (not torch_sees_as_this_machine(address))
    node_1 = Launch(nnodes=2, node_rank=1, rdzv_endpoint=f"{address}:29500", rdzv_id="a")
    assert HOSTS_STORE not in torchrun_command("sft", node_1, None, False, [])


def test_an_endpoint_at_this_machines_own_address_trains(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    endpoint = f"{this_machines_address()}:{free_port()}"
    done = mfsdp(
        "train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--json",
        "--nproc-per-node", "2", "--rdzv-endpoint", endpoint, "trainer.total_steps=1",
        f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}",
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_port_held_here_is_refused_for_this_machines_own_address(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    port = free_port()
    endpoint = f"{this_machines_address()}:{port}"
    with program_listening(port):
        done = mfsdp(
            "train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"),
            "--nproc-per-node", "2", "--rdzv-endpoint", endpoint,
            f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}",
            timeout=60,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    one_error(done.stderr, f"--rdzv-endpoint {endpoint}", f"port {port} is in use")
