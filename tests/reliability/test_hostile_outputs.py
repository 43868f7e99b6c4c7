"""Hostile outputs for `mfsdp ckpt export-hf`: races on --out, paths that must not be
replaced, and checkpoints whose export would be silently wrong.

Every refusal is one line, exit 1 (the checkpoint) or 2 (the request), and leaves nothing
beside --out: no partial export, no hidden work directory. A SIGKILLed export leaves its
work directory, which the next run into the same --out removes."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from click.testing import CliRunner
from safetensors import safe_open
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

from cli.main import app
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.out_dir import OutputDirError, claim_output
from mfsdp_ckpt.storage.out_lock import OutputBusyError
from tests.support.export import save_single_process_checkpoint
from tests.support.paths import REPO
from tests.support.waiting import wait_until

FAST_SECONDS = 20.0


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    return build_tiny_model_dir(tmp_path_factory.mktemp("assets") / "tiny")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, assets) -> Path:
    run = tmp_path_factory.mktemp("outputs") / "run"
    save_single_process_checkpoint(run, assets)
    return run


def _export(*args: str):
    return CliRunner().invoke(app, ["ckpt", "export-hf", *map(str, args)])


def _one_line_error(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _listing(directory: Path) -> list[str]:
    return sorted(entry.name for entry in directory.iterdir())


def _tree(directory: Path) -> dict[str, bytes]:
    files = (p for p in sorted(directory.rglob("*")) if p.is_file())
    return {str(p.relative_to(directory)): p.read_bytes() for p in files}


# --------------------------------------------------------------------------- paths
def test_out_that_is_the_current_directory_or_above_is_refused(run_dir, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    for out in (".", "..", "./", str(work), str(tmp_path)):
        for flags in ((), ("--overwrite",)):
            _one_line_error(_export(run_dir, "--out", out, *flags), 2)
    assert _listing(work) == ["notes.txt"] and _listing(tmp_path) == ["work"]


@pytest.mark.parametrize("target", ["empty-dir", "earlier-export", "missing"])
def test_out_that_is_a_symlink_is_refused_and_kept(run_dir, tmp_path, target):
    real = tmp_path / "real"
    if target == "earlier-export":
        assert _export(run_dir, "--out", real).exit_code == 0
    elif target == "empty-dir":
        real.mkdir()
    before = _tree(real) if real.exists() else None
    link = tmp_path / "link"
    link.symlink_to(real)
    for flags in ((), ("--overwrite",)):
        _one_line_error(_export(run_dir, "--out", link, *flags), 2, str(link))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (_tree(real) if real.exists() else None) == before
    assert _listing(tmp_path) == sorted(["link"] + (["real"] if target != "missing" else []))


def test_out_that_is_a_file_is_refused_and_kept(run_dir, tmp_path):
    out = tmp_path / "out"
    out.write_text("a file")
    for flags in ((), ("--overwrite",)):
        _one_line_error(_export(run_dir, "--out", out, *flags), 2, str(out), "not a directory")
    assert out.read_text() == "a file" and _listing(tmp_path) == ["out"]


@pytest.mark.parametrize("content", ["notes", "checkpoint", "config-only", "nested-data"])
def test_overwrite_keeps_a_directory_that_is_not_an_earlier_export(run_dir, tmp_path, content):
    out = tmp_path / "out"
    if content == "checkpoint":
        shutil.copytree(run_dir, out)
    else:
        out.mkdir()
        files = {
            "notes": {"notes.txt": "x"},
            "config-only": {"config.json": "{}"},
            "nested-data": {"data/train.jsonl": "{}", "config.json": "{}"},
        }[content]
        for name, text in files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
    before = _tree(out)
    result = _export(run_dir, "--out", out, "--overwrite")
    _one_line_error(result, 2, str(out), "--overwrite replaces only")
    assert _tree(out) == before and _listing(tmp_path) == ["out"]


# --------------------------------------------------------------------------- races
EXPORT_SCRIPT = """
import os, signal, sys, time
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.convert.export_hf import export_hf
ckpt, out, mode, marker = sys.argv[1:5]

