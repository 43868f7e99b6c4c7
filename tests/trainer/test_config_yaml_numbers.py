"""Numbers in a config, in every form YAML 1.1 reads, are one line naming where they are or
a value, never a traceback: `0b` + 20,000 ones, `0x` + 5,000 f's, octal and base-60
integers read as integers Python then refused to print (a ValueError from the message that
would quote them), a base-60 float overflowed, and `!!int ""` or a 13th month raised what
PyYAML's constructors raise. In a file, in a `key=value` override and in a verl launch
script alike (exit 2 via the CLI)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli.main import app
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.config_yaml import MAX_INT_DIGITS, YAMLConfigError, parse_yaml
from trainer.shown_value import shown_value
from trainer.verl_import import convert_verl

HUGE = {
    "binary": ("0b" + "1" * 20_000, "integer at line 2 has 20000 digits"),
    "hex": ("0x" + "f" * 5000, "integer at line 2 has 5000 digits"),
    "octal": ("0" + "7" * 6000, "integer at line 2 has 6001 digits"),
    "base_60": ("1" + ":59" * 3000, "integer at line 2 has 6001 digits"),
    "decimal": ("9" * 5000, "integer at line 2 has 5000 digits"),
    "signed_hex": ("-0x" + "f" * 5000, "integer at line 2 has 5000 digits"),
    # fewer digits than the cap as written, more once written in decimal
    "hex_wider_in_decimal": ("0x" + "f" * 4000, f"more than {MAX_INT_DIGITS} digits in decimal"),
    "octal_read_as": ("0" + "7" * 3000, "octal or base-60 forms, read as 1861919823"),
    "base_60_float": ("1" + ":59" * 3000 + ".5", "a number only in YAML 1.1's base-60 form"),
    "empty_int": ('!!int ""', "'' at line 2 is not a valid !!int"),
    "word_int": ("!!int abc", "'abc' at line 2 is not a valid !!int"),
    "base_60_word": ('!!int "1:x"', "'1:x' at line 2 is not a valid !!int"),
    "empty_float": ('!!float ""', "'' at line 2 is not a valid !!float"),
    "word_bool": ("!!bool maybe", "'maybe' at line 2 is not a valid !!bool"),
    "month_13": ("2001-13-01", "'2001-13-01' at line 2 is not a valid !!timestamp"),
}


@pytest.mark.parametrize("case", HUGE)
def test_every_number_form_is_one_line_naming_its_line(case):
    value, words = HUGE[case]
    with pytest.raises(YAMLConfigError) as caught:
        parse_yaml(f"trainer:\n  seed: {value}\n", "c.yaml")
    message = str(caught.value)
    assert message.startswith("c.yaml: ") and words in message, message
    assert "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize(
    "value", ["0b" + "1" * 20_000, "0x" + "f" * 5000, "1" + ":59" * 3000, "0" + "7" * 6000]
)
def test_an_override_of_any_integer_form_is_refused_as_a_decimal_one_is(value):
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, [f"trainer.seed={value}"])
    assert str(caught.value).startswith("override trainer.seed: integer at line 1 has ")
    assert str(caught.value).endswith(" digits; refusing")


def test_a_value_of_the_wrong_type_is_quoted_short():
    """`0o777...` is text to YAML 1.1: the seed's error quoted all of it (6,000 characters)."""
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, ["trainer.seed=0o" + "7" * 6000])
    assert str(caught.value) == (
        "command-line override: config key 'trainer.seed' expects an integer, got 0o"
        + "7" * 38
        + "…(+5922 chars)…"
        + "7" * 40
    )


def test_the_cli_says_it_in_one_json_object_with_exit_2(tmp_path):
    config = tmp_path / "y.yaml"
    config.write_text("trainer:\n  seed: 0b" + "1" * 20_000 + "\n")
    result = CliRunner().invoke(app, ["train", "sft", "--config", str(config), "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout) == {
        "error": f"{config}: integer at line 2 has 20000 digits; refusing",
        "exit_code": 2,
    }


def test_a_verl_launch_script_of_a_huge_hex_value_is_listed_not_carried_over(tmp_path):
    """A value mfsdp's check refuses that a verl key sets is listed with the check's reason
    (exit 1, as any key not carried over), its 5,000 digits cut short in the reason."""
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.sft_trainer \\\n    trainer.save_freq=0x" + "f" * 5000 + "\n"
    )
    [dropped] = convert_verl(script, "sft").dropped
    reason = dropped.partition(": ")[2]
    assert reason.startswith("config key 'checkpoint.save_every' expects an integer, got")
    assert "…(+" in reason and len(reason) < 200, reason


def test_numbers_in_plain_forms_still_read():
    text = "a: 12\nb: -0x10\nc: 0b101\nd: 0\ne: 1.5e-3\nf: 9223372036854775807\n"
    assert parse_yaml(text, "c.yaml") == {
        "a": 12,
        "b": -16,
        "c": 5,
        "d": 0,
        "e": 1.5e-3,
        "f": 2**63 - 1,
    }


def test_the_digit_cap_is_exact_in_every_form():
    """The largest integer of MAX_INT_DIGITS decimal digits reads, written either way; one
    more does not."""
    largest = 10**MAX_INT_DIGITS - 1
    for written in (str(largest), hex(largest)):
        assert parse_yaml(f"a: {written}\n", "c.yaml") == {"a": largest}
    with pytest.raises(YAMLConfigError, match=f"more than {MAX_INT_DIGITS} digits in decimal"):
        parse_yaml(f"a: {hex(largest + 1)}\n", "c.yaml")


def test_a_value_is_quoted_short_whatever_it_is():
    assert shown_value(2**64) == "18446744073709551616"
    assert shown_value(10**100).endswith("... (101 digits)")
    assert shown_value(-(10**100)).endswith("... (101 digits)")
    assert shown_value(1 << 20_000) == "an integer of more than 4300 digits"
    assert shown_value("x" * 10**6) == "x" * 40 + "…(+999920 chars)…" + "x" * 40
