"""stderr that cannot be written (a full log volume: `2>/dev/full`; a reader that went away:
`2>&1 >out.json | head -c 0`) changes nothing of a command's result: its notes, bars and
`error:` line are dropped, and stdout carries what a normal run prints, with the exit status
the command's own outcome gives. A finished export used to exit 1 as "No space left on
device", a failure's JSON object was printed twice with an exit_code the process did not
exit with, and a closed stderr pipe ended the command with 141, its result discarded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.paths import FIXTURES, REPO, repo_env

FSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"
UNWRITABLE = ["full device", "closed pipe"]
# what differs between two runs of the same command: the clock
VARYING = ("seconds", "gb_per_s")


@contextmanager
def _stderr(how: str) -> Iterator[Any]:
    """A stderr for the command: a normal pipe read afterwards (None: `subprocess.PIPE`),
    /dev/full, or a pipe whose reader has closed."""
    if how == "full device":
        with open("/dev/full", "w") as full:
            yield full
    elif how == "closed pipe":
        reader, writer = os.pipe()
        os.close(reader)
        try:
            yield writer
        finally:
            os.close(writer)
    else:
        yield subprocess.PIPE


def _mfsdp(*args: str, how: str = "readable", cwd: Path | None = None, **env: str) -> Any:
    """`mfsdp ARGS` in a fresh interpreter, stderr as `how` says: the finished process."""
    with _stderr(how) as stderr:
        return mfsdp(*args, cwd=cwd or REPO, env={**os.environ, **env}, timeout=300, stderr=stderr)


def _result(done: Any) -> dict[str, Any]:
    """The one JSON object on stdout, less what differs between runs (`VARYING`)."""
    printed = json.loads(done.stdout)  # one document, or this raises
    return {key: value for key, value in printed.items() if not key.endswith(VARYING)}


@pytest.fixture(scope="module")
def normal_run(tmp_path_factory) -> Callable[..., tuple[Any, Path]]:
    """`mfsdp ARGS` with a readable stderr, in a folder of its own: the finished process and
    that folder. Run once per ARGS and environment in this module, however many unwritable
    stderrs are compared with it (each such comparison otherwise loaded torch once more for
    the same normal run)."""
    ran: dict[tuple, tuple[Any, Path]] = {}

    def run(*args: str, **env: str) -> tuple[Any, Path]:
        key = (args, tuple(sorted(env.items())))
        if key not in ran:
            folder = tmp_path_factory.mktemp("normal")
            ran[key] = (_mfsdp(*args, cwd=folder, **env), folder)
        return ran[key]

    return run


def _twice(
    normal_run: Callable[..., tuple[Any, Path]], tmp_path: Path, how: str, *args: str, **env: str
) -> tuple[Any, Any, Path]:
    """`mfsdp ARGS` with a readable stderr (`normal_run`), then with stderr as `how` says in
    `tmp_path/unwritable`: both processes, and the folder the normal one ran in. Each runs in
    a folder of its own, so the relative paths they write and name are the same."""
    normal, folder = normal_run(*args, **env)
    (tmp_path / "unwritable").mkdir()
    return normal, _mfsdp(*args, how=how, cwd=tmp_path / "unwritable", **env), folder


@pytest.mark.parametrize("how", UNWRITABLE)
def test_an_export_with_a_note_is_reported_as_a_normal_run_reports_it(normal_run, tmp_path, how):
    normal, done, normal_folder = _twice(
        normal_run,
        tmp_path,
        how,
        "ckpt",
        "export-hf",
        str(FSDP_RUN),
        "--out",
        "hf",
        "--max-shard-size",
        "100000",
        "--json",
    )
    assert normal.returncode == 0 and "note: " in normal.stderr, normal.stderr
    assert (done.returncode, _result(done)) == (0, _result(normal))
    assert sorted(p.name for p in (tmp_path / "unwritable" / "hf").iterdir()) == sorted(
        p.name for p in (normal_folder / "hf").iterdir()
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """The fixture run exported, for the imports below to read (they only read it)."""
    hf = tmp_path_factory.mktemp("exported") / "hf"
    assert _mfsdp("ckpt", "export-hf", str(FSDP_RUN), "--out", str(hf)).returncode == 0
    return hf


@pytest.mark.parametrize("how", UNWRITABLE)
def test_an_import_is_reported_and_valid(normal_run, exported, tmp_path, how):
    normal, done, _ = _twice(
        normal_run, tmp_path, how, "ckpt", "import-hf", str(exported), "--out", "back", "--json"
    )
    assert normal.returncode == 0 and "note: " in normal.stderr, normal.stderr
    assert (done.returncode, _result(done)) == (0, _result(normal))
    back = tmp_path / "unwritable" / "back"
    assert _mfsdp("ckpt", "validate", str(back)).returncode == 0


@pytest.mark.parametrize("how", UNWRITABLE)
def test_a_failure_is_one_object_whose_exit_code_is_the_process_s(tmp_path, how):
    done = _mfsdp("ckpt", "validate", str(tmp_path / "nonexist"), "--json", how=how)
    printed = json.loads(done.stdout)
    assert set(printed) == {"error", "exit_code"} and "nonexist" in printed["error"]
    assert printed["exit_code"] == done.returncode == 2


@pytest.mark.parametrize("how", UNWRITABLE)
def test_a_note_said_before_the_command_runs_is_dropped_too(normal_run, tmp_path, how):
    """OMP_NUM_THREADS=abc: the entry point's own note, before any command is invoked."""
    normal, done, _ = _twice(
        normal_run,
        tmp_path,
        how,
        "ckpt",
        "validate",
        str(FSDP_RUN),
        "--json",
        OMP_NUM_THREADS="abc",
    )
    assert "note: " in normal.stderr
    assert (done.returncode, _result(done)) == (0, _result(normal))


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sft")
    assert _mfsdp("data", "synthetic", "--out", str(folder / "data")).returncode == 0
    return folder / "data" / "sft" / "train.parquet"


