"""Every id the run's tokenizer can emit is below the model's vocab_size, checked from the
files before anything loads (`trainer/tokenizer_ids.py`): a token moved to an id past it
left the count of tokens alike and passed, and the first step died in every rank with an
IndexError traceback (a device-side assert on CUDA). Each is one line naming the file, the
token and its id (exit 2); a tokenizer_config.json naming special tokens the vocab lacks
names them and the file; a vocab of a million entries is refused by the launcher, not after
every rank built a tokenizer of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.model_dirs import tokenizer_config_edit
from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source
from trainer.tiny import build_tokenizer
from trainer.tokenizer_ids import check_loaded_tokenizer

VOCAB = 356  # the tiny tokenizer's tokens, the trainable model's vocab_size


def _model(trainable, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trainable[0], tmp_path / "model"))


def _edit_tokenizer_json(model: Path, edit) -> None:
    data = json.loads((model / "tokenizer.json").read_text())
    edit(data)
    (model / "tokenizer.json").write_text(json.dumps(data))


def _move_im_end(data: dict) -> None:
    """`<|im_end|>` (the eos, id 2) moved to id 5000, in the vocab and the added tokens."""
    data["model"]["vocab"]["<|im_end|>"] = 5000
    for token in data["added_tokens"]:
        if token["content"] == "<|im_end|>":
            token["id"] = 5000


def _add_at_5000(data: dict) -> None:
    data["added_tokens"].append({**data["added_tokens"][-1], "id": 5000, "content": "<|big|>"})


def _a_million_more(data: dict) -> None:
    data["model"]["vocab"].update({f"tok{i}": VOCAB + i for i in range(1_000_000)})


def _refusal(model: Path) -> str:
    cfg = ModelConfig(path=str(model))
    with pytest.raises(ConfigError) as refused:
        check_model_files(cfg, resolve_model_source(cfg))
    return str(refused.value)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_move_im_end, "tokenizer.json: token '<|im_end|>' has id 5000"),
        (_add_at_5000, "tokenizer.json [added_tokens]: token '<|big|>' has id 5000"),
        (_a_million_more, f"tokenizer.json: token 'tok999999' has id {VOCAB + 999_999}"),
    ],
)
def test_a_tokenizer_id_past_vocab_size_is_refused_before_launch(trainable, tmp_path, edit, says):
    model = _model(trainable, tmp_path)
    _edit_tokenizer_json(model, edit)
    said = _refusal(model)
    assert said.startswith(f"{model}/{says}, past the model's vocab_size {VOCAB}"), said
    assert "\n" not in said


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
def test_an_eos_id_of_the_model_past_vocab_size_is_refused_naming_its_file(
    trainable, tmp_path, name
):
    model = _model(trainable, tmp_path)
    path = model / name
    data = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**data, "eos_token_id": [2, 9000]}))
    said = _refusal(model)
    assert said.startswith(f"{path} [eos_token_id]: id 9000, past the model's vocab_size"), said


def test_special_tokens_the_vocab_lacks_are_named_with_tokenizer_config_json(trainable, tmp_path):
    model = _model(trainable, tmp_path)
    tokenizer_config_edit(pad_token="<|nope|>", eos_token={"content": "<|nope2|>"})(model)
    said = _refusal(model)
    assert said.startswith(
        f"{model / 'tokenizer_config.json'}: names special tokens not in the vocab of"
        " tokenizer.json ('<|nope2|>', '<|nope|>'), which transformers adds: the tokenizer"
        f" would have {VOCAB + 2} tokens, more than the model's vocab_size {VOCAB}"
    ), said


def test_a_tokenizer_within_vocab_size_passes(trainable, tmp_path):
    model = _model(trainable, tmp_path)
    tokenizer_config_edit(pad_token="<|im_end|>")(model)  # a token of the vocab: none added
    cfg = ModelConfig(path=str(model))
    check_model_files(cfg, resolve_model_source(cfg))


def test_a_loaded_tokenizers_largest_id_is_checked_in_each_rank():
    tokenizer = build_tokenizer()
    check_loaded_tokenizer(tokenizer, VOCAB)
    with pytest.raises(ConfigError, match=r"has id 355, past the model's vocab_size 300 "):
        check_loaded_tokenizer(tokenizer, 300)


def test_config_check_and_train_refuse_it_alike_in_one_line(trainable, tmp_path):
    model = _model(trainable, tmp_path)
    _edit_tokenizer_json(model, _move_im_end)
    says = f"{model}/tokenizer.json: token '<|im_end|>' has id 5000, past the model's vocab_size"
    for command in (["config", "check", "sft"], ["train", "sft"]):
        done = mfsdp(
            *command,
            *("--config", "examples/sft_tiny_cpu.yaml", f"model.path={model}"),
            f"data.train_files={trainable[1]}",
            f"trainer.run_dir={tmp_path / 'run'}",
        )
        assert done.returncode == 2, done.stderr
        one_error(done.stderr, says)


@pytest.mark.parametrize(
    ("key", "shown"), [("²", "'²'"), ("9" * 5000, "'9999"), ("-1", "'-1'"), ("x", "'x'")]
)
def test_an_added_tokens_decoder_key_that_is_no_id_is_refused_in_one_line(
    trainable, tmp_path, key, shown
):
    """transformers reads every key with int(): '²' and 5000 digits pass str.isdigit() but
    not int(), which raised a traceback here."""
    model = _model(trainable, tmp_path)
    entry = {"content": "<|odd|>", "special": True}
    tokenizer_config_edit(added_tokens_decoder={key: entry})(model)
    said = _refusal(model)
    where = f"{model / 'tokenizer_config.json'} [added_tokens_decoder]"
    assert said.startswith(f"{where}: key {shown}"), said
    assert said.endswith("is not a token id") and len(said) < len(where) + 120, said
