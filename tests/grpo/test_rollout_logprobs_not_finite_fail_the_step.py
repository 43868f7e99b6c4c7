"""A rollout whose log-probs are not finite fails its step in one line naming the step, the
engine and what to do (exit 1), before its responses are scored or trained on. vLLM past the
model's context (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) gave NaN log-probs and token 0 for every
position past it, and the run trained on them and ended exit 0. Here the batch is a real
engine's: the hf engine given a weight that holds NaN, as the runner would call the check."""

import math

import pytest
import torch

from mfsdp_ckpt.errors import EXIT_FAILED
from tests.support.rollout import PROMPTS
from trainer.rollout.base import SamplingParams, pack_responses
from trainer.rollout.finite_logprobs import NonFiniteRolloutError, check_finite_logprobs
from trainer.rollout.hf import HFRolloutEngine
from trainer.tiny import build_tokenizer, tiny_config_fields


@pytest.fixture(scope="module")
def engine() -> HFRolloutEngine:
    """The tiny model's architecture, random weights (fixed by the seed), no EOS."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(**tiny_config_fields(build_tokenizer()))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    return HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0)


def _rollout(engine: HFRolloutEngine):
    params = SamplingParams(n=2, max_tokens=4, seed=0, logprobs=True)
    return engine.generate(PROMPTS, params)


def test_an_engines_nan_logprobs_fail_the_step_in_one_line(engine):
    check_finite_logprobs(_rollout(engine), 3, engine.name)  # finite: the step goes on
    hidden = engine.model.config.hidden_size
    engine.update_weights([("model.norm.weight", torch.full((hidden,), math.nan))])
    batch = _rollout(engine)
    with pytest.raises(NonFiniteRolloutError) as caught:
        check_finite_logprobs(batch, 3, engine.name)
    said = str(caught.value)
    responses = len(batch.prompt_index)
    assert said.startswith(f"step 3: rollout hf returned {responses * 4} log-probs that are"), said
    assert f"in {responses} of {responses} responses, from response token 1:" in said, said
    assert said.endswith("within the model's context and its weights finite"), said
    assert "\n" not in said, said
    assert caught.value.exit_code == EXIT_FAILED


def test_only_response_tokens_count_and_inf_is_refused():
    """Padding past a response's end is no token of it; -inf (a token the engine gave no
    chance) is refused as NaN is."""
    logprobs = [[-0.5, -1.0], [-0.25]]
    batch = pack_responses([[5, 6], [7]], logprobs, [0, 0], 0)
    batch.logprobs[1, 1] = math.nan  # padding: mask 0
    check_finite_logprobs(batch, 1, "vllm")
    batch.logprobs[0, 1] = -math.inf
    with pytest.raises(NonFiniteRolloutError) as caught:
        check_finite_logprobs(batch, 1, "vllm")
    said = str(caught.value)
    assert said.startswith("step 1: rollout vllm returned 1 log-probs that are not finite"), said
    assert said.endswith(", or use rollout.name=hf (the transformers engine)"), said
    check_finite_logprobs(pack_responses([[5]], None, [0], 0), 1, "vllm")  # none asked for
