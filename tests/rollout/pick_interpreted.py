"""Checks of the fused token picker (`pick_kernel`'s Triton kernels) run by Triton's
interpreter on CPU tensors.

Run as `TRITON_INTERPRET=1 python -m tests.rollout.pick_interpreted CHECK [MODEL_DIR]`;
prints one JSON object. tests/rollout/test_rollout_fused_sampling.py runs it and judges it.
"""

from __future__ import annotations

import json
import sys

import torch

from tests.support.rollout import PROMPTS, perturbed_model
from trainer.rollout import hf, pick_kernel
from trainer.rollout.base import SamplingParams
from trainer.rollout.fused_sampling import TokenPicker
from trainer.rollout.hf import HFRolloutEngine
from trainer.rollout.sampling import chosen_logprob, sample_next

BATCH_ROWS, VOCAB = 8, 3000  # a vocabulary of several kernel blocks and pieces
DROPPED = torch.tensor([6, 1, 3])  # rows left after a compaction, in decode order


def _logits(rows: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)


def picker_against_eager() -> dict:
    """Per case (temperature, all rows or a compacted subset, logits dtype): how many of
    two seeds' tokens differ from `sample_next`'s on the fp32 logits, the largest
    log-prob difference from `chosen_logprob`'s, and whether the picker stayed fused."""
    picker = TokenPicker(fused=True)
    out = {}
    for dtype in (torch.float32, torch.float16):
        for temperature in (0.0, 1.0, 0.7):
            for name, rows in (("all", None), ("dropped", DROPPED)):
                params = SamplingParams(temperature=temperature, logprobs=True)
                logits = _logits(BATCH_ROWS if rows is None else len(rows), 0, dtype)
                differ, worst = 0, 0.0
                for seed in range(2):
                    chosen, logprob = picker(
                        logits, params, torch.Generator().manual_seed(seed), rows, BATCH_ROWS
                    )
                    expected = sample_next(
                        logits.float(), params, torch.Generator().manual_seed(seed), rows, 8
                    )
                    differ += int((chosen != expected).sum())
                    gap = logprob - chosen_logprob(logits.float(), expected)
                    worst = max(worst, float(gap.abs().max()))
                    assert logprob.dtype == torch.float32
                key = f"{str(dtype).removeprefix('torch.')} T={temperature} {name}"
                out[key] = {"differ": differ, "logprob_gap": worst}
    out["fused"] = picker.fused
    return out


def ties() -> dict:
    """Equal best scores in different kernel pieces and blocks: the lowest token id wins, as
    torch.argmax's first maximum does."""
    logits = torch.zeros(3, VOCAB)
    logits[0, [2999, 1500, 700]] = 5.0
    logits[1, [64, 65]] = 5.0
    logits[2] = 1.0  # all equal
    greedy, _ = pick_kernel.pick(logits, pieces=4, block=64)
    noise = torch.ones(3, VOCAB)  # log 1 = 0: the race is the logits' own
    sampled, _ = pick_kernel.pick(logits, noise, torch.tensor(1.0), pieces=4, block=64)
    return {"greedy": greedy.tolist(), "sampled": sampled.tolist()}


def engine_run(model_dir: str) -> dict:
    """The tiny model on CPU, rows ending at an EOS and dropped at every step, with the eager
    and the fused picker: responses and log-probs of each."""
    hf.EOS_CHECK_EVERY = 1
    model = perturbed_model(model_dir, 3)
    out = {}
    for temperature in (0.0, 1.0):
        params = SamplingParams(n=2, temperature=temperature, max_tokens=8, seed=4, logprobs=True)
        free = HFRolloutEngine(model, [], 0, decoder="static", fused_sampling=False)
        eos = sorted({tokens[3] for tokens in free.generate(PROMPTS, params).token_lists()[::3]})
        for fused in (False, True):
            engine = HFRolloutEngine(model, eos, 0, decoder="static", fused_sampling=fused)
            batch = engine.generate(PROMPTS, params)
            out[f"T={temperature} fused={fused}"] = {
                "tokens": batch.token_lists(),
                "mask": batch.response_mask.tolist(),
                "logprobs": batch.logprobs.tolist(),
                "fused": engine.pick.fused,
            }
    return out


if __name__ == "__main__":
    check = sys.argv[1]
    if check == "picker":
        print(json.dumps(picker_against_eager()))
    elif check == "ties":
        print(json.dumps(ties()))
    else:
        print(json.dumps(engine_run(sys.argv[2])))
