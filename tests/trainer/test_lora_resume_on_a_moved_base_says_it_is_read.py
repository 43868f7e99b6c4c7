"""A LoRA run resumed with `model.path` at a byte-identical copy of its base: the resume is
right to go on (the base's digests match the step's record), but the note said the run
"trains on from global_step_1's weights, not the new value's", when a LoRA run reads its
frozen base from the new value and only the adapter comes from the step. It now says that."""

from __future__ import annotations

import shutil

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir

SETTINGS = ("trainer.total_steps=2", "model.lora_rank=4", "checkpoint.save_every=1")


def test_a_moved_lora_base_is_said_to_be_read_from_the_new_path(tmp_path, capsys):
    build_tiny_model_dir(tmp_path / "base", seed=0, with_weights=True)
    moved = shutil.copytree(tmp_path / "base", tmp_path / "moved")
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(
        tiny_config(
            data, run, f"model.path={tmp_path / 'base'}", *SETTINGS, "trainer.stop_at_step=1"
        )
    )
    capsys.readouterr()
    assert run_sft(tiny_config(data, run, f"model.path={moved}", *SETTINGS)).resumed_from == 1
    said = capsys.readouterr().err
    assert (
        f"resumed with settings changed since step 1: model.path '{tmp_path / 'base'}' ->"
        f" '{moved}' (the frozen base is read from the new value, checked equal to the base"
        " global_step_1 was trained on; the adapter trains on from global_step_1's); the config"
        f" step 1 was trained with is kept as {run / 'config.until_step_1.yaml'}\n"
    ) in said, said
    assert "not the new value's" not in said
