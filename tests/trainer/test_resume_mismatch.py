"""Resume refuses a checkpoint of another model instead of loading part of it.

A 2-rank FSDP2 run trains 2 steps; reruns into copies of its run dir with another model
shape must stop before training with one line naming what differs: the HF config field
when the step has huggingface/config.json, else (a bare dist_ckpt dir, as Megatron-LM
writes) the keys or shapes, both directions. The same model resumes. Nothing is saved by a
refused run."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.format.run_steps import list_complete_steps
from tests.support.distributed import run_distributed
from tests.support.paths import REPO
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

SETTINGS = (
    "trainer.total_steps=4",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
)
# name: (overrides of the rerun, resume from a bare copy of dist_ckpt/, expected text in the error)
VARIANTS = {
    "same-model": ((), False, None),
    "fewer-layers": (("model.overrides={num_hidden_layers: 1}",), False, "num_hidden_layers=2"),
    "wider-mlp": (("model.overrides={intermediate_size: 192}",), False, "intermediate_size=256"),
    "untied-head": (
        ("model.overrides={tie_word_embeddings: false}",),
        False,
        "tie_word_embeddings=True",
    ),
    # transformers 5 keeps it in rope_parameters, which was not compared: a run trained
    # with one RoPE resumed under another, silently (only tensor values change)
    "other-rope-theta": (("model.overrides={rope_theta: 5000.0}",), False, "rope_parameters="),
    "fewer-layers-bare": (
        ("model.overrides={num_hidden_layers: 1}",),
        True,
        "this run does not have",
    ),
    "more-layers-bare": (
        ("model.overrides={num_hidden_layers: 3}",),
        True,
        "missing from the checkpoint",
    ),
    "wider-mlp-bare": (
        ("model.overrides={intermediate_size: 192}",),
        True,
        "has shape (128, 256) in the checkpoint",
    ),
}


def _copy_for_variants(root: Path) -> None:
    for name, (_overrides, bare, _expected) in VARIANTS.items():
        if bare:
            dist_ckpt = root / "base" / "global_step_2" / "dist_ckpt"
            shutil.copytree(dist_ckpt, root / name / "bare")
        else:
            shutil.copytree(root / "base", root / name)


def _train_then_rerun_variants(rank: int, world_size: int, root: str) -> None:
    """One pair of processes does it all (each spawn costs seconds of imports)."""
    root = Path(root)
    run_sft(tiny_config(root / "train.jsonl", root / "base", *SETTINGS, "trainer.stop_at_step=2"))
    if rank == 0:
        _copy_for_variants(root)
    torch.distributed.barrier()
    outcomes = {}
    for name, (overrides, bare, _expected) in VARIANTS.items():
        run_dir = root / name / "run" if bare else root / name
        resume = [f"checkpoint.resume={root / name / 'bare'}"] if bare else []
        try:
            config = tiny_config(root / "train.jsonl", run_dir, *SETTINGS, *overrides, *resume)
            result = run_sft(config)
            outcomes[name] = {
                "ok": True,
                "resumed_from": result.resumed_from,
                "final_step": result.final_step,
            }
        except Exception as err:  # the outcome under test: which error, with which message
            outcomes[name] = {"ok": False, "type": type(err).__name__, "message": str(err)}
    if rank == 0:
        (root / "outcomes.json").write_text(json.dumps(outcomes))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mismatch")
    write_chat_jsonl(root / "train.jsonl", rows=40)
    run_distributed(_train_then_rerun_variants, 2, str(root))
    assert list_complete_steps(root / "base") == [2]
    return root


@pytest.fixture(scope="module")
def outcomes(trained) -> dict:
    return json.loads((trained / "outcomes.json").read_text())


@pytest.mark.parametrize("name", [name for name, spec in VARIANTS.items() if spec[2] is not None])
def test_another_model_is_refused_naming_the_difference(outcomes, trained, name):
    outcome, expected = outcomes[name], VARIANTS[name][2]
    assert not outcome["ok"], f"{name}: resumed a checkpoint of another model: {outcome}"
    assert outcome["type"] in ("ResumeMismatchError", "CheckpointContentsError"), outcome
    assert expected in outcome["message"] and "\n" not in outcome["message"], outcome["message"]
    saved = list_complete_steps(trained / name / "run" if VARIANTS[name][1] else trained / name)
    assert saved == ([] if VARIANTS[name][1] else [2])  # nothing saved by the refused run


def test_the_same_model_resumes(outcomes, trained):
    assert outcomes["same-model"] == {"ok": True, "resumed_from": 2, "final_step": 4}
    assert list_complete_steps(trained / "same-model") == [2, 4]


def test_cli_refuses_in_one_line_with_exit_2(trained, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(trained / "base", run_dir)
    result = CliRunner().invoke(
        app,
        [
            "train",
            "sft",
            "--config",
            str(REPO / "examples" / "sft_tiny_cpu.yaml"),
            f"data.train_files={trained / 'train.jsonl'}",
            f"trainer.run_dir={run_dir}",
            "trainer.progress_bar=false",
            "data.val_ratio=0",
            "trainer.eval_every=0",
            *SETTINGS,
            "model.overrides={num_hidden_layers: 1}",
        ],
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "num_hidden_layers=2" in errors[0], result.output
    assert "Traceback" not in result.output
    assert list_complete_steps(run_dir) == [2]
