"""A tied `lm_head.weight` in import-hf's `--layout hf` output is an alias: its own key in
`.metadata`, whose storage entry names the embedding's bytes, stored once. Plain torch
(`dcp.load`, FileSystemReader) loads it into a tied model; validate accepts the exact alias
and refuses every other sharing of bytes (a partial overlap, the same bytes as another
dtype or shape, a tensor's bytes read as a non-tensor value); inspect says it."""

import json
import math
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from tests.support.ckpt_edits import edit_metadata
from tests.support.hf_model_files import TINY, safetensors_tensors, saved_hf_model

EMBED, HEAD = "model.model.embed_tokens.weight", "model.lm_head.weight"
VOCAB = 2048  # the embedding (128 KiB in bf16) dwarfs the blobs' framing


def _model(root: Path, tied: bool) -> Path:
    """A tiny qwen2 with a large vocabulary, saved by transformers (tied: no lm_head stored)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "qwen2", tie_word_embeddings=tied, **{**TINY, "vocab_size": VOCAB}
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    out = root / f"qwen2_{'tied' if tied else 'untied'}"
    model.save_pretrained(out)
    return out


def _payload_bytes(model_dir: Path) -> int:
    """Bytes of the tensors the safetensors files store."""
    total = 0
    for file in model_dir.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            total += sum(math.prod(handle.get_slice(n).get_shape()) * 2 for n in handle.keys())
    return total


def _storage(dist_ckpt: Path) -> dict[str, tuple[str, int, int]]:
    metadata = load_metadata(dist_ckpt / ".metadata")
    return {
        index.fqn: (info.relative_path, info.offset, info.length)
        for index, info in metadata.storage_data.items()
    }


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("tied")
    runs = {}
    for tied in (True, False):
        source = _model(root, tied)
        runs[tied] = (source, import_hf(source, root / f"run_{tied}", layout_name="hf"))
    return runs


def test_tied_lm_head_names_the_embeddings_bytes_stored_once(imported):
    source, result = imported[True]
    dist_ckpt = Path(result.checkpoint)
    storage = _storage(dist_ckpt)
    assert storage[HEAD] == storage[EMBED]
    data = sum(p.stat().st_size for p in dist_ckpt.glob("*.distcp"))
    embedding = VOCAB * TINY["hidden_size"] * 2
    assert _payload_bytes(source) <= data < _payload_bytes(source) + embedding
    # every byte of the data files belongs to exactly one distinct blob
    assert data == sum(length for _, _, length in set(storage.values()))
    assert any("lm_head.weight shares the bytes" in note for note in result.notes)


def test_untied_model_is_unchanged(imported):
    _, result = imported[False]
    storage = _storage(Path(result.checkpoint))
    assert len(set(storage.values())) == len(storage)  # no entry shares another's bytes
    assert not any("shares" in note for note in result.notes)
    described = json.loads(
        CliRunner().invoke(app, ["ckpt", "inspect", "--json", result.out_dir]).output
    )
    assert described["totals"]["shared_bytes"] == 0
    assert all(t["shares_bytes_of"] is None for t in described["tensors"])


def test_plain_torch_loads_it_into_a_tied_model(imported):
    """No mfsdp code on the load path: stock dcp.load and FileSystemReader."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from transformers import AutoConfig, AutoModelForCausalLM

    source, result = imported[True]
    config = AutoConfig.from_pretrained(source)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied: one parameter
    state = {"model": model.state_dict()}
    with torch.no_grad():
        for tensor in state["model"].values():
            tensor.zero_()
    dcp.load(state, storage_reader=FileSystemReader(result.checkpoint))
    hf = safetensors_tensors(source)
    assert all(torch.equal(state["model"][name], hf[name]) for name in hf)
    assert torch.equal(model.lm_head.weight, hf["model.embed_tokens.weight"])
    # and into separate tensors: both keys read the embedding's values
    separate = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
    dcp.load(separate, checkpoint_id=result.checkpoint)
    assert torch.equal(separate["model"]["lm_head.weight"], hf["model.embed_tokens.weight"])


