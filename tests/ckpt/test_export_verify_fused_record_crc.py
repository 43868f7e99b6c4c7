"""export-hf --verify checks the CRC torch.save wrote for a tensor converted whole.

A Megatron-layout checkpoint keeps q, k and v in one linear_qkv and gate and up in one
linear_fc1; the export splits each, so --verify decoded the record through torch, which
checks no CRC: with no manifest (Megatron-LM, verl) a bit flipped in such a record was
written out and reported "verified", while the same flip in a tensor copied as stored was
"fails its CRC". Every record --verify decodes is now checked as its bytes are read,
a Megatron LoRA adapter's (its B fused as linear_qkv is) in both of its routes too.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.ckpt.test_blob_payload_bounds import _data_record
from tests.ckpt.test_interop_megatron_peft import _hf_lora, _megatron_adapters
from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

FAILS = "blob member archive/data/0 fails its CRC (bytes changed)"
FUSED = {
    "qkv": "model.module.decoder.layers.0.self_attention.linear_qkv.weight",
    "fc1": "model.module.decoder.layers.1.mlp.linear_fc1.weight",
}


@pytest.fixture(scope="module")
def megatron(tmp_path_factory) -> tuple[Path, Path, torch.nn.Module]:
    """A bare Megatron-layout DCP (fused linear_qkv and linear_fc1, no manifest) of a tiny
    Llama, and its config.json apart."""
    root = tmp_path_factory.mktemp("fused_crc")
    model = tiny_causal_lm("llama")
    model.config.save_pretrained(root / "assets")
    weights = to_mcore(model, norms="local", fc1="fused")
    dcp = save_dcp({"model": {f"module.{k}": v for k, v in weights.items()}}, root / "ckpt")
    return dcp, root / "assets" / "config.json", model


def _export(dcp: Path, config: Path, out: Path) -> tuple[int, str, str]:
    args = ("ckpt", "export-hf", dcp, "--out", out, "--hf-config", config, "--dtype", "fp32")
    return run_cli(*args, "--verify")


def _flip_a_payload_bit(dcp: Path, key: str) -> Path:
    """The file holding `key`'s one record, with one bit of its payload flipped."""
    (chunk,) = CheckpointReader(dcp).tensors[key].chunks
    assert chunk.file is not None
    path = dcp / chunk.file
    data = bytearray(path.read_bytes())
    blob = data[chunk.file_offset : chunk.file_offset + chunk.length]
    at = _data_record(blob).header_offset
    name_len, extra_len = struct.unpack_from("<HH", blob, at + 26)
    blob[at + 30 + name_len + extra_len + 20] ^= 0x01
    data[chunk.file_offset : chunk.file_offset + chunk.length] = blob
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("fused", sorted(FUSED))
def test_verify_refuses_a_flipped_bit_in_a_fused_record(fused, megatron, tmp_path):
    """Was: exit 0, "verified", the flipped value written into q_proj (or gate_proj)."""
    healthy, config, _ = megatron
    dcp = shutil.copytree(healthy, tmp_path / "ckpt")
    path = _flip_a_payload_bit(dcp, FUSED[fused])
    code, stdout, err = _export(dcp, config, tmp_path / "hf")
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert f"{path} [{FUSED[fused]}]" in line and FAILS in line, line


def test_verify_passes_an_unchanged_fused_checkpoint_bit_exact(megatron, tmp_path):
    dcp, config, model = megatron
    code, stdout, err = _export(dcp, config, tmp_path / "hf")
    assert code == 0, stdout + err
    written = load_file(tmp_path / "hf" / "model.safetensors")
    for name, value in model.state_dict().items():
        if name in written:
            assert torch.equal(written[name].view(torch.uint8), value.view(torch.uint8)), name
    assert "model.layers.1.mlp.gate_proj.weight" in written


ADAPTER_B = "model.module.decoder.layers.0.self_attention.linear_qkv.adapter.linear_out.weight"


@pytest.mark.parametrize("adapter_only", [True, False], ids=["adapter_only", "merged"])
def test_verify_refuses_a_flipped_bit_in_a_megatron_adapter_record(adapter_only, tmp_path):
    """A Megatron LoRA adapter saved alone (no manifest), exported as a PEFT adapter or
    merged onto the base in --hf-config: was exit 0, "verified"."""
    model = tiny_causal_lm("llama")
    base = tmp_path / "base"
    model.config.save_pretrained(base)
    save_file(model.state_dict(), base / "model.safetensors")
    adapters = _megatron_adapters(model, _hf_lora(model))
    dcp = save_dcp({"model": adapters}, tmp_path / "ckpt")
    args = ("ckpt", "export-hf", dcp, "--hf-config", base, "--lora-alpha", "8", "--verify")
    extra = ("--adapter-only",) if adapter_only else ()
    assert run_cli(*args, *extra, "--out", tmp_path / "healthy")[0] == 0
    path = _flip_a_payload_bit(dcp, ADAPTER_B)
    code, stdout, err = run_cli(*args, *extra, "--out", tmp_path / "hf")
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert f"{path} [{ADAPTER_B}]" in line and FAILS in line, line
