"""verl keys read as verl trains with them (verl's trainer/config and core_algos):

- `clip_ratio` fills only a side whose clip_ratio_low / clip_ratio_high is null (verl's
  actor.yaml sets both to 0.2), whatever order the keys come in: given after
  clip_ratio_high=0.28 it once threw clip-higher away, and alone it set 0.1/0.1 where verl
  trains 0.2/0.2;
- `mfsdp config from-verl` writes verl's default for a key the script leaves out where
  mfsdp's differs (use_kl_loss false, rollout.n 1, ...), each with a note; `mfsdp train`
  keeps mfsdp's own;
- clip_ratio_low >= 1 (a lower ratio bound of 0 or below: no clip) is refused in one line;
- reward_model.overlong_buffer is named as verl's DAPO reward manager's overlong penalty.
"""

from __future__ import annotations

import logging

import pytest

from tests.support.fresh_python import mfsdp
from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

ACTOR = "actor_rollout_ref.actor."


def grpo(*overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, None, list(overrides))


@pytest.mark.parametrize(
    "overrides, low, high",
    [
        ((f"{ACTOR}clip_ratio_high=0.28", f"{ACTOR}clip_ratio=0.2"), 0.2, 0.28),
        ((f"{ACTOR}clip_ratio=0.2", f"{ACTOR}clip_ratio_high=0.28"), 0.2, 0.28),
        ((f"{ACTOR}clip_ratio=0.1",), 0.2, 0.2),
        ((f"{ACTOR}clip_ratio=0.1", f"{ACTOR}clip_ratio_low=null"), 0.1, 0.2),
        ((f"{ACTOR}clip_ratio_high=null", f"{ACTOR}clip_ratio=0.3"), 0.2, 0.3),
        (("actor.clip_ratio_low=0.25", f"{ACTOR}clip_ratio=0.1"), 0.25, 0.2),
    ],
)
def test_clip_ratio_fills_only_null_sides_in_any_order(overrides, low, high):
    actor = grpo(*overrides).actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (low, high)


def test_clip_ratio_alone_says_what_verl_and_mfsdp_train_with(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        grpo(f"{ACTOR}clip_ratio=0.1")
    (note,) = [r.getMessage() for r in caplog.records if "clip_ratio=0.1" in r.getMessage()]
    assert "is not read" in note
    assert "trains with clip_ratio_low=0.2 (its default) and clip_ratio_high=0.2" in note


def test_from_verl_reads_clip_ratio_with_its_sides(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        f" {ACTOR}clip_ratio_high=0.28 {ACTOR}clip_ratio=0.2\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["actor"]["clip_ratio_high"] == 0.28
    assert "clip_ratio_low" not in conversion.tree["actor"]
    assert not conversion.dropped


def test_from_verl_writes_verls_defaults_the_script_leaves_out(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        f" {ACTOR}ppo_mini_batch_size=8 data.train_batch_size=16\n"
    )
    conversion = convert_verl(script)
    tree = conversion.tree
    assert tree["actor"] == {"ppo_mini_batch_size": 8, "use_kl_loss": False}
    assert tree["rollout"] == {"n": 1}
    assert tree["data"] == {"train_batch_size": 16, "filter_overlong_prompts": False}
    assert tree["trainer"] == {"val_before_train": True, "val_after_last_step": False, "epochs": 30}
    assert (
        "actor.use_kl_loss=false: verl's default (actor_rollout_ref.actor.use_kl_loss), which"
        " the source does not set; mfsdp's own is true"
    ) in conversion.notes
    assert GRPOConfig().actor.use_kl_loss and GRPOConfig().rollout.n == 5  # mfsdp train's own


def test_from_verl_without_an_estimator_is_not_carried_over_as_grpo(tmp_path):
    """verl's default estimator is gae (PPO with a critic): a script that sets none is not a
    GRPO run, and converting it as one trained something else without a word."""
    script = tmp_path / "run.sh"
    script.write_text(f"python3 -m verl.trainer.main_ppo {ACTOR}use_kl_loss=True\n")
    (dropped,) = convert_verl(script).dropped
    assert dropped.startswith("algorithm.adv_estimator: not set, so verl trains its default, gae")
    script.write_text("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo\n")
    assert convert_verl(script).dropped == []


def test_from_verl_keeps_what_the_script_sets(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        f"python3 -m verl.trainer.main_ppo {ACTOR}use_kl_loss=True"
        " actor_rollout_ref.rollout.n=$N data.filter_overlong_prompts=True\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["actor"]["use_kl_loss"] is True
    assert conversion.tree["data"]["filter_overlong_prompts"] is True
    assert "n" not in conversion.tree.get("rollout", {})  # given, known only when it runs
    assert not any(note.startswith("rollout.n=") for note in conversion.notes)


@pytest.mark.parametrize(
    "module, expected",
    [
        (
            "verl.trainer.fsdp_sft_trainer",
            {("data", "prompt_key"): "question", ("optim", "warmup_ratio"): 0.1},
        ),
        ("verl.trainer.sft_trainer", {("optim", "lr"): 1e-3, ("optim", "scheduler"): "constant"}),
    ],
)
def test_from_verl_writes_each_sft_trainers_defaults(module, expected, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"torchrun -m {module} data.max_length=256\n")
    tree = convert_verl(script).tree
    assert {(section, key): tree[section][key] for section, key in expected} == expected
    assert (tree["trainer"]["epochs"], tree["data"]["global_batch_size"]) == (4, 256)


def test_clip_ratio_low_of_one_or_more_is_refused():
    with pytest.raises(ConfigError, match=r"'actor\.clip_ratio_low' must be in \[0, 1\)"):
        grpo(f"{ACTOR}clip_ratio_low=1.5")
    done = mfsdp("train", "grpo", "actor.clip_ratio_low=1")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "actor.clip_ratio_low" in done.stderr


def test_overlong_buffer_is_named_as_dapos_penalty(caplog):
    with pytest.raises(ConfigError, match="overlong penalty of verl's DAPO reward manager"):
        grpo("reward_model.overlong_buffer.enable=True")
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        grpo("reward_model.overlong_buffer.len=4096")
    assert "DAPO reward manager" in caplog.text and "reward model's settings" not in caplog.text
