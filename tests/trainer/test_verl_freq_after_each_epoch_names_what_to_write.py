"""verl's SFT `trainer.save_freq` / `test_freq` of `after_each_epoch` (sft_trainer reads it
as the steps of one epoch, its dataloader's length) has no mfsdp setting, and an epoch's
steps are known only from the data: not carried over, naming verl's key and what to write.

Was: exit 2, "config key 'trainer.eval_every' expects an integer", an mfsdp key the user
never wrote; `mfsdp train sft trainer.save_freq=after_each_epoch` alike.
"""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.verl_import import convert_verl


@pytest.mark.parametrize(
    "verl, mfsdp",
    [("trainer.test_freq", "trainer.eval_every"), ("trainer.save_freq", "checkpoint.save_every")],
)
def test_from_verl_lists_it_with_what_to_write(tmp_path, verl, mfsdp):
    script = tmp_path / "run.sh"
    script.write_text(
        "torchrun --nproc_per_node=2 -m verl.trainer.sft_trainer data.train_files=/d"
        f" model.path=/m data.train_batch_size=8 {verl}=after_each_epoch\n"
    )
    conversion = convert_verl(script)
    [dropped] = conversion.dropped
    assert dropped.startswith(f"{verl}=after_each_epoch: verl's sft_trainer reads it as the steps")
    assert f"set {mfsdp} to the steps of one epoch" in dropped


def test_mfsdp_train_names_verls_key():
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, ["trainer.save_freq=after_each_epoch"])
    message = str(caught.value)
    assert "verl key 'trainer.save_freq=after_each_epoch' has no equivalent here" in message
    assert "expects an integer" not in message


def test_minus_one_is_still_zero():
    assert load_config(SFTConfig, None, ["trainer.save_freq=-1"]).checkpoint.save_every == 0
