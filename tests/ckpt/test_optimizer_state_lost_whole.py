"""A checkpoint whose optimizer state is gone whole, while its own record says the optimizer
stepped every parameter, fails validate in one error naming the first key a state would be
stored under and how many parameters lack theirs.

Was: a Megatron-LM fsdp_dtensor checkpoint with `optimizer.state` empty and
`optimizer.param_to_group_meta` naming every parameter was "valid: ... no optimizer state"
(exit 0), though one parameter losing its states was an error; Megatron-LM's load allows
a partial load, so a resume restarted Adam silently. An mfsdp step whose manifest lists
'optimizer' but whose `optimizer.state.*` tensors were gone (its param_groups left) was
valid too. With no state left to recognise the optimizer by, its states are those the run's
record names (Megatron-LM's `args.optimizer`, Megatron-Bridge's run_config.yaml, Megatron's
default `adam`); an optimizer not known here is reported by count, its states never guessed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tests.support.ckpt_edits import edit_metadata
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import (
    STEP,
    adam_state,
    bridge_run,
    mcore_weights,
    megatron_args,
    megatron_run,
    save_dcp,
)

STATES = "optimizer.state.module.module.module"


def _megatron(root: Path, states: bool = False, **args) -> tuple[Path, int]:
    """A Megatron-LM run of an untied Llama with `param_to_group_meta` naming every
    parameter and its Adam states (none unless `states`), `args` changed as given; returns
    the run and its parameter count."""
    model = tiny_causal_lm("llama", vocab=64)

    def held(adam: dict) -> dict:
        return adam if states else {**adam, "state": {}}

    run = megatron_run(root, model, megatron_args(model, **args), optimizer=held)
    return run, len(mcore_weights(model))


def _errors(run: Path) -> tuple[int, list[tuple[str, str]], dict]:
    code, out, _ = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(out)
    errors = [(f["where"], f["message"]) for f in report["findings"] if f["severity"] == "error"]
    return code, errors, report


def _adam_lost(count: int, where: str, about: str) -> str:
    """The error for Adam's states lost whole; `where` is its first parameter's key."""
    first = f"{STATES}.{where.removeprefix('[model.module.').removesuffix(']')}.exp_avg"
    return (
        f"no optimizer state for the {count} parameters param_to_group_meta names as"
        " optimized: each lacks Adam's exp_avg and exp_avg_sq"
        f" (first: no [{first}]; {about})"
    )


@pytest.mark.parametrize(
    ("args", "about"),
    [
        ({}, "args names no optimizer: Megatron's default adam"),
        ({"optimizer": "adam"}, "optimizer 'adam' in args"),
    ],
)
def test_megatron_adam_state_lost_whole_is_one_error(args, about, tmp_path):
    run, count = _megatron(tmp_path, **args)
    code, errors, report = _errors(run)
    assert code == 1 and len(errors) == 1, errors
    where, message = errors[0]
    assert where.startswith("[model.module.") and message == _adam_lost(count, where, about)
    assert report["has_optimizer_state"] is False


def test_the_same_checkpoint_with_its_states_is_valid(tmp_path):
    run, _ = _megatron(tmp_path, states=True, optimizer="adam")
    code, errors, report = _errors(run)
    assert code == 0 and errors == [] and report["has_optimizer_state"], report


def test_megatron_sgd_state_lost_whole_names_its_momentum(tmp_path):
    run, count = _megatron(tmp_path, optimizer="sgd", sgd_momentum=0.9)
    code, errors, _ = _errors(run)
    assert code == 1 and len(errors) == 1, errors
    where, message = errors[0]
    first = f"{STATES}.{where.removeprefix('[model.module.').removesuffix(']')}.momentum_buffer"
    assert message == (
        f"no optimizer state for the {count} parameters param_to_group_meta names as"
        " optimized: each lacks SGD's momentum_buffer"
        f" (first: no [{first}]; optimizer 'sgd' in args)"
    )


def test_megatron_sgd_without_momentum_keeps_no_state(tmp_path):
    """torch's SGD keeps no per-parameter state without momentum: none is expected."""
    run, _ = _megatron(tmp_path, optimizer="sgd", sgd_momentum=0.0)
    code, errors, _ = _errors(run)
    assert code == 0 and errors == []


