"""Variations of verl and Megatron-LM checkpoints that users have on disk, beyond the
layout matrix of tests/ckpt/test_interop_layouts.py: model entry and key variants
(`model0`, no `module.`, Transformer Engine `_extra_state`), an untied output layer under a
tied config, MoE, incomplete saves and stale trackers, and the formats of the same tools
mfsdp does not read (torch_dist, legacy torch, verl FSDP), each refused in one line that
says what the directory is and what reads it.

The Megatron-LM-shaped state comes from tests/fixtures/megatron_lm_optim/
make_megatron_lm_optim.py; the logits cases build a tiny transformers model and write its
weights under Megatron-core names with tests/support/hf_to_mcore.py's independent
converter.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import (
    assert_exports_to_source,
    maker,
    one_error_line,
    run_cli,
)
from tests.support.megatron_checkpoints import save_dcp

MAKER = maker()


def _config(root: Path, **changes) -> Path:
    path = root / "config.json"
    path.write_text(json.dumps({**MAKER.CONFIG, **changes}))
    return path


def _megatron_run(root: Path, state: dict, step: int = 100, tracker: str | None = None) -> Path:
    run = root / "megatron"
    save_dcp(state, run / f"iter_{step:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(tracker or str(step))
    return run


# --------------------------------------------------------------------------- key variants
def _model0(state: dict) -> dict:
    state["model0"] = state.pop("model")  # verl's name for a model in one virtual-pipeline chunk
    return state


def _no_module(state: dict) -> dict:
    state["model"] = {k.removeprefix("module."): v for k, v in state["model"].items()}
    return state


def _te_extra_state(state: dict) -> dict:
    """Transformer Engine keeps a `_extra_state` per module (an empty uint8 tensor without
    fp8, bytes with it); verl and Megatron-Bridge saves may keep them."""
    layer = "module.decoder.layers.0."
    state["model"][layer + "self_attention.linear_qkv._extra_state"] = torch.zeros(
        0, dtype=torch.uint8
    )
    state["model"][layer + "mlp.linear_fc1._extra_state"] = b"\x00fp8 scales"
    return state


VARIANTS = {"model0": _model0, "no_module": _no_module, "te_extra_state": _te_extra_state}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_key_variants_validate_clean_and_export(variant, tmp_path):
    """Was: `model0` failed validate (every weight "missing") and export ("fit neither
    layout"); `_extra_state` tensors were "optimizer state exp_avg is missing" errors."""
    state = VARIANTS[variant](MAKER.state_dict(MAKER.CONFIG))
    run = _megatron_run(tmp_path, state)
    config = _config(tmp_path)
    code, out, err = run_cli("ckpt", "validate", run, "--deep", "--hf-config", config, "--json")
    report = json.loads(out)
    assert code == 0 and report["findings"] == [], out + err
    assert report["layout"] == "megatron-lm" and report["has_optimizer_state"] is True
    code, out, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", config, "--out", tmp_path / "hf", "--verify"
    )
    assert code == 0 and "verified" in out, out + err


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_key_variants_export_to_the_source_logits(variant, tmp_path):
    model = tiny_causal_lm("llama")  # untied output layer, no biases, GQA 4:2
    weights = to_mcore(model, norms="te", fc1="split")
    state = {"model": {f"module.{k}": v for k, v in weights.items()}, "iteration": 5}
    ckpt = save_dcp(VARIANTS[variant](state), tmp_path / "dist_ckpt")
    model.config.save_pretrained(tmp_path / "assets")
    assert_exports_to_source(model, ckpt, tmp_path / "hf", "--hf-config", tmp_path / "assets")


def test_virtual_pipeline_chunks_are_refused_naming_them(tmp_path):
    state = MAKER.state_dict(MAKER.CONFIG)
    state["model1"] = {k: v.clone() for k, v in state["model"].items()}
    state["model0"] = state.pop("model")
    ckpt = save_dcp(state, tmp_path / "dist_ckpt")
    code, out, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", _config(tmp_path), "--out", tmp_path / "hf"
    )
    assert code == 1, out + err
    assert "model entries model0, model1: a model saved in virtual-pipeline" in one_error_line(err)
    assert not (tmp_path / "hf").exists()


