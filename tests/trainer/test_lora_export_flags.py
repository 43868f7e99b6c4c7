"""Every `export-hf` flag is honoured on a LoRA checkpoint or refused (exit 2) naming it and
why, never ignored: `--layout mcore`, `--workers`, `--io tensorstore`, `--role` and, with
`--adapter-only`, `--max-shard-size` and `--hf-config` (even one that does not exist) were
dropped without a word; a NaN in the adapter was
exported, merged or alone, where every other export refuses one unless `--allow-nonfinite`."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import pytest

from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.ckpt.test_interop_megatron_peft import BRIDGE_PEFT, _bridge_lora_run, _hf_lora
from tests.support.ckpt_edits import edit_manifest, rehash
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

ONE_FILE = "an adapter export writes one adapter_model.safetensors"


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    """One LoRA step of the tiny model on q_proj and v_proj, its base beside it."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_flags")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    settings = (f"model.path={base}", "model.lora_rank=4", "model.target_modules=[q_proj,v_proj]")
    run_sft(tiny_config(data, root / "run", *settings, "data.global_batch_size=4"))
    return root / "run"


def _flag(says: str) -> str:
    return says.split(":")[0].split()[0]


def _export(run: Path, out: Path, *flags: str) -> tuple[int, str]:
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, *flags)
    return code, (one_error_line(err) if code else stdout)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--layout", "mcore"], "--layout mcore: {run} is an mfsdp LoRA checkpoint, its adapter"),
        (
            ["--adapter-only", "--layout", "mcore"],
            "--layout mcore: {run} is an mfsdp LoRA checkpoint",
        ),
        (["--adapter-only", "--max-shard-size", "1KB"], f"--max-shard-size: {ONE_FILE}"),
        (["--workers", "2"], "--workers: a LoRA export reads, merges and writes one tensor"),
        (["--adapter-only", "--workers", "2"], "--workers: a LoRA export"),
        (["--io", "tensorstore"], "--io tensorstore: {run} is an mfsdp LoRA checkpoint, read"),
        (["--role", "critic"], "--role critic: {run} is an mfsdp checkpoint, which has no actor/"),
        (["--adapter-only", "--role", "actor"], "--role actor: {run} is an mfsdp checkpoint"),
        (
            ["--adapter-only", "--hf-config", "/nonexistent/dir"],
            "--hf-config /nonexistent/dir: {run} is an mfsdp LoRA checkpoint: --adapter-only",
        ),
    ],
    ids=[
        "layout",
        "adapter-layout",
        "adapter-shard-size",
        "workers",
        "adapter-workers",
        "io",
        "role",
        "adapter-role",
        "adapter-hf-config",
    ],
)
def test_a_flag_a_lora_export_has_no_use_for_is_refused_naming_it(lora_run, tmp_path, flags, says):
    out = tmp_path / "out"
    code, line = _export(lora_run, out, *flags)
    assert code == 2, line
    assert line.startswith(f"error: {says.format(run=lora_run)}"), line
    assert "--role" in line or line.endswith(f"leave {_flag(says)} out"), line
    assert not out.exists()


