"""A Megatron-LM checkpoint recorded tied (`untie_embeddings_and_output_weights=False`) that
holds an `output_layer.weight`: Megatron-core keeps the embedding's copy as the output layer
of its last pipeline stage, saved with the rest.

Was: refused unread with exit 2, "an output layer of its own (trained untied), ... use a
config with tie_word_embeddings false", even for a byte-for-byte copy, and exit 2 though
the config was the checkpoint's own record (docs/interop.md: exit 2 is for --hf-config's).
Now the two are compared as a Hugging Face tied head is (tests/ckpt/test_tied_head_compared.py):
a copy exports tied; a head trained apart is exit 1 naming --hf-config as the way to give
an untied config.
"""

from __future__ import annotations

import json

from safetensors.torch import load_file

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import mcore_weights, megatron_args, megatron_run

HEAD, EMBEDDING = "module.output_layer.weight", "module.embedding.word_embeddings.weight"


def _run(tmp_path, head_change: float):
    """A tied qwen2's Megatron-LM run whose output layer is its embedding moved by
    `head_change` (0: a byte-for-byte copy)."""
    model = tiny_causal_lm("qwen2", vocab=64)
    head = mcore_weights(model)[EMBEDDING] + head_change
    return megatron_run(tmp_path, model, megatron_args(model), extra={HEAD: head})


def test_an_output_layer_equal_to_the_embedding_exports_tied(tmp_path):
    run = _run(tmp_path, 0.0)
    code, out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, out + err
    assert "lm_head.weight" not in load_file(tmp_path / "hf" / "model.safetensors")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["tie_word_embeddings"]
    code, out, err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 0, out + err


def test_an_output_layer_trained_apart_is_exit_1_naming_hf_config(tmp_path):
    run = _run(tmp_path, 0.5)
    code, out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1, out + err
    stored = f"[model.{HEAD}]: an output layer of its own, unequal to [model.{EMBEDDING}]"
    assert stored in line and "(trained untied)" in line, line
    assert "the checkpoint's own config says tie_word_embeddings=true" in line, line
    assert line.endswith("pass --hf-config DIR|config.json with tie_word_embeddings false"), line
    assert not (tmp_path / "hf").exists()
    code, out, err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 1 and f"[model.{HEAD}]" in out and "tie_word_embeddings" in out, out + err
