"""export-hf of a Megatron-Bridge step with an `--hf-config` dir that holds no tokenizer
(config.json alone: the remedy export gives for a mixed dense/MoE run) copies the step's
own `tokenizer/` and says so; validate checks those files as export copies them.

Was: the step's tokenizer was dropped, with "no tokenizer files in HFC; AutoTokenizer will
not load OUT", which did not name the tokenizer/ the step holds.
"""

from __future__ import annotations

import os

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import bridge_run


def test_the_step_tokenizer_is_copied_and_named(tmp_path):
    model = tiny_causal_lm("llama", vocab=64, hidden_size=32, head_dim=8)
    run = bridge_run(tmp_path, model, steps=(10,))
    config_only = tmp_path / "hfc"
    model.config.save_pretrained(config_only)
    tokenizer = run / "iter_0000010" / "tokenizer"
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--hf-config", config_only)
    assert code == 0, stdout + err
    assert f"note: tokenizer files from {tokenizer} (--hf-config {config_only} holds none)" in err
    assert "AutoTokenizer will not load" not in err, err
    for name in os.listdir(tokenizer):
        assert (out / name).read_bytes() == (tokenizer / name).read_bytes(), name
    # validate checks the step's tokenizer files that export would copy
    (tokenizer / "tokenizer.json").unlink()
    (tokenizer / "tokenizer.json").symlink_to(tmp_path / "hfc" / "config.json")
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", config_only)
    assert code == 1 and "tokenizer.json" in stdout + err, stdout + err
