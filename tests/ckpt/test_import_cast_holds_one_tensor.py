"""import-hf --dtype holds about the largest tensor in its output dtype, whichever way it
casts, as `import-hf --help` and the module's docstring say.

Was: each source was read whole and then cast, and the previous cast tensor stayed alive
(held by the loop, and by the data file's thread through the view of its bytes) while the
next was read and cast: an fp32 -> bf16 import of an untied model rose 4.7x the largest
tensor written, a bf16 -> fp32 one 2.8x. Now each tensor to write is filled from windows of
its source (`import_cast.read_cast`) and freed before the next is read; the bytes cast are
reported as they go, so the progress moves within a tensor.

The cast window is set small here, so that what is measured is the tensors' memory."""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.convert import import_cast
from mfsdp_ckpt.convert.import_hf import import_hf
from tests.ckpt.test_export_from_a_url_streams_in_bounded_memory import _peak_rise
from tests.support.hf_model_files import TINY, saved_hf_model

VOCAB = 524288  # x hidden 32: the embedding and the untied head, 64 MiB each in fp32
WINDOW = 256 << 10
# Besides the tensor: the cast window, the NaN/Inf count's pieces (`finite.PIECE_ELEMENTS`)
# and what the allocator keeps of them, 20 to 30 MiB measured whatever the tensor's size;
# the bound leaves them half the tensor and this.
CONSTANT = 16 << 20


def _model(tiny, root, dtype: str):
    """`tiny` (an untied model saved by transformers) with an embedding and a head that dwarf
    the rest, stored in `dtype`: written here, which is quicker than a model of that size."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(tiny / "model.safetensors")
    torch.manual_seed(0)
    hidden = weights["lm_head.weight"].shape[1]
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        weights[name] = torch.randn(VOCAB, hidden) * 0.02
    out = root / dtype
    out.mkdir()
    cast = {name: tensor.to(getattr(torch, dtype)) for name, tensor in weights.items()}
    save_file(cast, out / "model.safetensors", metadata={"format": "pt"})
    config = {**json.loads((tiny / "config.json").read_text()), "vocab_size": VOCAB}
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("import_cast")
    tiny = saved_hf_model(root, "qwen2", tied=False)
    import_hf(tiny, root / "warm", dtype="fp32")  # torch and its kernels loaded
    return {dtype: _model(tiny, root, dtype) for dtype in ("float32", "bfloat16")}


@pytest.mark.parametrize(
    ("stored", "dtype", "itemsize"),
    [("float32", "bf16", 2), ("bfloat16", "fp32", 4), ("float32", "fp16", 2)],
)
def test_a_cast_import_peaks_at_about_the_largest_tensor_it_writes(
    models, tmp_path, monkeypatch, stored, dtype, itemsize
):
    monkeypatch.setattr(import_cast, "CAST_WINDOW_BYTES", WINDOW)
    largest = VOCAB * TINY["hidden_size"] * itemsize
    heard: list[tuple[int, int]] = []

    def progress(tensors: int, _total: int, nbytes: int, _total_bytes: int) -> None:
        heard.append((tensors, nbytes))

    rise = _peak_rise(
        lambda: import_hf(models[stored], tmp_path / "out", dtype=dtype, progress=progress)
    )
    # was 4.7x (fp32 -> bf16) and 2.8x (bf16 -> fp32) the largest tensor written
    bound = largest * 3 // 2 + CONSTANT
    assert rise < bound, f"peak rose {rise >> 20} MiB, the tensor {largest >> 20} MiB"
    # the first (largest) tensor is heard while it is cast, a window at a time
    per_window = WINDOW // (4 if stored == "float32" else 2) * itemsize
    within = [nbytes for tensors, nbytes in heard if tensors == 0 and 0 < nbytes < largest]
    assert len(within) == largest // per_window - 1, heard[:5]
    assert [n for _, n in heard] == sorted(n for _, n in heard)
