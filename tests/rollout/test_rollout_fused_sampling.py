"""The fused token picker chooses what `sample_next` chooses, with the same log-probs: its
Triton kernels run by Triton's interpreter on CPU (tests/rollout/pick_interpreted.py), and
its fallback to the torch functions where the kernel fails."""

import os
import warnings
from functools import partial

import pytest
import torch

from tests.support.triton import needs_triton, run_interpreted
from trainer.rollout.base import SamplingParams
from trainer.rollout.fused_sampling import TokenPicker
from trainer.rollout.sampling import chosen_logprob, sample_next
from trainer.tiny import build_tiny_model_dir

pytestmark = needs_triton
_interpreted = partial(run_interpreted, "tests.rollout.pick_interpreted")
BATCH_ROWS, VOCAB = 8, 50


def test_fused_equals_eager():
    result = _interpreted("picker")
    assert result.pop("fused") is True  # the kernel all along, no fallback
    assert len(result) == 12
    for case, found in result.items():
        assert found["differ"] == 0, case
        assert found["logprob_gap"] < 1e-5, (case, found)


def test_ties_go_to_the_lowest_token_id():
    assert _interpreted("ties") == {"greedy": [700, 64, 0], "sampled": [700, 64, 0]}


def test_engine_outputs_unchanged(tmp_path):
    """Rows end at an EOS and are dropped every step: same tokens, mask and log-probs."""
    out = _interpreted("engine", os.fspath(build_tiny_model_dir(tmp_path, with_weights=True)))
    for temperature in (0.0, 1.0):
        eager, fused = out[f"T={temperature} fused=False"], out[f"T={temperature} fused=True"]
        assert fused["fused"] and not eager["fused"]
        assert len({len(tokens) for tokens in eager["tokens"]}) >= 2  # rows ended apart
        assert fused["tokens"] == eager["tokens"] and fused["mask"] == eager["mask"]
        torch.testing.assert_close(
            torch.tensor(fused["logprobs"]), torch.tensor(eager["logprobs"]), atol=1e-6, rtol=0
        )


@pytest.mark.parametrize("error", [RuntimeError("no backend"), AssertionError("bad launch")])
def test_kernel_failure_falls_back_with_one_warning(error, monkeypatch):
    """A kernel that cannot run here (no GPU Triton backend, a launch error) costs speed,
    never the rollout: the failed step keeps its noise and its compacted rows."""
    from trainer.rollout import pick_kernel

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(pick_kernel, "pick", broken)
    picker = TokenPicker(fused=True)
    params = SamplingParams(temperature=1.0, logprobs=True)
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(0)) * 3
    rows = torch.tensor([6, 1, 3])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = picker(logits, params, torch.Generator().manual_seed(0), rows, BATCH_ROWS)
        second = picker(logits, params, torch.Generator().manual_seed(1), rows, BATCH_ROWS)
    assert [str(w.message).split(" (")[0] for w in caught] == [
        "rollout: the token-pick kernel failed, sampling eagerly"
    ]
    assert not picker.fused
    for (chosen, logprob), seed in ((first, 0), (second, 1)):
        expected = sample_next(logits, params, torch.Generator().manual_seed(seed), rows, 8)
        assert torch.equal(chosen, expected)
        torch.testing.assert_close(logprob, chosen_logprob(logits, expected), atol=1e-6, rtol=0)
