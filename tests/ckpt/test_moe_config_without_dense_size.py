"""A --hf-config of a Qwen MoE model that leaves out its dense intermediate_size (no layer of
an all-MoE model uses it, and transformers defaults it) is compared with the checkpoint's own
config.json like any other: the comparison removed the key from the keys both state even when
the given config did not state it, and export-hf and validate stopped with a ValueError."""

from __future__ import annotations

import json

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_a_moe_config_without_intermediate_size_is_compared(family, tmp_path):
    model = tiny_causal_lm(family)
    model.save_pretrained(tmp_path / "model")
    code, stdout, err = run_cli(
        "ckpt", "import-hf", tmp_path / "model", "--out", tmp_path / "ckpt", "--layout", "hf"
    )
    assert code == 0, stdout + err
    given = tmp_path / "given"
    model.config.save_pretrained(given)
    data = json.loads((given / "config.json").read_text())
    del data["intermediate_size"]
    (given / "config.json").write_text(json.dumps(data))

    code, stdout, err = run_cli("ckpt", "validate", tmp_path / "ckpt", "--hf-config", given)
    assert code == 0, stdout + err
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", tmp_path / "ckpt", "--out", out, "--hf-config", given
    )
    assert code == 0, stdout + err
    assert (out / "config.json").is_file()