def _moe(model: dict) -> str:
    layer = "module.decoder.layers.0.mlp."
    for name in ("linear_fc1.weight_w", "linear_fc1.weight_v", "linear_fc2.weight"):
        del model[layer + name]
    model[layer + "router.weight"] = torch.zeros(4, 16)
    model[layer + "experts.local_experts.0.linear_fc1.weight"] = torch.zeros(48, 16)
    return f"[model.{layer}experts.local_experts.0.linear_fc1.weight]"


UNSUPPORTED_PARTS = {  # was: exit 2, "N tensor(s) have no qwen2 mcore mapping" / "fit neither"
    "moe": (_moe, "mixture-of-experts (MoE) layers are not supported"),
    # multi-token prediction layers: tests/ckpt/test_interop_megatron_mtp.py (--drop-mtp)
}


@pytest.mark.parametrize("part", list(UNSUPPORTED_PARTS))
def test_unsupported_megatron_parts_are_one_line_exit_1_naming_the_key(part, tmp_path):
    add, words = UNSUPPORTED_PARTS[part]
    state = MAKER.state_dict(MAKER.CONFIG)
    named = add(state["model"])
    state["optimizer"] = {}
    ckpt = save_dcp(state, tmp_path / "dist_ckpt")
    config = _config(tmp_path)
    code, out, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", config, "--out", tmp_path / "o"
    )
    line = one_error_line(err)
    assert code == 1 and words in line and named in line, err
    assert not (tmp_path / "o").exists()
    code, out, err = run_cli("ckpt", "validate", ckpt, "--hf-config", config)
    assert code == 1 and words.split(" layers")[0] in out, out + err


def test_an_untied_output_layer_under_a_tied_config_is_not_dropped(tmp_path):
    """Was: exit 0, output_layer.weight silently dropped (the export's lm_head became the
    embedding: a different model)."""
    state = MAKER.state_dict(MAKER.CONFIG)
    state["model"]["module.output_layer.weight"] = torch.randn(32, 16)
    ckpt = save_dcp(state, tmp_path / "dist_ckpt")
    tied = _config(tmp_path)
    code, out, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tied, "--out", tmp_path / "o"
    )
    assert code == 2 and "says tie_word_embeddings=true" in one_error_line(err), out + err
    code, out, err = run_cli("ckpt", "validate", ckpt, "--hf-config", tied, "--deep")
    assert code == 1 and "tie_word_embeddings" in out, out + err  # values: read with --deep
    (tmp_path / "untied").mkdir()
    untied = _config(tmp_path / "untied", tie_word_embeddings=False)
    code, out, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", untied, "--out", tmp_path / "o"
    )
    assert code == 0, out + err


def test_validate_reports_whether_optimizer_state_is_present(tmp_path):
    state = MAKER.state_dict(MAKER.CONFIG)
    with_optim = save_dcp(state, tmp_path / "with" / "dist_ckpt")
    del state["optimizer"]
    without = save_dcp(state, tmp_path / "without" / "dist_ckpt")
    for ckpt, present, words in (
        (with_optim, True, "Adam optimizer state"),
        (without, False, "no optimizer state"),
    ):
        code, out, err = run_cli("ckpt", "validate", ckpt, "--json")
        assert code == 0 and json.loads(out)["has_optimizer_state"] is present, out + err
        code, out, err = run_cli("ckpt", "validate", ckpt)
        assert f"2 files, {words}" in out.splitlines()[-1], out


def test_megatron_lm_without_config_says_what_to_pass(tmp_path):
    run = _megatron_run(tmp_path, MAKER.state_dict(MAKER.CONFIG))
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 2 and "pass --hf-config with the Hugging Face model dir" in line, err
    assert "Megatron-LM saves none" in line and "its weights: 1 layers, hidden 16, vocab 32" in line


