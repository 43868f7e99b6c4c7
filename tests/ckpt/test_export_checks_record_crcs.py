"""Plain export-hf (no --verify) checks the CRC torch.save wrote for each record it reads.

Without a manifest (Megatron-LM, Megatron-Bridge, verl saves) that CRC is the only evidence a
tensor's bytes are the ones saved, and torch.load checks none: a bit flipped in a model
weight was written into the exported safetensors, exit 0, while --verify and validate --deep
refused it. The export reads those bytes anyway (streamed, or read raw into a tensor it
converts whole), so each is now added to its record's CRC as it passes: a record that fails
it is one line naming the file and the key, exit 1, and nothing is left at --out. The rows
it drops (Megatron's vocabulary padding) are read for the CRC too; a save whose CRCs were
written as 0 (`set_crc32_options(False)`) exports as before.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.ckpt.test_export_verify_fused_record_crc import FAILS, _flip_a_payload_bit
from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import mcore_weights, save_dcp

VOCAB, PADDED = 512, 640  # the config's vocabulary, the rows Megatron saved
STREAMED = "model.module.decoder.layers.0.self_attention.linear_proj.weight"  # o_proj as stored
FUSED = "model.module.decoder.layers.0.self_attention.linear_qkv.weight"  # split: converted whole
EMBEDDING = "model.module.embedding.word_embeddings.weight"  # its padding rows dropped


def _megatron_save(root: Path, fc1: str = "split") -> tuple[Path, Path, torch.nn.Module]:
    """A bare Megatron-layout DCP of a tiny Llama (no manifest), its vocabulary padded as
    Megatron pads it, and the model's config.json apart."""
    model = tiny_causal_lm("llama", vocab=VOCAB)
    model.config.save_pretrained(root / "assets")
    weights = mcore_weights(model, rows=PADDED)
    if fc1 == "fused":
        weights = {f"module.{k}": v for k, v in to_mcore(model, norms="local", fc1="fused").items()}
    dcp = save_dcp({"model": weights}, root / "ckpt")
    return dcp, root / "assets" / "config.json", model


@pytest.fixture(scope="module")
def megatron(tmp_path_factory) -> tuple[Path, Path, torch.nn.Module]:
    return _megatron_save(tmp_path_factory.mktemp("export_crc"))


def _export(dcp: Path, config: Path, out: Path, *args: str) -> tuple[int, str, str]:
    return run_cli("ckpt", "export-hf", dcp, "--out", out, "--hf-config", config, *args)


def _flip_in_copy(megatron, tmp_path: Path, key: str) -> tuple[Path, Path, Path]:
    healthy, config, _ = megatron
    dcp = shutil.copytree(healthy, tmp_path / "ckpt")
    return dcp, config, _flip_a_payload_bit(dcp, key)


def _assert_refused(code: int, stdout: str, err: str, path: Path, key: str, out: Path) -> None:
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert f"{path} [{key}]" in line and FAILS in line, line
    assert sorted(p.name for p in out.parent.iterdir()) == ["ckpt"]  # no output, no work dir


@pytest.mark.parametrize(
    "args",
    [("--dtype", "fp32"), ("--dtype", "fp32", "--allow-nonfinite"), ("--dtype", "bf16")],
    ids=["copied", "copied_nonfinite_allowed", "cast"],
)
def test_a_flipped_bit_in_a_streamed_record_is_refused(megatron, tmp_path, args):
    """Was: exit 0, the flipped value written into o_proj."""
    dcp, config, path = _flip_in_copy(megatron, tmp_path, STREAMED)
    out = tmp_path / "hf"
    code, stdout, err = _export(dcp, config, out, *args)
    _assert_refused(code, stdout, err, path, STREAMED, out)


def test_a_flipped_bit_in_a_record_converted_whole_is_refused(tmp_path):
    """A fused linear_qkv is split, so converted whole: its raw record is read into the
    tensor once and checked as it lands."""
    healthy, config, _ = _megatron_save(tmp_path / "made", fc1="fused")
    dcp = shutil.copytree(healthy, tmp_path / "ckpt")
    path = _flip_a_payload_bit(dcp, FUSED)
    out = tmp_path / "hf"
    code, stdout, err = _export(dcp, config, out, "--dtype", "fp32")
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert f"{path} [{FUSED}]" in line and FAILS in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "made"]  # nothing at --out


def _flip_a_padding_bit(dcp: Path, key: str) -> Path:
    """The file holding `key`'s record with one bit flipped in its last row, which the
    export drops (vocabulary padding) and so never writes."""
    from mfsdp_ckpt.storage.reader import CheckpointReader

    reader = CheckpointReader(dcp)
    entry = reader.tensors[key]
    (chunk,) = entry.chunks
    payload = reader.raw_payload(entry, chunk)
    assert payload is not None and chunk.file is not None
    path = dcp / chunk.file
    data = bytearray(path.read_bytes())
    data[payload.offset + chunk.numel * entry.dtype.itemsize - 2] ^= 0x01
    path.write_bytes(bytes(data))
    return path


def test_a_flipped_bit_in_dropped_padding_rows_is_refused(megatron, tmp_path):
    healthy, config, _ = megatron
    dcp = shutil.copytree(healthy, tmp_path / "ckpt")
    path = _flip_a_padding_bit(dcp, EMBEDDING)
    out = tmp_path / "hf"
    code, stdout, err = _export(dcp, config, out, "--dtype", "fp32")
    _assert_refused(code, stdout, err, path, EMBEDDING, out)


def _assert_bit_exact(out: Path, model: torch.nn.Module) -> None:
    written = load_file(out / "model.safetensors")
    for name, value in model.state_dict().items():
        if name in written:
            assert torch.equal(written[name].view(torch.uint8), value.view(torch.uint8)), name
    assert "model.layers.0.self_attn.o_proj.weight" in written


def test_an_unchanged_save_exports_bit_exact(megatron, tmp_path):
    dcp, config, model = megatron
    code, stdout, err = _export(dcp, config, tmp_path / "hf", "--dtype", "fp32")
    assert code == 0, stdout + err
    _assert_bit_exact(tmp_path / "hf", model)


@pytest.fixture
def crc_off() -> Iterator[None]:
    """torch.save writes 0 as every record's CRC while the test runs."""
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(True)


@pytest.mark.parametrize("fc1", ["split", "fused"])
def test_a_save_without_crcs_exports(tmp_path, crc_off, fc1):
    dcp, config, model = _megatron_save(tmp_path, fc1=fc1)
    code, stdout, err = _export(dcp, config, tmp_path / "hf", "--dtype", "fp32")
    assert code == 0, stdout + err
    _assert_bit_exact(tmp_path / "hf", model)