def test_an_optimizer_not_known_here_is_reported_by_count_naming_the_first(tmp_path):
    """Megatron-LM's Muon keeps states this check does not know: their names are not
    guessed, the loss is still an error, naming the first few parameters (it named none)."""
    run, count = _megatron(tmp_path, optimizer="muon")
    code, errors, _ = _errors(run)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0][1] == (
        f"no optimizer state for the {count} parameters param_to_group_meta names as"
        " optimized: [model.module.embedding.word_embeddings.weight],"
        " [model.module.decoder.final_layernorm.weight], [model.module.output_layer.weight]"
        f" (+{count - 3} more); optimizer 'muon' in args, whose states are not known here"
    )


def test_no_state_and_no_record_naming_parameters_is_a_model_only_checkpoint(tmp_path):
    """Without param_to_group_meta nothing says a parameter was optimized (a model-only
    save): valid, as before."""
    model = tiny_causal_lm("llama", vocab=64)
    run = tmp_path / "megatron"
    state = {"args": megatron_args(model), "iteration": STEP, "model": mcore_weights(model)}
    save_dcp(state, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    code, errors, report = _errors(run)
    assert code == 0 and errors == [] and report["has_optimizer_state"] is False


def test_bridge_reads_the_optimizer_from_run_config(tmp_path):
    """Megatron-Bridge records the optimizer in run_config.yaml's `optimizer:` section."""
    model = tiny_causal_lm("llama", vocab=64)
    run = bridge_run(tmp_path, model, steps=(10,))
    step = run / "iter_0000010"
    weights = mcore_weights(model)
    optimizer = {"state": {}, "param_to_group_meta": adam_state(weights)["param_to_group_meta"]}
    save_dcp({"model": weights, "optimizer": optimizer}, step)
    config = yaml.safe_load((step / "run_config.yaml").read_text())
    config["optimizer"] = {"optimizer": "sgd", "sgd_momentum": 0.9, "lr": 1e-4}
    (step / "run_config.yaml").write_text(yaml.safe_dump(config))
    code, errors, _ = _errors(run)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0][1].endswith("; optimizer 'sgd' in run_config.yaml's optimizer section)")
    assert "SGD's momentum_buffer" in errors[0][1]


def _mfsdp_step(root: Path) -> Path:
    """An mfsdp run whose step 1 saved a stepped AdamW's state (manifest: model, optimizer)."""
    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.state import ModelState, OptimizerState

    model = tiny_causal_lm("llama", vocab=64)
    model.config.save_pretrained(root / "assets")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    states = {"model": ModelState(model), "optimizer": OptimizerState(model, optimizer)}
    run = root / "run"
    Checkpointer(run, strategy="none").save(1, states, contents=("model", "optimizer"))
    return run


def _drop(prefix: str):
    def edit(metadata) -> None:
        for key in [k for k in metadata.state_dict_metadata if k.startswith(prefix)]:
            del metadata.state_dict_metadata[key]
        for index in [i for i in metadata.storage_data if i.fqn.startswith(prefix)]:
            del metadata.storage_data[index]

    return edit


def test_an_mfsdp_step_whose_states_are_gone_is_one_error(tmp_path):
    """Its param_groups left, its per-parameter states gone: the manifest's record says
    every parameter was stepped; which optimizer it does not say, so only the count."""
    run = _mfsdp_step(tmp_path)
    edit_metadata(run / "global_step_1", _drop("optimizer.state."))
    code, errors, _ = _errors(run)
    assert code == 1 and len(errors) == 1, errors
    where, message = errors[0]
    assert where == "[model.model.embed_tokens.weight]"
    assert message.startswith("no optimizer state for the ")
    assert message.endswith(
        " parameters the manifest records as optimized, as it lists 'optimizer':"
        " [model.model.embed_tokens.weight], [model.model.layers.0.self_attn.q_proj.weight],"
        " [model.model.layers.0.self_attn.k_proj.weight] (+17 more);"
        " which optimizer, and so which states, is not recorded"
    ), message


def test_an_mfsdp_step_without_any_optimizer_entry_is_the_contents_error_alone(tmp_path):
    run = _mfsdp_step(tmp_path)
    edit_metadata(run / "global_step_1", _drop("optimizer."))
    code, errors, _ = _errors(run)
    assert code == 1 and [message for _, message in errors] == [
        "manifest lists 'optimizer' but the checkpoint has no optimizer state"
    ]
