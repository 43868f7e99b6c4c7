"""A stored `lm_head.weight` under `tie_word_embeddings: true` is compared with the embedding
before the tied config drops it.

A trainer's state dict saves a tied head beside the embedding, and a tied config writes the
embedding alone. Was: the head was dropped unread whatever it held (export exit 0, validate
valid, import-hf exit 0 in both layouts), so a head trained apart from the embedding became
the embedding: a different model, which transformers itself refuses to tie (it loads such a
pair untied). Now equal bytes are dropped as before; unequal ones are refused naming the
tensor and the config key, as a Megatron-core output layer is
(tests/ckpt/test_interop_megatron_verl_variants.py): export exit 1 for the checkpoint's own
config (pass an untied one with --hf-config), 2 for --hf-config's,
`validate --deep` an error (values are read only with --deep, as for NaN), import-hf exit 1
(the model dir contradicts itself).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from mfsdp_ckpt.convert import tied_head
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp
from tests.support.paths import FIXTURES

HEAD, EMBEDDING = "model.lm_head.weight", "model.model.embed_tokens.weight"
EXPORT_REMEDY = "use a config with tie_word_embeddings false"
OWN_CONFIG = "the checkpoint's own config"
OWN_REMEDY = "pass --hf-config DIR|config.json with tie_word_embeddings false"


def _untied(embedding: str, config: str, remedy: str = EXPORT_REMEDY) -> str:
    return (
        f"an output layer of its own, unequal to [{embedding}] (trained untied), but {config}"
        f" says tie_word_embeddings=true; {remedy}"
    )


def _tied_dcp(root: Path, head_change: float | None, head_dtype=None) -> Path:
    """A `{"model": state_dict}` DCP of a tied Qwen2 with its config in huggingface/; every
    value of the head moved by `head_change`, as training it apart does (None: the
    embedding's own values), stored in `head_dtype` (None: the embedding's)."""
    model = tiny_causal_lm("qwen2", vocab=64)
    state = {name: value.clone() for name, value in model.state_dict().items()}
    if head_change is not None:
        state["lm_head.weight"] += head_change
    if head_dtype is not None:
        state["lm_head.weight"] = state["lm_head.weight"].to(head_dtype)
    ckpt = save_dcp({"model": state}, root / "dist_ckpt")
    model.config.save_pretrained(root / "huggingface")
    return ckpt


def test_export_and_validate_refuse_a_head_unequal_to_the_tied_embedding(tmp_path):
    ckpt = _tied_dcp(tmp_path, head_change=0.5)
    code, out, err = run_cli("ckpt", "export-hf", ckpt, "--out", tmp_path / "hf")
    assert code == 1, out + err  # the checkpoint's own config: exit 2 is for --hf-config's
    assert one_error_line(err) == (
        f"error: {ckpt}: [{HEAD}]: {_untied(EMBEDDING, OWN_CONFIG, OWN_REMEDY)}"
    )
    assert not (tmp_path / "hf").exists()
    code, out, err = run_cli("ckpt", "validate", ckpt)  # reads values only with --deep
    assert code == 0, out + err
    code, out, err = run_cli("ckpt", "validate", ckpt, "--deep", "--json")
    report = json.loads(out)
    assert code == 1 and not report["valid"], out + err
    config = tmp_path / "huggingface" / "config.json"
    assert [(f["severity"], f["where"], f["message"]) for f in report["findings"]] == [
        ("error", f"[{HEAD}]", _untied(EMBEDDING, str(config)))
    ]


def test_a_head_equal_to_the_tied_embedding_is_dropped_as_before(tmp_path):
    ckpt = _tied_dcp(tmp_path, head_change=None)
    code, out, err = run_cli("ckpt", "validate", ckpt, "--deep", "--json")
    assert code == 0 and json.loads(out)["findings"] == [], out + err
    code, out, err = run_cli("ckpt", "export-hf", ckpt, "--out", tmp_path / "hf")
    assert code == 0, out + err
    assert "lm_head.weight" not in load_file(tmp_path / "hf" / "model.safetensors")


def _flip_last_head_byte(run: Path) -> Path:
    """The last byte of the head's last chunk's payload inverted in place (sizes unchanged,
    so the manifest's size checks still pass): its last row differs from the embedding's."""
    dcp = run / "global_step_2" / "dist_ckpt"
    reader = CheckpointReader(dcp)
    entry = reader.tensors["model.module.lm_head.weight"]
    chunk = max(entry.chunks, key=lambda c: c.offsets)
    offset = reader.raw_payload_offset(entry, chunk)
    assert offset is not None and chunk.file is not None
    with open(dcp / chunk.file, "r+b") as handle:
        handle.seek(offset + chunk.numel * entry.dtype.itemsize - 1)
        byte = handle.read(1)[0]
        handle.seek(-1, 1)
        handle.write(bytes([byte ^ 0xFF]))
    return dcp


@pytest.mark.parametrize("flipped", [False, True])
def test_two_rank_chunks_are_compared_a_piece_at_a_time(flipped, tmp_path, monkeypatch):
    """Megatron-FSDP's own save of a tied model (tests/fixtures/megatron_fsdp_qwen2): both
    tensors in two uneven chunks, compared chunk by chunk in pieces far smaller than a
    chunk, to the last byte."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run")
    dcp = _flip_last_head_byte(run) if flipped else run / "global_step_2" / "dist_ckpt"
    monkeypatch.setattr(tied_head, "PIECE_BYTES", 1000)
    reader = CheckpointReader(dcp)
    head, embedding = "model.module.lm_head.weight", "model.module.model.embed_tokens.weight"
    assert [len(reader.tensors[k].chunks) for k in (head, embedding)] == [2, 2]
    assert tied_head.dcp_difference(reader, head, embedding).equal is not flipped


