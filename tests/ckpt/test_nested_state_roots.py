"""Model and optimizer entries wherever plain torch code nests them in a DCP checkpoint.

Each layout is written with a real `torch.distributed.checkpoint.save` of a tiny
transformers model after one AdamW step:
- torch's DCP recipe (pytorch.org/tutorials/recipes/distributed_checkpoint_recipe):
  `dcp.save({"app": AppState(model, optimizer)})`, stored as `app.model.model.layers...`
  beside `app.optim.state.model.layers....exp_avg`. Was: validate "no model weights (no
  keys under 'model.')" plus a "missing" line per weight, export "fit neither the hf nor
  the mcore layout";
- `dcp.save({"model": msd, "optim": osd})`. Was: validate said "no optimizer state" and
  never checked the 81 optimizer tensors;
- a bare model state dict at the top level with `optimizer.` or `optim.` beside it.
Every one must validate with its optimizer state checked, and export bit for bit what the
same weights saved as `{"model": msd}` export to.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from mfsdp_ckpt.format.state_keys import AmbiguousStateError, StateRoots, state_roots
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

UP_PROJ = "model.layers.0.mlp.up_proj.weight"


class AppState(Stateful):
    """The recipe's wrapper: model and optimizer state under one key, saved by DCP."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self):
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optimizer_state}

    def load_state_dict(self, state_dict):
        raise AssertionError("only saved here")


def _layouts(model, optimizer) -> dict[str, dict]:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {
        "reference": {"model": model_state},
        "recipe": {"app": AppState(model, optimizer)},
        "model-optim": {"model": model_state, "optim": optimizer_state},
        "bare-optimizer": {**model_state, "optimizer": optimizer_state},
        "bare-optim": {**model_state, "optim": optimizer_state},
    }


