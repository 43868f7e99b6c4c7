"""An error refusing a value of the `--config` YAML file quotes it as YAML writes it, as a
command-line override's value is quoted as typed: one language for both.

Was: Python's spelling of what YAML read, `device: npu` quoted as `'npu'`, `lr: true` as
`True`, a list's strings each in Python quotes (`['a', 'b c']`), `null` as `None`."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.shown_value import shown_value
from trainer.yaml_spelling import yaml_spelling


def _refusal(tmp_path, text: str, *overrides: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, str(path), list(overrides))
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("trainer:\n  device: npu\n", "'trainer.device' expects one of auto | cpu | cuda, got npu"),
        ("optim:\n  lr: true\n", "config key 'optim.lr' expects a number, got true"),
        ("optim:\n  lr: False\n", "config key 'optim.lr' expects a number, got false"),
        ("data:\n  max_length: [1, 2]\n", "'data.max_length' expects an integer, got [1, 2]"),
        ('trainer:\n  total_steps: [a, "b c"]\n', "or null, got [a, b c]"),
        ("trainer:\n  total_steps: 'true'\n", "expects an integer or null, got 'true'"),
        ("trainer:\n  total_steps: {a: 1}\n", "expects an integer or null, got {a: 1}"),
    ],
)
def test_a_config_files_value_is_quoted_as_yaml_writes_it(tmp_path, text, said):
    message = _refusal(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'c.yaml'}: "), message
    assert said in message, message


def test_the_same_value_from_the_file_and_typed_on_the_command_line_reads_alike(tmp_path):
    """The file's `npu` and the override's `npu`: quoted the same, each naming its source."""
    from_file = _refusal(tmp_path, "trainer:\n  device: npu\n")
    typed = _refusal(tmp_path, "trainer:\n  seed: 1\n", "trainer.device=npu")
    assert from_file.endswith("got npu") and typed.endswith("got npu"), (from_file, typed)
    assert typed.startswith("command-line override: "), typed


@pytest.mark.parametrize(
    ("value", "spelt"),
    [
        ("npu", "npu"),
        (True, "true"),
        (None, "null"),
        (["a", "b c"], "[a, b c]"),
        ("true", "'true'"),  # a string YAML would read as a boolean stays one, quoted
        ("a: b", "'a: b'"),
        ("two\nlines", '"two\\nlines"'),  # one line, whatever the string holds
        ({"a": [1, None]}, "{a: [1, null]}"),
        (3, "3"),
    ],
)
def test_values_are_spelt_as_yaml_on_one_line(value, spelt):
    assert yaml_spelling(value) == spelt


def test_a_value_yaml_cannot_write_is_pythons_repr():
    class Rule:
        def __repr__(self) -> str:
            return "<rule>"

    assert yaml_spelling(Rule()) == "<rule>"


@pytest.mark.parametrize("text", ["5e5", "1e-5", "+2E3", ".5", "1."])
def test_text_hydra_reads_as_a_number_is_spelt_in_quotes(text):
    """PyYAML (YAML 1.1) reads `5e5` as text and writes it plain, where Hydra and YAML 1.2
    read a number: a refusal saying `5e5 is not a number` of a value typed '5e5' misled."""
    assert yaml_spelling(text) == f"'{text}'"


def test_values_yaml_spells_over_lines_or_too_deep_stay_one_line():
    """`!!binary` is a block scalar (`!!binary |` and its lines), a list nested 900 deep past
    the representer's recursion: both keep Python's spelling."""
    assert yaml_spelling(b"hello") == "b'hello'"
    nested: list = []
    for _ in range(900):
        nested = [nested]
    assert yaml_spelling(nested) == repr(nested)


def test_a_megabyte_string_is_spelt_from_its_ends_alone():
    """Its middle is cut from the line anyway; spelling it all took ~1.8 s a megabyte."""
    value = "5e5" + "x" * 10**6 + "a\nb"
    shown = shown_value(value)
    assert shown.startswith("5e5xxx") and shown.endswith('xxxa\\nb"'), shown
    assert "\n" not in shown
