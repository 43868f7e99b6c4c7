"""Shared pieces of the rollout-engine tests: prompts, perturbed weights, transformers'
log-probs."""

import pytest
import torch

# The GPU tests' marks: collected by `pytest -m gpu`, skipped where CUDA is absent.
GPU_ONLY = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
PROMPTS = [[5, 17, 33, 60, 71], [9, 8], [100, 200, 300, 7, 7, 7, 7, 41]]


def build_cpu_engine(
    name: str,
    hf_config,
    assets_dir,
    write_assets,
    *,
    tokenizer=None,
    max_model_len: int = 64,
):
    """`build_rollout_engine(name, ...)` as the CPU rollout tests build it: no model path (its
    weights are pushed), fp32 on the CPU, seed 0, the tiny tokenizer unless `tokenizer`."""
    from trainer.rollout.build import build_rollout_engine
    from trainer.tiny import build_tokenizer

    return build_rollout_engine(
        name,
        hf_config=hf_config,
        tokenizer=tokenizer if tokenizer is not None else build_tokenizer(),
        model_path=None,
        assets_dir=assets_dir,
        write_assets=write_assets,
        device=torch.device("cpu"),
        dtype=torch.float32,
        max_model_len=max_model_len,
        seed=0,
    )


def tiny_perturbed_model(tmp_path_factory, seed: int, device: str = "cpu"):
    """`perturbed_model` of a fresh tiny model dir: a test module's shared model fixture."""
    from trainer.tiny import build_tiny_model_dir

    model_dir = build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), with_weights=True)
    return perturbed_model(model_dir, seed, device)


def perturbed_model(model_dir, seed: int, device: str = "cpu"):
    """The tiny model with its weights moved by seeded noise, so a weight push is visible."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    return model.eval()


def reference_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """log p(response tokens) by a plain transformers forward over prompt + response (on CPU)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response], device=device)).logits[
            0, len(prompt) - 1 : -1
        ]
    picked = torch.log_softmax(logits.float(), -1).gather(
        -1, torch.tensor(response, device=device)[:, None]
    )
    return picked.squeeze(-1).cpu()


def reference_varlen(q, k, v, cum_q, cum_k, max_q, max_k, dropout, causal, debug, **kw):
    """torch.ops.aten._flash_attention_forward's result as plain torch, for the arguments
    `flash_decode` gives it (no dropout, not causal, `seqused_k`): sequence b's queries are
    rows cum_q[b]:cum_q[b + 1] of q, its keys seqused_k[b] rows of k from cum_k[b]; query head
    h reads KV head h // (heads // kv_heads). It stands in for the CUDA kernel on CPU, so
    the cache layout and index arithmetic around it are tested everywhere."""
    assert dropout == 0.0 and not causal and not debug
    group = q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    for b in range(len(cum_q) - 1):
        start, used = int(cum_k[b]), int(kw["seqused_k"][b])
        keys = k[start : start + used].repeat_interleave(group, dim=1).transpose(0, 1)
        values = v[start : start + used].repeat_interleave(group, dim=1).transpose(0, 1)
        queries = q[int(cum_q[b]) : int(cum_q[b + 1])].transpose(0, 1)
        scores = (queries.float() @ keys.float().transpose(1, 2)) * kw["scale"]
        attended = torch.softmax(scores, -1) @ values.float()
        out[int(cum_q[b]) : int(cum_q[b + 1])] = attended.transpose(0, 1).to(q.dtype)
    return out, None, None, None, None
