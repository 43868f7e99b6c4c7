"""Megatron checkpoints of a run with multi-token prediction (`--mtp-num-layers`).

Megatron-LM saves the MTP block beside the decoder as `mtp.layers.N.{enorm, hnorm, eh_proj,
transformer_layer.*, final_layernorm}`; none of the transformers models export writes has
one, but the main model is complete without it. `export-hf --drop-mtp` leaves those tensors
out unread; without it the checkpoint is refused in one line naming the flag. The
checkpoints are Megatron-LM-shaped (tests/support/megatron_checkpoints.py), built from a tiny
transformers model through tests/support/hf_to_mcore.py's independent converter, each
beside a twin saved without the MTP tensors: the export of one must be the export of the
other, byte for byte, and give the source model's logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.export import load_report, logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    STEP,
    megatron_args,
    megatron_run,
    mtp_weights,
    save_dcp,
    source_logits,
)

MTP_LAYERS = 2


def _runs(tmp_path: Path, model) -> tuple[Path, Path]:
    """(a Megatron-LM run trained with MTP_LAYERS MTP layers, with Adam state; the same
    checkpoint without the MTP tensors). Both hold the same args, which name the MTP layers."""
    args = megatron_args(model, mtp_num_layers=MTP_LAYERS, mtp_loss_scaling_factor=0.1)
    with_mtp = megatron_run(tmp_path / "mtp", model, args, optimizer=True, mtp_layers=MTP_LAYERS)
    without = megatron_run(tmp_path / "plain", model, args, optimizer=True)
    return with_mtp, without


def _mtp_tensor_count(model) -> int:
    return len(mtp_weights(model, MTP_LAYERS))


def _spoil_mtp_bytes(dcp_dir: Path) -> None:
    """Overwrite every MTP tensor's stored bytes: an export that read one would fail."""
    reader = CheckpointReader(dcp_dir)
    for entry in reader.tensors.values():
        if ".mtp." not in entry.name:
            continue
        for chunk in entry.chunks:
            assert chunk.file is not None
            with open(dcp_dir / chunk.file, "r+b") as file:
                file.seek(chunk.file_offset)
                file.write(b"\xff" * chunk.length)


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("family", ["qwen2", "llama", "qwen3_moe"])
def test_drop_mtp_exports_the_main_model_byte_for_byte_unread(family, tmp_path):
    """The export of an MTP checkpoint with --drop-mtp is the export of its twin without
    MTP tensors (every file), never reads the MTP tensors (their bytes are spoiled), and
    gives the source model's logits in transformers."""
    model = tiny_causal_lm(family)
    with_mtp, without = _runs(tmp_path, model)
    _spoil_mtp_bytes(with_mtp / f"iter_{STEP:07d}")
    out, twin = tmp_path / "hf", tmp_path / "hf_twin"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", with_mtp, "--out", out, "--drop-mtp", "--verify", "--json"
    )
    assert code == 0, stdout + err
    result = json.loads(stdout)
    tensors = _mtp_tensor_count(model)
    assert result["dropped_mtp"] == {"layers": MTP_LAYERS, "tensors": tensors}, result
    dropped = f"--drop-mtp: left out 2 multi-token prediction (MTP) layers ({tensors} tensors)"
    assert any(note.startswith(dropped) for note in result["notes"]), result["notes"]
    assert result["mismatches"] == []
    code, stdout, err = run_cli("ckpt", "export-hf", without, "--out", twin, "--json")
    assert code == 0, stdout + err
    assert json.loads(stdout)["dropped_mtp"] is None
    assert _files(out) == _files(twin)
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    assert (logits_of(out, ids) - expected).abs().max() <= 1e-5


def test_drop_mtp_notes_on_stderr_and_the_help_shows_it(tmp_path):
    model = tiny_causal_lm("qwen2")
    with_mtp, _ = _runs(tmp_path, model)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", with_mtp, "--out", tmp_path / "hf", "--drop-mtp"
    )
    assert code == 0 and len(stdout.splitlines()) == 1, stdout + err
    notes = [line for line in err.splitlines() if "--drop-mtp" in line]
    assert len(notes) == 1 and notes[0].startswith("note: --drop-mtp: left out 2 multi"), err
    code, stdout, _ = run_cli("ckpt", "export-hf", "--help")
    assert code == 0 and "--drop-mtp" in stdout
    assert "mfsdp ckpt export-hf megatron_run --out hf/q7 --drop-mtp" in stdout


