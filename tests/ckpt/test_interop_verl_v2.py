"""verl's checkpoint manager as it writes today (layout schema v2, ckpt_contents.json).

megatron_checkpoint_manager.py creates model/dist_ckpt, optimizer/dist_ckpt and
extra/dist_ckpt with its path helpers on every save. With its default backend (mbridge,
use_dist_checkpointing False) the model's weights go to model/huggingface only and
model/dist_ckpt stays empty; the SFT trainer writes the same split into the step dir.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from tests.support.interop_layouts import (
    BUILDERS,
    assert_exports_to_source,
    one_error_line,
    run_cli,
)


@pytest.mark.parametrize("kind", ["verl-rl-v2", "verl-sft-v2"])
def test_a_save_of_hugging_face_weights_only_names_them(kind, made_optim, tmp_path):
    """Was untested: verl's default Megatron save holds no dist_ckpt model state."""
    laid = BUILDERS[kind](made_optim, tmp_path)
    for file in laid.dist_ckpt.iterdir():
        file.unlink()
    hf = laid.dist_ckpt.parent / "huggingface"
    save_file({"model.embed_tokens.weight": torch.zeros(2, 2)}, hf / "model.safetensors")
    contents = json.loads((laid.dist_ckpt.parents[1] / "ckpt_contents.json").read_text())
    contents["contents"]["model"] = {"path": "model/huggingface", "format": "huggingface"}
    (laid.dist_ckpt.parents[1] / "ckpt_contents.json").write_text(json.dumps(contents))
    for command in ("inspect", "validate", "export-hf"):
        extra = ["--out", tmp_path / "out"] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, laid.run, *extra)
        line = one_error_line(err)
        assert code == 2 and f"its weights are a Hugging Face dir: {hf}" in line, stdout + err
        assert not (tmp_path / "out").exists()


def test_a_newer_v2_step_without_its_contents_file_is_called_unfinished(made_optim, tmp_path):
    """verl's async save writes ckpt_contents.json, then the tracker, once every write is
    done: a newer step without it is a save still running or lost, not one to read.
    Was: "(an async save does not update the tracker) ... give RUN/global_step_80 to read
    the newer one"."""
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    newer = laid.run / "global_step_80" / "actor" / "model" / "dist_ckpt"
    newer.mkdir(parents=True)
    code, stdout, err = run_cli("ckpt", "validate", laid.run)
    assert code == 0 and f"valid: {laid.dist_ckpt}" in stdout, stdout + err
    assert "global_step_80/ (step 80) is newer and holds no ckpt_contents.json" in err
    assert "did not finish; reading step 40" in err and "give" not in err, err


def test_the_documented_import_for_verl_reads_as_its_v2_layout(tmp_path):
    """docs/interop.md's verl recipe: import-hf beside the run (an --out inside the step
    dir is refused), moved to actor/model/dist_ckpt, the config in actor/model/huggingface/,
    a tracker; every command reads it as verl v2. Was: the recipe imported straight into
    the step dir, which import-hf refuses."""
    from tests.support.hf_to_mcore import tiny_causal_lm

    model = tiny_causal_lm("qwen2")
    source = tmp_path / "qwen"
    model.save_pretrained(source)
    run = tmp_path / "run"
    model_dir = run / "global_step_0" / "actor" / "model"
    (model_dir / "huggingface").mkdir(parents=True)
    code, _, err = run_cli("ckpt", "import-hf", source, "--out", model_dir / "dist_ckpt")
    assert code == 2 and "lies inside the checkpoint" in one_error_line(err), err
    code, stdout, err = run_cli("ckpt", "import-hf", source, "--out", tmp_path / "q_mcore")
    assert code == 0, stdout + err
    (tmp_path / "q_mcore").rename(model_dir / "dist_ckpt")
    (model_dir / "huggingface" / "config.json").write_bytes((source / "config.json").read_bytes())
    (run / "latest_checkpointed_iteration.txt").write_text("0")
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["layout"] == "verl-rl-v2" and report["valid"], stdout + err
    assert_exports_to_source(model, run, tmp_path / "hf")


@pytest.mark.parametrize("kind", ["verl-rl-v2", "verl-sft-v2"])
def test_a_migrated_step_is_read_from_its_v2_split(kind, made_optim, tmp_path):
    """verl's scripts/migrate_megatron_checkpoint_layout.py links the v2 split beside the
    pre-v2 dist_ckpt/ and leaves that in place; a v2 run saving the step again rewrites
    model/ only. verl loads model/dist_ckpt (ckpt_contents.json marks the step v2). Was: the
    stale pre-v2 dist_ckpt/ was read, silently, at every level above it."""
    import torch.distributed.checkpoint as dcp

    laid = BUILDERS[kind](made_optim, tmp_path)
    holder = laid.dist_ckpt.parents[1]  # actor/ (RL) or the step dir (SFT)
    dcp.save({"model": {"stale": torch.zeros(3)}}, checkpoint_id=str(holder / "dist_ckpt"))
    for level in (laid.run, holder):
        code, stdout, err = run_cli("ckpt", "validate", level, "--json")
        report = json.loads(stdout)
        assert code == 0 and report["checkpoint"] == str(laid.dist_ckpt), stdout + err
        assert report["layout"] == kind, stdout
        assert f"{holder / 'dist_ckpt'} (verl's pre-v2 layout) is left unread" in report["note"]
