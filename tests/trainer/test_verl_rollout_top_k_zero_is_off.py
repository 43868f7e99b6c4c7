"""verl's `actor_rollout_ref.rollout.top_k=0` is off (verl's rollout.yaml: "-1 for vLLM
rollout, 0 for HF rollout"; vLLM takes 0 or -1 for all tokens): read as mfsdp's -1, by
`mfsdp config from-verl` and by `mfsdp train` / `config check` given the verl key, as
`val_kwargs.top_k` already was. Was: "must be -1 (off) or >= 1, got 0", and no config."""

from __future__ import annotations

import pytest

from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

GRPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=/d/t.parquet"
    " actor_rollout_ref.model.path=/m/q actor_rollout_ref.rollout.name=hf"
)


@pytest.mark.parametrize(("given", "read"), [(0, -1), (-1, -1), (50, 50)])
def test_from_verl(tmp_path, given, read):
    script = tmp_path / "run.sh"
    script.write_text(f"{GRPO} actor_rollout_ref.rollout.top_k={given}\n")
    conversion = convert_verl(script)
    assert conversion.dropped == []
    assert conversion.tree["rollout"]["top_k"] == read


def test_train_given_the_verl_key():
    config = load_config(GRPOConfig, None, ["actor_rollout_ref.rollout.top_k=0"])
    assert config.rollout.top_k == -1
