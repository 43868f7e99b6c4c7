"""An SFT run recorded before `data.loss_normalization` was a key trained as `global`:
resumed with `data.loss_normalization=micro_batch` (what a re-converted verl
`fsdp_sft_trainer` script now sets), the change was noted only as "new key
data.loss_normalization = 'micro_batch'", which did not say that the earlier steps trained
as `global` nor which setting keeps that."""

from __future__ import annotations

from trainer.config import SFTConfig, config_to_dict
from trainer.config_history import changed_keys


def _recorded_before_the_key() -> dict:
    earlier = config_to_dict(SFTConfig())
    del earlier["data"]["loss_normalization"]
    return earlier


def test_micro_batch_on_a_record_before_the_key_names_what_the_steps_trained_as():
    defaults = config_to_dict(SFTConfig())
    now = config_to_dict(SFTConfig())
    now["data"]["loss_normalization"] = "micro_batch"
    assert changed_keys(_recorded_before_the_key(), now, defaults) == [
        "data.loss_normalization 'global' -> 'micro_batch' (no such key when the step was"
        " trained, which trained as global: data.loss_normalization=global keeps that)"
    ]


def test_global_on_a_record_before_the_key_is_no_change():
    defaults = config_to_dict(SFTConfig())
    now = config_to_dict(SFTConfig())
    assert now["data"]["loss_normalization"] == "global"
    assert changed_keys(_recorded_before_the_key(), now, defaults) == []
