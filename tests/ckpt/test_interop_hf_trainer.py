"""What Hugging Face's Trainer (and TRL's trainers) save with FSDP and SHARDED_STATE_DICT:
OUTPUT/checkpoint-N/{pytorch_model_fsdp_0/, optimizer_0/, trainer_state.json, ...}, built
here with real dcp.save calls in Accelerate's key layout (save_fsdp_model saves
{"model": state_dict}, save_fsdp_optimizer {"optimizer": optimizer state dict}) from a tiny
Qwen2 after real AdamW steps. The run dir, a checkpoint-N dir and the model's DCP dir all
read as the same checkpoint."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

from mfsdp_ckpt.format import checkpoint_resolution, hf_trainer, layout
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import (
    assert_exports_to_source,
    one_error_line,
    run_cli,
    truncate_shard,
)

NEWEST, OLDER = 10, 2  # by number, not by name: "checkpoint-2" > "checkpoint-10" as text
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _train_step(model, optimizer, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (2, 8), generator=generator)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def save_trainer_checkpoint(run: Path, step: int, model, optimizer, tokenizer=None) -> Path:
    """checkpoint-<step> as Trainer._save_checkpoint leaves it: the two DCP dirs, the
    scheduler, RNG and trainer state; config.json and the tokenizer when `tokenizer` is
    given (transformers releases that called _save there), none otherwise."""
    checkpoint = run / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    model_dir, optimizer_dir = checkpoint / "pytorch_model_fsdp_0", checkpoint / "optimizer_0"
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(model_dir), no_dist=True)
    optimizer_state = get_optimizer_state_dict(model, optimizer)
    dcp.save({"optimizer": optimizer_state}, checkpoint_id=str(optimizer_dir), no_dist=True)
    if tokenizer is not None:
        model.config.save_pretrained(checkpoint)
        tokenizer.save_pretrained(checkpoint)
    torch.save({"last_epoch": step}, checkpoint / "scheduler.pt")
    torch.save({"cpu": torch.random.get_rng_state()}, checkpoint / "rng_state.pth")
    (checkpoint / "training_args.bin").write_bytes(b"TrainingArguments")
    # TrainerState.save_to_json: sorted keys, NaN as Python's json writes it
    state = {"global_step": step, "log_history": [{"grad_norm": float("nan"), "step": step}]}
    (checkpoint / hf_trainer.TRAINER_STATE_FILE).write_text(
        json.dumps(state, indent=2, sort_keys=True) + "\n"
    )
    return checkpoint


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(run dir, the model as saved at the newest step): checkpoint-2 and checkpoint-10."""
    from trainer.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    model = tiny_causal_lm("qwen2", vocab=len(tokenizer))  # tied embeddings, as Qwen2.5
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    run = tmp_path_factory.mktemp("trainer") / "output"
    _train_step(model, optimizer, seed=0)
    save_trainer_checkpoint(run, OLDER, model, optimizer, tokenizer)
    _train_step(model, optimizer, seed=1)
    save_trainer_checkpoint(run, NEWEST, model, optimizer, tokenizer)
    (run / "README.md").write_text("model card\n")  # TRL writes one beside the checkpoints
    return run, model.eval()


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the run to damage."""
    return shutil.copytree(trained[0], tmp_path / "output", symlinks=True)


def _newest(run: Path) -> Path:
    return run / f"checkpoint-{NEWEST}"


# --------------------------------------------------------------------------- entry paths
def test_run_checkpoint_and_model_dir_resolve_to_the_newest_checkpoint(trained):
    run = trained[0]
    checkpoint = _newest(run)
    model_dcp = checkpoint / "pytorch_model_fsdp_0"
    given = (run, checkpoint, model_dcp, checkpoint / "optimizer_0")
    for path in given:
        paths = checkpoint_resolution.resolve_checkpoint(path)
        assert paths.kind == layout.HF_TRAINER, path
        assert (paths.dist_ckpt, paths.step_dir, paths.run_dir) == (model_dcp, checkpoint, run)
        assert paths.optimizer_dcp == checkpoint / "optimizer_0"
        assert paths.hf_dir == checkpoint and paths.step == NEWEST
    older = checkpoint_resolution.resolve_checkpoint(run / f"checkpoint-{OLDER}")
    assert older.step == OLDER and older.dist_ckpt.parent.name == f"checkpoint-{OLDER}"


def test_a_dir_holding_the_run_reads_it(trained):
    code, out, err = run_cli("ckpt", "validate", trained[0].parent)
    assert code == 0 and f"checkpoint-{NEWEST}" in out and "holds one run" in err, out + err


# --------------------------------------------------------------------------- export
def test_export_needs_no_hf_config_and_copies_the_tokenizer(trained, tmp_path):
    run, model = trained
    checkpoint = _newest(run)
    assert_exports_to_source(model, run, tmp_path / "from_run")
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    shutil.copy(checkpoint / "config.json", config_only)
    code, out, err = run_cli(
        "ckpt",
        "export-hf",
        checkpoint / "pytorch_model_fsdp_0",
        "--out",
        tmp_path / "from_dcp",
        "--hf-config",
        config_only,
    )
    assert code == 0, out + err
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "from_run" / name).read_bytes() == (
            tmp_path / "from_dcp" / name
        ).read_bytes(), name
    for name in TOKENIZER_FILES:
        assert (tmp_path / "from_run" / name).read_bytes() == (checkpoint / name).read_bytes()
    copied = {p.name for p in (tmp_path / "from_run").iterdir()}
    assert hf_trainer.TRAINER_STATE_FILE not in copied and "optimizer_0" not in copied


def test_without_config_in_the_checkpoint_export_asks_for_hf_config(trained, run, tmp_path):
    """What transformers' Trainer saves today with SHARDED_STATE_DICT: no config.json."""
    checkpoint = _newest(run)
    (checkpoint / "config.json").unlink()
    code, out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 2 and "--hf-config" in line and "HF Trainer" in line, out + err
    model_dir = tmp_path / "model"
    trained[1].config.save_pretrained(model_dir)
    assert_exports_to_source(trained[1], run, tmp_path / "hf", "--hf-config", model_dir)


