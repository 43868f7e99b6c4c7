"""The hf engine's CUDA-graph decode on a GPU: same tokens and log-probs as transformers (fp32).

Run on a GPU machine: pytest -m gpu tests/test_rollout_hf_gpu.py
"""

import pytest
import torch

from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFRolloutEngine
from trainer.tiny import build_tiny_model_dir

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
PROMPTS = [[5, 17, 33, 60, 71], [9, 8], [100, 200, 300, 7, 7, 7, 7, 41]] * 3


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), with_weights=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    return model


def test_cuda_graph_decode_matches_transformers(model):
    engine = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0, cuda_graphs=True)
    assert engine.decoder.cuda_graphs
    for _ in range(2):  # the second call replays the graph captured by the first
        out = engine.generate(PROMPTS, SamplingParams(n=2, max_tokens=24, seed=5, logprobs=True))
        for row, response in enumerate(out.token_lists()):
            prompt = PROMPTS[out.prompt_index[row]]
            with torch.no_grad():
                logits = model(torch.tensor([prompt + response], device="cuda")).logits[0, len(prompt) - 1 : -1]
            expected = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(response, device="cuda")[:, None])
            torch.testing.assert_close(out.logprobs[row, : len(response)], expected.squeeze(-1).cpu(), atol=1e-4, rtol=0)
    eager = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0, cuda_graphs=False)
    greedy = SamplingParams(temperature=0, max_tokens=24)
    assert engine.generate(PROMPTS, greedy).token_lists() == eager.generate(PROMPTS, greedy).token_lists()
    for row, prompt in enumerate(PROMPTS[:3]):
        ref = model.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=24, do_sample=False, eos_token_id=2,
                             pad_token_id=0)
        assert engine.generate([prompt], greedy).token_lists()[0] == ref[0, len(prompt):].tolist()