# --------------------------------------------------------------------------- run dirs
def _verl_step(run: Path, step: int, state: dict | None) -> Path:
    """verl RL v1: global_step_N/actor/{dist_ckpt/, huggingface/}; both dirs always made,
    dist_ckpt/ left empty when `state` is None (a save that wrote nothing)."""
    actor = run / f"global_step_{step}" / "actor"
    (actor / "dist_ckpt").mkdir(parents=True)
    (actor / "huggingface").mkdir()
    if state is not None:
        shutil.rmtree(actor / "dist_ckpt")
        save_dcp(state, actor / "dist_ckpt")
    return actor


def test_a_tracker_naming_an_empty_save_is_exit_1_naming_it(tmp_path):
    """Was: exit 2, "global_step_40/actor: not a checkpoint (looked for ...)"."""
    run = tmp_path / "run"
    _verl_step(run, 20, MAKER.state_dict(MAKER.CONFIG))
    actor = _verl_step(run, 40, None)
    (run / "latest_checkpointed_iteration.txt").write_text("40")
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    assert code == 1, out + err
    report = json.loads(out)  # validate's own object: an invalid checkpoint, its one finding
    assert report["valid"] is False and len(report["findings"]) == 1, out
    error = report["findings"][0]["message"]
    assert f"names '40', but {actor / 'dist_ckpt'}: empty, no .metadata" in error
    assert "other step dirs here: global_step_20" in error
    for level in (actor, actor / "dist_ckpt"):
        code, out, err = run_cli("ckpt", "export-hf", level, "--out", tmp_path / "hf")
        assert code == 1 and "this save did not finish" in one_error_line(err), out + err
    assert not (tmp_path / "hf").exists()


def test_an_empty_v2_model_dir_is_exit_1(tmp_path):
    actor = tmp_path / "run" / "global_step_40" / "actor"
    for sub in ("model/dist_ckpt", "model/huggingface", "optimizer/dist_ckpt", "extra/dist_ckpt"):
        (actor / sub).mkdir(parents=True)
    (actor / "ckpt_contents.json").write_text(json.dumps({"schema_version": 2}))
    code, out, err = run_cli("ckpt", "validate", actor)  # validate says it as its finding
    assert code == 1 and "model/dist_ckpt: empty, no .metadata" in one_error_line(out), out + err


def test_a_step_newer_than_the_tracker_is_noted(tmp_path):
    """Older verl's async save never updated the tracker: the run resumes (and mfsdp reads)
    the tracker's step, and the note names the newer one with verl's reason."""
    run = tmp_path / "run"
    state = MAKER.state_dict(MAKER.CONFIG)
    _verl_step(run, 40, state)
    _verl_step(run, 80, state)
    (run / "latest_checkpointed_iteration.txt").write_text("40\n")
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(out)
    assert code == 0 and report["step"] == 40, out + err
    assert "global_step_80/ (step 80) is newer" in report["note"]
    assert "(older verl's async save never updated the tracker;" in report["note"]
    assert f"give {run / 'global_step_80'}" in report["note"]
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 0 and err.startswith("note: ") and "is newer" in err


# --------------------------------------------------------------------------- other formats
def _torch_dist(root: Path) -> Path:
    """Megatron dist_checkpointing's torch_dist: DCP files plus metadata.json and common.pt."""
    save_dcp({"decoder.layers.mlp.linear_fc2.weight": torch.zeros(2, 4, 4)}, root)
    (root / "metadata.json").write_text(
        json.dumps({"sharded_backend": "torch_dist", "common_backend": "torch"})
    )
    torch.save({"iteration": 100}, root / "common.pt")
    return root


def _megatron_torch_dist(root: Path) -> Path:
    run = root / "megatron"
    _torch_dist(run / "iter_0000100")
    (run / "latest_checkpointed_iteration.txt").write_text("100")
    return run


def _verl_megatron_torch_dist(root: Path) -> Path:
    """verl's Megatron backend without Megatron-FSDP saves dist_ckpt/ as torch_dist."""
    actor = root / "run" / "global_step_40" / "actor"
    _torch_dist(actor / "dist_ckpt")
    (actor / "huggingface").mkdir()
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("40")
    return root / "run"


