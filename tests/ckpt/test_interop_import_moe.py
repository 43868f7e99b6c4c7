"""`mfsdp ckpt import-hf` of mixture-of-experts models (Qwen3-MoE, Qwen2-MoE, Mixtral).

A tiny transformers model of each family (2 layers, 4 experts, top-2) is saved with
save_pretrained (the hub's per-expert names), imported in the mcore layout (TEGroupedMLP
and SequentialMLP expert names) and in our hf layout, exported back with export-hf: the
tensors are those saved, bit for bit, and the export loaded with transformers gives the
source model's logits. The mcore names and values are held to tests/support/hf_to_mcore.py's
independent converter, the same builder the MoE export tests read.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.export import load_report, logits_of
from tests.support.hf_model_files import safetensors_tensors
from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import source_logits
from trainer.model_source import ModelSource, load_checkpoint_weights

FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral")
# (--layout, --mcore-experts; the hf layout keeps transformers' names and takes none)
LAYOUTS = (("mcore", "grouped"), ("mcore", "sequential"), ("hf", None))


@functools.cache
def _tiny(family: str):
    return tiny_causal_lm(family)


def _saved(root: Path, family: str, **changes) -> tuple[torch.nn.Module, Path]:
    """The family's tiny model (its config changed by `changes`), saved by transformers."""
    model = tiny_causal_lm(family, **changes) if changes else _tiny(family)
    model.save_pretrained(root / "source")
    return model, root / "source"


