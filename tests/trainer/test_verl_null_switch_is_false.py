"""A verl null on a switch is false, as verl reads it, never "not set": `use_kl_loss=null`
trained with a KL loss (mfsdp's default, true) where verl tests the key for truth and trains
without one, and `filter_overlong_prompts=null` dropped prompts verl keeps (OmegaConf's
`.get(key, True)` gives the None written). Every switch of the verl key table is tried: the
verl keys whose mfsdp key is a bool, those of mfsdp's own name, and the converted ones; as
an override, in a verl YAML given to `mfsdp train`, and converted by `from-verl`. SFT's
`data.shuffle` is no switch: verl's SFT samplers shuffle whatever it holds
(`DistributedSampler(..., shuffle=True)`), so its null keeps mfsdp's default, true; it was
read as false, training a converted run's rows in file order where verl shuffles them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer import verl_keys
from trainer.config import SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl
from trainer.verl_null_flags import CONVERTED_SWITCHES, NOT_SWITCHES, flag_default
from trainer.verl_shared_keys import SHARED_WITH_VERL

CLASSES = {"grpo": GRPOConfig, "sft": SFTConfig}
SCRIPTS = {
    "grpo": "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    " data.train_files=/d/t.parquet actor_rollout_ref.model.path=/m",
    "sft": "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m",
}
# a key that makes a YAML verl's, beside the switch
VERL_MARK = {"grpo": "actor_rollout_ref.model.path", "sft": "model.partial_pretrain"}


def _switches(command: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(command, verl key, the mfsdp keys its null sets) for each switch of the table."""
    cls = CLASSES[command]
    found: dict[str, dict[str, Any]] = {}
    for key, target in verl_keys.names(command).items():
        rule = verl_keys.rule_for(key)
        if key in CONVERTED_SWITCHES:
            found[key] = CONVERTED_SWITCHES[key]
        elif target and rule is not None and rule.convert is None:
            found |= {key: {target: False}} if flag_default(cls, target) is not None else {}
    for key in SHARED_WITH_VERL[command]:
        if flag_default(cls, key) is not None:
            found[key] = {key: False}
    kept = sorted(item for item in found.items() if item[0] not in NOT_SWITCHES[command])
    return [(command, key, mapped) for key, mapped in kept]


SWITCHES = _switches("grpo") + _switches("sft")


def test_the_table_has_the_switches_the_review_named():
    keys = {key for _command, key, _mapped in SWITCHES}
    named = {"actor_rollout_ref.actor.use_kl_loss", "data.filter_overlong_prompts"}
    assert named | {"data.multiturn.enable", "trainer.val_before_train"} <= keys
    assert len(SWITCHES) >= 12, SWITCHES
    assert ("grpo", "data.shuffle", {"data.shuffle": False}) in SWITCHES  # create_rl_sampler
    # verl's SFT trainers never test data.shuffle for the training order: not a switch
    assert NOT_SWITCHES["sft"] == {"data.shuffle"} and not NOT_SWITCHES["grpo"]


def test_sft_null_shuffle_keeps_shuffling_as_verls_sampler_does(tmp_path: Path, caplog):
    script = tmp_path / "run.sh"
    script.write_text(f"{SCRIPTS['sft']} data.shuffle=null\n")
    conversion = convert_verl(script)
    assert "shuffle" not in conversion.tree.get("data", {}), conversion.tree
    assert "data.shuffle: null in verl, the mfsdp default stays" in conversion.notes
    assert not [note for note in conversion.notes if "shuffle is null, which verl" in note]
    path = tmp_path / "verl.yaml"
    path.write_text(
        yaml.safe_dump({"model": {"partial_pretrain": "/m"}, "data": {"shuffle": None}})
    )
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        assert load_config(SFTConfig, path).data.shuffle is True
    assert "reads as false" not in caplog.text


def _value(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    *sections, leaf = dotted.split(".")
    tree: dict[str, Any] = {leaf: value}
    for name in reversed(sections):
        tree = {name: tree}
    return tree


@pytest.mark.parametrize(("command", "key", "mapped"), SWITCHES)
def test_a_null_override_is_false_with_a_note(command, key, mapped, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        config = load_config(CLASSES[command], None, [f"{key}=null"])
    for target, value in mapped.items():
        assert _value(config, target) == value, (key, target)
    assert f"verl's {key} is null, which verl reads as false" in caplog.text


@pytest.mark.parametrize(("command", "key", "mapped"), SWITCHES)
def test_a_null_in_a_verl_yaml_given_to_train_is_false(command, key, mapped, tmp_path):
    tree = _nested(VERL_MARK[command], "/m")
    switch = _nested(key, None)
    top = next(iter(switch))
    if top in tree:  # the same top-level section: merged one level down
        tree[top] |= switch[top]
    else:
        tree |= switch
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(tree))
    config = load_config(CLASSES[command], path)
    for target, value in mapped.items():
        assert _value(config, target) == value, (key, target)


@pytest.mark.parametrize(("command", "key", "mapped"), SWITCHES)
def test_from_verl_writes_false_for_a_null(command, key, mapped, tmp_path: Path):
    script = tmp_path / "run.sh"
    script.write_text(f"{SCRIPTS[command]} {key}=null\n")
    conversion = convert_verl(script)
    assert not conversion.dropped, conversion.dropped
    for target, value in mapped.items():
        holder: Any = conversion.tree
        for part in target.split("."):
            holder = holder[part]
        assert holder == value, (key, target)
    said = [note for note in conversion.notes if note.startswith(f"verl's {key} is null")]
    assert said, conversion.notes
    differs = "mfsdp's default, left out, is true" in said[0]
    assert differs == bool(flag_default(CLASSES[command], next(iter(mapped)))), said