def _tied_hf_dir(root: Path, head_change: float | None, head_dtype=None) -> Path:
    """A tied Qwen2 saved by transformers, its model.safetensors then given an
    lm_head.weight (every value moved by `head_change`, or the embedding's own) in
    `head_dtype` (None: the embedding's)."""
    model = tiny_causal_lm("qwen2", vocab=64)
    model.save_pretrained(root / "src")
    weights = root / "src" / "model.safetensors"
    tensors = load_file(weights)
    head = tensors["model.embed_tokens.weight"].clone()
    if head_change is not None:
        head += head_change
    if head_dtype is not None:
        head = head.to(head_dtype)
    save_file({**tensors, "lm_head.weight": head}, weights, metadata={"format": "pt"})
    return root / "src"


@pytest.mark.parametrize("layout", ["mcore", "hf"])
def test_import_refuses_a_model_dir_whose_head_is_not_its_tied_embedding(layout, tmp_path):
    src = _tied_hf_dir(tmp_path, head_change=0.5)
    code, out, err = run_cli(
        "ckpt", "import-hf", src, "--out", tmp_path / "out", "--layout", layout
    )
    remedy = "transformers loads this model untied: set tie_word_embeddings to false there"
    untied = _untied("model.embed_tokens.weight", str(src / "config.json"), remedy)
    assert code == 1, out + err
    assert one_error_line(err) == f"error: {src / 'model.safetensors'} [lm_head.weight]: {untied}"
    assert not (tmp_path / "out").exists()


def test_import_drops_a_head_equal_to_the_tied_embedding(tmp_path):
    src = _tied_hf_dir(tmp_path, head_change=None)
    code, out, err = run_cli("ckpt", "import-hf", src, "--out", tmp_path / "out")
    assert code == 0, out + err
    names = CheckpointReader(tmp_path / "out").tensors
    assert not any("output_layer" in name for name in names)


@pytest.mark.parametrize("change", [None, 0.5])
def test_safetensors_are_compared_a_piece_at_a_time(change, tmp_path, monkeypatch):
    source = SafetensorsSource(_tied_hf_dir(tmp_path, head_change=change))
    monkeypatch.setattr(tied_head, "PIECE_BYTES", 1000)  # the embedding is 32 KiB
    difference = tied_head.safetensors_difference(
        source, "lm_head.weight", "model.embed_tokens.weight"
    )
    assert difference.equal is (change is None)


# ------------------------------------------------------- a head copied into another dtype


