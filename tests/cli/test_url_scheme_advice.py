"""A URL no command reads is refused with what reads URLs and how to copy that one here:
`mfsdp ckpt export-hf hdfs://...` was told "only `mfsdp ckpt export-hf` reads checkpoints at
URLs" by export-hf itself, and an `hf://` Hub URL was told to use gcloud or aws."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import app

HDFS = "hdfs://nn/user/me/checkpoints/global_step_5"
READERS = ["ckpt export-hf {url} --out hf/out", "ckpt validate {url}", "ckpt inspect {url}"]


def _error(args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, args.split())
    return result.exit_code, result.output.strip()


@pytest.mark.parametrize("command", READERS)
def test_a_scheme_no_command_reads_names_the_schemes_and_the_copy(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    code, line = _error(command.format(url=HDFS))
    assert code == 2
    assert "\n" not in line
    assert "only `mfsdp ckpt export-hf` reads" not in line
    assert "mfsdp reads no hdfs:// URL (`mfsdp ckpt export-hf` reads file://, gs://" in line
    assert f"`hdfs dfs -get {HDFS} DIR`" in line
    assert "gcloud" not in line


@pytest.mark.parametrize("command", READERS)
def test_a_hub_url_gets_the_hf_download_line(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    code, line = _error(command.format(url="hf://Qwen/Qwen2.5-0.5B"))
    assert code == 2
    assert "`hf download Qwen/Qwen2.5-0.5B --local-dir Qwen2.5-0.5B`" in line
    assert "gcloud" not in line and "aws" not in line


def test_a_url_export_hf_reads_names_export_hf_and_the_copy_for_other_commands(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, line = _error("ckpt validate s3://bucket/run")
    assert code == 2
    assert "only `mfsdp ckpt export-hf` reads checkpoints at URLs" in line
    assert "`aws s3 cp --recursive s3://bucket/run DIR`" in line
