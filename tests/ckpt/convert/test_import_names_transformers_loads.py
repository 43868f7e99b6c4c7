"""Model dirs transformers loads that import-hf refused, and one it must never load.

A base model's save (`Qwen2Model.save_pretrained`: `embed_tokens.weight`, no `model.`
prefix, no head) and an older save holding `rotary_emb.inv_freq` buffers load into the same
causal LM; import-hf said "tensor(s) unknown to qwen2". A dir holding only
`pytorch_model.bin` said "no .safetensors weights" without naming the pickle there."""

from __future__ import annotations

import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.cli_errors import one_error
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli


def _round_trip(src, tmp_path, expected: dict[str, torch.Tensor]) -> str:
    """import-hf SRC (hf layout), export it with --verify; the export holds `expected`
    bit for bit. Returns import's stderr (its notes)."""
    out, back = tmp_path / "imported", tmp_path / "exported"
    code, stdout, err = run_cli("ckpt", "import-hf", src, "--out", out, "--layout", "hf")
    assert code == 0, stdout + err
    code, stdout, export_err = run_cli("ckpt", "export-hf", out, "--out", back, "--verify")
    assert code == 0, stdout + export_err
    exported = load_file(back / "model.safetensors")
    assert sorted(exported) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(exported[name], tensor), name
    return err


def test_a_base_model_save_imports_under_the_causal_lm_names(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=64, tie_word_embeddings=True)
    src = tmp_path / "base"
    model.model.save_pretrained(src)  # Qwen2Model: embed_tokens.weight, layers.0...., norm
    model.config.save_pretrained(src)  # the causal LM's config, as a hub repo holds it
    assert "embed_tokens.weight" in load_file(src / "model.safetensors")
    expected = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    err = _round_trip(src, tmp_path, expected)
    assert "no 'model.' prefix, no lm_head): read as model.*" in err


def test_an_untied_base_model_save_is_refused_for_its_missing_head(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=64, tie_word_embeddings=False)
    src = tmp_path / "base"
    model.model.save_pretrained(src)
    model.config.save_pretrained(src)
    code, stdout, err = run_cli("ckpt", "import-hf", src, "--out", tmp_path / "out")
    assert code == 1, stdout + err
    one_error(err, "lm_head.weight")
    assert not (tmp_path / "out").exists()


def test_stored_rotary_buffers_are_left_out_as_transformers_does(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=64)
    src = tmp_path / "old"
    model.save_pretrained(src)
    weights = src / "model.safetensors"
    tensors = load_file(weights)
    for layer in range(2):
        tensors[f"model.layers.{layer}.self_attn.rotary_emb.inv_freq"] = torch.rand(16)
    save_file(tensors, weights, metadata={"format": "pt"})
    expected = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    if not model.config.tie_word_embeddings:
        expected["lm_head.weight"] = model.state_dict()["lm_head.weight"]
    err = _round_trip(src, tmp_path, expected)
    assert "2 stored rotary buffer(s) (model.layers.0.self_attn.rotary_emb.inv_freq" in err
    names = CheckpointReader(tmp_path / "imported" / "global_step_0" / "dist_ckpt").tensors
    assert not [name for name in names if "inv_freq" in name]


class _Marker:
    """Unpickling this writes a file: whether the .bin was ever loaded."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("layout", ["mcore", "hf"])
def test_a_dir_with_only_a_pickle_names_it_and_never_loads_it(tmp_path, layout):
    src = tmp_path / "old"
    tiny_causal_lm("qwen2", vocab=64).config.save_pretrained(src)
    marker = tmp_path / "unpickled"
    (src / "pytorch_model.bin").write_bytes(pickle.dumps(_Marker(str(marker))))
    code, stdout, err = run_cli(
        "ckpt", "import-hf", src, "--out", tmp_path / "out", "--layout", layout
    )
    assert code == 1, stdout + err
    one_error(err, "no .safetensors weights", "pytorch_model.bin is a pickle", "never loads")
    assert not marker.exists() and not (tmp_path / "out").exists()
