"""A run's checkpoints ship the tokenizer files it read, byte for byte, and so does export-hf
of them, as import-hf -> export-hf does. Was: each checkpoint's huggingface/ held transformers'
re-save of the tokenizer, whose tokenizer_config.json gained the load settings
`"is_local": true` and `"local_files_only": true` (and, for Qwen2, another tokenizer_class;
tokenizer.json was rewritten), which every export copied on. Only a tokenizer built in memory
(the embedded tiny one) is saved through transformers, and without load settings."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.interop_layouts import run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ConfigError
from trainer.model_assets import tokenizer_files
from trainer.sft import run_sft

# What a checkpoint's huggingface/ holds besides the tokenizer: written by the run itself
OWN_FILES = {"config.json", "generation_config.json"}
LOAD_SETTINGS = {"is_local", "local_files_only"}


def _files(directory: Path) -> dict[str, bytes]:
    """Each file under `directory` but weights and OWN_FILES, relative name -> bytes."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
        and path.suffix != ".safetensors"
        and str(path.relative_to(directory)) not in OWN_FILES
    }


def _train(data: Path, run: Path, *settings: str) -> Path:
    """One SFT step saved; the step's huggingface/ dir."""
    run_sft(
        tiny_config(
            data,
            run,
            *("trainer.total_steps=1", "checkpoint.save_every=1", "data.global_batch_size=4"),
            *settings,
        )
    )
    return run / "global_step_1" / "huggingface"


def _export(run: Path, out: Path) -> Path:
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    return out


@pytest.fixture(scope="module")
def source(trainable, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a model dir whose tokenizer transformers' save_pretrained wrote, with a named chat
    template beside it; its run's data; that run, of one step)."""
    root = tmp_path_factory.mktemp("tok_source")
    model = root / "model"
    shutil.copytree(trainable[0], model)
    named = model / "additional_chat_templates"
    named.mkdir()
    shutil.copy(model / "chat_template.jinja", named / "default.jinja")
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    _train(data, root / "run", f"model.path={model}")
    return model, data, root / "run"


def test_a_model_dirs_tokenizer_files_are_in_each_checkpoint_and_export(source, tmp_path):
    model, _data, run = source
    expected = _files(model)
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= expected.keys()
    assert _files(run / "global_step_1" / "huggingface") == expected
    assert _files(_export(run, tmp_path / "export")) == expected


def test_a_run_from_a_checkpoint_ships_that_checkpoints_files(source, tmp_path):
    model, data, run = source
    again = _train(data, tmp_path / "again", f"model.path={run / 'global_step_1'}")
    assert _files(again) == _files(model)


def test_model_tokenizer_names_the_files_shipped(source, tmp_path):
    model, data, _run = source
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "chat_template.jinja"):
        shutil.copy(model / name, tokenizer / name)
    settings = json.loads((model / "tokenizer_config.json").read_text())
    (tokenizer / "tokenizer_config.json").write_text(json.dumps(settings, indent=4) + "\n")
    hf = _train(data, tmp_path / "run", f"model.path={model}", f"model.tokenizer={tokenizer}")
    assert _files(hf) == _files(tokenizer)


def test_a_lora_run_and_its_merged_export_ship_the_files(source, tmp_path):
    model, data, _run = source
    lora = ("model.lora_rank=4", "model.target_modules=[q_proj,v_proj]")
    hf = _train(data, tmp_path / "run", f"model.path={model}", *lora)
    assert _files(hf) == _files(model)
    assert _files(_export(tmp_path / "run", tmp_path / "export")) == _files(model)


def test_the_embedded_tokenizer_is_saved_without_load_settings(source, tmp_path):
    _model, data, _run = source
    hf = _train(data, tmp_path / "run")
    settings = json.loads((hf / "tokenizer_config.json").read_text())
    assert not LOAD_SETTINGS & settings.keys()
    assert settings["eos_token"] == "<|im_end|>"


def test_files_are_read_only_inside_the_tokenizer_dir(source, tmp_path):
    """What is shipped is read as import-hf reads it: a link that leads out of the dir (a
    user's file) is refused naming the file, never copied into a checkpoint."""
    model, _data, _run = source
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(model, tokenizer)
    assert tokenizer_files(tokenizer, None) == _files(model)
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes((model / "tokenizer.json").read_bytes())
    (tokenizer / "tokenizer.json").unlink()
    os.symlink(outside, tokenizer / "tokenizer.json")
    with pytest.raises(ConfigError) as refused:
        tokenizer_files(tokenizer, None)
    assert str(refused.value).startswith(f"{tokenizer / 'tokenizer.json'}: "), refused.value