def test_validate_accepts_the_alias_and_inspect_says_it(imported):
    _, result = imported[True]
    report = validate_checkpoint(result.out_dir, deep=True)
    assert report.ok(strict=True), [str(f) for f in report.findings]
    text = CliRunner().invoke(app, ["ckpt", "inspect", result.out_dir])
    assert text.exit_code == 0, text.output
    head_row = next(line for line in text.output.splitlines() if line.startswith(HEAD))
    assert head_row.endswith(f"shares the bytes of {EMBED}")
    assert "aliases other tensors' bytes" in text.output
    described = json.loads(
        CliRunner().invoke(app, ["ckpt", "inspect", "--json", result.out_dir]).output
    )
    by_name = {t["name"]: t for t in described["tensors"]}
    assert by_name[HEAD]["shares_bytes_of"] == EMBED and by_name[EMBED]["shares_bytes_of"] is None
    assert described["totals"]["shared_bytes"] == VOCAB * TINY["hidden_size"] * 2


def _point(fqn: str, at: str, shift: int = 0):
    """An edit: `fqn`'s storage entry names `at`'s bytes, or with `shift` those from `shift`
    bytes in to `shift` bytes before the end (inside them, partly shared)."""

    def edit(metadata) -> None:
        (mine,) = [i for i in metadata.storage_data if i.fqn == fqn]
        (theirs,) = [info for i, info in metadata.storage_data.items() if i.fqn == at]
        metadata.storage_data[mine] = type(theirs)(
            theirs.relative_path, theirs.offset + shift, theirs.length - 2 * shift
        )

    return edit


def _retype(dtype=None, shape=None):
    """An edit: lm_head declared as another dtype or shape (one whole chunk, as before)."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    def edit(metadata) -> None:
        entry = metadata.state_dict_metadata[HEAD]
        if dtype is not None:
            entry.properties.dtype = dtype
        if shape is not None:
            entry.size = torch.Size(shape)
            entry.chunks = [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size(shape))]

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (_point(HEAD, EMBED, shift=64), f"[{HEAD}] at bytes ["),  # partly inside the embedding
        (_retype(dtype=torch.float16), "but as float16 (2048, 32), not bfloat16 (2048, 32)"),
        (_retype(shape=(32, VOCAB)), "but as bfloat16 (32, 2048), not bfloat16 (2048, 32)"),
    ],
    ids=["partial_overlap", "other_dtype", "other_shape"],
)
def test_any_other_sharing_is_refused(imported, tmp_path, edit, message):
    run = tmp_path / "run"
    shutil.copytree(imported[True][1].out_dir, run)
    edit_metadata(run / "global_step_0", edit)
    report = validate_checkpoint(run)
    errors = [str(f) for f in report.findings if f.severity == "error"]
    assert any(message in e for e in errors), errors
    validated = CliRunner().invoke(app, ["ckpt", "validate", str(run)])
    assert validated.exit_code == 1 and message in validated.output, validated.output
    exported = CliRunner().invoke(
        app, ["ckpt", "export-hf", str(run), "--out", str(tmp_path / "x")]
    )
    assert exported.exit_code == 1 and message in exported.output, exported.output
    assert not (tmp_path / "x").exists()


def test_a_tensors_bytes_read_as_a_value_are_refused(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    dist_ckpt = tmp_path / "mcore"
    import_hf(source, dist_ckpt, layout_name="mcore")  # holds `iteration`, a non-tensor value
    assert validate_checkpoint(dist_ckpt).ok()
    metadata = load_metadata(dist_ckpt / ".metadata")
    norm = next(k for k in metadata.state_dict_metadata if k.endswith("final_layernorm.weight"))
    _point("iteration", norm)(metadata)
    (dist_ckpt / ".metadata").write_bytes(pickle.dumps(metadata))  # no manifest to agree with
    errors = [str(f) for f in validate_checkpoint(dist_ckpt).findings]
    assert any(
        "[iteration] names the bytes" in e and "a non-tensor value shares no bytes" in e
        for e in errors
    ), errors
