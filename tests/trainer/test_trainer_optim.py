import itertools
import math

import pytest
import torch

from trainer.config import OptimConfig
from trainer.optim import build_adamw, clip_grad_norm, lr_at, param_groups, warmup_steps
from trainer.strategies.megatron_fsdp import shard_optimizer_without_phantom_step


def test_warmup_then_cosine_to_min_lr():
    cfg = OptimConfig(lr=1e-5, warmup_ratio=0.2, scheduler="cosine", min_lr=1e-6)
    total = 10
    assert warmup_steps(cfg, total) == 2
    assert lr_at(0, cfg, total) == 0.0  # verl's first update, at lr 0
    assert lr_at(1, cfg, total) == pytest.approx(0.5e-5)
    assert lr_at(2, cfg, total) == pytest.approx(1e-5)  # decay starts at full lr
    # halfway through the 8 decay updates: cosine factor 0.5
    assert lr_at(6, cfg, total) == pytest.approx(1e-6 + 0.5 * 9e-6)
    assert lr_at(9, cfg, total) == pytest.approx(
        1e-6 + 9e-6 * 0.5 * (1 + math.cos(math.pi * 7 / 8))
    )
    lrs = [lr_at(s, cfg, total) for s in range(2, total)]
    assert all(a > b for a, b in itertools.pairwise(lrs)) and min(lrs) > 1e-6


def test_linear_constant_and_warmup_steps_win():
    linear = OptimConfig(lr=1.0, warmup_steps=1, warmup_ratio=0.9, scheduler="linear", min_lr=0.0)
    assert warmup_steps(linear, 5) == 1
    assert [lr_at(s, linear, 5) for s in range(5)] == pytest.approx([0.0, 1.0, 0.75, 0.5, 0.25])
    constant = OptimConfig(lr=0.3, warmup_steps=3, scheduler="constant")
    assert [lr_at(s, constant, 6) for s in range(6)] == pytest.approx(
        [0.0, 0.1, 0.2, 0.3, 0.3, 0.3]
    )


def test_constant_with_no_warmup_trains_the_first_update_and_one_warmup_step_is_verls_fsdp():
    """docs/verl.md: with no warmup the first update trains at `lr` (verl's Megatron
    backend); verl's FSDP backend's constant schedule, `min(1, step / max(1, warmup))`
    (verl/utils/torch_functional.py), gives it lr 0, which `optim.warmup_steps=1` matches."""
    none = OptimConfig(lr=0.3, scheduler="constant")
    assert [lr_at(s, none, 4) for s in range(4)] == pytest.approx([0.3] * 4)
    one = OptimConfig(lr=0.3, warmup_steps=1, scheduler="constant")
    verl_fsdp = [0.3 * min(1, s / max(1, 0)) for s in range(4)]
    assert [lr_at(s, one, 4) for s in range(4)] == pytest.approx(verl_fsdp)


def _verl_fsdp_lr(step: int, lr: float, ratio: float, total: int, min_ratio: float) -> float:
    """verl's FSDP backend, written out from its code: `int(ratio * total)` warmup updates,
    then `get_cosine_schedule_with_warmup`'s LambdaLR (verl/utils/torch_functional.py)."""
    warm = int(ratio * total)
    if step < warm:
        return lr * step / max(1, warm)
    progress = (step - warm) / max(1, total - warm)
    coef, intercept = (1 - min_ratio) * 0.5, (1 + min_ratio) * 0.5
    return lr * max(0.0, math.cos(math.pi * progress) * coef + intercept)


def _megatron_lr(step: int, lr: float, warm: int, total: int, min_lr: float) -> float:
    """Megatron-LM's OptimizerParamScheduler.get_lr (cosine, lr_warmup_init 0), which verl's
    Megatron backend uses: the lr of the update after `step` scheduler steps."""
    if warm > 0 and step <= warm:
        return lr * step / warm
    ratio = (step - warm) / (total - warm)
    return min_lr + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (lr - min_lr)


@pytest.mark.parametrize("ratio,total", [(0.1, 15), (0.29, 100), (0.05, 7), (0.0, 5), (0.5, 3)])
def test_the_schedule_is_verls_at_every_update(ratio, total):
    """The warmup rounded up and started at lr / warmup: every update of a run converted
    from verl had another learning rate (3.7% to 7.7% higher at updates 3-5 of 15)."""
    cfg = OptimConfig(lr=1e-5, warmup_ratio=ratio, scheduler="cosine", min_lr=1e-6)
    ours = [lr_at(s, cfg, total) for s in range(total)]
    assert ours == pytest.approx([_verl_fsdp_lr(s, 1e-5, ratio, total, 0.1) for s in range(total)])
    warm = warmup_steps(cfg, total)
    assert ours == pytest.approx([_megatron_lr(s, 1e-5, warm, total, 1e-6) for s in range(total)])


