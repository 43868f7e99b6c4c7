"""An mcore import records nothing of its model (`args` None, no config.json): a --hf-config
of another head split (4 heads of 8 in 2 groups, or 2 of 16 in 1) gives every tensor the
same shape and exported q/k/v scrambled with exit 0 and no word. Export says that the
config could not be checked."""

from __future__ import annotations

from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli

NOTE = "not checked against the checkpoint's record (the checkpoint keeps neither"


def test_export_of_an_mcore_import_under_hf_config_says_it_was_not_checked(tmp_path):
    model = tiny_causal_lm("llama", hidden_size=32, head_dim=8)
    model.save_pretrained(tmp_path / "model")
    code, stdout, err = run_cli("ckpt", "import-hf", tmp_path / "model", "--out", tmp_path / "ck")
    assert code == 0, stdout + err
    other = changed_config_dir(
        model, tmp_path / "other", num_attention_heads=2, num_key_value_heads=1, head_dim=16
    )
    code, stdout, err = run_cli(
        "ckpt", "export-hf", tmp_path / "ck", "--out", tmp_path / "hf", "--hf-config", other
    )
    assert code == 0 and f"--hf-config {other}: {NOTE}" in err, stdout + err
    assert "q/k/v scrambled" in err, err
