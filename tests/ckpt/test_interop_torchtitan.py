"""torchtitan's checkpoints are named, with the script that converts them.

torchtitan saves `<dump_folder>/checkpoint/step-N/{.metadata, __R_I.distcp}` with the
model's weights as top-level keys in its own names beside optimizer, lr_scheduler,
dataloader and train_state (torchtitan/components/checkpoint.py). Before, validate said
"no model weights" for a step dir and "not a checkpoint" for the folders above it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.support.interop_layouts import one_error_line, run_cli

SCRIPT = "scripts/checkpoint_conversion/convert_to_hf.py"


def _torchtitan_state(step: int, dim: int = 8, vocab: int = 16) -> dict:
    """What torchtitan's CheckpointManager hands DCP for a llama3-style model: the
    model's state dict flattened to the top level, the rest under their names."""
    model = {
        "tok_embeddings.weight": torch.randn(vocab, dim),
        "layers.0.attention.wq.weight": torch.randn(dim, dim),
        "layers.0.attention.wk.weight": torch.randn(dim, dim),
        "layers.0.attention.wv.weight": torch.randn(dim, dim),
        "layers.0.attention.wo.weight": torch.randn(dim, dim),
        "layers.0.feed_forward.w1.weight": torch.randn(2 * dim, dim),
        "layers.0.feed_forward.w2.weight": torch.randn(dim, 2 * dim),
        "layers.0.feed_forward.w3.weight": torch.randn(2 * dim, dim),
        "layers.0.attention_norm.weight": torch.ones(dim),
        "layers.0.ffn_norm.weight": torch.ones(dim),
        "norm.weight": torch.ones(dim),
        "output.weight": torch.randn(vocab, dim),
    }
    optimizer = {
        "state": {name: {"exp_avg": torch.zeros_like(t)} for name, t in model.items()},
        "param_groups": [{"lr": 3e-4, "params": list(model)}],
    }
    return {
        **model,
        "optimizer": optimizer,
        "lr_scheduler": {"last_epoch": step},
        "dataloader": {"dp_rank_0": b"state"},
        "train_state": {"step": step},
    }


def _dump(root: Path, steps=(10, 20)) -> Path:
    dump = root / "outputs"
    for step in steps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            target = dump / "checkpoint" / f"step-{step}"
            dcp.save(_torchtitan_state(step), checkpoint_id=str(target), no_dist=True)
    return dump


@pytest.mark.parametrize("level", ["step", "checkpoint", "dump"])
def test_a_torchtitan_checkpoint_is_named_with_its_converter(level, tmp_path):
    dump = _dump(tmp_path)
    given = {
        "step": dump / "checkpoint" / "step-20",
        "checkpoint": dump / "checkpoint",
        "dump": dump,
    }[level]
    for command in ("validate", "inspect", "export-hf"):
        args = ["--out", tmp_path / "hf"] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, given, *args)
        line = one_error_line(err)
        assert code == 2 and f"{given}: a torchtitan checkpoint" in line, stdout + err
        assert f"python {SCRIPT} {dump / 'checkpoint' / 'step-20'} OUT" in line, line
        assert "no model weights" not in line and "not a checkpoint" not in line
    assert not (tmp_path / "hf").exists()


def test_a_dcp_named_step_n_with_model_keys_is_still_read(tmp_path):
    """Only torchtitan's top-level names make it torchtitan's: an mfsdp-style bare DCP
    that happens to be named step-N reads as before."""
    target = tmp_path / "step-5"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": {"embed.weight": torch.randn(4, 4)}}, checkpoint_id=str(target))
    code, stdout, err = run_cli("ckpt", "inspect", target)
    assert code == 0 and "torchtitan" not in stdout + err, stdout + err


def test_the_json_error_names_torchtitan(tmp_path):
    import json

    dump = _dump(tmp_path, steps=(10,))
    code, stdout, _err = run_cli("ckpt", "validate", dump / "checkpoint", "--json")
    report = json.loads(stdout)
    assert code == 2 and report["exit_code"] == 2 and "torchtitan" in report["error"], stdout


def _hf_format_step(folder: Path, step: int) -> Path:
    """torchtitan with `last_save_in_hf` (components/checkpointer/dcp.py): the step holds
    Hugging Face safetensors shards and their index, no config.json."""
    from safetensors.torch import save_file

    step_dir = folder / f"step-{step}"
    step_dir.mkdir(parents=True)
    shard = "model-00001-of-00001.safetensors"
    save_file({"model.embed_tokens.weight": torch.randn(16, 8)}, step_dir / shard)
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": shard}}
    (step_dir / "model.safetensors.index.json").write_text(str(index).replace("'", '"'))
    return step_dir


