"""An error that refuses a command-line override's value quotes the text typed after `=`.

Was: Python's spelling of what YAML read, `optim.lr=true` quoted as `True`, `1e-5` as
`'1e-5'` (or `1e-05` by a check across keys), `null` as `None`, `"5"` as `'5'`; verl's own
scripts write both `true` and `True`, so the line named neither as the user wrote it."""

from __future__ import annotations

import logging

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.model_dirs import train
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.shown_value import overrides_typed, shown_value, typed_text


def _refusal(cls: type, *overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(cls, None, list(overrides))
    return str(caught.value)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("optim.lr=true", "config key 'optim.lr' expects a number, got true"),
        ("optim.lr=True", "config key 'optim.lr' expects a number, got True"),
        ("trainer.total_steps=1e-5", "'trainer.total_steps' expects an integer or null, got 1e-5"),
        ("trainer.total_steps='5'", "'trainer.total_steps' expects an integer or null, got '5'"),
        ('trainer.total_steps="5"', "'trainer.total_steps' expects an integer or null, got \"5\""),
        ("optim.lr=-1e-5", "config key 'optim.lr' must be >= 0, got -1e-5"),
        ("trainer.device=npu", "expects one of auto | cpu | cuda, got npu"),
        ("checkpoint.resume=True", "got True, which YAML reads as a boolean"),
        ("data.enable_thinking_default=true", "verl key 'data.enable_thinking_default=true'"),
        ("data.enable_thinking_default=True", "verl key 'data.enable_thinking_default=True'"),
        ("profiler.enable=TRUE", "verl key 'profiler.enable=TRUE' has no equivalent here"),
    ],
)
def test_an_sft_override_is_quoted_as_typed(override, said):
    message = _refusal(SFTConfig, override)
    assert message.startswith("command-line override: "), message
    assert said in message, message


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["algorithm.adv_estimator=null"], "algorithm.adv_estimator=null: mfsdp trains GRPO only"),
        (["algorithm.adv_estimator=~"], "algorithm.adv_estimator=~: mfsdp trains GRPO only"),
        (
            ["actor_rollout_ref.actor.optim.lr=2e-5", "optim.lr=1e-5"],
            "actor_rollout_ref.actor.optim.lr=2e-5 and optim.lr=1e-5: one setting here",
        ),
        (
            ["actor_rollout_ref.rollout.multi_turn.enable=True"],
            "verl key 'actor_rollout_ref.rollout.multi_turn.enable=True' has no equivalent",
        ),
    ],
)
def test_a_grpo_override_is_quoted_as_typed(overrides, said):
    assert said in _refusal(GRPOConfig, *overrides)


def test_a_check_across_keys_quotes_the_numbers_as_typed():
    message = _refusal(SFTConfig, "optim.min_lr=1e-5", "optim.lr=0.000001")
    assert message.startswith("optim.min_lr=1e-5 is above optim.lr=0.000001: "), message


def test_a_config_files_value_is_not_quoted_by_an_overrides_text(tmp_path):
    """A key the file sets keeps Python's spelling (`:g`) beside one the command line
    typed: only an override has a text typed."""
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  min_lr: 1.0e-5\n")
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, path, ["optim.lr=1e-6"])
    assert str(caught.value).startswith("optim.min_lr=1e-05 is above optim.lr=1e-6: ")


def test_a_value_a_rule_made_is_not_quoted_by_the_text_it_came_from():
    """verl's `-1` ("no limit") is null here: the text `-1` names no null, so a refusal of
    the null quotes it as YAML writes it."""
    with overrides_typed({"optim.lr": ("1e-5", "1e-5"), "trainer.seed": ("-1", -1)}):
        assert typed_text("optim.lr", 1e-5) == "1e-5"  # the number YAML 1.1 read as text
        assert typed_text("trainer.seed", None) is None
        assert shown_value(None, "trainer.seed") == "null"
        assert typed_text("+optim.lr", "1e-5") == "1e-5"  # Hydra's `+key=`
    assert typed_text("optim.lr", 1e-5) is None  # the command line read, nothing is typed


def test_a_long_typed_value_is_cut_to_one_line():
    message = _refusal(SFTConfig, "trainer.seed=x" + "y" * 5000)
    assert "expects an integer, got xyyy" in message and "…(+4921 chars)…" in message
    assert len(message) < 200, message


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("true", "expects a number, got true"),
        ("True", "expects a number, got True"),
        ("null", "expects a number, got null"),
        ("'1e-5x'", "expects a number, got '1e-5x'"),
    ],
)
def test_train_and_config_check_quote_the_override_as_typed(typed, said):
    code, stderr = train("sft", f"optim.lr={typed}")
    assert code == 2, stderr
    one_error(stderr, f"command-line override: config key 'optim.lr' {said}")
    checked = mfsdp(
        "config", "check", "sft", "--config", "examples/sft_tiny_cpu.yaml", f"optim.lr={typed}"
    )
    assert checked.returncode == 2, checked.stderr
    one_error(checked.stderr, f"command-line override: config key 'optim.lr' {said}")


def test_train_quotes_a_tiny_number_as_typed_where_two_keys_disagree():
    code, stderr = train("sft", "optim.lr=1e-5", "optim.min_lr=2e-5", "optim.scheduler=cosine")
    assert code == 2, stderr
    one_error(stderr, "optim.min_lr=2e-5 is above optim.lr=1e-5")


def test_a_note_quotes_the_overrides_it_names_as_typed(caplog):
    """The notes of a verl key not read name the values as the command line wrote them too."""
    actor = "actor_rollout_ref.actor."
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        load_config(GRPOConfig, None, [f"{actor}clip_ratio=0.10", f"{actor}clip_ratio_high=0.30"])
    (note,) = [r.getMessage() for r in caplog.records if "is not read" in r.getMessage()]
    assert note.startswith(f"note: verl's {actor}clip_ratio=0.10 is not read"), note
    assert "clip_ratio_high=0.30" in note, note


@pytest.mark.parametrize("typed", ["true", "True"])
def test_a_verl_keys_mapping_note_quotes_its_value_as_typed(caplog, typed):
    """The note above the error quotes the value as the error does, not as Python writes it."""
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"), pytest.raises(ConfigError):
        load_config(GRPOConfig, None, [f"actor_rollout_ref.actor.optim.lr={typed}"])
    note = "note: verl's actor_rollout_ref.actor.optim.lr is optim.lr=" + typed + " here"
    assert note in caplog.messages, caplog.messages
