"""The compiled token picker chooses what `sample_next` chooses, with the same log-probs."""

import warnings

import pytest
import torch

from tests.support.rollout import PROMPTS, perturbed_model
from trainer.rollout import hf
from trainer.rollout.base import SamplingParams
from trainer.rollout.fused_sampling import TokenPicker, gumbel_pick
from trainer.rollout.hf import HFRolloutEngine
from trainer.rollout.sampling import chosen_logprob, sample_next
from trainer.tiny import build_tiny_model_dir

BATCH_ROWS, VOCAB = 8, 50
DROPPED = torch.tensor([6, 1, 3])  # rows left after a compaction, in decode order


@pytest.fixture(scope="module")
def fused():
    """One picker for the module, so its functions compile once (plus once for dynamic rows)."""
    return TokenPicker(fused=True)


def _logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _eager(logits, params, seed, rows):
    chosen = sample_next(logits, params, torch.Generator().manual_seed(seed), rows, BATCH_ROWS)
    return chosen, chosen_logprob(logits, chosen)


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
@pytest.mark.parametrize("rows", [None, DROPPED], ids=["all", "dropped"])
def test_fused_equals_eager(fused, temperature, rows):
    params = SamplingParams(temperature=temperature, logprobs=True)
    logits = _logits(BATCH_ROWS if rows is None else len(rows))
    for seed in range(3):
        chosen, logprob = fused(logits, params, torch.Generator().manual_seed(seed), rows, 8)
        expected_chosen, expected_logprob = _eager(logits, params, seed, rows)
        assert torch.equal(chosen, expected_chosen)
        torch.testing.assert_close(logprob, expected_logprob, atol=1e-6, rtol=0)
    assert fused.fused  # compiled all along, no fallback


def test_half_logits_give_fp32_results(fused):
    """bf16 logits, as the decode graph hands them to the fused picker: the results of their
    fp32 copy, from the compiled function and from the same function run eagerly."""
    params = SamplingParams(temperature=1.0, logprobs=True)
    logits = _logits(BATCH_ROWS).bfloat16()
    expected_chosen, expected_logprob = _eager(logits.float(), params, 0, None)
    noise = torch.empty(BATCH_ROWS, VOCAB).exponential_(generator=torch.Generator().manual_seed(0))
    for chosen, logprob in (
        fused(logits, params, torch.Generator().manual_seed(0), None, BATCH_ROWS),
        gumbel_pick(logits, noise, torch.tensor(1.0)),
    ):
        assert logprob.dtype == torch.float32 and torch.equal(chosen, expected_chosen)
        torch.testing.assert_close(logprob, expected_logprob, atol=1e-6, rtol=0)


def test_new_temperatures_and_row_counts_stay_compiled(fused):
    """A temperature is an input, not a constant of the compiled code: a process that samples
    at many temperatures and row counts (a GRPO run with validation, a test session) stays
    within torch.compile's recompile limit (8) and never falls back."""
    logits = _logits(BATCH_ROWS)
    for index, temperature in enumerate([0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.5]):
        params = SamplingParams(temperature=temperature, logprobs=True)
        rows = (None, torch.tensor([5, 0, 2, 7]), torch.tensor([1, 3, 4, 6, 0, 2]))[index % 3]
        subset = logits if rows is None else logits[rows]
        chosen, logprob = fused(subset, params, torch.Generator().manual_seed(index), rows, 8)
        expected_chosen, expected_logprob = _eager(subset, params, index, rows)
        assert torch.equal(chosen, expected_chosen)
        torch.testing.assert_close(logprob, expected_logprob, atol=1e-6, rtol=0)
    assert fused.fused


@pytest.mark.parametrize("error", [RuntimeError("no backend"), AssertionError("dynamo guard")])
def test_compile_failure_falls_back_with_one_warning(error):
    """Compilers fail with more than RuntimeError (dynamo raises assertions too); any failure
    costs speed, never the rollout."""
    picker = TokenPicker(fused=True)

    def broken(*args):
        raise error

    picker._gumbel = broken
    params = SamplingParams(temperature=1.0, logprobs=True)
    logits = _logits(BATCH_ROWS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = picker(logits, params, torch.Generator().manual_seed(0), None, BATCH_ROWS)
        second = picker(logits, params, torch.Generator().manual_seed(1), None, BATCH_ROWS)
    assert [str(w.message).split(" (")[0] for w in caught] == [
        "rollout: compiling the token sampler failed, sampling eagerly"
    ]
    assert not picker.fused
    for result, seed in ((first, 0), (second, 1)):  # the failed step keeps its noise
        assert torch.equal(result[0], _eager(logits, params, seed, None)[0])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return perturbed_model(
        build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), with_weights=True), 3
    )


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_outputs_unchanged(model, temperature, monkeypatch):
    """Rows end at an EOS and are dropped every step: same tokens, mask and log-probs."""
    monkeypatch.setattr(hf, "EOS_CHECK_EVERY", 1)
    params = SamplingParams(n=2, temperature=temperature, max_tokens=12, seed=4, logprobs=True)
    free = HFRolloutEngine(model, [], 0, decoder="static", fused_sampling=False)
    eos = sorted({tokens[3] for tokens in free.generate(PROMPTS, params).token_lists()[::3]})
    results = []
    for fused_sampling in (False, True):
        engine = HFRolloutEngine(model, eos, 0, decoder="static", fused_sampling=fused_sampling)
        results.append(engine.generate(PROMPTS, params))
        assert engine.pick.fused == fused_sampling
    eager, fused = results
    assert len(set(eager.lengths())) >= 2  # rows ended apart, so some were dropped
    assert torch.equal(fused.response_ids, eager.response_ids)
    assert torch.equal(fused.response_mask, eager.response_mask)
    torch.testing.assert_close(fused.logprobs, eager.logprobs, atol=1e-6, rtol=0)
