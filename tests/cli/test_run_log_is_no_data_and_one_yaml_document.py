"""A training run's metrics.jsonl is its log, not data: `mfsdp data gsm8k --input RUN` was
told to give `--input RUN/metrics.jsonl`. A config of two YAML documents is said in one
sentence (PyYAML's context and problem ran together: "(in the expected a single document
in the stream ...)")."""

from __future__ import annotations

from click.testing import CliRunner

from cli.main import app


def _run_dir(root):
    run = root / "run1"
    run.mkdir()
    (run / "config.yaml").write_text("trainer: {}\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return run


def test_a_runs_metrics_are_not_offered_as_data(tmp_path):
    run = _run_dir(tmp_path)
    done = CliRunner().invoke(
        app, ["data", "gsm8k", "--input", str(run), "--out", str(tmp_path / "d")]
    )
    assert done.exit_code == 2
    assert (
        done.stderr == f"error: {run}: a directory; give a data file (.parquet, .jsonl or .json)\n"
    )


def test_a_metrics_file_of_no_run_is_still_offered(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    done = CliRunner().invoke(app, ["data", "gsm8k", "--input", str(tmp_path), "--out", "d"])
    assert f"--input {tmp_path / 'metrics.jsonl'}" in done.stderr


def test_a_second_yaml_document_is_said_in_one_sentence(tmp_path):
    config = tmp_path / "multi.yaml"
    config.write_text("trainer:\n  seed: 1\n---\noptim:\n  lr: 1.0e-5\n")
    done = CliRunner().invoke(app, ["train", "sft", "--config", str(config)])
    assert done.exit_code == 2
    assert done.stderr == (
        f"error: {config}: not valid YAML at line 3, column 1: a second YAML document starts"
        " here; the file must hold one\n"
    )
