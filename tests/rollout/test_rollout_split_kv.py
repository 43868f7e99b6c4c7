"""split_kv's Triton decode attention, run by Triton's interpreter on CPU: the kernel against
plain attention, flash_decode's self-check of it, and a whole decode with it."""

import os
from functools import partial

from tests.support.triton import needs_triton, run_interpreted
from trainer.tiny import build_tiny_model_dir

pytestmark = needs_triton
_interpreted = partial(run_interpreted, "tests.rollout.split_kv_interpreted")


def test_kernel_matches_plain_attention():
    errors = _interpreted("kernel")
    assert len(errors) == 10
    for name, error in errors.items():
        assert error < (1e-5 if name.startswith("float32") else 2e-3), (name, error)


def test_self_check_passes_and_catches_a_kernel_that_ignores_padding():
    result = _interpreted("self_check")
    assert result["torch.float32"] is None and result["torch.float16"] is None, result
    assert "off by" in result["ignores padding"]


def test_decoding_with_the_split_kernel(tmp_path):
    out = _interpreted("engine", os.fspath(build_tiny_model_dir(tmp_path, with_weights=True)))
    split, matmul = out["split"], out["matmul"]
    assert split["kernel"] == "split" and matmul["kernel"] == "matmul"
    assert split["tokens"] == matmul["tokens"]
    assert all(len(tokens) == 6 for tokens in split["tokens"])
    assert split["logprob_error"] < 1e-4 and matmul["logprob_error"] < 1e-4, out
