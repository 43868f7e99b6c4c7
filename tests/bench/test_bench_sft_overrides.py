"""bench/sft_throughput.py's `--override key=value` reads its value as a config override is:
bounded YAML, no python tags, an empty value refused. Read with plain `yaml.safe_load`, a
python tag or a deeply nested value was a traceback and `key=` was null."""

from __future__ import annotations

import argparse

import pytest

from bench.sft_throughput import _key_value


def test_an_override_value_is_typed_yaml():
    assert _key_value("num_hidden_layers=2") == ("num_hidden_layers", 2)
    assert _key_value("rope_scaling={type: linear, factor: 2.0}") == (
        "rope_scaling",
        {"type": "linear", "factor": 2.0},
    )


@pytest.mark.parametrize(
    "text", ["num_hidden_layers=", "x=!!python/name:os.system", "x=[" * 200, "no_equals"]
)
def test_a_bad_override_is_one_argparse_error(text):
    with pytest.raises(argparse.ArgumentTypeError):
        _key_value(text)
