"""verl's command line read as Hydra reads it, and verl's optimizer as its dataclasses build it.

Each expectation is what Hydra 1.3's OverridesParser and composition make of the words bash
passes (checked against hydra-core), then what verl's config classes do with the result
(verl/workers/config/optimizer.py): the deprecated `warmup_style` / `grad_clip` win
whatever their order; `~key` deletes, and verl then trains the dataclass default; a later
`key=null` undoes the keys set under it before; `{k:v}` is a Hydra mapping, `a,b` a sweep
verl refuses, `#` and the like stop Hydra's lexer; a key verl's struct config lacks is
refused without `+`; a mapping given to a one-value key is never read as "not set".
"""

from __future__ import annotations

import re

import pytest

from trainer.verl_hydra_value import HydraValueError, hydra_override_value
from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

GRPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    " data.train_files=/d/t.parquet actor_rollout_ref.model.path=/m/q"
)
OPTIM = "actor_rollout_ref.actor.optim."
MEGATRON = f"{GRPO} actor_rollout_ref.actor.strategy=megatron"


def convert(tmp_path, text: str, name: str = "run.sh"):
    source = tmp_path / name
    source.write_text(text)
    return convert_verl(source)


def dropped_keys(conversion) -> list[str]:
    return [item.partition(":")[0] for item in conversion.dropped]


# --- verl's deprecated optimizer names win over their successors, in any order


@pytest.mark.parametrize(
    ("old", "new", "key", "verl_trains"),
    [
        ("warmup_style=cosine", "lr_scheduler_type=constant", "scheduler", "cosine"),
        ("grad_clip=0.5", "clip_grad=2.0", "clip_grad", 0.5),
    ],
)
@pytest.mark.parametrize("deprecated_first", [True, False])
def test_a_deprecated_optimizer_name_wins_in_a_script(
    tmp_path, old, new, key, verl_trains, deprecated_first
):
    words = [f"+{OPTIM}{old}", f"{OPTIM}{new}"]
    words = words if deprecated_first else words[::-1]
    conversion = convert(tmp_path, f"{GRPO} {' '.join(words)}\n")
    assert conversion.tree["optim"][key] == verl_trains
    assert conversion.dropped == []


def test_a_deprecated_optimizer_name_wins_in_a_yaml(tmp_path):
    conversion = convert(
        tmp_path,
        "algorithm: {adv_estimator: grpo}\ndata: {train_files: /d/t.parquet}\n"
        "actor_rollout_ref:\n  model: {path: /m/q}\n  actor:\n    optim: {warmup_style: cosine,"
        " lr_scheduler_type: constant, grad_clip: 0.5, clip_grad: 2.0}\n",
        "run.yaml",
    )
    assert conversion.tree["optim"]["scheduler"] == "cosine"
    assert conversion.tree["optim"]["clip_grad"] == 0.5


def test_a_deprecated_name_at_null_leaves_its_successor(tmp_path):
    conversion = convert(
        tmp_path, f"{GRPO} {OPTIM}lr_scheduler_type=cosine {OPTIM}warmup_style=null\n"
    )
    assert conversion.tree["optim"]["scheduler"] == "cosine"


# --- Hydra's overrides apply in order: `~key` deletes, a later `key=null` replaces


@pytest.mark.parametrize(
    "words",
    [
        f"{OPTIM}betas=[0.9,0.95] ~{OPTIM}betas",
        f"'~{OPTIM}lr'",
        f"{OPTIM}lr=2e-6 '~{OPTIM}lr=2e-6'",
        f"{OPTIM}lr=2e-6 '~actor_rollout_ref.actor.optim'",
    ],
)
def test_a_deleted_key_carried_here_is_not_carried_over(tmp_path, words):
    """verl builds its config class without the key, at the dataclass default (betas
    0.999, lr 1e-3), which is not mfsdp's: the deleted value (or silence) trained another
    run at exit 0."""
    conversion = convert(tmp_path, f"{GRPO} {words}\n")
    deleted = [item for item in conversion.dropped if item.startswith("~")]
    assert deleted and "default" in deleted[0]
    assert "lr" not in conversion.tree.get("optim", {})
    assert conversion.tree.get("optim", {}).get("betas") != [0.9, 0.95]


