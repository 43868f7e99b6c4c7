"""A missing file path with one slash is not taken for a Hugging Face Hub id."""

import sys

import pytest

from cli.main import main
from mfsdp_ckpt.format.hub_id import hub_id_hint


def test_a_missing_data_file_gets_no_download_hint(tmp_path, monkeypatch, capsys):
    """`gsm8k/train.jsonl` names a file; `hf download gsm8k/train.jsonl` was suggested."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys, "argv", ["mfsdp", "data", "gsm8k", "--input", "gsm8k/train.jsonl", "--out", "out"]
    )
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2
    assert capsys.readouterr().err == (
        "error: gsm8k/train.jsonl: no such file or directory; relative paths are read from "
        f"{tmp_path}\n"
    )


@pytest.mark.parametrize("given", ["Qwen/Qwen2.5-0.5B", "openai/whisper-tiny.en", "owner/json"])
def test_ids_with_dots_still_get_the_hint(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    assert f"hf download {given} " in hub_id_hint(given, "--input ", dataset=True)