def progress(done, total, written, total_bytes):
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hold" and not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(float(sys.argv[5]))

export_hf(ckpt, out, overwrite="--overwrite" in sys.argv, progress=progress, workers=1)
"""


def _start_export(run_dir: Path, out: Path, mode: str, marker: Path, *extra: str):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-c", EXPORT_SCRIPT, str(run_dir), str(out), mode, str(marker), *extra]
    return subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_second_export_into_one_out_is_refused_while_the_first_runs(run_dir, tmp_path, overwrite):
    parent = tmp_path / "parent"
    parent.mkdir()
    out, marker = parent / "out", tmp_path / "first-is-writing"
    flags = ("--overwrite",) if overwrite else ()
    first = _start_export(run_dir, out, "hold", marker, "6", *flags)
    try:
        wait_until(marker.exists, 60, lambda: f"{marker} never appeared", first)
        second = _export(run_dir, "--out", out, *flags)
        _one_line_error(second, 1, str(out), "another command is writing it")
        with pytest.raises(OutputBusyError, match="another command"):
            claim_output(out, overwrite=True)
    finally:
        assert first.wait(timeout=120) == 0, first.stderr.read()
    assert _listing(parent) == ["out"] and (out / "model.safetensors").is_file()


@pytest.mark.parametrize("earlier", [False, True])
def test_sigkill_leaves_a_work_dir_the_next_run_removes(run_dir, tmp_path, earlier):
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "out"
    if earlier:
        assert _export(run_dir, "--out", out).exit_code == 0
    before = _tree(out) if earlier else None
    flags = ("--overwrite",) if earlier else ()
    killed = _start_export(run_dir, out, "kill", tmp_path / "unused", *flags)
    assert killed.wait(timeout=120) == -signal.SIGKILL
    left = [name for name in _listing(parent) if name != "out"]
    assert any(name.startswith(".out.export-tmp-") for name in left), left
    assert (_tree(out) if out.exists() else None) == before  # the earlier export is untouched
    result = _export(run_dir, "--out", out, *flags)
    assert result.exit_code == 0, result.output
    assert _listing(parent) == ["out"]


APPEARING = {
    "dir-with-a-file": lambda p: (p.mkdir(), (p / "theirs.txt").write_text("theirs")),
    "empty-dir": lambda p: p.mkdir(),
    "file": lambda p: p.write_text("theirs"),
    "symlink": lambda p: p.symlink_to("/"),
}


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("kind", APPEARING)
def test_what_appears_at_out_during_export_is_never_replaced(run_dir, tmp_path, kind, overwrite):
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "out"

    def appear(*_progress):
        if not (out.exists() or out.is_symlink()):
            APPEARING[kind](out)

    with pytest.raises(OutputDirError, match="appeared while this command ran"):
        export_hf(run_dir, out, overwrite=overwrite, progress=appear, workers=1)
    assert _listing(parent) == ["out"]
    if kind == "dir-with-a-file":
        assert _listing(out) == ["theirs.txt"]
    elif kind == "empty-dir":
        assert _listing(out) == []
    elif kind == "file":
        assert out.read_text() == "theirs"
    else:
        assert out.is_symlink() and os.readlink(out) == "/"


def test_overwrite_replaces_only_the_directory_found_at_start(run_dir, tmp_path):
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "out"
    assert _export(run_dir, "--out", out).exit_code == 0
    moved = tmp_path / "earlier"

    def swap(*_progress):
        if not moved.exists():
            out.rename(moved)
            out.mkdir()
            (out / "theirs.txt").write_text("theirs")

    with pytest.raises(OutputDirError, match="replaced by something else"):
        export_hf(run_dir, out, overwrite=True, progress=swap, workers=1)
    assert _listing(parent) == ["out"] and _listing(out) == ["theirs.txt"]
    assert (moved / "model.safetensors").is_file()


# --------------------------------------------------------------------------- contents
def _bare_checkpoint(root: Path, assets: Path, edit) -> Path:
    """A bare dist_ckpt dir (as Megatron-LM writes) of the tiny model, `edit`ed first."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(assets))
    state = {f"model.{name}": value.detach().clone() for name, value in model.state_dict().items()}
    edit(state)
    target = root / "dist_ckpt"
    dcp.save(state, checkpoint_id=str(target), no_dist=True)
    return target


