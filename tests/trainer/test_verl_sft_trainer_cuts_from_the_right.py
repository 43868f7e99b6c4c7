"""verl's `sft_trainer` at `data.pad_mode=no_padding` (its default) keeps an over-long row's
first `data.max_length` tokens whatever `data.truncation` says: MultiTurnSFTDataset reads
`truncation` only at `pad_mode=right`. `mfsdp config from-verl` carried `truncation=left`
over as it was (the converted run trained the other end of every over-long chat) and left
verl's default `error` (rows verl trained were refused). Such a script converts to
`truncation: right` with one note; `pad_mode=right` and the legacy `fsdp_sft_trainer`, which
honour `truncation`, keep the source's value. The refusal of an over-long row says what
verl did."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import DataConfig, SFTConfig, load_config
from trainer.data.chat import ChatFormatError
from trainer.data.sft_dataset import tokenize_rows
from trainer.tiny import build_tokenizer
from trainer.verl_import import Conversion, convert_verl

SFT = "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m"
LEGACY = (
    "torchrun -m verl.trainer.fsdp_sft_trainer data.train_files=/d/t.parquet"
    " model.partial_pretrain=/m"
)
CUT = "data.truncation=right: verl's sft_trainer at pad_mode=no_padding"


def converted(tmp_path: Path, text: str, name: str = "run.sh") -> Conversion:
    source = tmp_path / name
    source.write_text(text + "\n")
    return convert_verl(source)


def truncation(conversion: Conversion) -> object:
    return conversion.tree.get("data", {}).get("truncation", "mfsdp's default")


def cut_notes(conversion: Conversion) -> list[str]:
    return [note for note in conversion.notes if note.startswith(CUT)]


@pytest.mark.parametrize("given", ["data.truncation=left", "data.truncation=error", ""])
def test_no_padding_converts_to_right_with_one_note(tmp_path, given):
    conversion = converted(tmp_path, f"{SFT} {given}")
    assert truncation(conversion) == "right"
    (note,) = cut_notes(conversion)
    assert "whatever data.truncation says" in note
    said = given.partition("=")[2] or "error"
    assert f"the source's {said} is read only at pad_mode=right" in note


def test_no_padding_given_and_right_already(tmp_path):
    conversion = converted(tmp_path, f"{SFT} data.pad_mode=no_padding data.truncation=right")
    assert truncation(conversion) == "right" and cut_notes(conversion) == []


@pytest.mark.parametrize(
    "text",
    [f"{SFT} data.pad_mode=right data.truncation=left", f"{LEGACY} data.truncation=left"],
    ids=["pad_mode-right", "legacy"],
)
def test_trainers_that_read_truncation_keep_it(tmp_path, text):
    conversion = converted(tmp_path, text)
    assert truncation(conversion) == "left" and cut_notes(conversion) == []


def test_a_yaml_that_sets_no_padding_converts_to_right(tmp_path):
    yaml = "data:\n  pad_mode: no_padding\n  truncation: left\nmodel:\n  path: /m\n"
    conversion = converted(tmp_path, yaml, "sft.yaml")
    assert truncation(conversion) == "right" and len(cut_notes(conversion)) == 1


def test_train_reads_such_a_yaml_as_the_conversion_does(tmp_path):
    yaml = "data:\n  pad_mode: no_padding\n  truncation: left\n  train_files: /d/t.parquet\n"
    path = tmp_path / "verl.yaml"
    path.write_text(yaml)
    assert load_config(SFTConfig, path).data.truncation == "right"


def test_the_over_long_refusal_says_what_verl_did():
    data = DataConfig(max_length=16, truncation="error")  # the row's tokens, not the guard's
    row = {"prompt": "a b c d e f g h i j", "response": "k l m n"}
    with pytest.raises(ChatFormatError) as refused:
        tokenize_rows([row], data, build_tokenizer(), lambda index: f"t.jsonl:{index + 1}", False)
    assert "pad_mode=no_padding cut such rows from the right" in str(refused.value)
    assert "data.truncation=right does what it did" in str(refused.value)
