"""torchtitan's checkpoint layout around a model in Hugging Face's or its own early names.

torchtitan's CheckpointManager flattens the model to the top level of the DCP and saves
`optimizer`, `lr_scheduler`, `dataloader` and `train_state` beside it. A model in Hugging
Face's names trained that way read as a bare model state dict, but its `train_state.step`
and `train_state.ntokens_seen` tensors were taken for weights: validate said INVALID
("unexpected for qwen2") and export-hf refused. Its dump folder (`checkpoint/step-N/` below
it) was "not a checkpoint" though its `checkpoint/` folder was read. A step of torchtitan's
early releases (its own names under `model.`) was sent to convert_to_hf.py, which loads the
names at the top level and fails on it with "Missing key": its line gives the flattening.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp

from mfsdp_ckpt.format.torchtitan import CONVERT_SCRIPT
from tests.support.interop_layouts import one_error_line, run_cli


def _save(state: dict, target: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save/load in one process"
        dcp.save(state, checkpoint_id=str(target), no_dist=True)
    return target


def _hf_model(config_dir: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir))
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def _titan_layout_dump(root: Path, model: dict[str, torch.Tensor], step: int = 2) -> Path:
    """A dump folder as torchtitan's CheckpointManager writes it: the model flattened to the
    top level beside its optimizer, lr_scheduler, dataloader and train_state (with tensors)."""
    state: dict = dict(model)
    adam = ("exp_avg", "exp_avg_sq")
    state["optimizer"] = {
        "state": {
            name: {**{m: torch.zeros_like(t) for m in adam}, "step": torch.tensor(2.0)}
            for name, t in model.items()
        },
        "param_groups": [{"lr": 1e-3, "params": list(model)}],
    }
    state["lr_scheduler"] = {"last_epoch": step, "base_lrs": [1e-3]}
    state["dataloader"] = {"dp_rank_0": b"\x80\x04K\x04.", "world_size": 1}
    state["train_state"] = {
        "step": torch.tensor(step, dtype=torch.int32),
        "ntokens_seen": torch.tensor(96),
    }
    dump = root / "outputs"
    _save(state, dump / "checkpoint" / f"step-{step}")
    return dump


def test_a_hugging_face_model_in_torchtitans_layout_validates_and_exports(tmp_path):
    from trainer.tiny import build_tiny_model_dir

    config = build_tiny_model_dir(tmp_path / "model")
    model = _hf_model(config)
    step = _titan_layout_dump(tmp_path, model) / "checkpoint" / "step-2"
    code, stdout, err = run_cli("ckpt", "validate", step, "--hf-config", config)
    assert code == 0 and "valid:" in stdout + err, stdout + err
    assert "train_state" not in stdout + err
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", step, "--hf-config", config, "--out", out)
    assert code == 0, stdout + err
    exported = load_file(out / "model.safetensors")
    assert set(model) - {"lm_head.weight"} <= set(exported) <= set(model)  # tied: no lm_head
    assert all(torch.equal(exported[name], model[name]) for name in exported)


def test_a_torchtitan_dump_folder_of_hugging_face_names_reads_its_step(tmp_path):
    from trainer.tiny import build_tiny_model_dir

    config = build_tiny_model_dir(tmp_path / "model")
    dump = _titan_layout_dump(tmp_path, _hf_model(config))
    code, stdout, err = run_cli("ckpt", "validate", dump, "--hf-config", config)
    assert code == 0, stdout + err
    assert f"holds one checkpoint: reading {dump / 'checkpoint' / 'step-2'}" in stdout + err


def _early_titan_step(root: Path, dim: int = 8, vocab: int = 16) -> tuple[Path, dict]:
    """An early torchtitan step: `{"model": <its names>, "optimizer": ..., "train_state": ...}`."""
    model = {
        "tok_embeddings.weight": torch.randn(vocab, dim),
        "layers.0.attention.wq.weight": torch.randn(dim, dim),
        "layers.0.feed_forward.w1.weight": torch.randn(2 * dim, dim),
        "norm.weight": torch.randn(dim),
        "output.weight": torch.randn(vocab, dim),
    }
    optimizer = {"state": {n: {"exp_avg": torch.zeros_like(t)} for n, t in model.items()}}
    state = {"model": model, "optimizer": optimizer, "train_state": {"step": 5}}
    return _save(state, root / "outputs" / "checkpoint" / "step-5"), model


def test_an_early_torchtitan_step_is_given_a_route_that_loads(tmp_path):
    step, model = _early_titan_step(tmp_path)
    code, _, err = run_cli("ckpt", "inspect", step)
    line = one_error_line(err)
    assert code == 2 and "under `model.`" in line, line
    assert f"python {CONVERT_SCRIPT} {step} OUT" not in line  # it fails there: Missing key
    formats = "python -m torch.distributed.checkpoint.format_utils"
    assert f"`{formats} dcp_to_torch {step} full.pt`" in line, line
    assert f"`{formats} torch_to_dcp model.pt FLAT`" in line, line
    assert f"python {CONVERT_SCRIPT} FLAT OUT" in line, line
    assert (
        """`python -c 'import torch; torch.save(torch.load("full.pt")["model"], "model.pt")'`"""
        in line
    )
    # the route the line gives, in process: what convert_to_hf.py loads (flat names) loads
    full, flat = tmp_path / "full.pt", tmp_path / "FLAT"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_to_torch_save(step, full)
        torch.save(torch.load(full)["model"], tmp_path / "model.pt")
        torch_save_to_dcp(tmp_path / "model.pt", flat)
        loaded = {name: torch.empty_like(t) for name, t in model.items()}
        dcp.load(loaded, checkpoint_id=str(flat), no_dist=True)
    assert all(torch.equal(loaded[name], model[name]) for name in model)


def test_a_dump_folder_of_several_such_steps_lists_them(tmp_path):
    from trainer.tiny import build_tiny_model_dir

    config = build_tiny_model_dir(tmp_path / "model")
    model = _hf_model(config)
    dump = _titan_layout_dump(tmp_path, model, step=2)
    _titan_layout_dump(tmp_path, model, step=10)
    code, stdout, err = run_cli("ckpt", "inspect", dump)
    line = one_error_line(err)
    assert code == 2 and f"{dump}: holds 2 checkpoints; give one of them" in line, stdout + err
    assert (
        str(dump / "checkpoint" / "step-2") in line and str(dump / "checkpoint" / "step-10") in line
    )