def test_the_flags_a_merged_lora_export_takes_are_honoured(lora_run, tmp_path):
    code, said = _export(
        lora_run, tmp_path / "out", "--max-shard-size", "100KB", "--layout", "hf", "--io", "local"
    )
    assert code == 0, said
    shards = sorted((tmp_path / "out").glob("model-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "out" / "model.safetensors.index.json").is_file()


def _with_nan_in_an_adapter(lora_run: Path, copy: Path) -> tuple[Path, str]:
    """A copy of the run whose first lora_B holds one NaN (its bytes overwritten in place,
    the record's CRC, in its zip headers and the manifest's `model_records`, and the
    manifest's record of the file made anew: only the NaN shows). Returns the run and the
    tensor's name."""
    run = Path(shutil.copytree(lora_run, copy))
    paths = resolve_checkpoint(run)
    reader = CheckpointReader(paths.dist_ckpt)
    name = min(n for n in reader.tensors if ".lora_B." in n)
    entry = reader.tensors[name]
    chunk = next(c for c in entry.chunks if c.numel)
    payload = reader.raw_payload(entry, chunk)
    assert payload is not None and payload.crc is not None and chunk.file is not None
    assert entry.dtype.name == "float32"
    data = bytearray((paths.dist_ckpt / chunk.file).read_bytes())
    data[payload.offset : payload.offset + 4] = bytes.fromhex("0000c07f")  # float32 NaN, LE
    blob = slice(chunk.file_offset, chunk.file_offset + chunk.length)
    end = payload.offset + chunk.numel * 4
    crc = zlib.crc32(data[payload.offset : end])
    old, new = payload.crc.to_bytes(4, "little"), crc.to_bytes(4, "little")
    assert data[end : end + 8] == b"PK\x07\x08" + old  # torch.save's data descriptor
    data[end + 4 : end + 8] = new
    central = data.find(b"PK\x01\x02", end, blob.stop)
    while central != -1:  # the central entry holding the old CRC: this record's
        if data[central + 16 : central + 20] == old:
            data[central + 16 : central + 20] = new
        central = data.find(b"PK\x01\x02", central + 4, blob.stop)
    (paths.dist_ckpt / chunk.file).write_bytes(bytes(data))
    file = f"{paths.dist_ckpt.name}/{chunk.file}"
    edit_manifest(
        paths.step_dir, lambda m: m["model_records"][file].update({str(chunk.file_offset): crc})
    )
    rehash(paths.step_dir, file)
    return run, name


@pytest.mark.parametrize("adapter_only", [False, True], ids=["merged", "adapter-only"])
def test_a_nan_in_the_adapter_is_refused_unless_allowed(lora_run, tmp_path, adapter_only):
    run, stored = _with_nan_in_an_adapter(lora_run, tmp_path / "run")
    flags = ["--adapter-only"] if adapter_only else []
    code, line = _export(run, tmp_path / "out", *flags)
    assert code == 1, line
    module = stored.split(".lora_B.")[0].removeprefix("model.")  # the checkpoint's entry
    named = f"[{stored}]" if adapter_only else f"[{module}.weight] (merged with the adapter)"
    assert named in line and "NaN/Inf value(s)" in line, line
    assert line.endswith("--allow-nonfinite exports it anyway"), line
    assert not (tmp_path / "out").exists()
    code, said = _export(run, tmp_path / "out", *flags, "--allow-nonfinite")
    assert code == 0, said


@pytest.fixture(scope="module")
def bridge_adapter(tmp_path_factory) -> tuple[Path, Path]:
    """Megatron-Bridge's save of an adapter alone, and its base as a Hugging Face dir."""
    root = tmp_path_factory.mktemp("bridge_flags")
    model = tiny_causal_lm("llama", vocab=500)
    run, _ = _bridge_lora_run(root, model, _hf_lora(model), BRIDGE_PEFT)
    model.save_pretrained(root / "base")
    return run, root / "base"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--adapter-only", "--max-shard-size", "1KB"], f"--max-shard-size: {ONE_FILE}"),
        (["--adapter-only", "--layout", "mcore"], "--layout mcore: a LoRA adapter is read"),
        (["--adapter-only", "--workers", "2"], "--workers: a LoRA export reads"),
        (["--hf-config", "{base}", "--layout", "hf"], "--layout hf: a LoRA adapter is read"),
        (["--hf-config", "{base}", "--workers", "2"], "--workers: a LoRA export reads"),
    ],
    ids=[
        "adapter-shard-size",
        "adapter-layout",
        "adapter-workers",
        "merge-layout",
        "merge-workers",
    ],
)
def test_a_flag_a_megatron_adapter_export_has_no_use_for_is_refused(
    bridge_adapter, tmp_path, flags, says
):
    run, base = bridge_adapter
    out = tmp_path / "out"
    code, line = _export(run, out, *(flag.format(base=base) for flag in flags))
    assert code == 2, line
    assert line.startswith(f"error: {says}") and line.endswith(f"leave {_flag(says)} out"), line
    assert not out.exists()


@pytest.mark.parametrize(
    "flag", [["--workers", "2"], ["--layout", "hf"], ["--max-shard-size", "1GB"]]
)
def test_adapter_only_on_a_checkpoint_without_adapter_says_that_first(tmp_path, flag):
    """`--adapter-only --workers 2` on a checkpoint holding no adapter blamed --workers
    ("a LoRA export reads one tensor at a time"); the checkpoint's lack of one showed only
    once the flag was dropped."""
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    run = tmp_path / "run"
    save_single_process_checkpoint(run, build_tiny_model_dir(tmp_path / "assets"), seed=3)
    code, said = _export(run, tmp_path / "out", "--adapter-only", *flag)
    assert code == 2 and "--adapter-only needs one" in said and flag[0] not in said, said
