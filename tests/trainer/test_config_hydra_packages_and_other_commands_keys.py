"""Three config errors a verl user or a user moving keys between mfsdp's two commands meets:
verl's Hydra selection with a package (`actor@actor_rollout_ref.actor=megatron_actor`, as
verl's docs switch the actor to Megatron) and Hydra's delete (`~engine`) are named as what
they are, not as the unknown section `actor@actor_rollout_ref` ("did you mean actor?"); a
key of the other command inside a section both have (`data.max_prompt_length` given to
sft) is named as that command's, not matched to a key of no kin; verl's SFT-only top-level
keys given to grpo are refused alike (`ulysses_sequence_parallel_size` was carried over
with a note where `use_remove_padding` beside it was refused)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import EXAMPLES, REPO, repo_env
from tests.support.sft import TINY_CONFIG
from trainer import verl_keys
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.config_suggestions import all_keys
from trainer.grpo.config import GRPOConfig
from trainer.verl_rules import TRAINER_SECTIONS

CLASSES = {"sft": SFTConfig, "grpo": GRPOConfig}
CONFIGS = {"sft": TINY_CONFIG, "grpo": EXAMPLES / "grpo_tiny_cpu.yaml"}
FROM_VERL = "selects a file of verl's config (a Hydra config group)"
PACKAGED = [
    "actor@actor_rollout_ref.actor=megatron_actor",
    "ref@actor_rollout_ref.ref=megatron_ref",
    "rollout@actor_rollout_ref.rollout=rollout",
    "+engine=megatron",
    "++actor@actor_rollout_ref.actor=dp_actor",
]


def _error(command: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(CLASSES[command], None, list(overrides))
    return str(raised.value)


def _cli(command: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "train", command, "--config", str(CONFIGS[command])]
        + list(overrides),
        cwd=REPO,
        env=repo_env(),
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("command", ["sft", "grpo"])
@pytest.mark.parametrize("typed", PACKAGED)
def test_a_selection_with_a_package_is_named_as_verls_file_as_typed(command, typed):
    said = _error(command, typed)
    assert f"{typed} {FROM_VERL}" in said and "mfsdp config from-verl" in said, said
    assert "did you mean" not in said, said


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_the_packaged_form_gets_the_plain_forms_line(command):
    plain = _error(command, "actor=megatron_actor")
    packaged = _error(command, "actor@actor_rollout_ref.actor=megatron_actor")
    shown = "actor@actor_rollout_ref.actor"
    assert packaged.replace(shown, "actor") == plain


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_the_cli_refuses_a_packaged_selection_in_one_line(command):
    done = _cli(command, "actor@actor_rollout_ref.actor=megatron_actor")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"actor@actor_rollout_ref.actor=megatron_actor {FROM_VERL}" in lines[0], lines[0]


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("~engine", "~engine removes a file of verl's config"),
        ("~actor@actor_rollout_ref.actor", "~actor@actor_rollout_ref.actor removes a file"),
        ("~optim.lr", "Hydra's delete, which mfsdp train does not take; leave optim.lr out"),
    ],
)
def test_hydras_delete_is_named(typed, said):
    for command in CLASSES:
        got = _error(command, typed)
        assert said in got and "expected key=value" not in got, got


def _only_in(command: str) -> list[str]:
    """Keys in a section both commands have that only `command`'s config has and the other
    command takes no verl key of that name for, read from the two config classes."""
    other = "grpo" if command == "sft" else "sft"
    own, theirs = CLASSES[command], CLASSES[other]
    shared = {key for key in all_keys(own) if "." not in key} & set(all_keys(theirs))
    return [
        key
        for key in all_keys(own)
        if "." in key
        and key.split(".", 1)[0] in shared
        and not verl_keys.is_native(theirs, key)
        and not verl_keys.carries(theirs, key)
        and verl_keys.rule_for(key) is None
    ]


def test_each_command_has_keys_the_other_lacks():
    assert {"data.max_prompt_length", "data.filter_overlong_prompts"} <= set(_only_in("grpo"))
    wanted = {"data.messages_key", "data.max_length", "data.packing", "data.val_ratio"}
    assert wanted <= set(_only_in("sft"))


@pytest.mark.parametrize(
    ("owner", "given_to"), [("grpo", "sft"), ("sft", "grpo")], ids=["to_sft", "to_grpo"]
)
def test_a_key_of_the_other_command_in_a_shared_section_is_named_as_its(owner, given_to):
    for key in _only_in(owner):
        said = _error(given_to, f"{key}=1")
        wanted = f"unknown config key '{key}': a key of mfsdp train {owner}, not {given_to}"
        assert said.endswith(wanted), said


def test_the_other_commands_key_in_a_file_is_named_as_its(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  max_prompt_length: 32\n")
    with pytest.raises(ConfigError) as raised:
        load_config(SFTConfig, path)
    said = "unknown config key 'data.max_prompt_length': a key of mfsdp train grpo, not sft"
    assert str(raised.value) == f"{path}: {said}"


def test_the_cli_names_the_sft_key_given_to_grpo():
    done = _cli("grpo", "data.messages_key=messages")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].endswith("'data.messages_key': a key of mfsdp train sft, not grpo"), lines


def test_a_typo_in_a_shared_section_still_gets_its_hint():
    assert "did you mean data.max_prompt_length" in _error("grpo", "data.max_prompt_lenght=3")


SFT_TOP_KEYS = sorted(
    key for key in TRAINER_SECTIONS["sft"] if not verl_keys.is_native(GRPOConfig, key)
)


@pytest.mark.parametrize("key", ["use_remove_padding", "ulysses_sequence_parallel_size"])
def test_verls_sft_only_top_level_keys_are_refused_by_grpo_alike(key):
    assert key in SFT_TOP_KEYS
    said = _error("grpo", f"{key}=1")
    assert f"verl key '{key}' is for mfsdp train sft, not grpo" in said, said


def test_sft_still_takes_ulysses_at_its_harmless_size():
    load_config(SFTConfig, None, ["ulysses_sequence_parallel_size=1"])
    assert "model parallel sizes are 1" in _error("sft", "ulysses_sequence_parallel_size=2")


@pytest.mark.parametrize("command", ["sft", "grpo"])
@pytest.mark.parametrize(
    "written", ["actor@actor_rollout_ref.actor: megatron_actor", "+engine: megatron"]
)
def test_a_files_key_in_hydras_selection_form_is_named_as_verls_file(command, written, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"{written}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(CLASSES[command], path)
    said = str(raised.value)
    typed = written.replace(": ", "=")
    assert said.startswith(f"{path}: ") and f"{typed} {FROM_VERL}" in said, said
