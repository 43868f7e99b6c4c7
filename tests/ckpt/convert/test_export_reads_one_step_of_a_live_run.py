"""Exporting a run dir while the run is still saving reads one step from start to finish.

Was: export-hf resolved the run dir twice (once for its source, once for its checks), and a
save that committed a newer step between the two checked the first step's files against
the newer one: `RUN/global_step_85/huggingface/chat_template.jinja: resolves outside the
checkpoint`, exit 1, on a valid step. Resolving a run dir of verl or Megatron-LM listed its
step dirs before reading its tracker, so a step committed between the two was "missing".

Each test commits the newer step at the point where the old code read the run dir again,
through the real saver (the step renamed into place, then the tracker updated).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from mfsdp_ckpt.format.dir_entries import children
from tests.support.export import copy_hf_assets_from
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import megatron_args, megatron_run

EMBEDDING = "model.embed_tokens.weight"


def _save(run: Path, assets: Path, step: int) -> dict[str, torch.Tensor]:
    """Step `step` of a one-process run in `run`, weights seeded by the step; its model's
    state dict."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.state import ModelState

    torch.manual_seed(step)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(assets))
    Checkpointer(run, strategy="none", model_family="qwen2").save(
        step,
        {"model": ModelState(model), "extra": {"step": step}},
        contents=("model", "extra"),
        hf_assets=copy_hf_assets_from(assets),
    )
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def test_a_step_committed_while_the_export_prepares_is_not_mixed_in(tmp_path, monkeypatch):
    from mfsdp_ckpt.convert import export_prepare
    from mfsdp_ckpt.convert.export_hf import export_hf
    from trainer.tiny import build_tiny_model_dir

    assets = build_tiny_model_dir(tmp_path / "assets")
    (assets / "chat_template.jinja").write_text("{{ messages }}")
    run = tmp_path / "run"
    weights = _save(run, assets, 3)
    checked = export_prepare.check_out_dir  # called between the old code's two resolutions

    def checking_while_a_save_commits(*args, **kwargs):
        checked(*args, **kwargs)
        if not (run / "global_step_4").exists():
            _save(run, assets, 4)

    monkeypatch.setattr(export_prepare, "check_out_dir", checking_while_a_save_commits)
    out = tmp_path / "hf"
    result = export_hf(run, out)
    assert (run / "global_step_4").is_dir() and run_steps.read_tracker(run) == 4
    exported = load_file(out / "model.safetensors")
    assert torch.equal(exported[EMBEDDING], weights[EMBEDDING]), "not step 3's weights"
    assert (out / "chat_template.jinja").read_text() == "{{ messages }}"
    assert result.out_dir == str(out)


@pytest.fixture
def megatron(tmp_path) -> Path:
    model = tiny_causal_lm("qwen2", vocab=64)
    return megatron_run(tmp_path, model, megatron_args(model))


def test_a_run_dir_listed_before_a_commit_resolves_to_the_step_its_tracker_names(megatron):
    """The listing made when resolution began, then a save of Megatron-LM committing
    iter_0000200 (the dir renamed into place, then the tracker), then the run dir read."""
    listed = children(megatron)
    shutil.copytree(megatron / "iter_0000100", megatron / "iter_0000200")
    (megatron / layout.TRACKER_FILE).write_text("200")
    paths = checkpoint_resolution._from_run_dir(megatron, listed, None)
    assert paths is not None and paths.root == megatron / "iter_0000200"
    assert checkpoint_resolution.resolve_checkpoint(megatron).root == paths.root


def test_a_step_committed_after_the_removal_stamps_is_not_the_one_exported(tmp_path, monkeypatch):
    """The step whose removal export-hf watches for (`removed_while_read`, resolved as the
    command begins) is the step it exports: a save committing step 4 right after that
    lookup had the export read step 4 while a removal was looked for at step 3."""
    from mfsdp_ckpt.convert import export_hf as export_module
    from trainer.tiny import build_tiny_model_dir

    assets = build_tiny_model_dir(tmp_path / "assets")
    run = tmp_path / "run"
    weights = _save(run, assets, 3)
    routed = export_module.export_lora_kind  # the first thing export_hf does once stamped

    def routing_while_a_save_commits(*args, **kwargs):
        if not (run / "global_step_4").exists():
            _save(run, assets, 4)
        return routed(*args, **kwargs)

    monkeypatch.setattr(export_module, "export_lora_kind", routing_while_a_save_commits)
    out = tmp_path / "hf"
    export_module.export_hf(run, out)
    assert run_steps.read_tracker(run) == 4
    exported = load_file(out / "model.safetensors")
    assert torch.equal(exported[EMBEDDING], weights[EMBEDDING]), "not step 3's weights"


def test_a_path_resolves_once_in_a_resolved_once_block(tmp_path):
    """Inside the block the run dir stays at the step first resolved; after it, the newest."""
    from trainer.tiny import build_tiny_model_dir

    assets = build_tiny_model_dir(tmp_path / "assets")
    run = tmp_path / "run"
    _save(run, assets, 3)
    with checkpoint_resolution.resolved_once():
        first = checkpoint_resolution.resolve_checkpoint(run)
        _save(run, assets, 4)
        with checkpoint_resolution.resolved_once():  # nested: the outer block's
            assert checkpoint_resolution.resolve_checkpoint(str(run)).step == 3
        assert checkpoint_resolution.resolve_checkpoint(run) == first
    assert checkpoint_resolution.resolve_checkpoint(run).step == 4
