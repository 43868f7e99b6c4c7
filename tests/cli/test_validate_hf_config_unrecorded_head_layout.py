"""`ckpt validate --hf-config` of a checkpoint that records nothing of its model (an mcore
import: `args` None, no config.json) warns as export's note does: a config of another head
split gives every tensor the same shape and exports q/k/v scrambled. `--strict` fails it.

Was: export said so, validate (with or without --deep) said "valid" with exit 0 and no
warning, though it is the check a user runs before exporting; before that, export too
exported q/k/v scrambled with exit 0 and no word.
"""

from __future__ import annotations

from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli

LINE = (
    "not checked against the checkpoint's record (the checkpoint keeps neither Megatron"
    " settings nor its own config.json): a config.json of another head layout"
)


def test_validate_warns_as_export_notes_and_strict_fails(tmp_path):
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
    assert code == 0, stdout + err
    (noted,) = [line for line in err.splitlines() if LINE in line]
    assert "q/k/v scrambled" in noted, noted
    said = noted.split(f"--hf-config {other}: ", 1)[1]
    for deep in ([], ["--deep"]):
        code, stdout, err = run_cli(
            "ckpt", "validate", tmp_path / "ck", "--hf-config", other, *deep
        )
        assert code == 0, stdout + err
        assert f"warning: {other / 'config.json'}: {said}" in stdout + err, stdout + err
    code, stdout, err = run_cli(
        "ckpt", "validate", tmp_path / "ck", "--hf-config", other, "--strict"
    )
    assert code == 1 and said in stdout + err, stdout + err
    # the run's own config (the same head split) is no finding: the note is for a config given
    code, stdout, err = run_cli("ckpt", "validate", tmp_path / "ck")
    assert code == 0 and LINE not in stdout + err, stdout + err
