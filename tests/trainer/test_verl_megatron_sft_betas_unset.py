"""An SFT run on verl's Megatron optimizer that sets no betas trains with Megatron's Adam
betas (0.9, 0.999), as verl's does: mfsdp's SFT default beta2 is 0.95, and a hand-written
YAML naming McoreOptimizerConfig without betas kept it, at every entry point (`mfsdp config
from-verl` of a YAML, `mfsdp train sft --config`, command-line overrides).
"""

from __future__ import annotations

import yaml

from tests.trainer.test_verl_megatron_optimizer_betas import MEGATRON_BETAS
from trainer.config import SFTConfig, load_config
from trainer.verl_import import convert_verl

MCORE = "verl.workers.config.McoreOptimizerConfig"


def sft_yaml(tmp_path, optim: dict, **more):
    path = tmp_path / "sft.yaml"
    run = {"model": {"partial_pretrain": "m"}, "optim": {"_target_": MCORE, **optim}, **more}
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def test_mfsdps_sft_default_betas_are_not_megatrons():
    assert SFTConfig().optim.betas != MEGATRON_BETAS  # else this file tests nothing


def test_from_verl_writes_megatrons_betas_with_a_note(tmp_path):
    conversion = convert_verl(sft_yaml(tmp_path, {"lr": 1e-5}))
    assert conversion.tree["optim"]["betas"] == MEGATRON_BETAS
    assert any("Megatron's Adam settings" in note for note in conversion.notes)


def test_train_config_reads_megatrons_betas(tmp_path):
    assert load_config(SFTConfig, sft_yaml(tmp_path, {"lr": 1e-5})).optim.betas == MEGATRON_BETAS


def test_command_line_naming_megatrons_optimizer_reads_megatrons_betas():
    cfg = load_config(SFTConfig, None, [f"optim._target_={MCORE}"])
    assert cfg.optim.betas == MEGATRON_BETAS


def test_yaml_merging_verls_megatron_optim_file_writes_megatrons_betas(tmp_path):
    path = tmp_path / "sft.yaml"
    run = {"defaults": [{"optim@optim": "megatron"}, "_self_"], "optim": {"lr": 1e-5}}
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    assert convert_verl(path, "sft").tree["optim"]["betas"] == MEGATRON_BETAS


def test_overrides_still_set_the_betas(tmp_path):
    path = sft_yaml(tmp_path, {"override_optimizer_config": {"adam_beta2": 0.98}})
    assert load_config(SFTConfig, path).optim.betas == [MEGATRON_BETAS[0], 0.98]


def test_fsdp_optimizer_keeps_mfsdps_betas(tmp_path):
    path = tmp_path / "sft.yaml"
    optim = {"_target_": "verl.workers.config.FSDPOptimizerConfig", "lr": 1e-5}
    path.write_text(yaml.safe_dump({"model": {"partial_pretrain": "m"}, "optim": optim}))
    assert load_config(SFTConfig, path).optim.betas == SFTConfig().optim.betas