@pytest.mark.parametrize("level", ["step", "checkpoint", "dump"])
def test_a_step_saved_in_hugging_face_format_says_it_lacks_config_json(level, tmp_path):
    """Was: exit 2, "not a checkpoint (looked for .metadata, ...)"."""
    dump = tmp_path / "outputs"
    _hf_format_step(dump / "checkpoint", 10)
    newest = _hf_format_step(dump / "checkpoint", 50)
    given = {"step": newest, "checkpoint": dump / "checkpoint", "dump": dump}[level]
    for command in ("validate", "inspect"):
        code, _out, err = run_cli("ckpt", command, given)
        line = one_error_line(err)
        assert code == 2 and line.startswith(f"error: {newest}: Hugging Face safetensors"), err
        assert "without a config.json" in line and "copy the model's config.json" in line


def _hf_writer_shards(folder: Path) -> Path:
    """torch's HuggingFaceStorageWriter with save_distributed=True and no consolidation,
    as a one-rank run writes it: shard-00001-model-00001-of-00001.safetensors."""
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    state = {"model.embed_tokens.weight": torch.randn(16, 8), "lm_head.weight": torch.randn(16, 8)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, storage_writer=HuggingFaceStorageWriter(folder, save_distributed=True))
    return folder


def test_unconsolidated_shards_of_torchs_hf_writer_are_named_with_the_way_to_merge(tmp_path):
    """Each rank's shard holds part of every tensor under its full name: inspect called
    them a model that lacked a config.json, and with one copied in, import-hf said
    "several .safetensors files and no index" (with two ranks) or read a rank's part as
    the whole tensor."""
    from trainer.tiny import build_tiny_model_dir

    shards = _hf_writer_shards(tmp_path / "hfwriter")
    assert sorted(p.name for p in shards.glob("*.safetensors")) == [
        "shard-00001-model-00001-of-00001.safetensors"
    ]
    code, _out, err = run_cli("ckpt", "inspect", shards)
    line = one_error_line(err)
    assert code == 2 and "per-rank shard(s) of torch's HuggingFaceStorageWriter" in line, err
    assert "consolidate_safetensors_files" in line and "enable_consolidation=True" in line
    config = build_tiny_model_dir(tmp_path / "model") / "config.json"
    (shards / "config.json").write_bytes(config.read_bytes())
    code, _out, err = run_cli("ckpt", "import-hf", shards, "--out", tmp_path / "imported")
    line = one_error_line(err)
    assert code == 1 and "per-rank shard(s) of torch's HuggingFaceStorageWriter" in line, err
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize("hf_newer", [True, False])
def test_of_dcp_and_hugging_face_steps_the_newest_is_named(hf_newer, tmp_path):
    """torchtitan's last_save_in_hf saves the run's last step as safetensors after the
    interval steps in DCP: the older DCP step was named "its newest step"."""
    dump = _dump(tmp_path, steps=(10,))
    hf_step = _hf_format_step(dump / "checkpoint", 20 if hf_newer else 5)
    code, _out, err = run_cli("ckpt", "inspect", dump)
    line = one_error_line(err)
    assert code == 2, err
    if hf_newer:
        assert line.startswith(f"error: {hf_step}: Hugging Face safetensors"), line
        assert "copy the model's config.json" in line and "step-10" not in line, line
    else:
        assert f"{dump}: a torchtitan checkpoint (its newest complete step: step-10)" in line, line


def test_a_newest_hugging_face_step_with_its_config_is_named_a_model_dir(tmp_path):
    from trainer.tiny import build_tiny_model_dir

    dump = _dump(tmp_path, steps=(10,))
    hf_step = _hf_format_step(dump / "checkpoint", 20)
    config = build_tiny_model_dir(tmp_path / "model") / "config.json"
    (hf_step / "config.json").write_bytes(config.read_bytes())
    code, _out, err = run_cli("ckpt", "inspect", dump)
    line = one_error_line(err)
    assert code == 2 and f"whose newest step, {hf_step}, is a Hugging Face model dir" in line, err


def test_a_torchtitan_step_under_another_name_is_named_from_its_keys(tmp_path):
    """A step copied as `best/`: validate said "no model weights", export-hf counted its
    top-level `layers.N.` keys against the config's layers."""
    from trainer.tiny import build_tiny_model_dir

    step = _dump(tmp_path, steps=(10,)) / "checkpoint" / "step-10"
    best = step.rename(tmp_path / "best")
    config = build_tiny_model_dir(tmp_path / "model")
    for command in ("validate", "export-hf"):
        args = ["--out", tmp_path / "hf", "--hf-config", config] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, best, *args)
        line = one_error_line(err)
        assert code == 2 and line.startswith(f"error: {best}: a torchtitan checkpoint"), (
            stdout + err
        )
        assert f"python {SCRIPT} {best} OUT" in line, line
