"""A model dir's generation_config.json that is no JSON: transformers' model loader skips it,
so training from the dir goes on, but GenerationConfig.from_pretrained and verl's and vLLM's
readers fail on it. Every checkpoint copied it without a word (import-hf and export-hf leave
it out with a note); a run now says so once, before launch, and its checkpoints leave it
out, as GRPO's EOS read does (it refused the run, unlike SFT)."""

from __future__ import annotations

import shutil

from tests.support.model_dirs import train
from trainer.model_assets import copied_generation_config, unparsable_generation_config

GENERATION = "generation_config.json"
BROKEN = b'{"max_new_tokens": '


def _model(trainable, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(trainable[0], model)
    (model / GENERATION).write_bytes(BROKEN)
    return model


def test_a_run_notes_it_once_and_its_checkpoints_leave_it_out(trainable, tmp_path):
    model = _model(trainable, tmp_path)
    run = tmp_path / "run"
    code, err = train(
        "sft",
        *(f"model.path={model}", f"data.train_files={trainable[1]}", f"trainer.run_dir={run}"),
        *("trainer.total_steps=1", "trainer.eval_every=0", "checkpoint.save_every=1"),
    )
    assert code == 0, err
    notes = [line for line in err.splitlines() if GENERATION in line]
    assert notes == [
        f"note: {model / GENERATION}: not valid JSON (Expecting value at line 1, column 20);"
        " left out of what is written (transformers' model loader skips it,"
        " GenerationConfig.from_pretrained and verl's and vLLM's readers fail on it)"
    ], err
    copied = run / "global_step_1" / "huggingface" / GENERATION
    assert not copied.exists() or copied.read_bytes() != BROKEN


def test_what_checkpoints_copy_and_the_note(trainable, tmp_path):
    model = _model(trainable, tmp_path)
    assert copied_generation_config(str(model)) is None
    assert unparsable_generation_config(str(model)) is not None
    (model / GENERATION).write_text('{"max_new_tokens": 8}')
    assert copied_generation_config(str(model)) == b'{"max_new_tokens": 8}'
    assert unparsable_generation_config(str(model)) is None