def _set(key: str, index: tuple[int, ...], value: float):
    def edit(state):
        state[key][index] = value

    return edit


def _set_tied(index: tuple[int, ...], value: float):
    """The tiny model ties its head to the embedding: one tensor, saved under both names."""
    embedding, head = (
        _set("model.model.embed_tokens.weight", index, value),
        _set("model.lm_head.weight", index, value),
    )

    def edit(state):
        embedding(state)
        head(state)

    return edit


NONFINITE = {
    "nan-embedding": _set_tied((3, 5), float("nan")),
    "inf-mlp": _set("model.model.layers.1.mlp.down_proj.weight", (0, 0), float("inf")),
    "neg-inf-norm": _set("model.model.norm.weight", (7,), float("-inf")),
}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])  # kernel copy, cast, cast
@pytest.mark.parametrize("case", NONFINITE)
def test_nonfinite_weights_are_refused_naming_the_tensor(tmp_path, assets, case, dtype):
    key = {
        "nan-embedding": "embed_tokens",
        "inf-mlp": "layers.1.mlp.down_proj",
        "neg-inf-norm": "model.norm",
    }[case]
    ckpt = _bare_checkpoint(tmp_path, assets, NONFINITE[case])
    out = tmp_path / "parent" / "out"
    out.parent.mkdir()
    args = (ckpt, "--hf-config", assets, "--out", out, "--dtype", dtype)
    _one_line_error(_export(*args), 1, key, "NaN/Inf")
    assert _listing(out.parent) == []
    assert _export(*args, "--allow-nonfinite").exit_code == 0
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        name = next(n for n in handle.keys() if key in n)
        assert not bool(handle.get_tensor(name).isfinite().all())


@pytest.mark.parametrize("value", [1e6, -7e4])
def test_values_that_overflow_the_export_dtype_are_refused(tmp_path, assets, value):
    edit = _set("model.model.layers.0.self_attn.o_proj.weight", (1, 2), value)
    ckpt = _bare_checkpoint(tmp_path, assets, edit)
    out = tmp_path / "out"
    _one_line_error(
        _export(ckpt, "--hf-config", assets, "--out", out, "--dtype", "fp16"),
        1,
        "o_proj",
        "overflows float16",
    )
    assert not out.exists()


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.bool, torch.uint8])
@pytest.mark.parametrize(
    "key", ["model.model.layers.0.self_attn.q_proj.weight", "model.model.norm.weight"]
)
def test_integer_weights_are_refused(tmp_path, assets, dtype, key):
    def edit(state):
        state[key] = (state[key] * 100).to(dtype)

    ckpt = _bare_checkpoint(tmp_path, assets, edit)
    out = tmp_path / "out"
    for export_dtype in ("auto", "bf16", "fp32"):
        result = _export(ckpt, "--hf-config", assets, "--out", out, "--dtype", export_dtype)
        stored = f"stored as {str(dtype).removeprefix('torch.')}"
        _one_line_error(result, 1, key, stored, "floating-point weight")
    assert _listing(tmp_path) == ["dist_ckpt"]


@pytest.mark.parametrize(
    "alias",
    [
        "model._orig_mod.model.norm.weight",
        "model.module.model.layers.0.mlp.up_proj.weight",
        "model.model._fsdp_wrapped_module.embed_tokens.weight",
        "model.model.layers.1._checkpoint_wrapped_module.self_attn.k_proj.weight",
    ],
)
def test_two_stored_names_for_one_weight_are_refused_naming_both(tmp_path, assets, alias):
    from mfsdp_ckpt.format.state_keys import hf_name

    original = "model." + hf_name(alias.removeprefix("model."))

    def edit(state):
        state[alias] = state[original] + 1

    ckpt = _bare_checkpoint(tmp_path, assets, edit)
    out = tmp_path / "out"
    result = _export(ckpt, "--hf-config", assets, "--out", out)
    _one_line_error(result, 1, alias, original, "refusing to pick")
    assert not out.exists()


