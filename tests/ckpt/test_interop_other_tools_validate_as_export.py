"""Checkpoints other PyTorch tools write: validate refuses what export-hf refuses, in its words.

validate promises that a checkpoint it passes is one export-hf writes; these saves broke
that. Two stored keys for one weight once the wrapper segments are stripped (`x` beside
torch.compile's `_orig_mod.x`, DDP's `module.x`, activation checkpointing's
`_checkpoint_wrapped_module.x`) and a weight stored as int8 were "valid" to validate and
refused by export. A live PEFT model saved by Accelerate's save_state (`q_proj.base_layer.
weight`, `lora_A.default.weight`) was INVALID with its weights "missing", and FSDP1's
flattened parameter (`_flat_param`, use_orig_params=False) an "unknown tensor": both are
intact saves of a kind export does not convert, named by both commands (UNSUPPORTED in
validate). Accelerate's FULL_STATE_DICT model file (`pytorch_model_fsdp.bin`) was "not a
checkpoint" alone and "training state, no model weights" in a Trainer checkpoint-N: it
is named, with what to do, and never unpickled.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.support.interop_layouts import one_error_line, run_cli

_Q = "model.layers.0.self_attn.q_proj"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    return build_tiny_model_dir(tmp_path_factory.mktemp("hf") / "model", with_weights=True)


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(model_dir / "model.safetensors")


def _saved(model: dict[str, torch.Tensor], target: Path) -> Path:
    """`dcp.save({"model": model})`, as torch's own recipe and Accelerate save a model."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model": model}, checkpoint_id=str(target), no_dist=True)
    return target


def _both(ckpt: Path, model_dir: Path, out: Path) -> tuple[tuple[int, str, str], ...]:
    """(code, stdout, stderr) of `validate --deep` and of `export-hf`, each given the config."""
    validated = run_cli("ckpt", "validate", ckpt, "--hf-config", model_dir, "--deep")
    exported = run_cli("ckpt", "export-hf", ckpt, "--hf-config", model_dir, "--out", out)
    return validated, exported


def _said(line: str, ckpt: Path) -> str:
    """An error line less `error: CKPT` and the separator after it."""
    return line.removeprefix(f"error: {ckpt}").lstrip(": ")


def _with_wrapper(weights: dict[str, torch.Tensor], wrapped: str) -> dict[str, torch.Tensor]:
    """`weights` plus q_proj's weight a second time under a wrapper's name (`wrapped`)."""
    return {**weights, wrapped: weights[f"{_Q}.weight"].clone()}


_REFUSED = {
    "int8": lambda w: {**w, f"{_Q}.weight": w[f"{_Q}.weight"].to(torch.int8)},
    "torch.compile": lambda w: _with_wrapper(w, f"_orig_mod.{_Q}.weight"),
    "DDP": lambda w: _with_wrapper(w, f"module.{_Q}.weight"),
    "activation checkpointing": lambda w: _with_wrapper(
        w, "model.layers.0._checkpoint_wrapped_module.self_attn.q_proj.weight"
    ),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_validate_refuses_what_export_refuses_in_its_words(case, model_dir, tmp_path):
    ckpt = _saved(_REFUSED[case](_weights(model_dir)), tmp_path / "dist_ckpt")
    (code, stdout, err), (export_code, _, export_err) = _both(ckpt, model_dir, tmp_path / "out")
    refused = _said(one_error_line(export_err), ckpt)
    assert export_code == 1 and ("int8" in refused or "refusing to pick one" in refused), refused
    assert code == 1 and "INVALID" in stdout + err, stdout + err
    assert refused in [_said(line, ckpt) for line in (stdout + err).splitlines()], stdout + err


def _live_peft(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A PEFT model's state dict as FSDP saves it in place: base_layer and lora_A/B names."""
    base = weights.pop(f"{_Q}.weight")
    rank = 2
    return {
        **{f"base_model.model.{name}": t for name, t in weights.items()},
        f"base_model.model.{_Q}.base_layer.weight": base,
        f"base_model.model.{_Q}.lora_A.default.weight": torch.zeros(rank, base.shape[1]),
        f"base_model.model.{_Q}.lora_B.default.weight": torch.zeros(base.shape[0], rank),
    }


@pytest.mark.parametrize(
    ("case", "names"),
    [
        ("live PEFT", "a live PEFT model's names (base_layer, lora_A.<adapter>)"),
        ("FSDP1 flat", "FSDP1's flattened parameter (_flat_param: use_orig_params=False"),
    ],
)
def test_an_unconverted_kind_of_save_is_unsupported_in_exports_words(
    case, names, model_dir, tmp_path
):
    weights = _weights(model_dir)
    flat = torch.cat([t.flatten() for t in weights.values()])
    model = (
        _live_peft(weights) if case == "live PEFT" else {"_fsdp_wrapped_module._flat_param": flat}
    )
    ckpt = _saved(model, tmp_path / "dist_ckpt")
    (code, stdout, err), (export_code, _, export_err) = _both(ckpt, model_dir, tmp_path / "out")
    refused = _said(one_error_line(export_err), ckpt)
    assert export_code == 2 and names in refused, refused
    assert code == 1 and f"UNSUPPORTED: {ckpt}" in stdout + err, stdout + err
    said = [_said(line, ckpt) for line in (stdout + err).splitlines()]
    assert "missing" not in stdout + err and refused in said, stdout + err


class _Runs:
    """A pickle that, once loaded, would create the file it names."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.mknod, (str(self.path),))


@pytest.mark.parametrize("where", ["save_state", "Trainer checkpoint-N"])
def test_accelerates_full_state_dict_file_is_named_and_never_unpickled(where, tmp_path):
    ran = tmp_path / "unpickled"
    save = tmp_path / "run" / "checkpoint-3" if where != "save_state" else tmp_path / "state"
    save.mkdir(parents=True)
    for name in ("pytorch_model_fsdp.bin", "optimizer.bin", "scheduler.bin"):
        (save / name).write_bytes(pickle.dumps(_Runs(ran)))
    if where != "save_state":
        (save / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    for command in ("inspect", "validate", "export-hf"):
        args = ["--out", tmp_path / "out"] if command == "export-hf" else []
        code, _, err = run_cli("ckpt", command, save, *args)
        line = one_error_line(err)
        assert code == 2 and "pytorch_model_fsdp.bin: Accelerate's FULL_STATE_DICT" in line, line
        assert "save_pretrained" in line and "SHARDED_STATE_DICT" in line, line
        assert "no model weights" not in line and "not a checkpoint" not in line, line
    assert not ran.exists()
