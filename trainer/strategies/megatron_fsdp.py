"""NVIDIA Megatron-FSDP (`megatron_fsdp.fully_shard_model` / `fully_shard_optimizer`), CUDA only.

Decoder layers are the FSDP units (optionally the embedding too), ZeRO-3
(`optim_grads_params`) by default, bf16 compute weights with fp32 main weights and fp32
main gradients. Megatron-FSDP needs a device mesh with a tensor-parallel dimension even
at tp=1, so the mesh is (dp, tp=1) named ("dp", "tp").

One 0.6.1 behaviour is handled here: `fully_shard_optimizer` runs a synthetic
`optimizer.step()` on zero gradients to create the optimizer state ahead of checkpoint
loading. That advances Adam's step counter to 1, so the first real update uses the bias
correction of step 2 (about 1.36x too small with betas 0.9/0.95), and applies one decoupled
weight decay with the initial lr. We run that setup with lr 0 (no decay, no update) and
reset the step counters afterwards (`shard_optimizer_without_phantom_step`); the state then
equals a fresh optimizer's.

One data-parallel rank works with these settings (`sync_model_each_microbatch=True`, fp32
main gradients, `optimizer.zero_grad()` every step): on 1xH200 each of two steps' gradients
equals FSDP2's at 1, 2 and 3 micro-batches (tests/trainer/megatron_one_rank_grads.py). A group of
size 1 keeps every buffer whole, so ZeRO-3 there costs what no sharding costs.

Megatron-FSDP's own state-dict hooks, which tell DCP where each uneven shard lies, are
turned off (`preproc_state_dict_for_dcp_ckpt=False`): they run one collective per tensor
on every save. `mfsdp_ckpt.storage.uneven_chunks` attaches the same offsets with one collective.

LoRA: Megatron-FSDP groups parameters by `requires_grad` and gives a frozen group only its
(sharded, gathered) compute-weight buffer: no fp32 main weight, no main gradient, no
reduce-scatter (0.6.1's ParamAndGradBuffer default
`only_create_grad_buffer_and_main_weight_buffer_for_param_requires_grad=True`). The
optimizer is built on the trainable parameters alone, the checkpoint takes the adapters'
fp32 main weights (`AdapterState`), and the embedding output is made to need a gradient
(see `wrap`).

`fully_shard` (the one-call API) also replaces the optimizer's param groups by a single
group, which would lose the no-weight-decay group for biases and norms; building the
optimizer ourselves on the distributed parameters keeps it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.tensor import DTensor

from mfsdp_ckpt.storage.uneven_chunks import attach_uneven_chunk_metadata
from trainer.config import MEGATRON_FSDP_NEEDS_CUDA, ConfigError, OptimConfig
from trainer.lora import AdapterState, is_lora_model
from trainer.model import decoder_layer_class
from trainer.optim import build_adamw, param_groups
from trainer.strategies.base import Strategy

if TYPE_CHECKING:
    from transformers import PreTrainedModel

WRAPPER_PREFIX = "module."


def shard_optimizer_without_phantom_step(
    optimizer: torch.optim.Optimizer, setup: Callable[[torch.optim.Optimizer], Any]
) -> Any:
    """Run Megatron-FSDP's optimizer `setup` so that it leaves no trace of its init step.

    `setup` may call `optimizer.step()` on zero gradients (0.6.1 does). With every group's
    lr at 0 that step changes no weight (AdamW's decay and update both scale with lr) and
    leaves zero moments; resetting `step` to 0 makes the next real update the first one.
    """
    saved = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    try:
        result = setup(optimizer)
    finally:
        for group, lr in zip(optimizer.param_groups, saved):
            group["lr"] = lr
    reset_step_counters(optimizer)
    return result


def reset_step_counters(optimizer: torch.optim.Optimizer) -> None:
    """Set every parameter's AdamW `step` back to 0, so that the next update's bias
    correction is a first step's. A tensor count is zeroed in place, keeping its device and
    dtype (torch's AdamW takes its counts only as tensors); a plain number is set to 0."""
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            step.zero_()
        elif step is not None:
            state["step"] = 0


class MegatronFSDPStrategy(Strategy):
    name = "megatron_fsdp"

    def __init__(self, cfg, env):
        super().__init__(cfg, env)
        if env.device.type != "cuda":
            raise ConfigError(MEGATRON_FSDP_NEEDS_CUDA)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Shard `model` with Megatron-FSDP in the settings the module docstring gives reasons
        for: a (dp, tp=1) mesh because Megatron-FSDP needs a tp dimension, fp32 main weights
        and gradients beside bf16 compute weights, `sync_model_each_microbatch` for gradients
        equal to FSDP2's, and its per-tensor DCP hooks off (`uneven_chunks` does their job in
        one collective)."""
        import megatron_fsdp
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cuda", (self.env.world_size, 1), mesh_dim_names=("dp", "tp"))
        self.dp_group = mesh.get_group("dp")
        hf = cast("PreTrainedModel", model)  # not wrapped yet: the Hugging Face model itself
        units: list[type] = [decoder_layer_class(model)]
        if self.cfg.unit_modules == "decoder+embedding":
            units.append(type(hf.get_input_embeddings()))
        if is_lora_model(model):
            # A frozen embedding leaves the first decoder layer's input without a gradient, and
            # Megatron-FSDP releases a unit after backward from a hook on inputs that have one;
            # an embedding output that needs a gradient gets that layer released like the rest.
            hf.enable_input_require_grads()
        # Compute weights take the module's dtype; main weights and grads stay fp32.
        model.to(self.compute_dtype)
        policy = megatron_fsdp.MixedPrecisionPolicy(
            main_params_dtype=torch.float32, main_grads_dtype=torch.float32
        )
        with _default_bucket_size(self.cfg.bucket_size):
            return megatron_fsdp.fully_shard_model(
                module=model,
                device_mesh=mesh,
                dp_shard_dim="dp",
                tp_dim="tp",
                fsdp_unit_modules=units,
                zero_dp_strategy=self.cfg.zero_dp_strategy,
                device=self.env.device,
                mixed_precision_policy=policy,
                overlap_grad_reduce=self.cfg.overlap_grad_reduce,
                overlap_param_gather=self.cfg.overlap_param_gather,
                fsdp_double_buffer=self.cfg.fsdp_double_buffer,
                disable_bucketing=self.cfg.disable_bucketing,
                sync_model_each_microbatch=True,
                preproc_state_dict_for_dcp_ckpt=False,
            )

    def build_optimizer(self, model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
        import megatron_fsdp

        _wrapper(model)._replace_param_with_distributed_if_needed()
        named = [(_strip(name), p) for name, p in model.named_parameters()]
        optimizer = build_adamw(param_groups(named, cfg.weight_decay), cfg, self.env.device)
        return shard_optimizer_without_phantom_step(
            optimizer,
            lambda opt: megatron_fsdp.fully_shard_optimizer(
                opt, preproc_state_dict_for_dcp_ckpt=False
            ),
        )

    def before_optimizer_step(self, model: torch.nn.Module) -> None:
        _wrapper(model).finish_grad_sync()

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad()  # Megatron-FSDP's zero_grad also zeroes its gradient buffer

    def model_state(self, model: torch.nn.Module) -> Stateful:
        state = MegatronModelState(model, self.dp_group)
        return AdapterState(model, state) if is_lora_model(model) else state

    def weights_state(self, model: torch.nn.Module) -> dict[str, Any]:
        return MegatronModelState(model, self.dp_group).state_dict()  # the whole model

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Stateful:
        return MegatronOptimizerState(model, optimizer, self.dp_group)


def _wrapper(model: torch.nn.Module) -> Any:
    """`model` as the MegatronFSDP module `wrap` made of it, whose own methods (grad sync,
    weight installs) megatron_fsdp gives no types for."""
    return model


def _strip(name: str) -> str:
    return name[len(WRAPPER_PREFIX) :] if name.startswith(WRAPPER_PREFIX) else name


@contextmanager
def _default_bucket_size(bucket_size: int | None) -> Iterator[None]:
    """`fully_shard_model` builds its DistributedDataParallelConfig internally with no bucket
    size argument; while it runs, give the class it uses a different default."""
    if bucket_size is None:
        yield
        return
    module: Any = importlib.import_module(
        "megatron_fsdp.fully_shard"
    )  # the package re-exports a function of that name
    base = module.DistributedDataParallelConfig

    class WithBucketSize(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            kwargs.setdefault("bucket_size", bucket_size)
            super().__init__(*args, **kwargs)

    module.DistributedDataParallelConfig = WithBucketSize
    try:
        yield
    finally:
        module.DistributedDataParallelConfig = base


class MegatronModelState:
    """Model weights as DTensors under their Hugging Face names (the wrapper's `module.` removed),
    so a Megatron-FSDP checkpoint has the same keys as an FSDP2 one. The fp32 main weights are
    what is saved; after loading them, the bf16 compute weights are refreshed from them.
    Each call returns new DTensors (`state_dict` detaches), so each gets its chunk offsets."""

    def __init__(self, model: torch.nn.Module, group: torch.distributed.ProcessGroup):
        self.model, self.group = _wrapper(model), group

    def state_dict(self) -> dict[str, Any]:
        self.model._replace_param_with_distributed_if_needed()
        state = {_strip(k): v for k, v in self.model.state_dict().items()}
        attach_uneven_chunk_metadata(state, self.group)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.model._replace_param_with_distributed_if_needed()
        current = self.model.state_dict()
        for key, value in state_dict.items():
            target = current[WRAPPER_PREFIX + key]
            if target is not value:
                _copy_into(target, value)
        self.model.install_optimized_model_weights()


class MegatronOptimizerState:
    """Adam state keyed by parameter name, in the layout torch's `get_optimizer_state_dict` uses
    (`state.<name>.exp_avg`, `param_groups`), holding the optimizer's own DTensors: DCP loads
    into them in place. Ranks whose shard of a parameter is empty have no state for it and
    neither save nor load it."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        group: torch.distributed.ProcessGroup,
    ):
        self.model, self.optimizer, self.group = _wrapper(model), optimizer, group

    def _names(self) -> dict[int, str]:
        self.model._replace_param_with_distributed_if_needed()
        return {id(p): _strip(n) for n, p in self.model.named_parameters()}

    def state_dict(self) -> dict[str, Any]:
        names = self._names()
        state = {names[id(p)]: dict(s) for p, s in self.optimizer.state.items()}
        attach_uneven_chunk_metadata(state, self.group)
        groups = []
        for group in self.optimizer.param_groups:
            entry = {k: v for k, v in group.items() if k != "params"}
            entry["params"] = [names[id(p)] for p in group["params"]]
            groups.append(entry)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        names = self._names()
        by_name = {names[id(p)]: s for p, s in self.optimizer.state.items()}
        for name, saved in state_dict["state"].items():
            for key, value in saved.items():
                target = by_name[name].get(key)
                if isinstance(target, torch.Tensor) and target is not value:
                    _copy_into(target, value)


def _copy_into(target: torch.Tensor, value: Any) -> None:
    with torch.no_grad():
        local_target = target._local_tensor if isinstance(target, DTensor) else target
        local_value = value._local_tensor if isinstance(value, DTensor) else value
        local_target.copy_(torch.as_tensor(local_value))
