"""Fused q/k/v and gate/up projections see every weight change, in place or swapped."""

import pytest
import torch

from tests.support.rollout import PROMPTS, perturbed_model, reference_logprobs
from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFRolloutEngine
from trainer.tiny import build_tiny_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), with_weights=True)


def _assert_matches(engine, model):
    out = engine.generate(PROMPTS, SamplingParams(max_tokens=6, seed=1, logprobs=True))
    for row, response in enumerate(out.token_lists()):
        expected = reference_logprobs(model, PROMPTS[row], response)
        torch.testing.assert_close(out.logprobs[row, : len(response)], expected, atol=1e-4, rtol=0)


def test_fused_projections_follow_pushes_and_swapped_tensors(model_dir):
    model = perturbed_model(model_dir, 8)
    engine = HFRolloutEngine(model, [], 0, decoder="static")
    qkv, gate_up = engine.decoder._fused[0]
    attention = model.model.layers[0].self_attn
    assert attention.k_proj.weight.data_ptr() == qkv.weight[qkv.sizes[0] :].data_ptr()
    assert qkv.bias is not None and gate_up is not None  # Qwen2: q/k/v biases fused too
    other = HFRolloutEngine(model, [], 0, decoder="static")  # a second engine shares them
    assert other.decoder._fused[0][0] is qkv and qkv.intact()
    pushed = perturbed_model(model_dir, 9)
    engine.update_weights(pushed.state_dict().items())  # in place: into the fused buffers
    _assert_matches(engine, pushed)
    swapped = perturbed_model(model_dir, 10)
    with torch.no_grad():  # tensors replaced under the modules, as load_state_dict(assign=True)
        for (_, param), (_, new) in zip(model.named_parameters(), swapped.named_parameters()):
            param.data = new.detach().clone()
    _assert_matches(engine, swapped)
    assert engine.decoder._fused[0][0] is not qkv and engine.decoder._fused[0][0].intact()
