"""Every key that takes text reads a number-like value alike: an override as typed, under
verl's name of the key too and in YAML 1.1's octal and base-60 forms; in a file, a number
for a `str | None` key is told the quoting a `str` key is; `mfsdp config from-verl` takes a
value Hydra keeps as text as that text. The hints say a form the user can write: a list's
for a list, the shell's on the command line, named values for checkpoint.resume."""

from pathlib import Path

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl


def refusal(path: Path | None, overrides: tuple[str, ...] | list[str] = (), text: str = "") -> str:
    """The one line `load_config` refuses the SFT config of `text` (at `path`) with."""
    if path is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, path, list(overrides))
    return str(err.value)


@pytest.mark.parametrize(
    "section, key, written",
    [("model", "path", "1.5"), ("trainer", "experiment_name", "2024"), ("model", "tokenizer", "7")],
)
def test_a_number_for_an_optional_text_key_in_a_file_says_to_quote_it(
    tmp_path, section, key, written
):
    path = tmp_path / "config.yaml"
    said = refusal(path, text=f"{section}:\n  {key}: {written}\n")
    assert said == (
        f"{path}: config key '{section}.{key}' expects a string or null, got {written}, which"
        f' YAML reads as a number: quote the text to keep it as written ({key}: "...")'
    )


@pytest.mark.parametrize("text", ["6", "007", "12:30", "0x1f"])
def test_verl_names_of_text_keys_take_the_text_typed(text):
    sft = load_config(
        SFTConfig,
        None,
        [f"trainer.default_local_dir={text}", f"trainer.resume_from_path={text}"],
    )
    assert (sft.trainer.run_dir, sft.checkpoint.resume) == (text, text)
    grpo = load_config(GRPOConfig, None, [f"actor_rollout_ref.model.path={text}"])
    assert grpo.model.path == text


@pytest.mark.parametrize("text", ["007", "12:30", "1:30.5"])
def test_yaml_1_1_numbers_for_a_text_key_are_the_text_typed(text):
    config = load_config(SFTConfig, None, [f"trainer.run_dir={text}", f"data.val_files=[{text}]"])
    assert (config.trainer.run_dir, config.data.val_files) == (text, [text])


def test_a_number_key_still_refuses_yaml_1_1_octal():
    assert "YAML 1.1's octal or base-60 forms" in refusal(None, ["trainer.seed=007"])


def test_a_list_of_files_on_the_command_line_is_the_text_typed():
    config = load_config(SFTConfig, None, ["data.train_files=[1,0x1f]", "data.val_files=6"])
    assert (config.data.train_files, config.data.val_files) == (["1", "0x1f"], ["6"])


def test_a_number_in_a_list_of_text_in_a_file_says_the_list_form(tmp_path):
    path = tmp_path / "config.yaml"
    said = refusal(path, text="data:\n  train_files: [1, 2]\n")
    assert said == (
        f"{path}: config key 'data.train_files[0]' expects a string, got 1, which YAML reads"
        ' as a number: quote the text to keep it as written (train_files: ["...", ...])'
    )


def test_a_boolean_in_a_list_on_the_command_line_says_the_shell_form():
    said = refusal(None, ["data.train_files=[true]"])
    assert said.endswith(
        "which YAML reads as a boolean: quote the text to keep it as written"
        " (data.train_files='[\"...\", ...]')"
    )


@pytest.mark.parametrize("written", ["true", "off"])
def test_a_boolean_resume_in_a_file_is_told_the_named_values(tmp_path, written):
    path = tmp_path / "config.yaml"
    said = refusal(path, text=f"checkpoint:\n  resume: {written}\n")
    assert said.endswith("which YAML reads as a boolean: write one of auto | disable | PATH"), said
    assert "quote" not in said


def test_an_empty_verl_path_override_says_how_to_clear_it():
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, ["actor_rollout_ref.model.path="])
    assert str(err.value).endswith("or actor_rollout_ref.model.path=null to clear it")


@pytest.mark.parametrize("written", ["0x1f", "yes", "off", "007"])
def test_from_verl_takes_the_text_hydra_keeps_for_a_run_dir(tmp_path, written):
    """Hydra keeps `0x1f`, `yes`, `off` and `007` as the text written (its integers are
    decimal only), so verl checkpoints into a dir of that name: the conversion writes it,
    never a YAML 1.1 reading of it ('31', 'true', 'false', '7')."""
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        f" trainer.default_local_dir={written}\n"
    )
    assert convert_verl(script).tree["trainer"]["run_dir"] == written
