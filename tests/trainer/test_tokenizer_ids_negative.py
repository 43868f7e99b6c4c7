"""A negative id in tokenizer.json (a vocab entry, an added token, a post-processor token)
passed the launcher's check, which compared only the largest id with `vocab_size`, and the
`tokenizers` library failed on the file in every rank ("invalid value: integer `-5`,
expected u32"). It is refused before launch in one line naming the file, the key and the
id (`trainer/tokenizer_ids.py`). A negative id in config.json or generation_config.json is
no id a tokenizer emits: older LLaMA configs give `pad_token_id: -1` for "none", which the
run takes as it always did, so it is not refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source


def _model(trainable, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trainable[0], tmp_path / "model"))


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    edit(data)
    path.write_text(json.dumps(data))


def _check(model: Path) -> None:
    cfg = ModelConfig(path=str(model))
    check_model_files(cfg, resolve_model_source(cfg))


def _added_at(data: dict) -> None:
    data["added_tokens"][0]["id"] = -5


def _vocab_at(data: dict) -> None:
    data["model"]["vocab"]["<|low|>"] = -1


def _post_processor_at(data: dict) -> None:
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [-3], "tokens": ["<|bos|>"]}},
    }


def _bert_pair_at(data: dict) -> None:
    data["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", -2], "cls": ["[CLS]", 1]}


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_added_at, "tokenizer.json [added_tokens]: token '<|endoftext|>' has id -5"),
        (_vocab_at, "tokenizer.json: token '<|low|>' has id -1"),
        (_post_processor_at, "tokenizer.json [post_processor]: token '<|bos|>' has id -3"),
        (_bert_pair_at, "tokenizer.json [post_processor]: token '[SEP]' has id -2"),
    ],
)
def test_a_negative_tokenizer_id_is_refused_before_launch(trainable, tmp_path, edit, says):
    model = _model(trainable, tmp_path)
    _edit_json(model / "tokenizer.json", edit)
    with pytest.raises(ConfigError) as refused:
        _check(model)
    said = str(refused.value)
    assert said == f"{model}/{says}, not a token id (ids are 0 or more; the tokenizers" + (
        " library fails on the file as it loads it)"
    ), said


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
def test_an_old_llama_pad_token_id_of_minus_one_is_still_accepted(trainable, tmp_path, name):
    model = _model(trainable, tmp_path)
    _edit_json(model / name, lambda data: data.update(pad_token_id=-1))
    _check(model)  # no error


def test_the_model_of_a_config_with_pad_token_id_minus_one_builds(trainable, tmp_path):
    """transformers takes -1 as the embedding's padding_idx, counted from the end, as it
    always did: what the run builds from such a config.json."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = _model(trainable, tmp_path)
    _edit_json(model / "config.json", lambda data: data.update(pad_token_id=-1))
    _check(model)
    config = AutoConfig.from_pretrained(model, trust_remote_code=False)
    built = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    embedding = built.get_input_embeddings()
    assert embedding.padding_idx == config.vocab_size - 1