# (model entry, optimizer entry) inspect names for each layout
ENTRIES = {
    "recipe": (["app.model"], "app.optim"),
    "model-optim": (["model"], "optim"),
    "bare-optimizer": ([""], "optimizer"),
    "bare-optim": ([""], "optim"),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny Qwen2 (tied embeddings) after one AdamW step, and its config dir."""
    model = tiny_causal_lm("qwen2", vocab=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.tensor([[1, 2, 3, 4]])
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    config = tmp_path_factory.mktemp("config")
    model.config.save_pretrained(config)
    return model, optimizer, config


@pytest.fixture(scope="module")
def saved(trained, tmp_path_factory) -> dict[str, Path]:
    model, optimizer, _ = trained
    root = tmp_path_factory.mktemp("layouts")
    return {
        name: save_dcp(state, root / name) for name, state in _layouts(model, optimizer).items()
    }


@pytest.fixture(scope="module")
def reference_export(saved, trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "reference"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", saved["reference"], "--out", out, "--hf-config", trained[2]
    )
    assert code == 0, stdout + err
    return out


def _optimizer_tensors(ckpt: Path, entry: str) -> int:
    from mfsdp_ckpt.storage.reader import CheckpointReader

    return sum(1 for key in CheckpointReader(ckpt).tensors if key.startswith(f"{entry}.state."))


@pytest.mark.parametrize("layout", list(ENTRIES))
def test_validate_checks_the_optimizer_state_of_every_layout(layout, saved, trained):
    config = trained[2]
    code, out, err = run_cli("ckpt", "validate", saved[layout], "--hf-config", config, "--json")
    report = json.loads(out)
    assert code == 0 and report["findings"] == [] and report["has_optimizer_state"], out + err
    code, out, err = run_cli("ckpt", "validate", saved[layout], "--hf-config", config)
    assert code == 0 and " optimizer state;" in out.splitlines()[-1], out + err


@pytest.mark.parametrize("layout", list(ENTRIES))
def test_inspect_names_the_entries(layout, saved):
    models, optimizer = ENTRIES[layout]
    code, out, err = run_cli("ckpt", "inspect", saved[layout], "--json")
    weights = json.loads(out)["weights"]
    assert code == 0, out + err
    held = _optimizer_tensors(saved[layout], optimizer)
    assert held > 0
    assert weights == {
        "entries": models,
        "tensors": weights["tensors"],
        "optimizer": optimizer,
        "optimizer_state_tensors": held,
        "problem": None,
    }
    code, out, _ = run_cli("ckpt", "inspect", saved[layout])
    line = next(line for line in out.splitlines() if line.startswith("weights "))
    assert f"optimizer state {optimizer}.state.* ({held} tensors)" in line


@pytest.mark.parametrize("layout", list(ENTRIES))
def test_export_is_bit_identical_to_the_plain_model_entry(
    layout, saved, trained, reference_export, tmp_path
):
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", saved[layout], "--out", out, "--hf-config", trained[2]
    )
    assert code == 0, stdout + err
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(p.name for p in reference_export.iterdir())
    for name in written:
        assert (out / name).read_bytes() == (reference_export / name).read_bytes(), name


def test_reference_export_holds_the_trained_weights(trained, reference_export):
    """The comparison above is against the model's own weights, not two equal mistakes."""
    from safetensors.torch import load_file

    model = trained[0]
    exported = load_file(str(reference_export / "model.safetensors"))
    assert torch.equal(exported[UP_PROJ], model.get_parameter(UP_PROJ).detach())


def test_a_moment_missing_under_app_optim_is_named_by_its_stored_key(trained, tmp_path):
    model, optimizer, config = trained
    model_state, optimizer_state = get_state_dict(model, optimizer)
    del optimizer_state["state"][UP_PROJ]["exp_avg"]
    gate = "model.layers.1.mlp.gate_proj.weight"
    # no state at all: frozen or never stepped, as far as the checkpoint tells (a warning)
    del optimizer_state["state"][gate]
    down = "model.layers.1.mlp.down_proj.weight"
    optimizer_state["state"][down]["exp_avg_sq"] = torch.zeros(3)
    ckpt = save_dcp({"app": {"model": model_state, "optim": optimizer_state}}, tmp_path / "c")
    code, out, err = run_cli("ckpt", "validate", ckpt, "--hf-config", config, "--json")
    findings = [(f["where"], f["message"]) for f in json.loads(out)["findings"]]
    assert code == 1, out + err
    stepped = len(optimizer_state["state"])  # the tied lm_head is optimized as the embedding
    assert findings == [
        (
            f"[app.model.{UP_PROJ}]",
            f"optimizer state exp_avg is missing (no [app.optim.state.{UP_PROJ}.exp_avg])",
        ),
        (
            f"[app.optim.state.{down}.exp_avg_sq]",
            "shape (3,) differs from the parameter's (128, 192)",
        ),
        (
            f"[app.model.{gate}]",
            f"no optimizer state, while {stepped} of the {stepped + 1} parameters hold Adam's:"
            " frozen, or never stepped, so not checked",
        ),
    ]


def test_two_model_entries_are_refused_naming_both(trained, tmp_path):
    model, _, config = trained
    state = {"a": {"model": model.state_dict()}, "b": {"model": model.state_dict()}}
    ckpt = save_dcp(state, tmp_path / "two")
    for command in (["validate", ckpt], ["export-hf", ckpt, "--out", tmp_path / "hf"]):
        code, out, err = run_cli("ckpt", *command, "--hf-config", config)
        line = one_error_line(err)
        assert code == 2, out + err
        assert str(ckpt) in line and "a.model" in line and "b.model" in line, line
        assert "[a.model.model.embed_tokens.weight]" in line, line
    assert not (tmp_path / "hf").exists()
    code, out, err = run_cli("ckpt", "inspect", ckpt)  # still lists what is there
    assert code == 0 and "a.model.model.embed_tokens.weight" in out, out + err
    line = next(line for line in out.splitlines() if line.startswith("weights "))
    assert "not read" in line and "a.model" in line and "b.model" in line


# --------------------------------------------------------------------------- state_roots
@pytest.mark.parametrize(
    ("keys", "roots"),
    [
        (  # mfsdp's own
            ["model.model.layers.0.w", "optimizer.state.model.layers.0.w.exp_avg", "extra.x"],
            StateRoots(("model",), "optimizer"),
        ),
        (  # Megatron-LM: one `module.` on the model, three on the distributed optimizer
            [
                "model.module.decoder.layers.0.mlp.linear_fc1.weight_w",
                "optimizer.state.module.module.module.decoder.layers.0.x.exp_avg",
            ],
            StateRoots(("model",), "optimizer"),
        ),
        (
            ["model0.decoder.layers.0.w", "model1.decoder.layers.0.w"],
            StateRoots(("model0", "model1"), None),
        ),
        (  # chunks under an app's key are one model's chunks too
            ["app.model0.model.layers.0.w", "app.model1.model.layers.0.w", "app.optim.state.x"],
            StateRoots(("app.model0", "app.model1"), "app.optim"),
        ),
        (  # a parameter path that reads `model.model.` under the optimizer is no model entry
            ["model.model.layers.0.w", "optimizer.state.model.model.layers.0.w.exp_avg"],
            StateRoots(("model",), "optimizer"),
        ),
        (["model.embed_tokens.weight", "lm_head.weight"], StateRoots(("",), None)),
        (
            ["decoder.layers.0.w", "optim.state.decoder.layers.0.w.exp_avg"],
            StateRoots(("",), "optim"),
        ),
        (["app.step", "rng_state"], StateRoots((), None)),
    ],
)
def test_state_roots(keys, roots):
    assert state_roots(keys) == roots


def test_state_roots_of_a_bare_model_keep_names_and_skip_the_optimizer():
    keys = ["model.layers.0.w", "lm_head.weight", "optim.state.model.layers.0.w.exp_avg"]
    roots = state_roots(keys)
    assert roots.weight_keys(keys) == keys[:2]
    assert [roots.module_path(k) for k in roots.weight_keys(keys)] == keys[:2]


def test_two_optimizer_entries_are_refused():
    keys = ["model.model.layers.0.w", "optim.state.a.exp_avg", "optimizer.state.a.exp_avg"]
    with pytest.raises(AmbiguousStateError, match="optimizer and optim both"):
        state_roots(keys)
