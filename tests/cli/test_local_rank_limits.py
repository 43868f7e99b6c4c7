"""How many ranks `mfsdp train --nproc-per-node N` starts is checked before torchrun starts
any (trainer/local_ranks.py): on a 2-core CPU machine `--nproc-per-node 9999` printed a note
and launched 9999 processes, each loading torch. Refused, in one line naming the flag, are
more than 4 ranks per core or 8 (whichever is more) on CPU, more than the visible GPUs on
GPUs, and more ranks in all than one global batch has rows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import one_error
from tests.support.grpo import write_rl_rows
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl
from trainer import local_ranks, threads
from trainer.config import ConfigError


@pytest.fixture
def machine(monkeypatch):
    """A machine of `cores` CPU cores and `gpus` visible GPUs, as the launcher sees it."""

    def make(cores: int, gpus: int = 0) -> None:
        monkeypatch.setattr(local_ranks, "available_cores", lambda: list(range(cores)))
        monkeypatch.setattr(local_ranks, "visible_cuda_devices", lambda: gpus)

    return make


@pytest.fixture
def no_torchrun(monkeypatch):
    """torchrun started means the check did not stop the run: fail instead of launching."""

    def started(command, **popen):
        raise AssertionError(f"torchrun started: {command}")

    monkeypatch.setattr("cli.launch.run_ranks", started)


def _train(command: str, tmp_path, *args: str):
    # each trainer's own rows: the launcher reads a data file's first row (cli/first_rows.py)
    write = write_rl_rows if command == "grpo" else write_chat_jsonl
    data = write(tmp_path / "train.jsonl", rows=8)
    config = EXAMPLES / f"{command}_tiny_cpu.yaml"
    return CliRunner().invoke(
        app,
        [
            "train",
            command,
            "--config",
            str(config),
            f"data.train_files={data}",
            "data.val_files=[]",
            f"trainer.run_dir={tmp_path / 'run'}",
            *args,
        ],
    )


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_the_repro_is_refused_naming_flag_cores_and_cap(command, tmp_path, machine, no_torchrun):
    machine(cores=2)
    done = _train(command, tmp_path, "--nproc-per-node", "9999")
    assert done.exit_code == 2, (done.output, done.exception)
    line = one_error(done.stderr, "--nproc-per-node 9999", "2 CPU core(s)", "at most 8")
    assert "4 per core or 8, whichever is more" in line
    assert not (tmp_path / "run").exists()


def test_more_ranks_than_one_global_batch_has_rows_is_refused(tmp_path, machine, no_torchrun):
    machine(cores=4)  # cap 16: the batch is what is wrong
    done = _train("sft", tmp_path, "--nproc-per-node", "9", "data.global_batch_size=8")
    assert done.exit_code == 2, (done.output, done.exception)
    one_error(done.stderr, "--nproc-per-node 9", "data.global_batch_size=8", "1 rank(s)")


def _cfg(device: str = "auto", global_batch: int = 64, train_batch: int = 64) -> SimpleNamespace:
    return SimpleNamespace(
        trainer=SimpleNamespace(device=device),
        data=SimpleNamespace(global_batch_size=global_batch, train_batch_size=train_batch),
    )


@pytest.mark.parametrize(
    "cores, allowed", [(1, 8), (2, 8), (3, 12), (16, 64)]
)  # 4 per core, or 8, whichever is more
def test_the_cpu_cap_is_4_per_core_or_8(cores, allowed, machine):
    machine(cores=cores)
    assert threads.cpu_rank_cap(cores) == allowed
    local_ranks.check_local_ranks("sft", _cfg(), allowed)
    with pytest.raises(ConfigError, match=f"--nproc-per-node {allowed + 1}: too many"):
        local_ranks.check_local_ranks("sft", _cfg(), allowed + 1)


def test_on_gpus_one_rank_per_visible_gpu(machine):
    machine(cores=2, gpus=4)
    local_ranks.check_local_ranks("sft", _cfg(), 4)  # past the CPU cap of 8? no: 4 GPUs
    with pytest.raises(ConfigError, match="--nproc-per-node 5: only 4 GPU"):
        local_ranks.check_local_ranks("sft", _cfg(), 5)


def test_trainer_device_cpu_is_held_to_the_cpu_cap_on_a_gpu_machine(machine):
    machine(cores=1, gpus=64)
    local_ranks.check_local_ranks("grpo", _cfg(device="cuda"), 16)  # GPUs count, not cores
    with pytest.raises(ConfigError, match="1 CPU core"):
        local_ranks.check_local_ranks("grpo", _cfg(device="cpu"), 16)


@pytest.mark.parametrize(
    "command, cfg, key",
    [
        ("sft", _cfg(global_batch=8), "data.global_batch_size=8"),
        ("grpo", _cfg(train_batch=8), "data.train_batch_size=8"),
    ],
)
def test_ranks_on_every_node_count_against_the_batch(command, cfg, key, machine):
    machine(cores=8)
    local_ranks.check_local_ranks(command, cfg, 4, nnodes=2)  # 8 ranks, 8 rows: one each
    with pytest.raises(ConfigError, match=r"--nproc-per-node 3 x --nnodes 3 = 9 ranks") as err:
        local_ranks.check_local_ranks(command, cfg, 3, nnodes=3)
    assert key in str(err.value)
