"""flash_decode's self-check, run on CPU with the kernel's semantics in plain torch."""

import pytest
import torch

from tests.support.rollout import reference_varlen
from trainer.rollout import flash_decode
from trainer.rollout.decode_ops import masked_softmax
from trainer.rollout.static_cache import _attend

DIM = 16


def _matmul(q, keys, values, mask):
    return _attend(q, keys, values, mask, DIM**-0.5, masked_softmax)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_check_accepts_the_kernel_and_rejects_one_that_ignores_seqused_k(monkeypatch, dtype):
    monkeypatch.setattr(flash_decode, "varlen_op", reference_varlen)
    cpu = torch.device("cpu")
    assert flash_decode.compare(cpu, dtype, 4, 2, DIM, _matmul) is None

    def reads_to_the_end(*args, **kwargs):  # every row reads all its slots, padding included
        cum_k = args[4]
        kwargs["seqused_k"] = (args[6] - (cum_k[:-1] - cum_k[0]) % args[6]).to(torch.int32)
        return reference_varlen(*args, **kwargs)

    monkeypatch.setattr(flash_decode, "varlen_op", reads_to_the_end)
    assert "off by" in flash_decode.compare(cpu, dtype, 4, 2, DIM, _matmul)
    assert "needs CUDA" in flash_decode.check(cpu, torch.bfloat16, 4, 2, DIM, _matmul)
