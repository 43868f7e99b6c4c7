"""A LoRA resume refused because its base is other weights says what lets it go on, never
advice already followed: the base dir's files changed in place (model.path already is that
dir) -> restore them; model.path pointed at another dir -> set it back to the recorded one;
an adapter trained on a random init -> that init's seed. It said "set model.path to that
base" in every case, when model.path was that base."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir

SETTINGS = ("trainer.total_steps=2", "model.lora_rank=4", "checkpoint.save_every=1")
START_OVER = "or use a new trainer.run_dir to start over"


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[Path, Path]:
    """A LoRA run on the weights in root/base, stopped at step 1, and its data."""
    root = tmp_path_factory.mktemp("lora_base")
    build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    base = f"model.path={root / 'base'}"
    run_sft(tiny_config(data, root / "run", base, *SETTINGS, "trainer.stop_at_step=1"))
    return root, data


def _refusal(data: Path, run: Path, *overrides: str) -> str:
    with pytest.raises(ResumeMismatchError) as refused:
        run_sft(tiny_config(data, run, *SETTINGS, *overrides))
    assert not (run / "global_step_2").exists()
    return str(refused.value)


def test_files_changed_in_place_are_told_to_be_restored(stopped, tmp_path):
    root, data = stopped
    base, run = root / "base", shutil.copytree(root / "run", tmp_path / "run")
    weights = base / "model.safetensors"
    kept = weights.read_bytes()
    tensors = load_file(weights)
    tensors["model.norm.weight"] += 1e-3  # other bytes, the same size
    save_file(tensors, weights, metadata={"format": "pt"})
    try:
        said = _refusal(data, run, f"model.path={base}")
    finally:
        weights.write_bytes(kept)
    assert said.endswith(
        f"; in this run's base {base.resolve()}, model.safetensors has other bytes of the same"
        f" size (xxh3_128 differs); so its files changed since this step was saved: restore"
        f" them, {START_OVER}"
    ), said
    assert "set model.path" not in said
    assert run_sft(tiny_config(data, run, f"model.path={base}", *SETTINGS)).resumed_from == 1


def test_another_base_dir_is_told_the_recorded_one(stopped, tmp_path):
    root, data = stopped
    build_tiny_model_dir(tmp_path / "other", seed=1, with_weights=True)
    run = shutil.copytree(root / "run", tmp_path / "run")
    said = _refusal(data, run, f"model.path={tmp_path / 'other'}")
    assert said.endswith(
        f"; set model.path={(root / 'base').resolve()} (the base it was trained on), {START_OVER}"
    ), said


def test_an_adapter_on_a_random_init_is_told_its_seed(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.seed=5", "trainer.stop_at_step=1"))
    build_tiny_model_dir(tmp_path / "other", seed=1, with_weights=True)
    said = _refusal(data, run, f"model.path={tmp_path / 'other'}", "trainer.seed=5")
    assert said.endswith(
        "; resume on the random init it was trained on (trainer.seed=5, no weights loaded:"
        f" model.path unset or model.random_init=true), {START_OVER}"
    ), said
