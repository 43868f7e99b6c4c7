"""A model dir whose weights are only in another format than safetensors (torch.save's
`.pt`/`.pth`, llama.cpp's `.gguf`): import-hf said "no .safetensors weights" without naming
the file that is there or what to do with it. Now it names the file and how transformers
converts it, as it did for pytorch_model.bin alone; neither file is ever read."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import one_error
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli

PICKLE_HINT = "is a pickle, which mfsdp never loads"
GGUF_HINT = "is GGUF (llama.cpp's format), which mfsdp does not read"
CONVERT = "then save_pretrained writes safetensors"
OTHER_FORMATS = {
    "model.pt": (PICKLE_HINT,),
    "consolidated.00.pth": (PICKLE_HINT,),
    "model-q4_k_m.gguf": (GGUF_HINT, "gguf_file=model-q4_k_m.gguf"),
}


@pytest.mark.parametrize("name", list(OTHER_FORMATS))
def test_weights_in_another_format_are_named_with_how_to_convert_them(tmp_path, name):
    src = tmp_path / "model"
    tiny_causal_lm("qwen2", vocab=64).config.save_pretrained(src)
    (src / name).write_bytes(b"not read")
    code, stdout, err = run_cli("ckpt", "import-hf", src, "--out", tmp_path / "out")
    assert code == 1, stdout + err
    one_error(err, "no .safetensors weights", f"; {name} ", *OTHER_FORMATS[name], CONVERT)
    assert not (tmp_path / "out").exists()


def test_a_pickle_and_a_gguf_file_are_both_named(tmp_path):
    src = tmp_path / "model"
    tiny_causal_lm("qwen2", vocab=64).config.save_pretrained(src)
    for name in ("pytorch_model.bin", "model.gguf"):
        (src / name).write_bytes(b"not read")
    code, stdout, err = run_cli("ckpt", "import-hf", src, "--out", tmp_path / "out")
    assert code == 1, stdout + err
    one_error(err, f"pytorch_model.bin {PICKLE_HINT}", f"model.gguf {GGUF_HINT}")


def test_the_hf_trainers_state_files_are_not_named_as_weights(tmp_path):
    """training_args.bin (a checkpoint-N's) is a pickle of the Trainer's settings, not a
    model's weights: naming it as the weights to convert sent the user the wrong way."""
    src = tmp_path / "model"
    tiny_causal_lm("qwen2", vocab=64).config.save_pretrained(src)
    (src / "training_args.bin").write_bytes(b"not read")
    code, stdout, err = run_cli("ckpt", "import-hf", src, "--out", tmp_path / "out")
    assert code == 1, stdout + err
    line = one_error(err, "no .safetensors weights")
    assert "training_args.bin" not in line
