"""An override value YAML would read as other than typed is refused, naming the key and
saying to quote it; quoted, it is the text inside the quotes; every other value parses as
before.

Was: `'trainer.run_dir=exp/a #second try'` silently meant `exp/a` (a YAML comment), and the
run resumed the one already there; `trainer.run_dir=$'r\\nx'` wrote to `r x/` (the line
folded); `'trainer.run_dir=r3 '` wrote to `r3/` (the spaces trimmed)."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.override_text import quoted


def _run_dir(text: str) -> str:
    return load_config(SFTConfig, None, [f"trainer.run_dir={text}"]).trainer.run_dir


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("exp/a #second try", "YAML reads '#second try' as a comment"),
        ("#first try", "YAML reads '#first try' as a comment"),
        ("'exp/a' #quoted, then a comment", "as a comment"),
        ("r\nx", "control character (\\n)"),
        ("r\tx", "control character (\\t)"),
        ("r\x85x", "control character (\\x85)"),
        ("r\u2028x", "control character (\\u2028)"),
        ("r3 ", "spaces at its start or end"),
        (" r3", "spaces at its start or end"),
        ("--- r3", "'---' as a document marker"),
    ],
)
def test_a_value_yaml_would_change_is_refused_naming_the_key(text, said):
    with pytest.raises(ConfigError) as caught:
        _run_dir(text)
    message = str(caught.value)
    assert message.startswith("command-line override trainer.run_dir: "), message
    assert said in message and "quote the value" in message, message
    assert "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("'exp/a #second try'", "exp/a #second try"),
        ('"exp/a #second try"', "exp/a #second try"),
        ('"r3 "', "r3 "),
        ("' r3'", " r3"),
        ('"r\\nx"', "r\nx"),
        ("a b/c", "a b/c"),
        ("a=b", "a=b"),
        ("a#b", "a#b"),
        ("exp/a-#1", "exp/a-#1"),
    ],
)
def test_quoted_values_and_plain_paths_are_the_text_meant(text, read):
    assert _run_dir(text) == read


def test_lists_maps_numbers_and_null_parse_as_before():
    config = load_config(
        SFTConfig,
        None,
        [
            "data.train_files=[a.parquet,b.parquet]",
            "model.overrides={num_hidden_layers: 2, rope: {theta: 10000.0}}",
            "optim.lr=2e-5",
            "trainer.total_steps=7",
            "checkpoint.keep_last=null",
            "optim.betas=[0.8, 0.95]",
        ],
    )
    assert config.data.train_files == ["a.parquet", "b.parquet"]
    assert config.model.overrides == {"num_hidden_layers": 2, "rope": {"theta": 10000.0}}
    assert (config.optim.lr, config.trainer.total_steps) == (2e-5, 7)
    assert config.checkpoint.keep_last is None
    assert config.optim.betas == [0.8, 0.95]


@pytest.mark.parametrize(
    "text",
    [
        "runs/demo #2",
        " lead and trail ",
        "a\nb",
        "tab\there",
        "q'uote\"s\\and back\\slashes",
        "r\x85x\u2028y\x7f",
        "not\udcffutf8",  # a non-UTF-8 byte of a path, as Python decodes it
        "[not a list]",
        "null",
        "--- x",
        "10",
        "snow \u2603",
    ],
)
def test_quoted_reads_back_as_exactly_the_text(text):
    """What `mfsdp demo` writes its paths with: `--out 'runs/demo #2'` is no comment."""
    assert _run_dir(quoted(text)) == text
