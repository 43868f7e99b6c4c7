"""export-hf on a real 2-process FSDP2 (gloo) checkpoint written through Checkpointer.

The trained model's logits are recorded inside the FSDP2 job; the export must reproduce
them after a plain `from_pretrained`. Also: bf16 cast, sharding + index, --verify
catching a corrupted file, and no partial output on failure or Ctrl-C.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from cli.main import app
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safetensors_writer import INDEX_FILE
from tests.support.distributed import run_distributed
from tests.support.export import (
    copy_hf_assets_from,
    fixed_inputs,
    load_report,
    logits_of,
    verify_export_dir,
)


def _train_and_save(rank: int, world: int, root: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.state import ModelState, OptimizerState

    assets = Path(root) / "assets"
    config = AutoConfig.from_pretrained(assets)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = fixed_inputs(config.vocab_size, batch=2, length=16)
    for _ in range(2):
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    Checkpointer(Path(root) / "run", strategy="fsdp2", model_family="qwen2").save(
        2,
        {
            "model": ModelState(model),
            "optimizer": OptimizerState(model, optimizer),
            "extra": {"step": 2},
        },
        hf_assets=copy_hf_assets_from(assets),
    )
    with torch.no_grad():
        logits = model(input_ids=fixed_inputs(config.vocab_size)).logits
    if rank == 0:
        torch.save(logits, Path(root) / "trained_logits.pt")


@pytest.fixture(scope="module")
def fsdp2_run(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("fsdp2")
    build_tiny_model_dir(root / "assets")
    run_distributed(_train_and_save, 2, str(root))
    return root


def test_checkpoint_is_really_sharded(fsdp2_run):
    reader = CheckpointReader(fsdp2_run / "run" / "global_step_2" / "dist_ckpt")
    entry = reader.tensors["model.model.layers.0.mlp.up_proj.weight"]
    assert len([c for c in entry.chunks if c.numel]) == 2  # one shard per rank


def test_export_reproduces_trained_logits(fsdp2_run, tmp_path):
    out = tmp_path / "hf"
    result = export_hf(fsdp2_run / "run", out, dtype="fp32")
    assert result.layout == "hf" and result.files == ["model.safetensors"]
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        assert "lm_head.weight" not in handle.keys()  # tied, as save_pretrained writes it
    assert load_report(out) == {}  # no missing / unexpected / mismatched keys
    trained = torch.load(fsdp2_run / "trained_logits.pt")
    exported = logits_of(out, fixed_inputs(trained.shape[-1]))
    torch.testing.assert_close(exported, trained, rtol=0, atol=1e-5)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert tokenizer.decode(tokenizer("#### 42")["input_ids"]) == "#### 42"


def test_bf16_cast_matches_source_cast(fsdp2_run, tmp_path):
    out = tmp_path / "hf16"
    export_hf(fsdp2_run / "run", out, dtype="bf16")
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    reader = CheckpointReader(fsdp2_run / "run" / "global_step_2" / "dist_ckpt")
    source = reader.read_tensor("model.model.layers.1.self_attn.k_proj.weight")
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        written = handle.get_tensor("model.layers.1.self_attn.k_proj.weight")
    assert written.dtype == torch.bfloat16
    assert torch.equal(written, source.to(torch.bfloat16))
    trained = torch.load(fsdp2_run / "trained_logits.pt")
    exported = logits_of(out, fixed_inputs(trained.shape[-1]), dtype=torch.bfloat16)
    torch.testing.assert_close(exported, trained, rtol=0.05, atol=0.05)


def test_sharded_output_with_index(fsdp2_run, tmp_path):
    out = tmp_path / "sharded"
    result = export_hf(fsdp2_run / "run", out, dtype="fp32", max_shard_size=300_000, workers=3)
    assert len(result.files) >= 4
    assert result.files == [
        f"model-{i:05d}-of-{len(result.files):05d}.safetensors"
        for i in range(1, len(result.files) + 1)
    ]
    index = json.loads((out / INDEX_FILE).read_text())
    assert sorted(set(index["weight_map"].values())) == result.files
    assert index["metadata"]["total_size"] == result.bytes
    for file in result.files:
        assert (out / file).stat().st_size <= 300_000 + 4096 or len(
            safe_open(str(out / file), "pt").keys()
        ) == 1
    trained = torch.load(fsdp2_run / "trained_logits.pt")
    torch.testing.assert_close(
        logits_of(out, fixed_inputs(trained.shape[-1])), trained, rtol=0, atol=1e-5
    )


def test_verify_passes_then_catches_a_corrupted_tensor(fsdp2_run, tmp_path):
    out = tmp_path / "hf"
    runner = CliRunner()
    ok = runner.invoke(
        app,
        [
            "ckpt",
            "export-hf",
            str(fsdp2_run / "run"),
            "--out",
            str(out),
            "--verify",
            "--dtype",
            "fp32",
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert "verified" in ok.output
    assert verify_export_dir(fsdp2_run / "run", out) == []
    file = out / "model.safetensors"
    with safe_open(str(file), framework="pt") as handle:
        names = list(handle.keys())
    header_len = int.from_bytes(file.read_bytes()[:8], "little")
    header = json.loads(file.read_bytes()[8 : 8 + header_len])
    begin = header["model.norm.weight"]["data_offsets"][0] + 8 + header_len
    with open(file, "r+b") as handle:
        handle.seek(begin + 4)
        handle.write(b"\x00\x00\x80\x7f")  # one float becomes +inf
    problems = verify_export_dir(fsdp2_run / "run", out)
    assert len(problems) == 1 and problems[0].startswith("model.norm.weight:"), problems
    assert "model.norm.weight" in names


def test_verify_reads_an_exports_index_as_any_model_dirs(fsdp2_run, tmp_path):
    """The export's index is read bounded and its file names must be plain names inside the
    export: verifying an export whose index names `../outside.safetensors` opened the file
    beside the export and compared its tensors."""
    out = tmp_path / "hf"
    export_hf(fsdp2_run / "run", out, workers=1)
    shutil.copy(out / "model.safetensors", tmp_path / "outside.safetensors")
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        names = list(handle.keys())
    weight_map = dict.fromkeys(names, "../outside.safetensors")
    (out / INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    problems = verify_export_dir(fsdp2_run / "run", out)
    assert problems == [
        f"{INDEX_FILE}: file '../outside.safetensors' is not a plain file name inside the export"
    ], problems


def test_verify_never_opens_a_file_linked_out_of_the_export(fsdp2_run, tmp_path):
    """An export's model.safetensors replaced by a link to a file outside it (the same
    bytes) verified as equal: the file compared was not the export's."""
    out = tmp_path / "hf"
    export_hf(fsdp2_run / "run", out, workers=1)
    outside = tmp_path / "outside.safetensors"
    (out / "model.safetensors").rename(outside)
    (out / "model.safetensors").symlink_to(outside)
    problems = verify_export_dir(fsdp2_run / "run", out)
    assert any(line.startswith(f"model.safetensors: a symlink to {outside}") for line in problems)


def test_interrupt_mid_export_leaves_nothing(fsdp2_run, tmp_path):
    out = tmp_path / "hf"
    seen = []

    def interrupt(tensors, total, done, total_bytes):
        seen.append(tensors)
        if tensors == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_hf(fsdp2_run / "run", out, workers=1, progress=interrupt)
    assert 3 in seen
    assert list(tmp_path.iterdir()) == []  # neither the export nor its temporary directory
