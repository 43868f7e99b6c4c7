"""A tied head unequal to its embedding by damage is called damaged, not trained untied.

One flipped byte in a tied checkpoint made the head differ from the embedding in one
element, and export blamed the config: exit 2, "(trained untied) ... use a config with
tie_word_embeddings false", advice that export then refused too, while `validate --deep`
found the file's digest changed. Training a head apart changes nearly every element; damage
changes a few. So a head that differs in a few elements, or whose files no longer match the
manifest's digests (checked for those files only), is damaged: exit 1, pointing to
`validate --deep`; a head that differs everywhere is still "trained untied" (exit 1 under
the checkpoint's own config, 2 under --hf-config's).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from mfsdp_ckpt.convert import tied_head
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp
from tests.support.paths import FIXTURES

HEAD, EMBEDDING = "model.lm_head.weight", "model.model.embed_tokens.weight"
MEGATRON_FSDP_HEAD = "model.module.lm_head.weight"


def _flip_one_head_byte(run: Path) -> Path:
    """A byte in the middle of the head's first chunk inverted in place (sizes unchanged):
    the file holding it, __0_*.distcp, no longer matches the manifest. Returns that file."""
    dcp = run / "global_step_2" / "dist_ckpt"
    reader = CheckpointReader(dcp)
    entry = reader.tensors[MEGATRON_FSDP_HEAD]
    chunk = min((c for c in entry.chunks if c.numel), key=lambda c: c.offsets)
    offset = reader.raw_payload_offset(entry, chunk)
    assert offset is not None and chunk.file is not None
    with open(dcp / chunk.file, "r+b") as handle:
        handle.seek(offset + chunk.numel * entry.dtype.itemsize // 2)
        byte = handle.read(1)[0]
        handle.seek(-1, 1)
        handle.write(bytes([byte ^ 0x7F]))
    return dcp / chunk.file


def test_a_flipped_byte_under_a_manifest_is_damage_naming_the_file(tmp_path):
    """Was: exit 2, "(trained untied) ... use a config with tie_word_embeddings false"."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run")
    changed = _flip_one_head_byte(run)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    assert code == 1 and f"[{MEGATRON_FSDP_HEAD}]" in line, stdout + err
    assert f"{changed}, which holds them, differs from the manifest" in line, line
    assert "damaged" in line and "mfsdp ckpt validate --deep" in line, line
    assert "trained untied)" not in line and not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep", "--json")
    findings = json.loads(stdout)["findings"]
    assert code == 1, stdout + err
    head = [f["message"] for f in findings if f["where"] == f"[{MEGATRON_FSDP_HEAD}]"]
    assert len(head) == 1 and "damaged, not trained untied" in head[0], findings


def _tied_dcp(root: Path, changed_elements: int) -> Path:
    """A tied Qwen2 as a bare DCP (no manifest) with huggingface/config.json, the head the
    embedding's copy but for its first `changed_elements` values."""
    model = tiny_causal_lm("qwen2", vocab=64)
    state = {name: value.clone() for name, value in model.state_dict().items()}
    head = state["lm_head.weight"].reshape(-1)
    head[:changed_elements] += 0.5
    ckpt = save_dcp({"model": state}, root / "dist_ckpt")
    model.config.save_pretrained(root / "huggingface")
    return ckpt


def test_a_few_differing_elements_without_a_manifest_are_damage(tmp_path):
    ckpt = _tied_dcp(tmp_path, changed_elements=3)
    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1, stdout + err
    assert f"[{HEAD}]: differs from [{EMBEDDING}] in only 3 of 8192 elements: damaged" in line
    assert "mfsdp ckpt validate --deep" in line, line
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--deep")
    assert code == 1 and "in only 3 of 8192 elements: damaged" in stdout, stdout + err


def test_a_head_that_differs_everywhere_is_still_trained_untied(tmp_path):
    ckpt = _tied_dcp(tmp_path, changed_elements=64 * 128)
    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "(trained untied)" in line and "damaged" not in line, stdout + err


@pytest.mark.parametrize(("changed", "damaged"), [(1, True), (8192, False)])
def test_import_tells_damage_from_a_head_trained_apart(changed, damaged, tmp_path):
    model = tiny_causal_lm("qwen2", vocab=64)
    model.save_pretrained(tmp_path / "src")
    weights = tmp_path / "src" / "model.safetensors"
    tensors = load_file(weights)
    head = tensors["model.embed_tokens.weight"].clone()
    head.reshape(-1)[:changed] += 0.5
    save_file({**tensors, "lm_head.weight": head}, weights, metadata={"format": "pt"})
    code, stdout, err = run_cli("ckpt", "import-hf", tmp_path / "src", "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 1, stdout + err
    assert ("damaged rather than trained untied" in line) is damaged, line
    assert ("(trained untied)" in line) is not damaged, line


def test_counting_stops_past_a_few(monkeypatch):
    """The count is exact up to a few and stops past them: a head trained apart is not
    read to its end once it is known to differ in many elements."""
    import torch

    assert tied_head.few_elements(4096) == tied_head.MIN_FEW
    assert tied_head.few_elements(10**8) == 10**5
    assert tied_head.few_elements(10) == 4  # a tiny head that differs everywhere is no "few"
    reads = []

    def read(which: int, start: int, size: int) -> bytes:
        reads.append(start)
        values = torch.zeros(size // 4) if which == 0 else torch.ones(size // 4)
        return values.numpy().tobytes()

    monkeypatch.setattr(tied_head, "PIECE_BYTES", 64)  # 16 float32 elements a piece
    counter = tied_head._Counter(4096)
    tied_head._count_same_dtype(4096, 4, read, counter)
    difference = counter.result()
    assert not difference.few and difference.differing == 2 * 16 and len(reads) == 4
    verdict = tied_head.unequal_verdict(difference, "e", [], "c", "r")
    assert not verdict.damaged and "(trained untied)" in verdict.what