def _dcp_tensors(dcp_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP dir under its flattened key, read with torch's own reader."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(str(dcp_dir))
    state = {
        key: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in reader.read_metadata().state_dict_metadata.items()
        if isinstance(meta, TensorStorageMetadata)
    }
    dcp.load(state, storage_reader=reader)
    return state


def _import(source: Path, out: Path, layout: str, experts: str | None) -> None:
    named = ("--mcore-experts", experts) if experts is not None else ()
    code, stdout, err = run_cli(
        "ckpt", "import-hf", source, "--out", out, "--layout", layout, *named
    )
    assert code == 0, stdout + err


@pytest.mark.parametrize(("layout", "experts"), LAYOUTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_import_then_export_gives_back_the_saved_model(family, layout, experts, tmp_path):
    """Was: exit 2, "model family 'qwen3_moe' is not one import-hf reads"."""
    model, source = _saved(tmp_path, family)
    _import(source, tmp_path / "imported", layout, experts)
    out = tmp_path / "hf"
    config_args = ("--hf-config", source) if layout == "mcore" else ()
    code, stdout, err = run_cli(
        "ckpt", "export-hf", tmp_path / "imported", "--out", out, *config_args
    )
    assert code == 0, stdout + err
    saved, exported = safetensors_tensors(source), safetensors_tensors(out)
    assert sorted(exported) == sorted(saved)
    for name, tensor in saved.items():
        assert exported[name].dtype == tensor.dtype and torch.equal(exported[name], tensor), name
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("norms", ["local", "te"])
@pytest.mark.parametrize("experts", ["grouped", "sequential"])
@pytest.mark.parametrize("family", FAMILIES)
def test_mcore_import_holds_megatrons_names_and_values(family, experts, norms, tmp_path):
    """The names Megatron-LM's fsdp_dtensor save writes (the export tests' builder, fc1 split
    into _w/_v, experts under global ids); validate --deep against the config finds nothing
    (--strict asks for the manifest a Megatron checkpoint never has)."""
    model, source = _saved(tmp_path, family)
    code, stdout, err = run_cli(
        "ckpt", "import-hf", source, "--out", tmp_path / "mcore",
        "--mcore-experts", experts, "--mcore-norms", norms,
    )  # fmt: skip
    assert code == 0, stdout + err
    stored = _dcp_tensors(tmp_path / "mcore")
    expected = {
        f"model.module.{name}": tensor
        for name, tensor in to_mcore(model, norms=norms, fc1="split", experts=experts).items()
    }
    assert sorted(stored) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(stored[name], tensor), name
    report = validate_checkpoint(tmp_path / "mcore", deep=True, hf_config=source)
    # an mcore import records no head layout: the config given is named as unchecked, alone
    unchecked = [(f.severity, f.where) for f in report.findings]
    assert report.ok() and unchecked == [("warning", str(source / "config.json"))], [
        str(f) for f in report.findings
    ]


@pytest.mark.parametrize(
    ("norms", "expert_key", "spec"),
    [
        ("local", "mlp.experts.local_experts.3.linear_fc1.weight_w", "SequentialMLP"),
        ("te", "mlp.experts.linear_fc1.weight3_w", "TEGroupedMLP"),
    ],
)
def test_the_default_expert_names_are_those_of_the_norm_spec(norms, expert_key, spec, tmp_path):
    """Megatron's local spec builds SequentialMLP experts, the Transformer Engine one (with
    --moe-grouped-gemm) TEGroupedMLP: without --mcore-experts the import writes the names
    of the spec --mcore-norms names, and says which."""
    _, source = _saved(tmp_path, "qwen3_moe")
    out = tmp_path / "mcore"
    code, stdout, err = run_cli("ckpt", "import-hf", source, "--out", out, "--mcore-norms", norms)
    assert code == 0 and f"experts written as {spec}" in err, stdout + err
    assert f"model.module.decoder.layers.1.{expert_key}" in _dcp_tensors(out)


@pytest.mark.parametrize("layout", ["mcore", "hf"])
def test_training_loads_the_import_into_the_fused_experts(layout, tmp_path):
    """What `mfsdp train` does with model.path (hf) or the mcore dir and model.hf_config:
    each expert's tensor goes into transformers 5.x's fused expert parameters."""
    from transformers import AutoModelForCausalLM

    model, source = _saved(tmp_path, "qwen2_moe")
    _import(source, tmp_path / "imported", layout, "grouped" if layout == "mcore" else None)
    torch.manual_seed(0)
    loaded = AutoModelForCausalLM.from_config(model.config).eval()
    checkpoint = resolve_checkpoint(tmp_path / "imported")
    load_checkpoint_weights(loaded, ModelSource(assets=None, checkpoint=checkpoint))
    ids, expected = source_logits(model)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, expected, rtol=0, atol=1e-5)


def test_hf_layout_import_validates_deep_and_strict(tmp_path):
    _, source = _saved(tmp_path, "mixtral")
    _import(source, tmp_path / "run", "hf", None)
    code, stdout, err = run_cli(
        "ckpt", "validate", tmp_path / "run", "--deep", "--strict", "--json"
    )
    report = json.loads(stdout)
    assert code == 0 and report["findings"] == [] and report["has_manifest"], stdout + err


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        (dict(mlp_only_layers=[1]), "mlp_only_layers=[1]"),
        (dict(decoder_sparse_step=2), "decoder_sparse_step=2"),
    ],
)
def test_dense_layers_among_moe_ones_are_refused_for_mcore_naming_the_key(changes, key, tmp_path):
    """Megatron records such a model as a moe_layer_freq pattern, which export-hf refuses:
    the mcore import would not convert back. The hf layout keeps the names and imports it."""
    model, source = _saved(tmp_path, "qwen3_moe", **changes)
    code, stdout, err = run_cli("ckpt", "import-hf", source, "--out", tmp_path / "mcore")
    assert code == 1 and key in one_error_line(err), stdout + err
    assert not (tmp_path / "mcore").exists()
    _import(source, tmp_path / "run", "hf", None)
    code, stdout, err = run_cli("ckpt", "export-hf", tmp_path / "run", "--out", tmp_path / "hf")
    assert code == 0, stdout + err
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(tmp_path / "hf", ids), expected, rtol=0, atol=1e-5)


def test_a_missing_expert_tensor_is_refused_naming_it(tmp_path):
    from safetensors.torch import save_file

    _, source = _saved(tmp_path, "qwen3_moe")
    tensors = safetensors_tensors(source)
    del tensors["model.layers.1.mlp.experts.2.up_proj.weight"]
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})
    code, stdout, err = run_cli("ckpt", "import-hf", source, "--out", tmp_path / "mcore")
    assert code == 1 and "model.layers.1.mlp.experts.2.up_proj.weight" in err, stdout + err


