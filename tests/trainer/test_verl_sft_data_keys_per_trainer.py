"""Which of verl's SFT data keys set `data.packing`, per trainer.

verl's `sft_trainer` forms its micro-batches by `data.use_dynamic_bsz` (a token budget, or
`micro_batch_size_per_gpu` rows); `data.pad_mode` only lays out the sequences inside one
(packed, or each padded to `data.max_length`). Both set `data.packing` here, the last one
given winning: `use_dynamic_bsz=False pad_mode=no_padding` converted as packed micro-batches.
The legacy `fsdp_sft_trainer` reads neither `use_dynamic_bsz` nor `max_token_len_per_gpu`
(its sft_trainer.yaml never had them, so verl refuses them without `+`), yet
`+data.use_dynamic_bsz=True` turned packing on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.verl_import import Conversion, convert_verl
from trainer.verl_rules import worker_version_refusal

SFT = "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m"
LEGACY = (
    "torchrun -m verl.trainer.fsdp_sft_trainer data.train_files=/d/t.parquet"
    " model.partial_pretrain=/m"
)
UNREAD = "verl.trainer.fsdp_sft_trainer does not read it"


def converted(tmp_path: Path, text: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(text + "\n")
    return convert_verl(script)


def packing(conversion: Conversion) -> object:
    return conversion.tree.get("data", {}).get("packing", "mfsdp's default")


def struct_refused(conversion: Conversion) -> dict[str, str]:
    return {
        line.partition(": ")[0]: line for line in conversion.dropped if "is not in struct" in line
    }


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("pad_mode", ["no_padding", "right"])
@pytest.mark.parametrize("pad_mode_last", [False, True])
def test_packing_follows_use_dynamic_bsz_in_either_order(
    tmp_path, dynamic, pad_mode, pad_mode_last
):
    keys = [f"data.use_dynamic_bsz={dynamic}", f"data.pad_mode={pad_mode}"]
    if pad_mode_last is False:
        keys.reverse()
    conversion = converted(tmp_path, " ".join([SFT, *keys]))
    assert conversion.dropped == []
    assert packing(conversion) is dynamic
    pad_notes = [note for note in conversion.notes if "data.pad_mode" in note]
    assert len(pad_notes) == 1
    assert pad_notes[0].startswith("verl's data.pad_mode is ignored: ")
    assert "data.packing here follows data.use_dynamic_bsz" in pad_notes[0]
    # one note sets data.packing, and it is use_dynamic_bsz's
    setting = [note for note in conversion.notes if "data.packing=" in note]
    assert setting == [f"verl's data.use_dynamic_bsz is data.packing={dynamic} here"]


@pytest.mark.parametrize("pad_mode", ["no_padding", "right"])
def test_pad_mode_alone_leaves_verls_dynamic_default(tmp_path, pad_mode):
    conversion = converted(tmp_path, f"{SFT} data.pad_mode={pad_mode}")
    assert packing(conversion) in (True, "mfsdp's default")  # sft_trainer's use_dynamic_bsz: True


def test_a_pad_mode_verl_does_not_take_is_refused(tmp_path):
    conversion = converted(tmp_path, f"{SFT} data.pad_mode=left")
    assert [line.partition(": ")[0] for line in conversion.dropped] == ["data.pad_mode=left"]


def test_use_remove_padding_does_not_say_pad_mode_decides_padding(tmp_path):
    conversion = converted(tmp_path, f"{SFT} model.use_remove_padding=True")
    (said,) = [note for note in conversion.notes if "use_remove_padding" in note]
    assert "data.pad_mode=right" not in said
    assert "data.use_dynamic_bsz=False" in said


@pytest.mark.parametrize(
    ("key", "target"),
    [
        ("data.use_dynamic_bsz=True", "packing"),
        ("data.max_token_len_per_gpu=100", "max_tokens_per_micro_batch"),
    ],
)
def test_a_key_the_legacy_trainer_never_reads_is_a_note(tmp_path, key, target):
    conversion = converted(tmp_path, f"{LEGACY} +{key}")
    assert conversion.dropped == []
    name = key.partition("=")[0]
    assert f"verl's {name} is ignored: {UNREAD}" in conversion.notes
    # verl's legacy micro-batches: rows, padded
    assert conversion.tree["data"]["packing"] is False
    assert target == "packing" or target not in conversion.tree["data"]


def test_the_legacy_trainers_struct_refuses_them_without_plus(tmp_path):
    conversion = converted(
        tmp_path, f"{LEGACY} data.use_dynamic_bsz=True data.max_token_len_per_gpu=100"
    )
    lines = struct_refused(conversion)
    assert set(lines) == {"data.use_dynamic_bsz=True", "data.max_token_len_per_gpu=100"}
    line = lines["data.use_dynamic_bsz=True"]
    assert "Key 'use_dynamic_bsz' is not in struct" in line
    assert "verl.trainer.fsdp_sft_trainer's (verl's sft_trainer.yaml), which has no" in line
    assert line.endswith("add a key with +data.use_dynamic_bsz=...")
    assert conversion.tree["data"]["packing"] is False


def test_a_misspelt_legacy_data_key_is_refused_with_its_close_names(tmp_path):
    conversion = converted(tmp_path, f"{LEGACY} data.prompt_ky=q")
    line = struct_refused(conversion)["data.prompt_ky=q"]
    assert "did you mean prompt_key" in line


def test_the_legacy_trainers_own_data_keys_pass(tmp_path):
    conversion = converted(
        tmp_path,
        f"{LEGACY} data.multiturn.enable=true data.multiturn.messages_key=messages"
        " data.micro_batch_size_per_gpu=2 data.max_length=512 data.truncation=right",
    )
    assert struct_refused(conversion) == {}


def test_the_engine_trainer_reads_them(tmp_path):
    conversion = converted(
        tmp_path, f"{SFT} data.use_dynamic_bsz=False data.max_token_len_per_gpu=4096"
    )
    assert conversion.dropped == []
    assert conversion.tree["data"]["packing"] is False
    assert conversion.tree["data"]["max_tokens_per_micro_batch"] == 4096
    assert not any(UNREAD in note for note in conversion.notes)


@pytest.mark.parametrize("worker", ["auto", "enable", "disable"])
def test_the_worker_refusal_tells_a_resume_to_give_its_recorded_value(worker):
    why = worker_version_refusal(worker, "seq-mean-token-sum-norm")
    assert why is not None
    assert "to resume a run, give the actor.loss_normalization its RUN_DIR/config.yaml" in why


def test_the_unset_worker_note_quotes_verls_value(tmp_path):
    conversion = converted(
        tmp_path,
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        " data.train_files=/d/t.parquet actor_rollout_ref.model.path=/m",
    )
    (said,) = [note for note in conversion.notes if "use_legacy_worker_impl" in note]
    assert "made `disable` its default" in said
