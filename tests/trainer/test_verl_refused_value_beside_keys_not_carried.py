"""A value the config loader refuses, set by a verl key in a run with keys not carried over
already (verl's CISPO script: `policy_loss.loss_mode=cispo` with `clip_ratio_low=10`), is
listed with them, the loader's reason beside it: the real reason is said too.

Was: the conversion stopped on "clip_ratio_low must be in [0, 1), got 10" (exit 2), before
the loss mode mfsdp does not train was said. Alone, such a value is listed too (exit 1), as
`--help` says of a key not carried over: it stopped the conversion (exit 2, as for no verl
script) only where no other key was listed, so its exit code turned on unrelated keys.
"""

from __future__ import annotations

import pytest

from trainer.verl_import import convert_verl

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


@pytest.mark.parametrize("other", ["", " actor_rollout_ref.rollout.repetition_penalty=1.1"])
def test_listed_alone_or_beside_unrelated_keys(tmp_path, other):
    script = tmp_path / "run.sh"
    script.write_text(f"{GRPO} {LOW}{other}\n")
    dropped = convert_verl(script).dropped
    assert [item for item in dropped if item.startswith(f"{LOW}: ")] == [
        f"{LOW}: config key 'actor.clip_ratio_low' must be in [0, 1) (the ratio's lower clip"
        " bound is 1 - clip_ratio_low), got 10"
    ]
    assert len(dropped) == 1 + bool(other)


def test_no_note_says_a_refused_value_was_carried_over(tmp_path):
    """Was: the header said "verl's actor_rollout_ref.actor.optim.lr is optim.lr=inf here"
    and a line below "NOT carried over: actor_rollout_ref.actor.optim.lr=inf": one story."""
    source = tmp_path / "run.yaml"
    source.write_text(
        "data:\n  train_files: /x.parquet\n"
        "actor_rollout_ref:\n  actor:\n    optim:\n      lr: .inf\n      weight_decay: 0.05\n"
    )
    conversion = convert_verl(source)
    assert any(
        item.startswith("actor_rollout_ref.actor.optim.lr=inf: ") for item in conversion.dropped
    )
    assert not [note for note in conversion.notes if "optim.lr" in note], conversion.notes
    # the key beside it that did carry over is still said
    assert any("optim.weight_decay" in note for note in conversion.notes), conversion.notes


def test_a_nan_value_is_not_said_to_hold_filled_in_references(tmp_path):
    """NaN is unequal to itself: `.nan` was said to have had ${...} references filled in."""
    source = tmp_path / "run.yaml"
    source.write_text("data:\n  train_files: /x.parquet\n  max_prompt_length: .nan\n")
    conversion = convert_verl(source)
    assert not [note for note in conversion.notes if "references" in note], conversion.notes
    assert any(item.startswith("data.max_prompt_length=nan") for item in conversion.dropped)