def test_without_drop_mtp_the_refusal_names_the_first_mtp_tensor_and_the_flag(tmp_path):
    """Was: "multi-token prediction (MTP) layers are not supported (N MTP tensor(s)); the
    transformers models export writes have none", with no way out."""
    model = tiny_causal_lm("llama")
    with_mtp, _ = _runs(tmp_path, model)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", with_mtp, "--out", out)
    line = one_error_line(err)
    assert code == 1 and not out.exists(), stdout + err
    assert "[model.module.mtp.layers.0.eh_proj.weight]: 2 multi-token prediction (MTP)" in line
    assert "pass --drop-mtp to export the main model without them" in line, line
    code, stdout, _ = run_cli("ckpt", "export-hf", with_mtp, "--out", out, "--json")
    failure = json.loads(stdout)
    assert code == 1 and failure["exit_code"] == 1 and "--drop-mtp" in failure["error"]


def test_drop_mtp_on_a_checkpoint_without_mtp_changes_nothing(tmp_path):
    model = tiny_causal_lm("qwen2")
    _, without = _runs(tmp_path, model)
    out, plain = tmp_path / "hf", tmp_path / "plain_hf"
    code, stdout, err = run_cli("ckpt", "export-hf", without, "--out", out, "--drop-mtp")
    assert code == 0 and "--drop-mtp" not in err, stdout + err
    assert run_cli("ckpt", "export-hf", without, "--out", plain)[0] == 0
    assert _files(out) == _files(plain)


def test_validate_warns_that_mtp_layers_are_not_checked_and_passes(tmp_path):
    """Was: exit 1, "the weights do not fit this config: ... (MTP) layers are not
    supported". The main model is checked against the config (from args, or --hf-config);
    the MTP layers, which it has no counterpart for, are a warning, so --strict fails."""
    model = tiny_causal_lm("qwen2")
    with_mtp, _ = _runs(tmp_path, model)
    model.config.save_pretrained(tmp_path / "config")
    for given in ((), ("--hf-config", tmp_path / "config")):
        code, stdout, err = run_cli("ckpt", "validate", with_mtp, *given, "--json")
        report = json.loads(stdout)
        assert code == 0 and report["valid"] is True, stdout + err
        (finding,) = report["findings"]
        assert finding["severity"] == "warning", finding
        assert finding["where"] == "[model.module.mtp.layers.0.eh_proj.weight]"
        assert finding["message"].startswith("2 multi-token prediction (MTP) layers")
        assert "not checked against" in finding["message"] and "--drop-mtp" in finding["message"]
        # the record (args: mtp_num_layers 2) has them; the transformers model has none
        assert "has no MTP module" in finding["message"], finding
        assert "whose model has none" not in finding["message"], finding
    code, stdout, _ = run_cli("ckpt", "validate", with_mtp, "--strict")
    assert code == 1 and "warning: [model.module.mtp.layers.0.eh_proj.weight]" in stdout
    code, stdout, _ = run_cli("ckpt", "validate", with_mtp, "--deep")
    assert code == 0 and "valid:" in stdout, stdout


def test_validate_still_fails_a_main_model_that_does_not_fit(tmp_path):
    """Leaving the MTP layers out of the check leaves the rest checked."""
    model = tiny_causal_lm("qwen2")
    with_mtp, _ = _runs(tmp_path, model)
    config = tmp_path / "config"
    model.config.save_pretrained(config)
    data = json.loads((config / "config.json").read_text())
    (config / "config.json").write_text(json.dumps({**data, "intermediate_size": 96}))
    code, stdout, _ = run_cli("ckpt", "validate", with_mtp, "--hf-config", config)
    assert code == 1 and "the weights do not fit this config" in stdout, stdout


def test_inspect_names_the_mtp_layers_on_its_model_line(tmp_path):
    model = tiny_causal_lm("qwen2")
    with_mtp, _ = _runs(tmp_path, model)
    code, stdout, _ = run_cli("ckpt", "inspect", with_mtp)
    model_line = next(line for line in stdout.splitlines() if line.startswith("model "))
    assert code == 0 and "Qwen2ForCausalLM, 2 layers" in model_line, stdout
    tensors = _mtp_tensor_count(model)
    assert f"plus 2 multi-token prediction (MTP) layers ({tensors} tensors)" in model_line
    assert "export-hf --drop-mtp leaves them out" in model_line
    code, stdout, _ = run_cli("ckpt", "inspect", with_mtp, "--json")
    mtp = json.loads(stdout)["mtp"]
    assert code == 0 and (mtp["layers"], mtp["tensors"]) == (MTP_LAYERS, tensors), mtp
    # a bare dist_ckpt dir records no model: the model line names the MTP layers alone
    bare = save_dcp({"model": {"module.mtp.layers.0.enorm.weight": torch.ones(8)}}, tmp_path / "b")
    code, stdout, _ = run_cli("ckpt", "inspect", bare)
    assert code == 0, stdout
    assert "model       1 multi-token prediction (MTP) layer (1 tensor) beside" in stdout
    _, without = _runs(tmp_path / "again", model)
    code, stdout, _ = run_cli("ckpt", "inspect", without, "--json")
    assert code == 0 and json.loads(stdout)["mtp"] is None
