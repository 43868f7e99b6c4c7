"""A URL given where a command reads or writes a local path is refused in one line, exit 2:
`--out file:///abs/x` wrote the export to the relative `./file:/abs/x` and `--out gs://b/x`
to `./gs:/b/x`, with exit 0 saying it was written."""

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


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("url", ["file:///abs/x", "gs://bucket/x", "s3://bucket/x"])
def test_a_url_as_a_local_path_is_refused_and_nothing_is_written(
    tmp_path, monkeypatch, command, url
):
    monkeypatch.chdir(tmp_path)
    args = [url if arg == "{url}" else arg for arg in COMMANDS[command]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    said = result.output
    if url.startswith("file://"):
        assert "give the local path itself, /abs/x" in said, said
    else:
        assert f"{url} is a URL; give a local path" in said, said
    assert list(tmp_path.iterdir()) == []  # no ./file:/abs/x, ./gs:/bucket/x