def test_no_weight_decay_for_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    groups = param_groups(model.named_parameters(), 0.1)
    decay, no_decay = groups
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 4])] and decay[
        "weight_decay"
    ] == 0.1
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_clip_grad_norm_single_process_matches_torch():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn_like(p) * 4
    reference = [p.grad.clone() for p in params]
    twins = [torch.nn.Parameter(g.clone()) for g in reference]
    for twin, grad in zip(twins, reference):
        twin.grad = grad.clone()
    expected = torch.nn.utils.clip_grad_norm_(twins, 1.0)
    norm = clip_grad_norm(params, 1.0, torch.device("cpu"))
    assert norm == pytest.approx(
        torch.cat([g.flatten() for g in reference]).norm().item(), rel=1e-6
    )
    assert norm == pytest.approx(float(expected), rel=1e-6)
    assert torch.cat([p.grad.flatten() for p in params]).norm().item() == pytest.approx(
        1.0, rel=1e-5
    )


def _emulate_megatron_fsdp_061_setup(optimizer: torch.optim.Optimizer) -> None:
    """What megatron-fsdp 0.6.1's `fully_shard_optimizer` does before training: give every
    parameter a zero gradient, call `optimizer.step()` to create the Adam state eagerly (so
    DCP can load into it), then `zero_grad()`. The step counter is then 1, not 0."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = torch.zeros_like(param)
    optimizer.step()
    optimizer.zero_grad()


def _train(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int
) -> list[torch.Tensor]:
    torch.manual_seed(1)
    snapshots = []
    for _ in range(steps):
        loss = model(torch.randn(8, 6)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        snapshots.append(torch.cat([p.detach().flatten().clone() for p in model.parameters()]))
    return snapshots


def _model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    cfg = OptimConfig(lr=1e-2, betas=[0.9, 0.95], weight_decay=0.1)
    return model, build_adamw(param_groups(model.named_parameters(), 0.1), cfg, torch.device("cpu"))


def test_adam_phantom_step_of_megatron_fsdp_061_is_undone():
    model, optimizer = _model_and_optimizer()
    fresh = _train(model, optimizer, 3)

    model, optimizer = _model_and_optimizer()
    before = [p.detach().clone() for p in model.parameters()]
    shard_optimizer_without_phantom_step(optimizer, _emulate_megatron_fsdp_061_setup)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # no decay, no update
    assert all(int(s["step"]) == 0 for s in optimizer.state.values()) and len(optimizer.state) == 2
    assert all(g["lr"] == 1e-2 for g in optimizer.param_groups)
    fixed = _train(model, optimizer, 3)
    assert all(torch.equal(a, b) for a, b in zip(fresh, fixed))

    # Without the fix the first real update is Adam's step 2: with betas (0.9, 0.95) its bias
    # correction makes the update (0.1/0.19) / sqrt(0.05/0.0975) = 0.735 of the correct one.
    model, optimizer = _model_and_optimizer()
    start = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    for group in optimizer.param_groups:
        group["weight_decay"] = 0.0
    _emulate_megatron_fsdp_061_setup(optimizer)
    buggy = _train(model, optimizer, 1)[0]
    model, optimizer = _model_and_optimizer()
    for group in optimizer.param_groups:
        group["weight_decay"] = 0.0
    right = _train(model, optimizer, 1)[0]
    ratio = ((buggy - start).norm() / (right - start).norm()).item()
    assert ratio == pytest.approx((0.1 / 0.19) / math.sqrt(0.05 / 0.0975), rel=1e-3)


@pytest.mark.parametrize(
    ("settings", "total", "named"),
    [
        ({"warmup_steps": 10}, 10, "optim.warmup_steps=10 is not less than the run's 10 steps"),
        ({"warmup_ratio": 1.0}, 8, "optim.warmup_ratio=1 (8 steps) is not less than the run's 8"),
        ({"warmup_steps": 1}, 1, "optim.warmup_steps=1 is not less than the run's 1 steps"),
    ],
)
def test_a_warmup_that_takes_the_whole_run_is_warned_of(settings, total, named):
    """The warmup reaches lr at update `warmup` (0-based): a warmup as long as the run never
    reaches it (one step under warmup trains at lr 0), and the check let these pass."""
    from trainer.optim import warmup_past_the_end

    cfg = OptimConfig(lr=1e-3, **settings)
    warning = warmup_past_the_end(cfg, total)
    assert warning is not None and named in warning, warning
    assert lr_at(total - 1, cfg, total) < cfg.lr
    if "warmup_steps" in settings:  # one step more reaches lr: no warning
        assert warmup_past_the_end(cfg, total + 1) is None
