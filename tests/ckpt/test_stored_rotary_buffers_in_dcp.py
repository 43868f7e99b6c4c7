"""A DCP holding `rotary_emb.inv_freq` buffers is the model without them, as import-hf says.

Older transformers (and remote-code models) persisted each layer's `rotary_emb.inv_freq`;
`from_pretrained` ignores it and recomputes it from the config. import-hf left it out with a
note, but an FSDP save of such a model (`dcp.save({"model": state_dict})`) was INVALID to
`validate --hf-config` ("unexpected for qwen2") and export-hf refused it ("tensor(s)
unknown to qwen2"): one list of ignored buffers (`stored_buffers`) serves all three.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file

from tests.support.interop_layouts import run_cli

_NOTE = "2 stored rotary buffer(s) (model.model.layers.0.self_attn.rotary_emb.inv_freq, ...)"


def _dcp_with_buffers(tmp_path: Path) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    """(the DCP, the model dir its config is in, the model's weights)."""
    from trainer.tiny import build_tiny_model_dir

    model_dir = build_tiny_model_dir(tmp_path / "model", with_weights=True)
    weights = load_file(model_dir / "model.safetensors")
    state = dict(weights)
    for layer in range(2):
        state[f"model.layers.{layer}.self_attn.rotary_emb.inv_freq"] = torch.rand(4)
    target = tmp_path / "fsdp_save"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model": state}, checkpoint_id=str(target), no_dist=True)
    return target, model_dir, weights


def test_validate_leaves_the_buffers_out_with_a_note(tmp_path):
    ckpt, model_dir, _weights = _dcp_with_buffers(tmp_path)
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", model_dir, "--json")
    assert code == 0, stdout + err
    findings = json.loads(stdout)["findings"]
    assert {
        "severity": "note",
        "where": str(ckpt),
        "message": f"{_NOTE} left out: loading recomputes them from the config",
    } in findings, findings
    # the note fails nothing, not even --strict: only what it always says of a bare DCP
    assert [f for f in findings if f["severity"] != "note"] == [], findings
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", model_dir)
    assert code == 0 and f"note: {ckpt}: {_NOTE} left out" in stdout + err, stdout + err


def test_export_writes_the_model_without_them(tmp_path):
    ckpt, model_dir, weights = _dcp_with_buffers(tmp_path)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--hf-config", model_dir, "--out", out)
    assert code == 0, stdout + err
    assert f"{_NOTE} left out" in err, err
    written = load_file(out / "model.safetensors")
    assert sorted(written) == sorted(weights)
    for name, tensor in weights.items():
        assert torch.equal(written[name], tensor), name
