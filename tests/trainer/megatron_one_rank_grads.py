"""Gradients on one GPU: Megatron-FSDP (one data-parallel rank) vs FSDP2, over two optimizer steps.

Same tiny model, seed and micro-batches for each; each step's gradients are compared after
`before_optimizer_step` (the second step also checks that the first step's optimizer update
and `zero_grad` left the gradient buffers clean). Prints one JSON line per step and setting
with the relative error against FSDP2 over all gradients together and the largest over the
tensors, and the range of their norm ratios (a doubled gradient reads 2.0). With
`--lora-rank R` the model trains LoRA adapters (their B matrices drawn nonzero, so that A has
a gradient at step 1 too); each line then also names any frozen weight that has a gradient or
changed over the steps. Run directly on a CUDA machine:

    python -m tests.trainer.megatron_one_rank_grads --micro-batches 1 3 \
        [--zero-dp optim_grads_params optim]
    python -m tests.trainer.megatron_one_rank_grads --micro-batches 1 2 --lora-rank 8
"""

from __future__ import annotations

import argparse
import json
import random

import torch

from trainer.config import ModelConfig, OptimConfig, StrategyConfig
from trainer.data.batching import collate_padded
from trainer.data.chat import Example
from trainer.distributed import init_distributed, shutdown
from trainer.model import build_hf_config, build_model, load_tokenizer
from trainer.strategies import make_strategy


def micro_batches(count: int, vocab: int, device: torch.device, step: int) -> list:
    rng = random.Random(5 + step)
    batches = []
    for _ in range(count):
        docs = [
            Example([rng.randrange(3, vocab) for _ in range(48)], [0] * 8 + [1] * 40)
            for _ in range(2)
        ]
        batches.append(collate_padded(docs, 0).to(device))
    return batches


def step_gradients(
    strategy_cfg: StrategyConfig, model_cfg: ModelConfig, env, count: int, steps: int
) -> tuple[list[dict[str, torch.Tensor]], list[str]]:
    """Full fp32 gradients by Hugging Face name, per optimizer step, after `count` micro-batches,
    and the frozen weights that changed over the steps."""
    tokenizer = load_tokenizer(model_cfg)
    hf_config = build_hf_config(model_cfg, tokenizer)
    strategy = make_strategy(strategy_cfg, env)
    raw = build_model(model_cfg, hf_config, env.device, seed=0)
    if model_cfg.lora_rank:
        draw_lora_b(raw)
    frozen = {
        n: p.detach().to(strategy.compute_dtype).cpu()
        for n, p in raw.named_parameters()
        if not p.requires_grad
    }
    model = strategy.wrap(raw)
    optimizer = strategy.build_optimizer(model, OptimConfig(lr=1e-3))
    per_step = []
    for step in range(steps):
        for batch in micro_batches(count, hf_config.vocab_size, env.device, step):
            model(**batch.inputs).backward()
        strategy.before_optimizer_step(model)
        grads = {}
        for name, param in model.named_parameters():
            if param.grad is not None:
                full = (
                    param.grad.full_tensor() if hasattr(param.grad, "full_tensor") else param.grad
                )
                grads[name.removeprefix("module.")] = full.detach().float().cpu().reshape(-1)
        per_step.append(grads)
        optimizer.step()
        strategy.zero_grad(optimizer)
    changed = []
    for name, param in model.named_parameters():
        name = name.removeprefix("module.")
        if name in frozen:
            now = param.full_tensor() if hasattr(param, "full_tensor") else param
            if not torch.equal(now.detach().cpu(), frozen[name]):
                changed.append(name)
    del model, optimizer
    torch.cuda.empty_cache()
    return per_step, changed


def draw_lora_b(model: torch.nn.Module) -> None:
    """PEFT starts B at zero, which leaves A without a gradient at the first step; draw B from
    a fixed generator instead, the same on every run."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                drawn = torch.randn(param.shape, generator=generator) * 0.02
                param.copy_(drawn.to(param.device, param.dtype))


def compare(ours: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict:
    rel, ratio = {}, {}
    for name, ref in reference.items():
        mine = ours[name]
        rel[name] = ((mine - ref).norm() / ref.norm().clamp(min=1e-30)).item()
        ratio[name] = (mine.norm() / ref.norm().clamp(min=1e-30)).item()
    names = sorted(reference)
    everything = (
        torch.cat([ours[n] for n in names]) - torch.cat([reference[n] for n in names])
    ).norm()
    overall = (everything / torch.cat([reference[n] for n in names]).norm()).item()
    return {
        "missing": sorted(set(reference) - set(ours)),
        "extra": sorted(set(ours) - set(reference)),
        "rel_err": overall,
        "max_rel_err": max(rel.values()),
        "norm_ratio_min": min(ratio.values()),
        "norm_ratio_max": max(ratio.values()),
        "worst": max(rel, key=rel.get),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--zero-dp", nargs="+", default=["optim_grads_params"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lora-rank", type=int, default=0, help="train LoRA adapters of this rank")
    args = parser.parse_args()
    env = init_distributed("cuda")
    model_cfg = ModelConfig(shape="tiny", loss="chunked", lora_rank=args.lora_rank)
    try:
        for count in args.micro_batches:
            reference, reference_changed = step_gradients(
                StrategyConfig(name="fsdp2", mixed_precision="bf16"),
                model_cfg,
                env,
                count,
                args.steps,
            )
            for zero_dp in args.zero_dp:
                cfg = StrategyConfig(
                    name="megatron_fsdp", mixed_precision="bf16", zero_dp_strategy=zero_dp
                )
                ours, changed = step_gradients(cfg, model_cfg, env, count, args.steps)
                for step, (mine, theirs) in enumerate(zip(ours, reference), start=1):
                    report = {
                        "zero_dp": zero_dp,
                        "micro_batches": count,
                        "step": step,
                        "compared": len(theirs),
                        "frozen_changed": sorted(set(changed) | set(reference_changed)),
                        **compare(mine, theirs),
                    }
                    print(json.dumps(report), flush=True)
    finally:
        shutdown(env)


if __name__ == "__main__":
    main()
