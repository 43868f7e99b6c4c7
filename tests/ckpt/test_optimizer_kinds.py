"""validate holds each parameter to the state set of the optimizer that wrote it.

Was: every checkpoint was held to Adam's moments (or SGD's momentum), so healthy
checkpoints of Adafactor (torch's and transformers'), Adagrad, RMSprop, Adadelta and
Adamax were INVALID ("exp_avg is missing" for every parameter); a frozen parameter (no
state: requires_grad off) made an AdamW checkpoint INVALID; and an output layer was
exempt whenever an embedding existed, so an untied model whose head lost its state was
valid. Now the set is recognised from the names the checkpoint holds
(mfsdp_ckpt/format/optimizer_states.py), one state lost is still an error naming the key
it would have, a parameter without any state is a warning (frozen, or never stepped)
unless the checkpoint's own record says it was optimized (mfsdp's manifest, Megatron's
param_to_group_meta), an unknown set is a warning, and only a head the config ties (or
one stored as the embedding's own bytes) needs no state of its own.

Each checkpoint is a real torch optimizer's state after one step on a tiny Llama, saved
with `get_state_dict` as FSDP2 and the HF Trainer save it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from torch import optim
from torch.distributed.checkpoint.state_dict import get_state_dict

from mfsdp_ckpt.check.report import NO_HF_CONFIG
from mfsdp_ckpt.format.optimizer_states import identify
from tests.support.export import copy_hf_assets_from
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run, save_dcp


def _transformers_adafactor(params, beta1=None):
    from transformers.optimization import Adafactor

    return Adafactor(
        params, lr=1e-3, relative_step=False, scale_parameter=False, warmup_init=False, beta1=beta1
    )


# optimizer -> (factory, a state every 2-D parameter of it holds)
OPTIMIZERS = {
    "adamw": (functools.partial(optim.AdamW, lr=1e-3), "exp_avg_sq"),
    "adam_amsgrad": (functools.partial(optim.Adam, lr=1e-3, amsgrad=True), "exp_avg"),
    "nadam": (functools.partial(optim.NAdam, lr=1e-3), "exp_avg_sq"),
    "radam": (functools.partial(optim.RAdam, lr=1e-3), "exp_avg"),
    "adamax": (functools.partial(optim.Adamax, lr=1e-3), "exp_inf"),
    "adagrad": (functools.partial(optim.Adagrad, lr=1e-3), "sum"),
    "rmsprop": (functools.partial(optim.RMSprop, lr=1e-3), "square_avg"),
    "rmsprop_centered_momentum": (
        functools.partial(optim.RMSprop, lr=1e-3, momentum=0.9, centered=True),
        "square_avg",
    ),
    "adadelta": (functools.partial(optim.Adadelta, lr=1e-3), "acc_delta"),
    "sgd_momentum": (functools.partial(optim.SGD, lr=1e-3, momentum=0.9), "momentum_buffer"),
    "adafactor_torch": (functools.partial(optim.Adafactor, lr=1e-3), "col_var"),
    "adafactor_transformers": (_transformers_adafactor, "exp_avg_sq_row"),
    "adafactor_transformers_beta1": (
        functools.partial(_transformers_adafactor, beta1=0.9),
        "exp_avg_sq_col",
    ),
}
LOST_FROM = "model.layers.0.mlp.up_proj.weight"


def _stepped(make, frozen: str | None = None) -> tuple[torch.nn.Module, dict, dict]:
    """A tiny untied Llama after one step of `make`'s optimizer (over its trainable
    parameters; `frozen` has requires_grad off), and its model and optimizer state dicts."""
    model = tiny_causal_lm("llama", vocab=64)
    if frozen is not None:
        model.get_parameter(frozen).requires_grad_(False)
    optimizer = make([p for p in model.parameters() if p.requires_grad])
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return model, model_state, optimizer_state


def _validate(root: Path, model, state: dict, config: bool = True) -> tuple[int, list]:
    """validate's exit code and (severity, where, message) findings for `state` saved as a
    DCP, with `model`'s config in huggingface/ beside it (`config`)."""
    ckpt = save_dcp(state, root / "dist_ckpt")
    if config:
        model.config.save_pretrained(root / "huggingface")
    code, out, _ = run_cli("ckpt", "validate", ckpt, "--json")
    report = json.loads(out)
    return code, [(f["severity"], f["where"], f["message"]) for f in report["findings"]]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_healthy_states_of_every_known_optimizer_validate(name, tmp_path):
    model, model_state, optimizer_state = _stepped(OPTIMIZERS[name][0])
    held = {s for states in optimizer_state["state"].values() for s in states}
    assert identify(held) is not None, held
    state = {"model": model_state, "optimizer": optimizer_state}
    assert _validate(tmp_path, model, state) == (0, [])