def test_a_nan_in_one_expert_stops_the_import_naming_it(tmp_path):
    """As for a dense weight: nothing is written, the expert's tensor is named."""
    from safetensors.torch import save_file

    _, source = _saved(tmp_path, "mixtral")
    tensors = safetensors_tensors(source)
    name = "model.layers.0.block_sparse_moe.experts.1.w2.weight"
    tensors[name][3, 4] = float("nan")
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})
    for layout in ("mcore", "hf"):
        out = tmp_path / layout
        code, stdout, err = run_cli("ckpt", "import-hf", source, "--out", out, "--layout", layout)
        assert code == 1 and name in one_error_line(err), stdout + err
        assert not out.exists()


def test_a_dtype_cast_writes_every_expert_cast(tmp_path):
    """--dtype bf16 reads each expert's tensor and casts it (the torch path of the writer)."""
    model, source = _saved(tmp_path, "qwen2_moe")
    out = tmp_path / "mcore"
    code, stdout, err = run_cli(
        "ckpt", "import-hf", source, "--out", out, "--dtype", "bf16", "--mcore-norms", "te"
    )
    assert code == 0, stdout + err
    stored = _dcp_tensors(out)
    expected = to_mcore(model, norms="te", fc1="split", experts="grouped")
    assert sorted(stored) == sorted(f"model.module.{name}" for name in expected)
    for name, tensor in expected.items():
        assert torch.equal(stored[f"model.module.{name}"], tensor.to(torch.bfloat16)), name


@pytest.mark.parametrize("layout", ["mcore", "hf"])
@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
def test_experts_saved_fused_as_transformers_holds_them_import_per_expert(family, layout, tmp_path):
    """`save_file(model.state_dict())` of a transformers 5.x model stores each layer's
    experts fused (`mlp.experts.gate_up_proj` [E, 2I, H]) and Mixtral's router under `mlp`:
    imported, they are the per-expert tensors save_pretrained writes, value for value."""
    from safetensors.torch import save_file

    model, hub = _saved(tmp_path, family)
    fused = tmp_path / "fused"
    model.config.save_pretrained(fused)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    assert "model.layers.1.mlp.experts.gate_up_proj" in state
    save_file(state, str(fused / "model.safetensors"), metadata={"format": "pt"})
    code, stdout, err = run_cli(
        "ckpt", "import-hf", fused, "--out", tmp_path / "imported", "--layout", layout
    )
    assert code == 0 and "4 fused expert tensor(s)" in err, stdout + err
    out = tmp_path / "hf"
    config_args = ("--hf-config", fused) if layout == "mcore" else ()
    code, stdout, err = run_cli(
        "ckpt", "export-hf", tmp_path / "imported", "--out", out, *config_args
    )
    assert code == 0, stdout + err
    saved, exported = safetensors_tensors(hub), safetensors_tensors(out)
    assert sorted(exported) == sorted(saved)
    for name, tensor in saved.items():
        assert torch.equal(exported[name], tensor), name


def test_a_fused_expert_tensor_claiming_too_many_experts_is_refused(tmp_path):
    """An empty tensor has no bytes to contradict its shape: [10**9, 48, 0] would otherwise
    make 2 * 10**9 expert names before any check."""
    from safetensors.torch import save_file

    model, _ = _saved(tmp_path, "qwen3_moe")
    fused = tmp_path / "fused"
    model.config.save_pretrained(fused)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    state["model.layers.0.mlp.experts.down_proj"] = torch.empty(10**9, 32, 0)
    save_file(state, str(fused / "model.safetensors"), metadata={"format": "pt"})
    code, stdout, err = run_cli("ckpt", "import-hf", fused, "--out", tmp_path / "mcore")
    line = one_error_line(err)
    assert code == 1 and "model.layers.0.mlp.experts.down_proj" in line, stdout + err
    assert "more than 16384" in line, line
