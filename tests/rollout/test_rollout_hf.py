"""The hf rollout engine: exact against transformers, sampling rules, EOS and masks, weight
pushes."""

import math

import pytest
import torch

from tests.support.rollout import PROMPTS, perturbed_model, reference_logprobs
from trainer.rollout.base import SamplingParams
from trainer.rollout.decode_ops import DecodeOps
from trainer.rollout.hf import HFRolloutEngine
from trainer.rollout.sampling import filter_logits
from trainer.rollout.static_cache import StaticCacheDecoder
from trainer.tiny import build_tiny_model_dir

DECODERS = ["static", "dynamic"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), with_weights=True)


@pytest.mark.parametrize("ops", ["eager", "compiled"])
def test_static_decoder_logits_match_transformers_on_padded_batch(model_dir, ops):
    """`compiled` runs the torch.compile-fused ops (what CUDA-graph decoding captures) here on
    CPU."""
    model = perturbed_model(model_dir, 1)
    decoder = StaticCacheDecoder(model, pad_token_id=0)
    decoder.eager_ops = getattr(DecodeOps, ops)()
    with torch.no_grad():
        logits = decoder.prefill(PROMPTS, 1, 4)
        nxt = logits.argmax(-1)
        step = decoder.decode(nxt)
        for row, prompt in enumerate(PROMPTS):
            ref = model(torch.tensor([prompt + [int(nxt[row])]])).logits[0]
            # fp32 sums run in another order (a padded batch vs one row, the CPU's vector
            # width), so logits of a few units differ in the fifth decimal on some CPUs.
            torch.testing.assert_close(logits[row], ref[-2], atol=1e-4, rtol=1e-5)
            torch.testing.assert_close(step[row], ref[-1], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("chunk_rows", [1, 2])
def test_prefill_in_chunks_equals_one_pass(model_dir, chunk_rows):
    """A prefill cut into chunks of `chunk_rows` prompts (the last one shorter) fills the
    cache and gives the logits of one pass over all of them, each prompt continued twice."""
    model = perturbed_model(model_dir, 1)
    longest = max(len(p) for p in PROMPTS)
    whole = StaticCacheDecoder(model, pad_token_id=0)
    chunked = StaticCacheDecoder(model, pad_token_id=0, prefill_tokens=chunk_rows * longest)
    with torch.no_grad():
        first = [decoder.prefill(PROMPTS, 2, 4) for decoder in (whole, chunked)]
        torch.testing.assert_close(first[1], first[0], atol=1e-5, rtol=1e-5)
        nxt = first[0].argmax(-1)
        steps = [decoder.decode(nxt) for decoder in (whole, chunked)]
    torch.testing.assert_close(steps[1], steps[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decoder", DECODERS)
def test_logprobs_after_weight_push_match_transformers(model_dir, decoder):
    engine = HFRolloutEngine.from_pretrained(str(model_dir), torch.float32, "cpu", decoder=decoder)
    pushed = perturbed_model(model_dir, 2)
    engine.update_weights(pushed.state_dict().items())  # includes the tied lm_head.weight name
    out = engine.generate(PROMPTS, SamplingParams(n=2, max_tokens=10, seed=3, logprobs=True))
    assert out.prompt_index == [0, 0, 1, 1, 2, 2]
    for row, response in enumerate(out.token_lists()):
        expected = reference_logprobs(pushed, PROMPTS[out.prompt_index[row]], response)
        torch.testing.assert_close(out.logprobs[row, : len(response)], expected, atol=1e-4, rtol=0)
        assert out.logprobs[row, len(response) :].abs().sum() == 0


@pytest.mark.parametrize("decoder", DECODERS)
def test_greedy_matches_transformers_generate(model_dir, decoder):
    model = perturbed_model(model_dir, 4)
    engine = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0, decoder=decoder)
    out = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12))
    for row, prompt in enumerate(PROMPTS):
        ref = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=2,
            pad_token_id=0,
        )
        assert out.token_lists()[row] == ref[0, len(prompt) :].tolist()


@pytest.mark.parametrize("decoder", DECODERS)
def test_stops_at_eos_and_masks_the_rest(model_dir, decoder):
    model = perturbed_model(model_dir, 5)
    free = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0, decoder=decoder)
    greedy = SamplingParams(temperature=0, max_tokens=12)
    full = free.generate(PROMPTS, greedy).token_lists()
    assert all(len(r) == 12 for r in full)  # no EOS: runs to max_tokens
    stop_token = full[0][3]  # make the 4th token of the first response the end of sequence
    stopped = HFRolloutEngine(
        model, eos_token_ids=[stop_token], pad_token_id=0, decoder=decoder
    ).generate(PROMPTS, greedy)
    for row, response in enumerate(full):
        end = response.index(stop_token) + 1 if stop_token in response else len(response)
        assert stopped.token_lists()[row] == response[:end]  # EOS itself is kept and masked in
        assert stopped.response_mask[row].tolist() == [1] * end + [0] * (
            stopped.response_mask.shape[1] - end
        )
        assert (stopped.response_ids[row, end:] == 0).all()
    assert len(stopped.token_lists()[0]) == 4


def test_seeds_top_k_and_chunking(model_dir):
    model = perturbed_model(model_dir, 6)
    engine = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0)
    sample = SamplingParams(n=3, max_tokens=8, seed=11)
    first, again = engine.generate(PROMPTS, sample), engine.generate(PROMPTS, sample)
    assert torch.equal(first.response_ids, again.response_ids)
    other = engine.generate(PROMPTS, SamplingParams(n=3, max_tokens=8, seed=12))
    assert not torch.equal(first.response_ids, other.response_ids)
    assert len({tuple(r) for r in first.token_lists()[:3]}) > 1  # n samples of one prompt differ
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=8))
    top1 = engine.generate(PROMPTS, SamplingParams(top_k=1, max_tokens=8, seed=1))
    assert torch.equal(greedy.response_ids, top1.response_ids)
    chunked = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0, max_num_seqs=2)
    split = chunked.generate(PROMPTS, SamplingParams(n=2, temperature=0, max_tokens=8))
    assert split.prompt_index == [0, 0, 1, 1, 2, 2]
    assert split.token_lists() == [r for r in greedy.token_lists() for _ in range(2)]


def test_filter_logits_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda **kw: torch.isfinite(filter_logits(logits, SamplingParams(**kw)))[0].tolist()  # noqa: E731
    assert kept(top_k=2) == [True, True, False, False]
    assert kept(top_p=0.5) == [True, False, False, False]  # 0.5 alone reaches 0.5
    assert kept(top_p=0.79) == [True, True, False, False]
    assert kept(top_p=0.81) == [True, True, True, False]
    scaled = filter_logits(logits, SamplingParams(temperature=2.0))
    torch.testing.assert_close(scaled, logits / 2)
    assert math.isclose(
        torch.softmax(filter_logits(logits, SamplingParams(top_k=2)), -1)[0, 0].item(), 0.625
    )


def test_bad_updates_and_params_are_rejected(model_dir):
    engine = HFRolloutEngine.from_pretrained(str(model_dir), torch.float32, "cpu")
    with pytest.raises(KeyError, match=r"no parameter 'nope\.weight'"):
        engine.update_weights([("nope.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match=r"model\.norm\.weight.*shape"):
        engine.update_weights([("model.norm.weight", torch.zeros(3))])
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="empty prompt"):
        engine.generate([[]], SamplingParams())