@pytest.mark.parametrize("layout", ["mcore", "hf"])
@pytest.mark.parametrize("change", [None, 0.5], ids=["same values", "other values"])
def test_import_ties_a_head_holding_the_embeddings_values_in_another_dtype(
    layout, change, tmp_path
):
    """An fp32 embedding whose lm_head.weight holds its values in float64 (a bf16 one's in
    fp32, as a mixed-precision save writes): transformers ties them; import refused it as
    "trained untied". Values that differ are still refused."""
    import torch

    src = _tied_hf_dir(tmp_path, head_change=change, head_dtype=torch.float64)
    code, out, err = run_cli(
        "ckpt", "import-hf", src, "--out", tmp_path / "out", "--layout", layout
    )
    if change is not None:
        assert code == 1 and "unequal to [model.embed_tokens.weight]" in err, out + err
        return
    assert code == 0, out + err
    if layout == "mcore":
        assert not any("output_layer" in n for n in CheckpointReader(tmp_path / "out").tensors)
        return
    reader = CheckpointReader(tmp_path / "out" / "global_step_0" / "dist_ckpt")
    stored = {n.rsplit(".", 2)[-2]: n for n in reader.tensors if n.endswith(".weight")}
    head, embedding = (reader.read_tensor(stored[k]) for k in ("lm_head", "embed_tokens"))
    assert torch.equal(head, embedding.to(torch.float64))  # kept as the model dir holds it


@pytest.mark.parametrize("change", [None, 0.5], ids=["same values", "other values"])
def test_export_ties_a_head_holding_the_embeddings_values_in_another_dtype(change, tmp_path):
    import torch

    ckpt = _tied_dcp(tmp_path, head_change=change, head_dtype=torch.float64)
    code, out, err = run_cli("ckpt", "export-hf", ckpt, "--out", tmp_path / "hf")
    if change is not None:
        assert code == 1 and "(trained untied)" in err, out + err
        return
    assert code == 0, out + err
    assert "lm_head.weight" not in load_file(tmp_path / "hf" / "model.safetensors")


@pytest.mark.parametrize("change", [None, 1e-12], ids=["same values", "other values"])
def test_values_in_another_dtype_are_compared_a_piece_at_a_time(change, tmp_path, monkeypatch):
    """A change far below the embedding's float32 resolution still tells them apart: the
    comparison widens to float64, it does not round the head to the embedding's dtype."""
    import torch

    source = SafetensorsSource(_tied_hf_dir(tmp_path, head_change=None, head_dtype=torch.float64))
    if change is not None:
        weights = tmp_path / "src" / "model.safetensors"
        tensors = load_file(weights)
        tensors["lm_head.weight"][0, 0] += change
        save_file(tensors, weights, metadata={"format": "pt"})
        source = SafetensorsSource(tmp_path / "src")
    monkeypatch.setattr(tied_head, "PIECE_BYTES", 1000)
    difference = tied_head.safetensors_difference(
        source, "lm_head.weight", "model.embed_tokens.weight"
    )
    assert difference.equal is (change is None)


@pytest.mark.parametrize("change", [None, 0.5], ids=["same values", "other values"])
def test_a_dcp_head_in_another_dtype_is_compared_a_piece_at_a_time(change, tmp_path, monkeypatch):
    """The DCP path read both tensors whole to compare them as values (over 3 GB more for a
    7B model's vocabulary): now a piece of elements at a time, never the whole tensor."""
    import torch

    ckpt = _tied_dcp(tmp_path, head_change=change, head_dtype=torch.float64)
    reader = CheckpointReader(ckpt)

    def whole(*_args):
        raise AssertionError("read whole")

    monkeypatch.setattr(reader, "read_tensor", whole)
    monkeypatch.setattr(tied_head, "PIECE_BYTES", 1000)
    assert tied_head.dcp_difference(reader, HEAD, EMBEDDING).equal is (change is None)


def test_a_nan_copied_with_the_embedding_into_another_dtype_is_still_its_copy(tmp_path):
    """A NaN in the embedding and its float64 copy was "trained untied" (NaN != NaN);
    --allow-nonfinite decides about NaN, as for a head in the embedding's own dtype."""
    import torch

    model = tiny_causal_lm("qwen2", vocab=64)
    state = {name: value.clone() for name, value in model.state_dict().items()}
    state["model.embed_tokens.weight"][3, 5] = float("nan")
    state["lm_head.weight"] = state["model.embed_tokens.weight"].to(torch.float64)
    ckpt = save_dcp({"model": state}, tmp_path / "dist_ckpt")
    model.config.save_pretrained(tmp_path / "huggingface")
    reader = CheckpointReader(ckpt)
    assert tied_head.dcp_difference(reader, HEAD, EMBEDDING).equal
    code, out, err = run_cli(
        "ckpt", "export-hf", ckpt, "--out", tmp_path / "hf", "--allow-nonfinite"
    )
    assert code == 0, out + err