# SGD keeps its momentum alone: a parameter that lost it holds no state, which is a frozen
# one's warning here and an error where Megatron's record names it (test_interop_layouts)
@pytest.mark.parametrize("name", [name for name in OPTIMIZERS if name != "sgd_momentum"])
def test_one_state_lost_is_an_error_naming_its_key(name, tmp_path):
    make, lost = OPTIMIZERS[name]
    model, model_state, optimizer_state = _stepped(make)
    del optimizer_state["state"][LOST_FROM][lost]
    state = {"model": model_state, "optimizer": optimizer_state}
    assert _validate(tmp_path, model, state) == (
        1,
        [
            (
                "error",
                f"[model.{LOST_FROM}]",
                f"optimizer state {lost} is missing (no [optimizer.state.{LOST_FROM}.{lost}])",
            )
        ],
    )


def test_a_frozen_parameter_is_a_warning_naming_it(tmp_path):
    """Was: exit 1, "exp_avg is missing" and "exp_avg_sq is missing" for it."""
    frozen = "model.embed_tokens.weight"
    model, model_state, optimizer_state = _stepped(OPTIMIZERS["adamw"][0], frozen=frozen)
    stepped = len(optimizer_state["state"])
    state = {"model": model_state, "optimizer": optimizer_state}
    assert _validate(tmp_path, model, state) == (
        0,
        [
            (
                "warning",
                f"[model.{frozen}]",
                f"no optimizer state, while {stepped} of the {stepped + 1} parameters hold"
                " Adam's: frozen, or never stepped, so not checked",
            )
        ],
    )


def test_an_unknown_state_set_is_a_warning_not_checked(tmp_path):
    """bitsandbytes' 8-bit Adam keeps state1/state2 and their quantisation maps."""
    model, model_state, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    for states in optimizer_state["state"].values():
        states["state1"], states["state2"] = states.pop("exp_avg"), states.pop("exp_avg_sq")
        states["qmap1"] = torch.zeros(256)
    first = f"optimizer.state.{next(iter(optimizer_state['state']))}.step"
    state = {"model": model_state, "optimizer": optimizer_state}
    assert _validate(tmp_path, model, state) == (
        0,
        [
            (
                "warning",
                f"[{first}]",
                "optimizer states qmap1, state1, state2, step are no known optimizer's set"
                " (Adam, Adamax, Adafactor (transformers), Adafactor (torch), Adadelta,"
                " RMSprop, Adagrad, SGD, Lion): their completeness is not checked",
            )
        ],
    )


# --------------------------------------------------------------------------- the output layer
HEAD = "lm_head.weight"
# What a head without state is said to be where no config says whether it is tied
TIE_UNTOLD = (
    "tied to the embedding, optimized under the embedding's name (--hf-config with"
    " tie_word_embeddings true says so), or "
)


def test_an_untied_heads_lost_moment_is_an_error(tmp_path):
    """Was: valid, the head exempt because an embedding exists."""
    model, model_state, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    del optimizer_state["state"][HEAD]["exp_avg_sq"]
    state = {"model": model_state, "optimizer": optimizer_state}
    assert _validate(tmp_path, model, state) == (
        1,
        [
            (
                "error",
                f"[model.{HEAD}]",
                f"optimizer state exp_avg_sq is missing (no [optimizer.state.{HEAD}.exp_avg_sq])",
            )
        ],
    )


@pytest.mark.parametrize("config", [True, False], ids=["untied_config", "no_config"])
def test_a_head_without_state_is_exempt_only_when_tied(config, tmp_path):
    """Untied, or with no config to say: checked as any parameter (a warning: no record
    says it was optimized). Was: no finding at all."""
    model, model_state, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    del optimizer_state["state"][HEAD]
    stepped = len(optimizer_state["state"])
    state = {"model": model_state, "optimizer": optimizer_state}
    # and with no config, the weights' shapes are not checked either, which is said
    unchecked = [] if config else [("warning", str(tmp_path / "dist_ckpt"), NO_HF_CONFIG)]
    tie = "" if config else TIE_UNTOLD  # with no config to say, the tie is named first
    assert _validate(tmp_path, model, state, config=config) == (
        0,
        [
            (
                "warning",
                f"[model.{HEAD}]",
                f"no optimizer state, while {stepped} of the {stepped + 1} parameters hold"
                f" Adam's: {tie}frozen, or never stepped, so not checked",
            ),
            *unchecked,
        ],
    )


def test_a_tied_heads_second_name_needs_no_state(tmp_path):
    """A tied model's state dict names the shared tensor twice; its optimizer once."""
    model = tiny_causal_lm("qwen2", vocab=64)  # tied
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    assert HEAD in model_state and HEAD not in optimizer_state["state"]
    state = {"model": model_state, "optimizer": optimizer_state}
    assert _validate(tmp_path, model, state) == (0, [])