def _config_variant(tmp_path: Path, assets: Path, **changes) -> Path:
    target = tmp_path / "config"
    shutil.copytree(assets, target)
    data = json.loads((target / "config.json").read_text())
    data.update(changes)
    (target / "config.json").write_text(json.dumps(data))
    return target


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"num_hidden_layers": 100_000_000}, "num_hidden_layers=100000000"),
        ({"num_hidden_layers": 1000}, "num_hidden_layers=1000"),
        ({"num_hidden_layers": -2}, "num_hidden_layers must be a positive integer"),
        ({"num_hidden_layers": "2"}, "num_hidden_layers must be a positive integer"),
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
        ({"num_attention_heads": -4}, "num_attention_heads must be a positive integer"),
        ({"num_attention_heads": 3}, "num_attention_heads=3 is not a multiple"),
        ({"num_attention_heads": 6, "num_key_value_heads": 2}, "hidden_size=128 is not a multiple"),
        ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads=3"),
        ({"num_key_value_heads": 0}, "num_key_value_heads must be a positive integer"),
        ({"hidden_size": 0}, "hidden_size must be a positive integer"),
        ({"vocab_size": -5}, "vocab_size must be a positive integer"),
        ({"intermediate_size": 2.5}, "intermediate_size must be a positive integer"),
        ({"head_dim": 0}, "head_dim must be a positive integer"),
        ({"num_hidden_layers": True}, "num_hidden_layers must be a positive integer"),
    ],
)
def test_config_geometry_that_makes_no_sense_is_refused_fast(
    tmp_path, run_dir, assets, changes, needle
):
    config = _config_variant(tmp_path, assets, **changes)
    out = tmp_path / "out"
    started = time.monotonic()
    _one_line_error(_export(run_dir, "--hf-config", config, "--out", out), 2, needle)
    assert time.monotonic() - started < FAST_SECONDS
    assert not out.exists() and _listing(tmp_path) == ["config"]


@pytest.mark.parametrize("as_url", [False, True])
def test_sizes_not_backed_by_files_are_refused_before_reserving_disk(
    tmp_path, assets, monkeypatch, as_url
):
    """The embedding claims 2**27 rows (64 GiB of fp32) over the blob of the tiny one; the
    output files' preallocation is watched (it is ignored where the filesystem cannot)."""
    rows = 2**27
    ckpt = _bare_checkpoint(tmp_path, assets, lambda state: None)
    path = ckpt / ".metadata"
    metadata = load_metadata(path)
    item = metadata.state_dict_metadata["model.model.embed_tokens.weight"]
    item.size = torch.Size([rows, item.size[1]])
    item.chunks = [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([rows, item.size[1]]))]
    path.write_bytes(pickle.dumps(metadata))
    config = _config_variant(tmp_path, assets, vocab_size=rows)
    out = tmp_path / "parent" / "out"
    out.parent.mkdir()
    reserved = []
    fallocate = os.posix_fallocate

    def watched(fd: int, offset: int, size: int) -> None:
        reserved.append(size)
        fallocate(fd, offset, size)

    monkeypatch.setattr(os, "posix_fallocate", watched)
    started = time.monotonic()
    unbacked = (CheckpointFileError, CheckpointFormatError)
    with pytest.raises(unbacked, match=r"embed_tokens.*cannot hold"):
        export_hf(f"file://{ckpt}" if as_url else ckpt, out, hf_config=config, workers=1)
    assert time.monotonic() - started < FAST_SECONDS
    assert max(reserved, default=0) < 2**30, reserved
    assert _listing(out.parent) == []
