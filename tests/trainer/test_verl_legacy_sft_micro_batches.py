"""The micro-batches of a converted verl SFT run, which `data.loss_normalization=micro_batch`
weighs one by one.

verl's legacy `verl.trainer.fsdp_sft_trainer` splits each rank's rows into micro-batches of
`data.micro_batch_size_per_gpu` padded rows (`training_step`: `batch.split(...)`, with
`use_remove_padding` or not) and takes each one's own token mean. Its conversion wrote
`data.micro_batch_size` and `data.loss_normalization=micro_batch` but left mfsdp's default
`data.packing=true`, which never reads `data.micro_batch_size`: the micro-batches weighed
were token-budget packs, not verl's rows. It now writes `data.packing=false` too, both from
verl's defaults table, so a YAML (which does not name its trainer) is told both differ
between verl's SFT trainers. verl's newer `sft_trainer` forms its micro-batches by
`data.use_dynamic_bsz` (default on: `max_token_len_per_gpu` tokens), `data.packing` here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.verl_conversions import as_given
from trainer.config import SFTConfig, config_from_tree
from trainer.data.batching import plan_micro_batches
from trainer.data.chat import Example
from trainer.verl_import import Conversion, convert_verl

LEGACY = "verl.trainer.fsdp_sft_trainer"
ENGINE = "verl.trainer.sft_trainer"
KEYS = "data.train_files=/d/t.parquet model.partial_pretrain=/m data.train_batch_size=8"
LENGTHS = [5, 300, 7, 9, 400, 11, 6, 8]  # tokens of a rank's rows, unequal as responses are


def converted(tmp_path: Path, module: str, *keys: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(f"torchrun --nproc_per_node=1 -m {module} {KEYS} {' '.join(keys)}\n")
    return convert_verl(script)


def micro_batches(conversion: Conversion) -> list[list[int]]:
    """The row groups the converted config trains a rank's rows of LENGTHS in."""
    data = config_from_tree(SFTConfig, conversion.tree, "converted").data
    rows = {row: Example([1] * length, [1] * length) for row, length in enumerate(LENGTHS)}
    return plan_micro_batches(
        rows, data.packing, data.max_tokens_per_micro_batch, data.micro_batch_size
    )


def notes_on(conversion: Conversion, key: str) -> list[str]:
    return [note for note in conversion.notes if note.startswith(key + "=")]


@pytest.mark.parametrize(("given", "size"), [((), 4), (("data.micro_batch_size_per_gpu=2",), 2)])
def test_a_legacy_sft_script_trains_verls_micro_batches_of_rows(tmp_path, given, size):
    conversion = converted(tmp_path, LEGACY, *given)
    assert conversion.tree["data"]["packing"] is False
    assert conversion.tree["data"]["loss_normalization"] == "micro_batch"
    # verl's batch.split(micro_batch_size_per_gpu) of the rank's rows, in order
    assert [len(group) for group in micro_batches(conversion)] == [size] * (len(LENGTHS) // size)
    (packing,) = notes_on(conversion, "data.packing")
    assert "verl's default (no key: verl.trainer.fsdp_sft_trainer splits" in packing
    assert "micro-batches of data.micro_batch_size_per_gpu padded rows" in packing
    (weighting,) = notes_on(conversion, "data.loss_normalization")
    assert "takes each micro-batch's own token mean and averages them" in weighting
    # both are verl's defaults written, as the other keys the source leaves out
    assert "packing" not in as_given(conversion).get("data", {})


def test_the_newer_sft_trainer_keeps_token_budget_micro_batches(tmp_path):
    conversion = converted(tmp_path, ENGINE)
    assert "packing" not in conversion.tree["data"]  # mfsdp's true: verl's use_dynamic_bsz
    assert "loss_normalization" not in conversion.tree["data"]
    assert conversion.tree["data"]["max_tokens_per_micro_batch"] == 8192
    assert len(micro_batches(conversion)) == 1  # 746 tokens in one pack of 8192
    rows = converted(tmp_path, ENGINE, "data.use_dynamic_bsz=False")
    assert rows.tree["data"]["packing"] is False
    assert not notes_on(rows, "data.packing") and not notes_on(rows, "data.loss_normalization")


def test_a_yaml_names_both_keys_among_those_its_trainer_decides(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text("data:\n  train_files: /d/t.parquet\nmodel:\n  partial_pretrain: /m\n")
    conversion = convert_verl(path, "sft")
    (either,) = [note for note in conversion.notes if "differ between its SFT trainers" in note]
    named = either.partition(":")[0].split(", ")
    assert {"data.packing", "data.loss_normalization"} <= set(named)
    assert not {"packing", "loss_normalization"} & set(conversion.tree["data"])