def _verl_lora(root: Path, hf_adapter: bool) -> Path:
    """verl's v2 manager with mbridge and PEFT: the adapter's torch_dist shards in
    model/dist_ckpt, the HF PEFT adapter in model/huggingface/adapter/ (when exported), and
    `backend.peft` in ckpt_contents.json."""
    actor = root / "run" / "global_step_40" / "actor"
    _torch_dist(actor / "model" / "dist_ckpt")
    (actor / "model" / "huggingface").mkdir()
    if hf_adapter:
        (actor / "model" / "huggingface" / "adapter").mkdir()
        (actor / "model" / "huggingface" / "adapter" / "adapter_config.json").write_text("{}")
    contents = {
        "schema_version": 2,
        "backend": {"has_bridge": True, "use_dist_checkpointing": False, "peft": True},
        "contents": {"peft_adapters": {"path": "model/dist_ckpt"}},
    }
    (actor / "ckpt_contents.json").write_text(json.dumps(contents))
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("40")
    return root / "run"


def _megatron_legacy(root: Path) -> Path:
    step = root / "megatron" / "iter_0000100" / "mp_rank_00"
    step.mkdir(parents=True)
    torch.save({"iteration": 100}, step / "model_optim_rng.pt")
    (root / "megatron" / "latest_checkpointed_iteration.txt").write_text("100")
    return root / "megatron"


def _verl_fsdp(root: Path) -> Path:
    actor = root / "run" / "global_step_40" / "actor"
    actor.mkdir(parents=True)
    for rank in range(2):
        torch.save({}, actor / f"model_world_size_2_rank_{rank}.pt")
        torch.save({}, actor / f"optim_world_size_2_rank_{rank}.pt")
    (actor / "fsdp_config.json").write_text("{}")
    (actor / "huggingface").mkdir()
    (actor / "huggingface" / "config.json").write_text(json.dumps(MAKER.CONFIG))
    (actor / "huggingface" / "model.safetensors").write_bytes(b"{}")
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("40")
    return root / "run"


def _verl_fsdp_lora(root: Path) -> Path:
    """verl's FSDP backend with LoRA (fsdp_workers.py) adds actor/lora_adapter/."""
    run = _verl_fsdp(root)
    adapter = run / "global_step_40" / "actor" / "lora_adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    return run


FOREIGN = {
    "megatron_torch_dist": (_megatron_torch_dist, "dist_checkpointing (torch_dist)"),
    "verl_megatron_torch_dist": (
        _verl_megatron_torch_dist,
        "verl.model_merger merge --backend megatron",
    ),
    "verl_lora_hf_adapter": (
        functools.partial(_verl_lora, hf_adapter=True),
        "a verl LoRA checkpoint: the adapter's shards only",
    ),
    "verl_lora": (
        functools.partial(_verl_lora, hf_adapter=False),
        "verl's scripts/megatron_merge_lora.py merges it",
    ),
    "megatron_legacy": (_megatron_legacy, "Megatron-LM legacy checkpoint (mp_rank_NN"),
    "verl_fsdp": (_verl_fsdp, "--backend fsdp"),
    "verl_fsdp_lora": (_verl_fsdp_lora, "its lora_adapter/ holds the LoRA adapter"),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_formats_mfsdp_does_not_read_are_named_with_their_reader(case, tmp_path):
    """Was: torch_dist validated "valid" as megatron-lm (its stacked-layer names then failed
    export as unmapped); legacy and verl FSDP dirs were "not a checkpoint"."""
    build, words = FOREIGN[case]
    run = build(tmp_path)
    config = _config(tmp_path)
    for args in (
        ("validate", run),
        ("validate", run, "--json"),
        ("inspect", run),
        ("export-hf", run, "--hf-config", config, "--out", tmp_path / "hf"),
    ):
        code, out, err = run_cli("ckpt", *args)
        line = one_error_line(err)
        assert code == 2 and words in line and "which mfsdp does not read" in line, out + err
        assert "not a checkpoint" not in line
        if "--json" in args:
            assert json.loads(out)["exit_code"] == 2
    assert not (tmp_path / "hf").exists()
    if case == "verl_fsdp":
        assert "huggingface/ already holds Hugging Face weights" in line
    if case == "verl_lora_hf_adapter":  # the ready PEFT adapter, not verl's model merger
        assert "model/huggingface/adapter (peft.PeftModel" in line and "merger" not in line
