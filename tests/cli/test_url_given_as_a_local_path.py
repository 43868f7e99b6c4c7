"""A URL given where a command reads or writes a local path is refused in one line, exit 2:
`--out file:///abs/x` wrote the export to the relative `./file:/abs/x` and `--out gs://b/x`
to `./gs:/b/x`, with exit 0 saying it was written; so did the other spellings of a `file:`
URL (`file:/abs/x`, `FILE:///abs/x`), and `file://localhost/abs/x` was told to give the
relative `localhost/abs/x`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import app

COMMANDS = {
    "export-hf --out": ["ckpt", "export-hf", "runs/sft", "--out", "{url}"],
    "export-hf --hf-config": [
        "ckpt",
        "export-hf",
        "runs/sft",
        "--out",
        "o",
        "--hf-config",
        "{url}",
    ],
    "import-hf --out": ["ckpt", "import-hf", "model", "--out", "{url}"],
    "data --out": ["data", "synthetic", "--out", "{url}"],
    "demo --out": ["demo", "--out", "{url}"],
    "config from-verl": ["config", "from-verl", "{url}"],
}


FILE_URLS = {
    "file:///abs/x": "/abs/x",
    "file:/abs/x": "/abs/x",
    "FILE:///abs/x": "/abs/x",
    "file://localhost/abs/x": "/abs/x",
    "file:///abs/sp%20ace": "/abs/sp ace",
}


def _invoke(tmp_path, monkeypatch, command: str, value: str) -> tuple[int, str]:
    monkeypatch.chdir(tmp_path)
    args = [value if arg == "{url}" else arg for arg in COMMANDS[command]]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("url", ["gs://bucket/x", "s3://bucket/x", "hdfs://nn/x"])
def test_a_url_as_a_local_path_is_refused_and_nothing_is_written(
    tmp_path, monkeypatch, command, url
):
    code, said = _invoke(tmp_path, monkeypatch, command, url)
    assert code == 2 and f"{url}: a URL; give a local path" in said, said
    assert list(tmp_path.iterdir()) == []  # no ./gs:/bucket/x


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("url", FILE_URLS)
def test_a_file_url_as_a_local_path_names_that_path_and_nothing_is_written(
    tmp_path, monkeypatch, command, url
):
    code, said = _invoke(tmp_path, monkeypatch, command, url)
    advice = f"{url}: a file:// URL; give the local path itself, {FILE_URLS[url]}\n"
    assert code == 2 and advice in said, said
    assert list(tmp_path.iterdir()) == []  # no ./file:/abs/x


def test_a_file_url_of_another_host_is_said_to_be_no_local_path(tmp_path, monkeypatch):
    code, said = _invoke(tmp_path, monkeypatch, "export-hf --out", "file://otherhost/x")
    assert code == 2 and "a file:// URL of the host otherhost, not a path on this" in said, said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["run:1/x", "C:/x", "x:/g2", "./a://b"])
def test_a_local_name_with_a_colon_is_written_there(tmp_path, monkeypatch, name):
    code, said = _invoke(tmp_path, monkeypatch, "data --out", name)
    assert code == 0, said
    assert list((tmp_path / name).iterdir()), said
