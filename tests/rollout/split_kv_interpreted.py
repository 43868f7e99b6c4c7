"""Checks of `split_kv`'s Triton kernels run by Triton's interpreter on CPU tensors.

Run as `TRITON_INTERPRET=1 python -m tests.rollout.split_kv_interpreted CHECK` (the
interpreter is chosen when the kernels are defined, so it needs a process of its own);
prints one JSON object. tests/rollout/test_rollout_split_kv.py runs it and judges the result.
"""

from __future__ import annotations

import json
import sys

import torch

from tests.support.rollout import PROMPTS, perturbed_model, reference_logprobs
from trainer.rollout import flash_decode, split_kv
from trainer.rollout.base import SamplingParams
from trainer.rollout.decode_ops import masked_softmax
from trainer.rollout.hf import HFRolloutEngine
from trainer.rollout.static_cache import _attend

# rows, heads, kv_heads, dim, width, slot, pieces: one piece (no combine), grouped heads (6
# per KV head, padded to 16 in the kernel), one head per KV head, more pieces than filled
# slots, and the default piece count; in each, a row whose padding leaves it one slot
CASES = [
    (3, 12, 2, 32, 64, 50, 1),
    (3, 4, 2, 16, 40, 30, 2),
    (2, 12, 2, 32, 64, 63, 4),
    (4, 4, 4, 16, 48, 5, 8),
    (5, 6, 1, 16, 24, 11, None),
]


def plain_attention(q, keys, values, starts, slot: int, scale: float) -> torch.Tensor:
    """Row r, head h: softmax over slots starts[r]..slot of q . k, times v, in fp32."""
    rows, heads, _ = q.shape
    group = heads // keys.shape[2]
    out = torch.empty(q.shape, dtype=torch.float32)
    for r in range(rows):
        k = keys[r, int(starts[r]) : slot + 1].float()
        v = values[r, int(starts[r]) : slot + 1].float()
        for h in range(heads):
            weights = torch.softmax((k[:, h // group] @ q[r, h].float()) * scale, 0)
            out[r, h] = weights @ v[:, h // group]
    return out


def kernel_errors() -> dict:
    """The kernel's largest difference from `plain_attention`, per dtype and case."""
    generator = torch.Generator().manual_seed(0)
    errors = {}
    for dtype in (torch.float32, torch.float16):
        for rows, heads, kv_heads, dim, width, slot, pieces in CASES:

            def randn(*shape: int) -> torch.Tensor:
                return torch.randn(shape, generator=generator).to(dtype)  # noqa: B023

            q = randn(rows, heads, dim)
            keys, values = randn(rows, width, kv_heads, dim), randn(rows, width, kv_heads, dim)
            starts = torch.randint(0, slot + 1, (rows,), generator=generator)
            starts[0] = slot  # one filled slot
            got = split_kv.attend(
                q, keys, values, starts, torch.tensor([slot]), dim**-0.5, pieces=pieces
            )
            want = plain_attention(q, keys, values, starts, slot, dim**-0.5)
            name = f"{str(dtype).removeprefix('torch.')} {rows}x{heads}/{kv_heads}x{dim} p{pieces}"
            errors[name] = float((got.float() - want).abs().max())
    return errors


def self_check() -> dict:
    """flash_decode's self-check of the split kernel on CPU, and on a kernel that ignores
    each row's padding (it must say so)."""

    def matmul(q, keys, values, mask):
        return _attend(q, keys, values, mask, 32**-0.5, masked_softmax)

    cpu = torch.device("cpu")
    result = {
        str(dtype): flash_decode.compare(cpu, dtype, 12, 2, 32, matmul, "split")
        for dtype in (torch.float32, torch.float16)
    }
    attend = split_kv.attend
    split_kv.attend = lambda q, k, v, starts, *rest: attend(q, k, v, starts * 0, *rest)
    result["ignores padding"] = flash_decode.compare(cpu, torch.float32, 12, 2, 32, matmul, "split")
    split_kv.attend = attend
    return result


def engine_run(model_dir: str) -> dict:
    """The tiny model (fp32, CPU) decoded with the split kernel and with the matmul attention:
    greedy tokens, and log-probs next to a plain transformers forward."""
    model = perturbed_model(model_dir, 7)
    params = SamplingParams(n=1, temperature=0, max_tokens=6, logprobs=True)
    out = {}
    for attention in ("split", "matmul"):
        engine = HFRolloutEngine(model, [], 0, attention=attention)
        batch = engine.generate(PROMPTS, params)
        worst = max(
            float(
                (
                    batch.logprobs[row, : len(tokens)]
                    - reference_logprobs(model, PROMPTS[batch.prompt_index[row]], tokens)
                )
                .abs()
                .max()
            )
            for row, tokens in enumerate(batch.token_lists())
        )
        out[attention] = {
            "kernel": engine.decoder.kernel,
            "tokens": batch.token_lists(),
            "logprob_error": worst,
        }
    return out


if __name__ == "__main__":
    check = sys.argv[1]
    if check == "kernel":
        print(json.dumps(kernel_errors()))
    elif check == "self_check":
        print(json.dumps(self_check()))
    else:
        print(json.dumps(engine_run(sys.argv[2])))
