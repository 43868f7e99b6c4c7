"""What a first-time user still hit on a fresh machine: path keys of a config that were read
only once training had started (or never), relative paths read from a directory the message
did not name, a run directory that could not be written found at the first save, and an
OMP_NUM_THREADS that OpenMP rejects with a warning from every process."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.fresh_python import MAIN_CATCHING_EXIT, mfsdp, modules_after
from tests.support.paths import FIXTURES, REPO

TINY = ["train", "sft", "--config", "examples/sft_tiny_cpu.yaml"]
MCORE_QWEN2 = FIXTURES / "mcore" / "qwen2"


def _data(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1 + 1?", "response": "#### 2"}\n')
    return f"data.train_files={data}"


@pytest.mark.parametrize(
    "override, line",
    [
        (
            "model.tokenizer=Qwen/Qwen2.5-0.5B",
            "model.tokenizer: Qwen/Qwen2.5-0.5B does not exist (a local tokenizer dir is needed",
        ),
        (
            "model.hf_config=Qwen/Qwen2.5-0.5B",
            "model.hf_config: Qwen/Qwen2.5-0.5B does not exist (a local Hugging Face model dir",
        ),
        (
            "model.lora_adapter_path=org/adapter",
            "model.lora_adapter_path: org/adapter does not exist (a local PEFT adapter dir",
        ),
        (
            "model.lora_adapter_path=README.md",
            "model.lora_adapter_path: README.md is a file; a local PEFT adapter dir is needed",
        ),
    ],
)
def test_every_path_key_is_checked_before_torch_loads(tmp_path, override, line):
    done = mfsdp(*TINY, _data(tmp_path), override)
    assert done.returncode == 2 and done.stderr.startswith(f"error: {line}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    loaded = modules_after(MAIN_CATCHING_EXIT, *TINY, _data(tmp_path), override, roots=("torch",))
    assert loaded == []


def test_a_grpo_reward_file_that_is_missing_fails_before_torch_loads():
    args = ["train", "grpo", "--config", "examples/grpo_tiny_cpu.yaml", "reward.path=nope.py"]
    done = mfsdp(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: reward.path: nope.py does not exist"), done.stderr
    assert modules_after(MAIN_CATCHING_EXIT, *args, roots=("torch",)) == []


def test_a_relative_path_names_the_directory_it_was_read_from(tmp_path):
    """The example configs' paths are relative to the repository root: run from elsewhere,
    the error says where they were looked for."""
    done = mfsdp(
        "train",
        "sft",
        "--config",
        str(REPO / "examples/sft_tiny_cpu.yaml"),
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "error: data.train_files: runs/demo/data/sft/train.parquet: no such file or directory;"
        f" relative paths are read from {tmp_path}; `mfsdp demo` writes it"
    ), done.stderr
    model = mfsdp(*TINY, _data(tmp_path), "model.path=models/q05", timeout=300)
    assert f"relative paths are read from {REPO})" in model.stderr, model.stderr


@pytest.mark.parametrize("nproc", ["1", "2"])
def test_a_run_dir_that_cannot_be_written_is_refused_before_anything_starts(tmp_path, nproc):
    (tmp_path / "notes.txt").write_text("a file")
    run_dir = tmp_path / "notes.txt" / "run"
    args = [*TINY, "--nproc-per-node", nproc, _data(tmp_path), f"trainer.run_dir={run_dir}"]
    done = mfsdp(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"error: trainer.run_dir: {run_dir}: {tmp_path / 'notes.txt'} is a file, not a directory\n"
    )
    assert modules_after(MAIN_CATCHING_EXIT, *args, roots=("torch",)) == []


def test_a_read_only_run_dir_is_named_as_such(tmp_path, monkeypatch):
    from trainer.config import ConfigError
    from trainer.local_paths import check_writable_dir

    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as a non-root user sees it
    with pytest.raises(ConfigError, match=f"{tmp_path} is not writable by this user; choose"):
        check_writable_dir("trainer.run_dir", str(tmp_path / "run"))


@pytest.mark.parametrize("value", ["abc", "0", "-2"])
def test_a_malformed_omp_num_threads_is_one_note_not_a_warning_per_process(value):
    done = mfsdp(
        "ckpt",
        "validate",
        str(MCORE_QWEN2 / "dist_ckpt"),
        "--hf-config",
        str(MCORE_QWEN2 / "config.json"),
        "--deep",
        env={**os.environ, "OMP_NUM_THREADS": value},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"note: OMP_NUM_THREADS={value!r} is not a positive whole number; ignored\n"
    )


def test_openmp_thread_lists_are_a_user_setting():
    from trainer.threads import choose_threads, drop_malformed_thread_count

    environ = {"OMP_NUM_THREADS": "4,2"}
    assert drop_malformed_thread_count(environ) is None and environ == {"OMP_NUM_THREADS": "4,2"}
    assert choose_threads(2, idle_cores=2.0, environ=environ).threads == 4
    empty = {"OMP_NUM_THREADS": " "}
    assert drop_malformed_thread_count(empty) is None and empty == {}


def test_a_small_export_and_import_show_a_rate_that_is_not_zero(tmp_path):
    """A tiny model's export read "(0.00 GB/s)", as if nothing had been written."""
    from click.testing import CliRunner

    from cli.main import app

    exported = CliRunner().invoke(
        app,
        ["ckpt", "export-hf", str(MCORE_QWEN2 / "dist_ckpt"), "--out", str(tmp_path / "hf")]
        + ["--hf-config", str(MCORE_QWEN2 / "config.json")],
    )
    imported = CliRunner().invoke(
        app, ["ckpt", "import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mcore")]
    )
    for done in (exported, imported):
        assert done.exit_code == 0, done.output
        assert re.search(r" [kMG]B in [\d.]+ s \([\d.]+ [kMG]B/s\)", done.stdout), done.stdout
        assert "0.00 GB/s" not in done.stdout


@pytest.mark.parametrize(("given", "kind"), [("out/sft", "sft"), ("out", "rl")])
def test_a_data_dir_given_as_a_file_names_the_files_in_it(given, kind, tmp_path):
    """Was `(e.g. out/sft/sft/<split>.parquet)`: a path under the directory given that
    `mfsdp data` never writes."""
    for split in ("train", "test"):
        for family in ("sft", "rl"):
            (tmp_path / "out" / family).mkdir(parents=True, exist_ok=True)
            (tmp_path / "out" / family / f"{split}.parquet").write_bytes(b"")
    command = "sft" if kind == "sft" else "grpo"
    config = f"examples/{command}_tiny_cpu.yaml"
    done = mfsdp(
        "train",
        command,
        "--config",
        str(REPO / config),
        f"data.train_files={given}",
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert f"data.train_files: {given}: is a directory, not a data file (it holds" in line, line
    assert line.endswith(f"e.g. data.train_files=out/{kind}/train.parquet)"), line
