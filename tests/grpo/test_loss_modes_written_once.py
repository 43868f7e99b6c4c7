"""The GRPO loss modes are one list: the config accepts exactly the modes `aggregate` computes,
both read from trainer/grpo/aggregation.py. Written twice, a mode added to one list only
passed config validation and failed at the first step, or the reverse."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest
import torch

from tests.support.fresh_python import modules_after
from trainer.config import ConfigError, load_config
from trainer.grpo.aggregation import LOSS_AGG_MODES, LossAggMode, LossNormalization, aggregate
from trainer.grpo.config import ActorConfig, GRPOConfig


def test_the_config_fields_are_the_aggregation_types():
    hints = get_type_hints(ActorConfig)
    assert hints["loss_agg_mode"] == LossAggMode
    assert hints["loss_normalization"] == LossNormalization
    assert get_args(LossAggMode) == LOSS_AGG_MODES


@pytest.mark.parametrize("mode", get_args(LossAggMode))
def test_every_mode_the_config_takes_is_one_aggregate_computes(mode):
    cfg = load_config(GRPOConfig, None, [f"actor.loss_agg_mode={mode}"])
    loss = aggregate(torch.ones(2, 3), torch.ones(2, 3), cfg.actor.loss_agg_mode)
    assert torch.isfinite(loss)


def test_a_mode_aggregate_lacks_is_refused_by_the_config():
    with pytest.raises(ConfigError, match="loss_agg_mode"):
        load_config(GRPOConfig, None, ["actor.loss_agg_mode=seq-sum"])
    with pytest.raises(ValueError, match="seq-sum"):
        aggregate(torch.ones(1, 1), torch.ones(1, 1), "seq-sum")


def test_the_config_reads_the_modes_without_loading_torch():
    """`mfsdp config` and the checks before a launch load the GRPO config; torch takes
    seconds to import, so the module holding the modes imports it only where it is used."""
    assert modules_after("import trainer.grpo.config", roots=("torch",)) == []
