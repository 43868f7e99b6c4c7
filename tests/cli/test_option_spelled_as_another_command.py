"""An option spelled as another mfsdp command spells it (`demo --nproc`, `train
--nproc-per-node`), or as most tools do (`--output`, `-o`), is told this command's name for
it; a required option's value given as a bare word (`export-hf CKPT hf/out`) is told the
option to put before it. Each was click's bare "No such option" or "Missing option"."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import usage_error_line


@pytest.mark.parametrize(
    "args, meant, spelled_by",
    [
        (["train", "sft", "--nproc", "2"], "--nproc-per-node", "'mfsdp demo'"),
        (["train", "grpo", "--nproc=2"], "--nproc-per-node", "'mfsdp demo'"),
        (["demo", "--nproc-per-node", "2"], "--nproc", "'mfsdp train grpo' and 'mfsdp train sft'"),
        (["ckpt", "export-hf", "runs/a", "--output", "hf/out"], "--out", None),
        (["ckpt", "export-hf", "runs/a", "-o", "hf/out"], "--out", None),
        (["ckpt", "import-hf", "model", "--output", "runs/b"], "--out", None),
    ],
)
def test_another_spelling_names_this_commands_option(
    monkeypatch, capsys, tmp_path, args, meant, spelled_by
):
    line = usage_error_line(monkeypatch, capsys, *args, cwd=tmp_path)
    assert f"(did you mean '{meant}'?)" in line
    if spelled_by is not None:
        assert line.endswith(
            f"is how {spelled_by} spell{'s' if ' and ' not in spelled_by else ''} it; "
            f"see 'mfsdp {' '.join(a for a in args[:2] if not a.startswith('-'))} --help'"
        )


@pytest.mark.parametrize(
    "args, word",
    [
        (["ckpt", "export-hf", "runs/a", "hf/out"], "hf/out"),
        (["ckpt", "export-hf", "--max-shard-size", "1GB", "runs/a", "hf/out"], "hf/out"),
        (["ckpt", "import-hf", "model", "runs/b"], "runs/b"),
    ],
)
def test_a_value_without_its_option_is_named_with_it(monkeypatch, capsys, tmp_path, args, word):
    line = usage_error_line(monkeypatch, capsys, *args, cwd=tmp_path)
    assert line.startswith(f"error: Missing option '--out' for 'mfsdp ckpt {args[1]}'")
    assert line.endswith(f"(did you mean --out {word}?); see 'mfsdp ckpt {args[1]} --help'")


def test_missing_option_with_no_extra_word_is_as_before(monkeypatch, capsys, tmp_path):
    line = usage_error_line(monkeypatch, capsys, "ckpt", "export-hf", "runs/a", cwd=tmp_path)
    assert "did you mean" not in line and "Missing option '--out'" in line
