"""`mfsdp train sft` and `mfsdp demo` from the command line: exit codes, output, torchrun launch."""

import json
from pathlib import Path

from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.format.run_steps import list_complete_steps
from tests.support.paths import REPO
from tests.support.sft import launch_sft, write_chat_jsonl

CONFIG = str(REPO / "examples" / "sft_tiny_cpu.yaml")


def _sft(*args: str):
    return CliRunner().invoke(app, ["train", "sft", "--config", CONFIG, *args])


def test_unknown_key_is_usage_error_with_suggestion():
    result = _sft("optim.lrr=1")
    assert result.exit_code == 2
    assert (
        "error: command-line override: unknown config key 'optim.lrr'; did you mean optim.lr"
        in result.output
    )


def test_missing_data_file_is_usage_error(tmp_path):
    result = _sft(
        f"data.train_files={tmp_path / 'absent.jsonl'}", f"trainer.run_dir={tmp_path / 'run'}"
    )
    assert result.exit_code == 2
    assert "absent.jsonl: no such file" in result.output


def test_help_has_an_example():
    result = CliRunner().invoke(app, ["train", "sft", "--help"])
    assert result.exit_code == 0 and "mfsdp train sft --config" in result.output


def test_two_processes_through_torchrun_then_resume_in_one(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    run_dir = tmp_path / "run"
    common = [
        f"data.train_files={data}",
        f"trainer.run_dir={run_dir}",
        "trainer.progress_bar=false",
        "data.val_ratio=0",
        "data.global_batch_size=8",
    ]
    summary, stderr = launch_sft(
        data, run_dir, "trainer.total_steps=2", "data.global_batch_size=8", nproc=2
    )
    assert summary["final_step"] == 2 and summary["resumed_from"] is None
    assert "fsdp2 on 2 x cpu" in stderr
    result = _sft("--json", "trainer.total_steps=3", *common)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["resumed_from"], summary["final_step"]) == (2, 3)
    assert list_complete_steps(run_dir) == [2, 3]


def test_demo_trains_validates_exports_and_generates(tmp_path, monkeypatch):
    """Run from a directory of the user's with a relative --out (the ranks were started in
    the package's directory and did not find `demo/init_model` there)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["demo", "--out", "demo", "--steps", "4", "--nproc", "1"])
    assert result.exit_code == 0, result.output[-3000:]
    assert f"validate --deep {Path('demo') / 'sft'}: valid" in result.stdout
    assert "(verified)" in result.stdout and "[demo] generate: " in result.stdout
    assert "Loading weights" not in result.stderr and "Writing model" not in result.stderr
    assert list_complete_steps(tmp_path / "demo" / "sft") == [2, 4]
    assert (tmp_path / "demo" / "hf" / "config.json").is_file()
