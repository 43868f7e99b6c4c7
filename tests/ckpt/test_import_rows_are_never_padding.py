"""An mcore import (`args` None) holds its model's rows, unpadded, and a --hf-config that
contradicts any weight is the user's config: one exit code, 2.

Was: a --hf-config of fewer tokens than an import's rows (Mistral v0.1's 32000 against
v0.3's 32768 rows) passed as "Megatron's vocabulary padding": export-hf dropped the 768
real token rows (exit 0) and validate called the pair valid. And export-hf --hf-config
exited 1 when its config contradicted a weight's shape (fc1 rows, fused QKV rows), 2 when
it named more layers or had no place for a weight.
"""

from __future__ import annotations

import pytest

from tests.support.cli_errors import error_prefixed_lines
from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

VOCAB = 128  # stored rows of the import; a config of 112 passes the padding guess (d = 16)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("import")
    model = tiny_causal_lm("qwen2", vocab=VOCAB)
    model.save_pretrained(root / "model")
    code, stdout, err = run_cli("ckpt", "import-hf", root / "model", "--out", root / "ck")
    assert code == 0, stdout + err
    return model, root / "ck"


def test_fewer_tokens_than_an_import_holds_are_another_models_config(imported, tmp_path):
    model, ckpt = imported
    config = changed_config_dir(model, tmp_path / "cfg", vocab_size=112)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--hf-config", config, "--out", out)
    errors = error_prefixed_lines(err)
    assert code == 2 and len(errors) == 1, stdout + err
    assert "128 rows, but an import holds its model's rows, unpadded" in errors[0], errors[0]
    assert "vocab_size 112" in errors[0] and "padding" not in err.replace("unpadded", "")
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", config)
    assert code == 1 and "INVALID" in stdout, stdout + err
    assert "an import holds its model's rows, unpadded" in stdout, stdout + err


def test_the_same_rows_from_a_training_run_are_its_padding(imported, tmp_path):
    """The rule the import is held apart from: a Megatron-LM run with no padded_vocab_size
    recorded pads 112 tokens by make_vocab_size_divisible_by 128 to these 128 rows."""
    model, _ckpt = imported
    args = megatron_args(
        model,
        padded_vocab_size=None,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=1,
    )
    run = megatron_run(tmp_path, model, args)
    config = changed_config_dir(model, tmp_path / "cfg", vocab_size=112)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--hf-config", config, "--out", out)
    assert code == 0, stdout + err
    assert "dropped 16 rows of Megatron's vocabulary padding (128 stored, vocab_size 112)" in err


CONTRADICTIONS = {
    "fc1_rows": dict(intermediate_size=64),
    "qkv_rows_of_another_hidden_size": dict(hidden_size=64),
    "qkv_rows_of_another_head_split": dict(num_key_value_heads=4),
    "more_layers": dict(num_hidden_layers=3),
    "missing_q_k_norms": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"]),
}


@pytest.mark.parametrize("case", sorted(CONTRADICTIONS))
def test_a_given_config_that_contradicts_a_weight_exits_2(imported, case, tmp_path):
    model, ckpt = imported
    config = changed_config_dir(model, tmp_path / "cfg", **CONTRADICTIONS[case])
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--hf-config", config, "--out", out)
    assert code == 2 and len(error_prefixed_lines(err)) == 1, stdout + err
    assert not out.exists()


def test_the_checkpoints_own_config_contradicting_a_weight_exits_1(imported, tmp_path):
    """The same contradiction (fc1 rows) from the record a run saved: the checkpoint is
    what is wrong."""
    model, _ckpt = imported
    run = megatron_run(tmp_path, model, megatron_args(model, ffn_hidden_size=64))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    errors = error_prefixed_lines(err)
    assert code == 1 and len(errors) == 1 and "linear_fc1" in errors[0], stdout + err
