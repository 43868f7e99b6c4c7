"""What LoRA under Megatron-FSDP rests on, checked on CPU: Megatron-FSDP puts the frozen base and
the adapters in separate parameter groups (it gives a frozen group no main weight, gradient
buffer or reduce-scatter), and the adapter checkpoint state reads through the wrapper."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig
from trainer.lora import AdapterState, hf_model, is_adapter_param, is_lora_model
from trainer.model import build_hf_config, build_model, decoder_layer_class, load_tokenizer


def _lora_tiny() -> torch.nn.Module:
    cfg = ModelConfig(shape="tiny", loss="chunked", lora_rank=4)
    hf_config = build_hf_config(cfg, load_tokenizer(cfg))
    return build_model(cfg, hf_config, torch.device("cpu"), seed=0)


class Wrapper(torch.nn.Module):
    """Holds the model as `.module`, the way Megatron-FSDP's wrapper does."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module


class WholeModelState:
    """A strategy's whole-model state under Hugging Face names; records what it is given."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.loaded = model, None

    def state_dict(self) -> dict:
        return dict(self.model.named_parameters())

    def load_state_dict(self, state_dict: dict) -> None:
        self.loaded = state_dict


def test_megatron_fsdp_groups_frozen_base_apart_from_adapters():
    pytest.importorskip("megatron_fsdp")
    from megatron_fsdp.param_and_grad_buffer import BucketingPolicy, _get_parameter_groups

    model = _lora_tiny().to(torch.bfloat16)  # the strategy's cast before sharding
    policy = BucketingPolicy(
        fsdp_unit_modules=[decoder_layer_class(model)],
        data_parallel_sharding_strategy="optim_grads_params",
    )
    groups, _, _ = _get_parameter_groups(model, policy, {})
    names = {param: name for name, param in model.named_parameters()}
    trainable = set()
    for group in groups:
        flags = {param.requires_grad for param in group.params}
        assert flags == {group.requires_grad}, [names[p] for p in group.params]
        if group.requires_grad:
            trainable |= {names[p] for p in group.params}
    adapters = {name for name in names.values() if is_adapter_param(name)}
    assert trainable == adapters and len(adapters) == 2 * 2 * 7


def test_adapter_state_reads_the_adapter_through_the_wrapper():
    model = _lora_tiny()
    wrapped = Wrapper(model)
    assert is_lora_model(wrapped) and hf_model(wrapped) is model and hf_model(model) is model
    whole = WholeModelState(model)
    state = AdapterState(wrapped, whole)
    saved = state.state_dict()
    adapters = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert sorted(saved) == adapters and all(is_adapter_param(n) for n in saved)
    state.load_state_dict(saved)
    assert whole.loaded is saved  # the strategy's state loads the adapter subset itself