def _megatron_with_optimizer(tmp_path, drop) -> Path:
    """A Megatron-LM run of an untied Llama whose Adam state (with param_to_group_meta
    naming every parameter) has `drop` applied to the output layer's states."""
    model = tiny_causal_lm("llama", vocab=64)
    # args name adam, as Megatron-LM's always name the optimizer: without a record, a
    # matrix without state may have lost Adam's moments or a momentum_buffer
    args = megatron_args(model, optimizer="adam")
    run = megatron_run(tmp_path, model, args, optimizer=True)
    ckpt = run / "iter_0000100"
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    flat = tmp_path / "flat.pt"
    dcp_to_torch_save(ckpt, flat)
    state = torch.load(flat, weights_only=False)
    drop(state["optimizer"]["state"]["module.module.module.output_layer.weight"])
    save_dcp(state, ckpt)
    return run


OUTPUT_STATES = "optimizer.state.module.module.module.output_layer.weight"


def test_megatrons_output_layer_losing_a_moment_is_an_error(tmp_path):
    run = _megatron_with_optimizer(tmp_path, lambda states: states.pop("exp_avg"))
    code, out, _ = run_cli("ckpt", "validate", run, "--json")
    findings = [(f["where"], f["message"]) for f in json.loads(out)["findings"]]
    assert code == 1 and findings == [
        (
            "[model.module.output_layer.weight]",
            f"optimizer state exp_avg is missing (no [{OUTPUT_STATES}.exp_avg])",
        )
    ]


def test_megatrons_output_layer_without_state_is_an_error_its_record_names(tmp_path):
    """Megatron's optimizer lists the layer in param_to_group_meta: it was optimized, so
    no state at all is a loss, not a frozen layer."""
    run = _megatron_with_optimizer(tmp_path, lambda states: states.clear())
    code, out, _ = run_cli("ckpt", "validate", run, "--json")
    findings = [(f["where"], f["message"]) for f in json.loads(out)["findings"]]
    assert code == 1 and findings == [
        (
            "[model.module.output_layer.weight]",
            f"optimizer state {moment} is missing (no [{OUTPUT_STATES}.{moment}])",
        )
        for moment in ("exp_avg", "exp_avg_sq")
    ]


def test_an_mfsdp_step_records_every_parameter_as_optimized(tmp_path):
    """mfsdp's trainer optimizes every parameter (a LoRA step holds adapters): a parameter
    of its step without state lost it, whatever froze it here."""
    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.state import ModelState, OptimizerState

    model = tiny_causal_lm("llama", vocab=64)
    model.config.save_pretrained(tmp_path / "assets")
    frozen = "model.norm.weight"
    model.get_parameter(frozen).requires_grad_(False)  # no gradient, so AdamW keeps no state
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    states = {"model": ModelState(model), "optimizer": OptimizerState(model, optimizer)}
    Checkpointer(tmp_path / "run", strategy="none", model_family="llama").save(
        1,
        states,
        contents=("model", "optimizer"),
        hf_assets=copy_hf_assets_from(tmp_path / "assets"),
    )
    code, out, _ = run_cli("ckpt", "validate", tmp_path / "run", "--json")
    findings = [(f["where"], f["message"]) for f in json.loads(out)["findings"]]
    assert code == 1 and findings == [
        (
            f"[model.{frozen}]",
            f"optimizer state {moment} is missing (no [optimizer.state.{frozen}.{moment}])",
        )
        for moment in ("exp_avg", "exp_avg_sq")
    ]


def test_an_mfsdp_step_without_a_config_warns_of_a_head_it_cannot_call_tied(tmp_path):
    """A Checkpointer save without huggingface/: nothing says whether the output layer is
    the embedding's second name, so its missing state is a warning, never the error the
    manifest's record would make of it (a tied model's head has no state of its own)."""
    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.state import ModelState, OptimizerState

    model = tiny_causal_lm("qwen2", vocab=64)  # tied
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    states = {"model": ModelState(model), "optimizer": OptimizerState(model, optimizer)}
    Checkpointer(tmp_path / "run", strategy="none").save(1, states, contents=("model", "optimizer"))
    stepped = len(optimizer.state)
    code, out, _ = run_cli("ckpt", "validate", tmp_path / "run", "--json")
    findings = [(f["severity"], f["where"], f["message"]) for f in json.loads(out)["findings"]]
    assert code == 0 and findings == [
        (
            "warning",
            f"[model.{HEAD}]",
            f"no optimizer state, while {stepped} of the {stepped + 1} parameters hold Adam's:"
            f" {TIE_UNTOLD}frozen, or never stepped, so not checked",
        ),
        ("warning", str(tmp_path / "run" / "global_step_1" / "dist_ckpt"), NO_HF_CONFIG),
    ]
