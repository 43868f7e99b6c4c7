"""The EOS ids a GRPO rollout stops at (`trainer.rollout.build.eos_token_ids`) come from the
generation_config.json each checkpoint of the run ships, read as a checked asset: a regular
file inside its dir, bounded, its GenerationConfig built from the data, never from the path.

Was: `GenerationConfig.from_pretrained(model.path)` whenever model.path held a
generation_config.json at its top: a link out of the dir was followed (a user's file read
as the model's), one over any bound was read whole, a checkpoint's top-level file was read
unchecked instead of its huggingface/ one, and an eos_token_id of text was a TypeError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from mfsdp_ckpt.convert.export_source import MAX_JSON_ASSET_BYTES
from tests.support.paths import FIXTURES
from trainer.config import ConfigError
from trainer.rollout.build import eos_token_ids

GENERATION = "generation_config.json"
TOKENIZER = SimpleNamespace(eos_token_id=2, name_or_path="tok")
VOCAB = 356  # the model's vocab_size: ids 0 to 355


def _model_dir(tmp_path: Path, generation: dict | None = None) -> Path:
    """A model dir of config.json (and generation_config.json when given)."""
    model = tmp_path / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    if generation is not None:
        (model / GENERATION).write_text(json.dumps(generation))
    return model


def _linked_out(path: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"eos_token_id": 99}))
    path.unlink(missing_ok=True)
    path.symlink_to(outside)


def test_qwen_style_eos_lists_are_merged(tmp_path):
    model = _model_dir(tmp_path, {"eos_token_id": [5, 2], "bos_token_id": 0})
    assert eos_token_ids(TOKENIZER, str(model), VOCAB) == [2, 5]
    assert eos_token_ids(TOKENIZER, str(_model_dir(tmp_path / "none")), VOCAB) == [2]
    assert eos_token_ids(TOKENIZER, None, VOCAB) == [2]


def test_a_generation_config_linked_out_of_the_model_dir_is_refused(tmp_path):
    model = _model_dir(tmp_path)
    _linked_out(model / GENERATION, tmp_path)
    with pytest.raises(ConfigError, match=r"generation_config\.json: resolves outside the model"):
        eos_token_ids(TOKENIZER, str(model), VOCAB)


def test_an_oversized_generation_config_is_refused_unread(tmp_path):
    model = _model_dir(tmp_path)
    with open(model / GENERATION, "wb") as handle:
        handle.truncate(MAX_JSON_ASSET_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match=f"more than the {MAX_JSON_ASSET_BYTES} this file"):
        eos_token_ids(TOKENIZER, str(model), VOCAB)


@pytest.mark.parametrize(
    ("eos", "words"),
    [("x", "eos_token_id 'x' is not a token id"), ([1, True], "eos_token_id: True is not a token")],
)
def test_an_eos_id_that_is_no_token_id_is_one_line(eos, words, tmp_path):
    model = _model_dir(tmp_path, {"eos_token_id": eos})
    with pytest.raises(ConfigError) as caught:
        eos_token_ids(TOKENIZER, str(model), VOCAB)
    assert str(caught.value).startswith(f"model.path {model}: {GENERATION}: ")
    assert words in str(caught.value)


def test_a_checkpoints_top_level_file_is_not_taken_for_its_own(tmp_path):
    """A checkpoint step's generation_config.json is its huggingface/ one, checked inside
    the checkpoint; a file at the step's top (here a link out) is not read."""
    step = Path(shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run"))
    step = step / "global_step_2"
    _linked_out(step / GENERATION, tmp_path)
    assert eos_token_ids(TOKENIZER, str(step), VOCAB) == [2]
    (step / "huggingface" / GENERATION).write_text(json.dumps({"eos_token_id": [7, 2]}))
    assert eos_token_ids(TOKENIZER, str(step), VOCAB) == [2, 7]
    _linked_out(step / "huggingface" / GENERATION, tmp_path)
    with pytest.raises(ConfigError, match=r"resolves outside the checkpoint"):
        eos_token_ids(TOKENIZER, str(step), VOCAB)


@pytest.mark.parametrize("eos", [10**20, [2, 10**20], [2, VOCAB], 5000, -5])
def test_an_eos_id_that_is_no_row_of_the_embedding_is_one_line(eos, tmp_path):
    """Was: 10**20 an 82-line `Overflow when unpacking long long` traceback at the first
    rollout; 5000 (past vocab_size) a stop token that trained without a word and can never
    be sampled; -5 refused as "not a token id" without saying what one is."""
    model = _model_dir(tmp_path, {"eos_token_id": eos})
    bad = next(token for token in (eos if isinstance(eos, list) else [eos]) if token != 2)
    with pytest.raises(ConfigError) as caught:
        eos_token_ids(TOKENIZER, str(model), VOCAB)
    assert str(caught.value) == (
        f"model.path {model}: {GENERATION}: eos_token_id: {bad} is not a token id of the model"
        f" (its vocab_size {VOCAB} has ids 0 to {VOCAB - 1})"
    )


def test_the_last_row_of_the_embedding_is_a_token_id(tmp_path):
    model = _model_dir(tmp_path, {"eos_token_id": [VOCAB - 1, 0]})
    assert eos_token_ids(TOKENIZER, str(model), VOCAB) == [0, 2, VOCAB - 1]


def test_the_tokenizers_own_eos_is_bounded_too(tmp_path):
    tokenizer = SimpleNamespace(eos_token_id=VOCAB, name_or_path="tok")
    with pytest.raises(ConfigError, match=r"^model: the tokenizer in tok: eos_token_id: 356 is"):
        eos_token_ids(tokenizer, None, VOCAB)
