"""`import-hf --layout hf` writes transformers' names: `--mcore-norms` and `--mcore-experts`,
which name Megatron-core's, have nothing to choose there and are refused (exit 2, naming
them) whatever value is given, the default's included. Was: exit 0, the flags ignored."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import error_prefixed_lines
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("model")
    tiny_causal_lm("qwen2", vocab=64, hidden_size=32, intermediate_size=48).save_pretrained(root)
    return root


@pytest.mark.parametrize(
    "flags",
    [
        ["--mcore-norms", "te"],
        ["--mcore-norms", "local"],
        ["--mcore-experts", "grouped"],
        ["--mcore-norms", "te", "--mcore-experts", "sequential"],
    ],
)
def test_mcore_flags_with_the_hf_layout_exit_2_naming_them(model_dir, flags, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = run_cli(
        "ckpt", "import-hf", model_dir, "--out", out, "--layout", "hf", *flags
    )
    (line,) = error_prefixed_lines(err)
    assert code == 2, stdout + err
    for flag, value in zip(flags[::2], flags[1::2]):
        assert f"{flag} {value}" in line, line
    assert "--layout hf writes transformers' names" in line and not out.exists()


def test_the_hf_layout_without_them_and_the_mcore_layout_with_them_import(model_dir, tmp_path):
    code, stdout, err = run_cli(
        "ckpt", "import-hf", model_dir, "--out", tmp_path / "run", "--layout", "hf"
    )
    assert code == 0, stdout + err
    code, stdout, err = run_cli(
        "ckpt", "import-hf", model_dir, "--out", tmp_path / "ck", "--mcore-norms", "te"
    )
    assert code == 0, stdout + err
