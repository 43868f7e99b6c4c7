"""`export-hf --hf-config DIR` looks at `DIR/config.json` alone before anything lists DIR: a
model dir's files were found by walking it, and a dir without config.json was walked whole
before being refused (`--hf-config /` walked the disk, "more than 100000 entries")."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed.checkpoint as dcp

from cli.main import main
from mfsdp_ckpt.format import file_walk


@pytest.fixture
def walked(monkeypatch) -> list[str]:
    """The dirs `file_walk.list_files` is asked to list during the test."""
    listed: list[str] = []
    real = file_walk.list_files

    def recording(base, *args, **kwargs):
        listed.append(str(base))
        return real(base, *args, **kwargs)

    monkeypatch.setattr(file_walk, "list_files", recording)
    return listed


def _export(monkeypatch, capsys, tmp_path, hf_config) -> tuple[int, str]:
    checkpoint = tmp_path / "ck"
    dcp.save({"model": {"w": torch.ones(2, 2)}}, checkpoint_id=str(checkpoint), no_dist=True)
    args = ["ckpt", "export-hf", str(checkpoint), "--out", str(tmp_path / "out")]
    monkeypatch.setattr("sys.argv", ["mfsdp", *args, "--hf-config", str(hf_config)])
    with pytest.raises(SystemExit) as stopped:
        main()
    return int(stopped.value.code), capsys.readouterr().err


def test_a_dir_without_config_json_is_refused_unlisted(monkeypatch, capsys, tmp_path, walked):
    given = tmp_path / "home"
    (given / "a" / "b").mkdir(parents=True)
    (given / "a" / "b" / "tokenizer.json").write_text("{}")
    code, err = _export(monkeypatch, capsys, tmp_path, given)
    assert code == 2 and err.startswith(f"error: --hf-config {given}: no config.json;"), err
    assert not [base for base in walked if base.startswith(str(given))], walked


def test_a_dir_with_config_json_is_listed_as_a_model_dir(monkeypatch, capsys, tmp_path, walked):
    given = tmp_path / "model"
    given.mkdir()
    (given / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    _export(monkeypatch, capsys, tmp_path, given)
    assert str(given) in walked