def test_a_deleted_key_ignored_here_is_a_note(tmp_path):
    conversion = convert(tmp_path, f"{GRPO} '~trainer.n_gpus_per_node'\n")
    assert conversion.dropped == []
    assert any(note.startswith("~trainer.n_gpus_per_node") for note in conversion.notes)


def test_a_later_null_mapping_undoes_the_keys_set_under_it(tmp_path):
    """Hydra's composition leaves override_optimizer_config None: Megatron's betas."""
    conversion = convert(
        tmp_path,
        f"{MEGATRON} +{OPTIM}override_optimizer_config.adam_beta1=0.8"
        f" {OPTIM}override_optimizer_config=null\n",
    )
    assert conversion.tree["optim"]["betas"] == [0.9, 0.999]


def test_a_key_set_after_a_null_mapping_stands(tmp_path):
    conversion = convert(
        tmp_path,
        f"{MEGATRON} {OPTIM}override_optimizer_config=null"
        f" +{OPTIM}override_optimizer_config.adam_beta1=0.8\n",
    )
    assert conversion.tree["optim"]["betas"] == [0.8, 0.999]


# --- values by Hydra's grammar


def test_a_hydra_mapping_without_spaces_is_read_as_hydra_reads_it(tmp_path):
    conversion = convert(
        tmp_path,
        f"{MEGATRON} '+{OPTIM}override_optimizer_config={{adam_beta2:0.95}}'"
        " 'actor_rollout_ref.actor.megatron.override_transformer_config="
        "{recompute_granularity:full}'\n",
    )
    assert conversion.dropped == []
    assert conversion.tree["optim"]["betas"] == [0.9, 0.95]


def test_a_refused_mapping_is_shown_as_verl_gets_it(tmp_path):
    conversion = convert(tmp_path, f"{GRPO} '+data.apply_chat_template_kwargs={{a_b:false}}'\n")
    assert conversion.dropped[0].startswith("+data.apply_chat_template_kwargs={'a_b': False}")


@pytest.mark.parametrize("value", ["/d/a.parquet,/d/b.parquet", "console,wandb"])
def test_a_comma_value_is_a_sweep_verl_refuses(tmp_path, value):
    with pytest.raises(VerlSourceError, match=r"Ambiguous value.*write \[") as err:
        convert(tmp_path, f"{GRPO} trainer.logger={value}\n")
    assert "trainer.logger" in str(err.value)


def test_a_quoted_comma_and_a_list_are_values(tmp_path):
    conversion = convert(
        tmp_path, f"{GRPO} \"trainer.experiment_name='a,b'\" trainer.logger=[console,wandb]\n"
    )
    assert conversion.tree["trainer"]["experiment_name"] == "a,b"
    assert conversion.tree["trainer"]["logger"] == ["console", "wandb"]


@pytest.mark.parametrize("char", ["#", "!", "&", "^", ";", "<", ">", "é"])
def test_a_character_hydra_lexes_no_token_for_is_refused(tmp_path, char):
    with pytest.raises(VerlSourceError, match=f"refuses '{re.escape(char)}'.*token recognition"):
        convert(tmp_path, f"{GRPO} 'trainer.experiment_name=x{char}y'\n")


def test_those_characters_inside_hydra_quotes_are_text(tmp_path):
    conversion = convert(tmp_path, f"{GRPO} \"trainer.experiment_name='run #1!'\"\n")
    assert conversion.tree["trainer"]["experiment_name"] == "run #1!"