def test_export_into_a_checkpoint_is_refused(trained, tmp_path):
    code, out, err = run_cli("ckpt", "export-hf", trained[0], "--out", _newest(trained[0]) / "hf")
    assert code == 2 and "inside the checkpoint" in one_error_line(err), out + err


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
def test_an_asset_linked_out_of_the_checkpoint_is_refused(name, run, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text((_newest(run) / name).read_text())
    (_newest(run) / name).unlink()
    os.symlink(secret, _newest(run) / name)
    code, out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1 and "resolves outside the checkpoint" in one_error_line(err), out + err
    assert not (tmp_path / "hf").exists()


# --------------------------------------------------------------------------- validate
def test_validate_checks_the_optimizer_dir_against_the_model(trained):
    code, out, err = run_cli("ckpt", "validate", trained[0], "--deep", "--json")
    report = json.loads(out)
    assert code == 0 and report["valid"] and report["findings"] == [], out + err
    assert report["layout"] == layout.HF_TRAINER and report["step"] == NEWEST
    assert report["has_optimizer_state"] is True
    model_tensors = 1 + sum(1 for _ in trained[1].named_parameters())  # lm_head, tied
    assert report["tensors"] > 2 * model_tensors  # the optimizer's moments are counted


def _without_a_moment(run: Path) -> str:
    """optimizer_0 saved again without one parameter's exp_avg: the key it lacks."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    optimizer_dir = _newest(run) / "optimizer_0"
    flat = run / "optimizer.pt"
    dcp_to_torch_save(optimizer_dir, flat)
    state = torch.load(flat, weights_only=False)
    shutil.rmtree(optimizer_dir)
    del state["optimizer"]["state"]["model.layers.1.mlp.up_proj.weight"]["exp_avg"]
    dcp.save(state, checkpoint_id=str(optimizer_dir), no_dist=True)
    flat.unlink()
    return "model.model.layers.1.mlp.up_proj.weight"


DAMAGE = {
    "truncated_shard": (lambda run: truncate_shard(_newest(run) / "optimizer_0"), "truncated"),
    "metadata_removed": (
        lambda run: (_newest(run) / "optimizer_0" / ".metadata").unlink(),
        "optimizer_0/.metadata",
    ),
    "moment_missing": (_without_a_moment, "optimizer state exp_avg is missing"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_optimizer_dir_fails_validate(case, run):
    damage, expected = DAMAGE[case]
    damage(run)
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 1 and expected in out, out + err


def test_without_an_optimizer_dir_validate_says_so(run):
    shutil.rmtree(_newest(run) / "optimizer_0")
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "no optimizer state" in out, out + err


# --------------------------------------------------------------------------- inspect
def test_inspect_lists_the_optimizer_dir(trained):
    checkpoint = _newest(trained[0])
    code, out, err = run_cli("ckpt", "inspect", trained[0], "--json")
    described = json.loads(out)
    assert code == 0 and described["layout"] == layout.HF_TRAINER, out + err
    assert described["optimizer_checkpoint"] == str(checkpoint / "optimizer_0")
    assert set(described["totals"]["by_group"]) == {"model", "optimizer"}
    names = {t["name"] for t in described["tensors"]}
    assert "optimizer.state.model.embed_tokens.weight.exp_avg_sq" in names
    weights = described["weights"]  # the optimizer's entry is read from optimizer_0/ too
    assert (weights["optimizer"], weights["problem"]) == ("optimizer", None), weights
    assert weights["optimizer_state_tensors"] == sum(
        name.startswith("optimizer.state.") for name in names
    )
    code, out, err = run_cli("ckpt", "inspect", trained[0])
    assert code == 0 and f"optimizer   {checkpoint / 'optimizer_0'}" in out, out + err


# --------------------------------------------------------------------------- the step
def test_the_step_is_trainer_states_global_step(run):
    state_file = _newest(run) / hf_trainer.TRAINER_STATE_FILE
    state_file.write_text(json.dumps({"global_step": 12}))
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert paths.step == 12 and "global_step 12" in paths.note
    state_file.unlink()
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert paths.step == NEWEST and hf_trainer.TRAINER_STATE_FILE in paths.note


HOSTILE_STATES = {
    "fifo": (lambda p: os.mkfifo(p), "a FIFO"),
    "not_json": (lambda p: p.write_text("{'global_step': 10}"), "not valid JSON"),
    "step_as_text": (lambda p: p.write_text('{"global_step": "10"}'), "integer global_step"),
    "step_as_bool": (lambda p: p.write_text('{"global_step": true}'), "integer global_step"),
    "a_list": (lambda p: p.write_text("[10]"), "expected a JSON object"),
    "nested_100000_deep": (lambda p: p.write_text("[" * 100_000), "not valid JSON"),
    "directory": (lambda p: p.mkdir(), "a directory"),
    "symlink_out": (lambda p: os.symlink("/etc/hostname", p), "resolves outside"),
}


@pytest.mark.parametrize("case", list(HOSTILE_STATES))
def test_a_hostile_trainer_state_is_one_line(case, run):
    make, expected = HOSTILE_STATES[case]
    state_file = _newest(run) / hf_trainer.TRAINER_STATE_FILE
    state_file.unlink()
    make(state_file)
    for given in (run, _newest(run) / "pytorch_model_fsdp_0"):
        code, out, err = run_cli("ckpt", "validate", given)  # validate's finding and verdict
        line = one_error_line(out)
        assert code == 1 and expected in line and hf_trainer.TRAINER_STATE_FILE in line, out
        assert out.splitlines()[-1].startswith(f"INVALID: {given} ("), out + err
        code, _out, err = run_cli("ckpt", "inspect", given)
        line = one_error_line(err)
        assert code == 1 and expected in line and hf_trainer.TRAINER_STATE_FILE in line, err


def test_a_huge_trainer_state_is_not_read(run):
    """A long run's log_history: the step comes from the dir's name, with a note."""
    state_file = _newest(run) / hf_trainer.TRAINER_STATE_FILE
    with open(state_file, "r+b") as handle:
        handle.truncate(hf_trainer.TRAINER_STATE_MAX_BYTES + 1)  # sparse: nothing written
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 0 and f"step {NEWEST} (from the folder name)," in out, out + err
    assert "from the dir name" in err, err


# --------------------------------------------------------------------------- other shapes
def test_several_models_are_a_choice_left_to_the_user(run):
    checkpoint = _newest(run)
    shutil.copytree(checkpoint / "pytorch_model_fsdp_0", checkpoint / "pytorch_model_fsdp_1")
    code, out, err = run_cli("ckpt", "validate", run)
    line = one_error_line(err)
    assert code == 2 and "pytorch_model_fsdp_0/, pytorch_model_fsdp_1/" in line, out + err
    paths = checkpoint_resolution.resolve_checkpoint(checkpoint / "pytorch_model_fsdp_1")
    assert paths.dist_ckpt.name == "pytorch_model_fsdp_1" and paths.optimizer_dcp is None


def test_a_full_state_dict_checkpoint_is_a_hugging_face_model_dir(trained, run):
    """FULL_STATE_DICT: the Trainer saves the model with save_pretrained into checkpoint-N."""
    checkpoint = _newest(run)
    for name in ("pytorch_model_fsdp_0", "optimizer_0"):
        shutil.rmtree(checkpoint / name)
    trained[1].save_pretrained(checkpoint)
    for given in (run, checkpoint):
        code, _out, err = run_cli("ckpt", "validate", given)
        line = one_error_line(err)
        assert code == 2 and "a Hugging Face model dir, not a training checkpoint" in line, err


def test_an_unfinished_newest_save_is_named(run):
    metadata = _newest(run) / "pytorch_model_fsdp_0" / ".metadata"
    metadata.unlink()
    code, out, err = run_cli("ckpt", "validate", run)
    line = one_error_line(out)  # validate's finding: an invalid checkpoint, not a failure
    assert code == 1 and "no .metadata" in line and "resume_from_checkpoint" in line, out + err
    assert f"checkpoint-{OLDER}" in line
    assert run_cli("ckpt", "validate", run / f"checkpoint-{OLDER}")[0] == 0


def test_accelerates_per_rank_shards_are_named(run):
    checkpoint = _newest(run)
    shutil.rmtree(checkpoint / "pytorch_model_fsdp_0")
    (checkpoint / "pytorch_model_fsdp_0_rank0.bin").write_bytes(b"shard")
    code, out, err = run_cli("ckpt", "validate", checkpoint)
    assert code == 2 and "per-rank FSDP shards" in one_error_line(err), out + err
