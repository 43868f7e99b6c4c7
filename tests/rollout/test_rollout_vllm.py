"""The vllm rollout engine (runs where vLLM is installed; CPU build: scripts/install_vllm_cpu.sh).

vLLM initializes torch.distributed and changes torch's thread settings in its process, so the
engine runs in a spawned child and the checks compare what it leaves in a file (not through a
multiprocessing manager: its server process is one more process a busy machine can lose).
"""

import pytest
import torch

from tests.support.distributed import run_distributed
from tests.support.rollout import PROMPTS, perturbed_model, reference_logprobs
from trainer.rollout.vllm_engine import vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)


def _run_engine(_rank, _world, model_dir, results_file):
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.vllm_engine import VLLMRolloutEngine

    engine = VLLMRolloutEngine(
        str(model_dir), dtype="float32", max_model_len=128, enforce_eager=True, seed=0
    )
    before = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=10))
    # named_parameters() leaves out the tied lm_head: the engine must refresh it from the embedding.
    engine.update_weights(perturbed_model(model_dir, 2).named_parameters())
    sampled = engine.generate(PROMPTS, SamplingParams(n=2, max_tokens=10, seed=3, logprobs=True))
    again = engine.generate(PROMPTS, SamplingParams(n=2, max_tokens=10, seed=3, logprobs=True))
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=10, n=2))
    stop_token = greedy.token_lists()[0][3]
    engine.eos_token_ids = [stop_token]
    stopped = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=10))
    results = {
        "before": before,
        "sampled": sampled,
        "again": again,
        "greedy": greedy,
        "stopped": stopped,
        "stop_token": stop_token,
    }
    torch.save(results, results_file)


@pytest.fixture(scope="module")
def engine_results(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    model_dir = build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), with_weights=True)
    results_file = tmp_path_factory.mktemp("results") / "results.pt"
    run_distributed(_run_engine, 1, model_dir, results_file)
    return model_dir, torch.load(results_file, weights_only=False)  # written by the test itself


def test_logprobs_after_weight_push_match_transformers(engine_results):
    model_dir, results = engine_results
    pushed = perturbed_model(model_dir, 2)
    sampled = results["sampled"]
    assert sampled.prompt_index == [0, 0, 1, 1, 2, 2]
    for row, response in enumerate(sampled.token_lists()):
        expected = reference_logprobs(pushed, PROMPTS[sampled.prompt_index[row]], response)
        torch.testing.assert_close(
            sampled.logprobs[row, : len(response)], expected, atol=1e-4, rtol=0
        )
    assert torch.equal(sampled.response_ids, results["again"].response_ids)  # seeded: reproducible
    assert len({tuple(r) for r in sampled.token_lists()[:2]}) == 2  # the n samples differ


def test_greedy_matches_transformers_and_changes_after_push(engine_results):
    model_dir, results = engine_results
    pushed = perturbed_model(model_dir, 2)
    greedy = results["greedy"]
    assert greedy.prompt_index == [0, 0, 1, 1, 2, 2]
    for row, prompt in enumerate(PROMPTS):
        ref = pushed.generate(
            torch.tensor([prompt]),
            max_new_tokens=10,
            do_sample=False,
            eos_token_id=2,
            pad_token_id=0,
        )
        assert (
            greedy.token_lists()[2 * row]
            == greedy.token_lists()[2 * row + 1]
            == ref[0, len(prompt) :].tolist()
        )
    assert results["before"].token_lists() != greedy.token_lists()[::2]  # the push took effect


def test_stops_at_eos_and_masks_the_rest(engine_results):
    _, results = engine_results
    stopped, stop_token = results["stopped"], results["stop_token"]
    full = results["greedy"].token_lists()[::2]
    for row, response in enumerate(full):
        end = response.index(stop_token) + 1 if stop_token in response else len(response)
        assert stopped.token_lists()[row] == response[:end]
        assert stopped.response_mask[row].tolist() == [1] * end + [0] * (
            stopped.response_mask.shape[1] - end
        )
