"""A value the config loader refuses, set by a verl key in a run with keys not carried over
already (verl's CISPO script: `policy_loss.loss_mode=cispo` with `clip_ratio_low=10`), is
listed with them, the loader's reason beside it: the real reason is said too.

Was: the conversion stopped on "clip_ratio_low must be in [0, 1), got 10" (exit 2), before
the loss mode mfsdp does not train was said. Alone, such a value still stops it (exit 2).
"""

from __future__ import annotations

import pytest

from trainer.verl_import import VerlSourceError, convert_verl

GRPO = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
LOW = "actor_rollout_ref.actor.clip_ratio_low=10"


def test_listed_beside_the_loss_mode(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"{GRPO} actor_rollout_ref.actor.policy_loss.loss_mode=cispo {LOW}\n")
    dropped = convert_verl(script).dropped
    assert [item.split(":")[0] for item in dropped] == [
        "actor_rollout_ref.actor.policy_loss.loss_mode=cispo",
        LOW,
    ]
    assert "config key 'actor.clip_ratio_low' must be in [0, 1)" in dropped[1]


def test_alone_it_stops_the_conversion(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"{GRPO} {LOW}\n")
    with pytest.raises(VerlSourceError, match=r"clip_ratio_low' must be in \[0, 1\)"):
        convert_verl(script)