@pytest.mark.parametrize(
    ("written", "hydra_reads"),
    [
        ("{enable_thinking:false}", {"enable_thinking": False}),
        ("{a: 1, b: [1,2]}", {"a": 1, "b": [1, 2]}),
        ("{1:2}", {1: 2}),
        ("[0x10,1e-6,yes, x y ]", ["0x10", 1e-06, "yes", "x y"]),
        ("a\\,b", "a,b"),
        ("'a\\'b'", "a'b"),
        ("1:30", "1:30"),
        (" 1 ", 1),
        ("${x.y}", "${x.y}"),
    ],
)
def test_values_are_read_by_hydras_grammar(written, hydra_reads):
    assert hydra_override_value(written) == hydra_reads


@pytest.mark.parametrize(
    "written", ["x{y", "/d/{train,test}", "[1,]", "{a:}", "a)b", "choice(a,b)"]
)
def test_values_hydra_cannot_parse_are_refused(written):
    with pytest.raises(HydraValueError):
        hydra_override_value(written)


# --- keys verl's struct config refuses without `+`


def test_a_megatron_engine_key_on_sfts_fsdp_engine_is_refused_not_read_as_megatron(tmp_path):
    conversion = convert(
        tmp_path,
        "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m/q"
        " optim.betas=[0.9,0.95] engine.use_megatron_fsdp=True\n",
    )
    assert dropped_keys(conversion) == ["engine.use_megatron_fsdp=True"]
    assert "not in struct" in conversion.dropped[0]
    assert conversion.tree["optim"]["betas"] == [0.9, 0.95]
    assert "strategy" not in conversion.tree


def test_an_optimizer_override_key_without_plus_is_refused(tmp_path):
    conversion = convert(tmp_path, f"{MEGATRON} {OPTIM}override_optimizer_config.adam_beta2=0.95\n")
    assert dropped_keys(conversion) == [f"{OPTIM}override_optimizer_config.adam_beta2=0.95"]
    assert conversion.tree.get("optim", {}).get("betas") != [0.9, 0.95]


def test_an_optimizer_override_key_added_with_plus_is_read(tmp_path):
    conversion = convert(
        tmp_path, f"{MEGATRON} +{OPTIM}override_optimizer_config.adam_beta2=0.95\n"
    )
    assert conversion.dropped == []
    assert conversion.tree["optim"]["betas"] == [0.9, 0.95]


# --- a mapping or list given to a key of one value


@pytest.mark.parametrize(
    ("words", "key"),
    [
        (f"'{OPTIM}lr={{}}'", "optim.lr"),
        (f"'{OPTIM}lr={{a:1}}'", "optim.lr"),
        ("trainer.total_epochs=[1]", "trainer.epochs"),
    ],
)
def test_a_mapping_or_list_given_to_a_one_value_key_is_not_carried_over(tmp_path, words, key):
    conversion = convert(tmp_path, f"{GRPO} {words}\n")
    assert [item.partition("=")[0] for item in conversion.dropped] == [key]
    assert "one value" in conversion.dropped[0]


def test_a_mapping_given_to_a_one_value_key_in_a_yaml_is_not_carried_over(tmp_path):
    conversion = convert(
        tmp_path,
        "algorithm: {adv_estimator: grpo}\ndata: {train_files: /d/t.parquet}\n"
        "actor_rollout_ref: {model: {path: /m/q}}\noptim: {lr: {1e-6: null}}\n",
        "run.yaml",
    )
    assert [item.partition("=")[0] for item in conversion.dropped] == ["optim.lr"]


def test_a_megatron_adam_override_hydra_leaves_text_is_not_carried_over(tmp_path):
    """Hydra reads `095e-2` as text, which verl hands to Megatron's Adam; the loader here
    read it as 0.95."""
    conversion = convert(
        tmp_path, f"{MEGATRON} +{OPTIM}override_optimizer_config.adam_beta2=095e-2\n"
    )
    assert len(conversion.dropped) == 1
    assert "adam_beta2='095e-2' is not a number" in conversion.dropped[0]