@pytest.mark.parametrize(
    ("how", "launch"),
    [("full device", ()), ("closed pipe", ("--nproc-per-node", "2"))],
    ids=["full device", "closed pipe, ranks launched"],
)
def test_a_training_run_ends_as_its_normal_run_does(normal_run, tmp_path, sft_data, how, launch):
    """Launched ranks write to the same stderr themselves: their lines are dropped alike."""
    config = REPO / "examples" / "sft_tiny_cpu.yaml"
    normal, done, _ = _twice(
        normal_run,
        tmp_path,
        how,
        "train",
        "sft",
        "--config",
        str(config),
        f"data.train_files={sft_data}",
        "trainer.run_dir=run",
        "trainer.total_steps=2",
        "--json",
        *launch,
        OMP_NUM_THREADS="1",
    )
    assert normal.returncode == 0, normal.stderr
    assert (done.returncode, _result(done)) == (0, _result(normal))
    assert (tmp_path / "unwritable" / "run" / "global_step_2").is_dir()


def test_launched_ranks_drop_their_lines_once_the_reader_went_away(tmp_path, sft_data):
    """`mfsdp train ... 2>&1 >out.json | grep -m1 -q "step 1/"`: the launching mfsdp and
    torchrun have written their lines by then; rank 0 meets the closed pipe itself."""
    config = REPO / "examples" / "sft_tiny_cpu.yaml"
    command = [
        sys.executable,
        "-c",
        "from cli.main import main; main()",
        *("train", "sft", "--config", str(config), f"data.train_files={sft_data}"),
        *("trainer.run_dir=run", "trainer.total_steps=4", "--json", "--nproc-per-node", "2"),
    ]
    env = {**repo_env(), "OMP_NUM_THREADS": "1"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    ) as run:
        assert run.stderr is not None and run.stdout is not None
        for line in run.stderr:
            if "step 1/" in line:
                break
        run.stderr.close()
        printed = run.stdout.read()
        code = run.wait(timeout=300)
    assert (code, json.loads(printed)["final_step"]) == (0, 4)
    assert (tmp_path / "run" / "global_step_4").is_dir()
