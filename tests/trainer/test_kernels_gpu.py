"""liger-kernel as a lever (1 GPU: pytest -m gpu tests/trainer/test_kernels_gpu.py): the fused RoPE,
RMSNorm and SwiGLU and the fused linear cross-entropy compute what the plain model does."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig
from trainer.loss import IGNORE_INDEX, linear_cross_entropy_sum
from trainer.model import build_hf_config, build_model, load_tokenizer

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_liger_loss_equals_plain_loss_and_gradients():
    pytest.importorskip("liger_kernel")
    torch.manual_seed(0)
    hidden = torch.randn(2, 300, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = (torch.randn(5000, 256, device="cuda") * 0.05).bfloat16().requires_grad_()
    targets = torch.randint(0, 5000, (2, 300), device="cuda")
    targets[0, :50] = IGNORE_INDEX
    results = {}
    for mode in ("plain", "liger"):
        loss = linear_cross_entropy_sum(hidden, weight, targets, mode)
        results[mode] = (loss.float(), *torch.autograd.grad(loss, (hidden, weight)))
    print({mode: r[0].item() for mode, r in results.items()})
    assert results["liger"][0].item() == pytest.approx(results["plain"][0].item(), rel=1e-3)
    for ours, reference in zip(results["liger"][1:], results["plain"][1:]):
        error = (ours.float() - reference.float()).norm() / reference.float().norm()
        assert error < 2e-2, error


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_liger_kernels_model_matches_plain_model():
    pytest.importorskip("liger_kernel")
    outputs = {}
    for liger in (False, True):
        cfg = ModelConfig(shape="tiny", loss="liger" if liger else "plain", liger=liger)
        hf_config = build_hf_config(cfg, load_tokenizer(cfg))
        model = build_model(cfg, hf_config, torch.device("cuda"), seed=0).to(torch.bfloat16)
        if liger:
            assert (
                type(model.model.norm).__name__ != "LigerRMSNorm"
                and model.model.norm._get_name() == "LigerRMSNorm"
            )
        generator = torch.Generator().manual_seed(1)
        ids = torch.randint(3, hf_config.vocab_size, (2, 64), generator=generator).cuda()
        positions = torch.arange(64, device="cuda").expand(2, 64)
        loss = model(input_ids=ids, position_ids=positions, targets=ids.roll(-1, dims=1))
        loss.backward()
        outputs[liger] = (
            loss.float().item(),
            model.model.layers[0].mlp.down_proj.weight.grad.float().clone(),
        )
    print({k: v[0] for k, v in outputs.items()})
    assert outputs[True][0] == pytest.approx(outputs[False][0], rel=1e-2)
    error = (outputs[True][1] - outputs[False][1]).norm() / outputs[False][1].norm()
    assert error < 5e-2, error
    # liger's patch stays with its model: one built later in the process runs on CPU too.
    cpu_model = build_model(ModelConfig(shape="tiny"), hf_config, torch.device("cpu"), seed=0)
    cpu_loss = cpu_model(
        input_ids=ids.cpu(), position_ids=positions.cpu(), targets=ids.roll(-1, dims=1).cpu()
    )
    assert cpu_loss.item() == pytest.approx(outputs[False][0], rel=1e-2)
