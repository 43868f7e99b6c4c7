"""Ended rows leave the decoded batch: no row's tokens, mask or log-probs change for it."""

import pytest
import torch

from tests.support.rollout import (
    PROMPTS,
    reference_logprobs,
    reference_varlen,
    tiny_perturbed_model,
)
from trainer.rollout import flash_decode, hf
from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFRolloutEngine

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_perturbed_model(tmp_path_factory, 7)


def _generate(model, decoder, eos, params, check_every, monkeypatch):
    """A generation whose EOS check (and so any compaction) runs every `check_every` steps,
    the decoded row count after each compaction, and the engine."""
    monkeypatch.setattr(hf, "EOS_CHECK_EVERY", check_every)
    monkeypatch.setattr(flash_decode, "varlen_op", reference_varlen)  # the kernel, on CPU
    engine = HFRolloutEngine(
        model,
        eos_token_ids=eos,
        pad_token_id=0,
        decoder=decoder.removesuffix("_flash"),
        attention="flash" if decoder.endswith("_flash") else "auto",
    )
    counts = []
    keep_rows = engine.decoder.keep_rows
    engine.decoder.keep_rows = lambda index: (counts.append(len(index)), keep_rows(index))
    return engine.generate(PROMPTS * 2, params), counts, engine


def _stop_tokens(model, decoder, params, monkeypatch) -> list[int]:
    """Two tokens that end the first two responses of a free (no EOS) run at different steps."""
    free, *_ = _generate(model, decoder, [], params, MAX_TOKENS + 1, monkeypatch)
    first, second = free.token_lists()[0], free.token_lists()[2]
    return [first[2], next(t for t in second[6:] if t not in first[:3])]


@pytest.mark.parametrize("decoder", ["static", "static_flash", "dynamic"])
@pytest.mark.parametrize("greedy", [True, False])
def test_dropping_ended_rows_changes_no_row(model, decoder, greedy, monkeypatch):
    params = SamplingParams(
        n=2, temperature=0 if greedy else 1.0, max_tokens=MAX_TOKENS, seed=5, logprobs=True
    )
    eos = _stop_tokens(model, decoder, params, monkeypatch)
    kept, *_ = _generate(model, decoder, eos, params, MAX_TOKENS + 1, monkeypatch)
    dropped, counts, engine = _generate(model, decoder, eos, params, 1, monkeypatch)
    lengths = kept.lengths()
    assert len(set(lengths)) >= 3 and min(lengths) < MAX_TOKENS, lengths  # rows end apart
    assert counts and counts == sorted(counts, reverse=True) and counts[-1] < len(lengths)
    if decoder == "static_flash":  # decoded on flash_decode's (rows, width, kv_heads, dim) cache
        keys = engine.decoder._state["keys"]
        assert engine.decoder.kernel == "flash"
        assert keys[0].shape[2] == model.config.num_key_value_heads
    assert torch.equal(dropped.response_ids, kept.response_ids)
    assert torch.equal(dropped.response_mask, kept.response_mask)
    torch.testing.assert_close(dropped.logprobs, kept.logprobs, atol=1e-5, rtol=0)
    for row, response in enumerate(dropped.token_lists()):
        assert response[-1] in eos or len(response) == MAX_TOKENS
        assert not set(response[:-1]) & set(eos)  # ends at its first EOS, no earlier
        expected = reference_logprobs(model, (PROMPTS * 2)[dropped.prompt_index[row]], response)
        torch.testing.assert_close(
            dropped.logprobs[row, : len(response)], expected, atol=1e-4, rtol=0
        )
        assert dropped.logprobs[row, len(response) :].abs().sum() == 0


def test_row_buckets_and_fillers():
    assert [hf._row_bucket(g, 256) for g in (1, 32, 33, 128, 129, 256)] == [
        32,
        32,
        64,
        128,
        160,
        256,
    ]
    assert [hf._row_bucket(g, 6) for g in (1, 5, 6)] == [1, 5, 6]
    ended = torch.tensor([True, False, True, True, False, True])
    assert hf._kept_rows(ended, 6) is None
    assert hf._kept_rows(ended, 3).tolist() == [1, 4, 0]  # live rows first, then one filler
