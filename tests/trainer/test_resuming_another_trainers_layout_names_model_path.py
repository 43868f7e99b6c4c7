"""`checkpoint.resume=` a checkpoint that is not a step of an mfsdp training run (a verl
run dir, a bare Megatron-core dist_ckpt such as Megatron-LM's --load dir or an import) is
refused in one line naming its layout and `model.path=`, which trains from it.

Was: its keys were compared with the run's, "131 key(s) of this run missing from the
checkpoint ... (another model config? a new trainer.run_dir starts over)" in a new run dir
of the same model; only an mfsdp import, which has a manifest, got the model.path advice.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.checkpointer import CheckpointContentsError
from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir

SHORT = ("trainer.total_steps=1", "data.global_batch_size=4")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A tiny model dir, its Megatron-core import, that import in a verl run dir (as
    docs/interop.md builds one), and chat data."""
    root = tmp_path_factory.mktemp("foreign")
    model = build_tiny_model_dir(root / "hf", seed=0, with_weights=True)
    import_hf(model, root / "mcore", layout_name="mcore")
    actor = root / "verl" / "global_step_0" / "actor" / "model"
    shutil.copytree(root / "mcore", actor / "dist_ckpt")
    shutil.copytree(model, actor / "huggingface", ignore=shutil.ignore_patterns("*.safetensors"))
    (root / "verl" / "latest_checkpointed_iteration.txt").write_text("0")
    return root, model, write_chat_jsonl(root / "train.jsonl", rows=8)


def _refused(data: Path, run: Path, *settings: str) -> str:
    with pytest.raises(CheckpointContentsError) as refused:
        run_sft(tiny_config(data, run, *SHORT, *settings))
    message = str(refused.value)
    assert "\n" not in message and "another model config" not in message, message
    return message


@pytest.mark.parametrize("with_model_path", [False, True])
def test_a_verl_run_dir_is_named_as_verls(made, tmp_path, with_model_path):
    root, model, data = made
    given = [f"model.path={model}"] if with_model_path else []
    message = _refused(data, tmp_path / "run", f"checkpoint.resume={root / 'verl'}", *given)
    step = root / "verl" / "global_step_0"
    assert message == (
        f"{step}: a checkpoint of layout verl-rl-v2, not a step of an mfsdp training run: it"
        " has no mfsdp optimizer or extra state to resume; to start training from its"
        f" weights, give model.path={step} instead of checkpoint.resume"
    )
    assert run_sft(tiny_config(data, tmp_path / "run2", *SHORT, f"model.path={step}"))


def test_a_bare_mcore_dist_ckpt_is_named_as_one_without_manifest(made, tmp_path):
    root, model, data = made
    given = f"checkpoint.resume={root / 'mcore'}"
    message = _refused(data, tmp_path / "run", given, f"model.path={model}")
    assert message.startswith(
        f"{root / 'mcore'}: a checkpoint without manifest.json, not a step of an mfsdp"
        " training run: "
    ), message
    assert message.endswith(f"give model.path={root / 'mcore'} instead of checkpoint.resume")


def test_the_refusal_comes_before_the_model_is_built(made, tmp_path):
    """Refused before any weight is read (minutes on a large model): a model dir whose
    weights file is damaged is not reached."""
    root, model, data = made
    damaged = tmp_path / "damaged"
    shutil.copytree(model, damaged)
    for weights in damaged.glob("*.safetensors"):
        weights.write_bytes(weights.read_bytes()[:64])
    given = f"checkpoint.resume={root / 'verl'}"
    message = _refused(data, tmp_path / "run", given, f"model.path={damaged}")
    assert message.endswith("instead of checkpoint.resume"), message
