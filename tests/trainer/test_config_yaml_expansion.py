"""YAML aliases that copy one long string thousands of times are refused by the characters
they expand to, not only by their nodes: a 3.7 KB config of 9,000 references to one 2 KB
string wrote a 20 MB config.yaml (and HF config.json), and a 200 KB verl YAML took 5.6 GB
converting with `mfsdp config from-verl`. The size is counted before anything is built."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.config_yaml import (
    MAX_EXPANDED_CHARS,
    ExpansionBudget,
    YAMLConfigError,
    parse_yaml,
    read_yaml_file,
)
from trainer.verl_import import VerlMemoryError, VerlSourceError, convert_verl

TEXT = "x" * 2000


def _amplified(text: str = TEXT, copies: int = 10, levels: int = 3) -> str:
    """A flow list whose `levels` nested levels of aliases reach `text` copies**levels times."""
    lines = [f"s: &s {text}", f"l1: &l1 [{', '.join(['*s'] * copies)}]"]
    for level in range(2, levels + 1):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * copies)}]")
    return "\n".join(lines) + "\n"


def _copies(text: str, copies: int) -> str:
    """A flow list of `copies` references to `text`."""
    return f"[&s {text}, " + ", ".join(["*s"] * (copies - 1)) + "]"


def test_a_few_kilobytes_expanding_to_megabytes_of_text_is_refused_before_building(
    tmp_path, monkeypatch
):
    path = tmp_path / "small.yaml"
    path.write_text(_amplified())
    assert path.stat().st_size < 4000
    built = []
    monkeypatch.setattr(yaml.SafeLoader, "construct_document", lambda *a: built.append(a))
    with pytest.raises(YAMLConfigError) as caught:
        read_yaml_file(path)
    assert str(caught.value) == (
        f"{path}: expands to over {MAX_EXPANDED_CHARS} characters through anchors/aliases; refusing"
    )
    assert caught.value.exit_code == 2 and not built


def test_a_training_config_with_such_aliases_is_refused_naming_it(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(
        "model:\n  overrides:\n    id2label:\n" + textwrap.indent(_amplified(), " " * 6)
    )
    with pytest.raises(ConfigError, match=f"^{path}: expands to over {MAX_EXPANDED_CHARS} char"):
        load_config(SFTConfig, path)


def test_aliases_that_stay_small_are_read_as_before():
    assert parse_yaml(_amplified("x" * 10, copies=3), "doc")["l3"] == [[["x" * 10] * 3] * 3] * 3


def test_documents_read_together_share_one_budget():
    """The values of one launch script make one config: each alone fits, all together not."""
    budget = ExpansionBudget()
    value = _copies("x" * 1000, 100)  # 100,000 characters as walked
    for index in range(MAX_EXPANDED_CHARS // 100_000):
        parse_yaml(value, f"value {index}", budget)
    with pytest.raises(YAMLConfigError, match=r"^last: expands .* \(with the values read before"):
        parse_yaml(value, "last", budget)


def test_from_verl_reads_a_yaml_through_the_same_bounds(tmp_path):
    path = tmp_path / "verl.yaml"
    path.write_text("actor_rollout_ref:\n  rollout:\n    n: 2\n" + _amplified("x" * 20_000))
    with pytest.raises(VerlSourceError, match=f"^{path}: expands to over {MAX_EXPANDED_CHARS}"):
        convert_verl(path)


def test_from_verl_never_expands_yaml_aliases_in_a_scripts_values(tmp_path):
    """Each `key=[&s ..., *s, ...]` value of a script is Hydra's text, where `&` is refused
    outside quotes: a script of many such values expands none of them."""
    value = _copies("x" * 1000, 250)  # 250,000 characters
    keys = " ".join(f"'x.k{index}={value}'" for index in range(20))
    script = tmp_path / "run.sh"
    script.write_text(f"python3 -m verl.trainer.main_ppo {keys}\n")
    with pytest.raises(VerlSourceError) as caught:
        convert_verl(script)
    assert str(caught.value).startswith(f"{script}: x.k0: ")
    assert "Hydra refuses '&' outside quotes" in str(caught.value)


def test_from_verl_out_of_memory_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "verl.yaml"
    path.write_text("trainer:\n  total_epochs: 1\n")

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("trainer.verl_source.parse_yaml", no_memory)
    with pytest.raises(VerlMemoryError) as caught:
        convert_verl(path)
    assert str(caught.value) == (
        f"{path}: out of memory converting it; free memory or raise the process's limit (ulimit -v)"
    )
    assert caught.value.exit_code == 1


def test_a_run_dirs_config_is_read_back_through_the_same_bounds(tmp_path):
    """A resume compares against RUN/config.yaml (and wandb shows it): one of such aliases
    made a note of megabytes (the old value's repr) on stderr; it is no config to compare
    with: the note is one short line, and the file is kept aside as it was."""
    from trainer.config_history import keep_changed_config
    from trainer.metrics import _resolved_config

    run = tmp_path / "run"
    run.mkdir()
    text = "optim:\n  betas:\n" + textwrap.indent(_amplified(), "    ")
    (run / "config.yaml").write_text(text)
    assert _resolved_config(run) is None
    note = keep_changed_config(run, 2, SFTConfig())
    assert note is not None and note.startswith("settings not compared") and len(note) < 1000
    assert sorted(path.name for path in run.iterdir()) == ["config.until_step_2.yaml"]
    assert (run / "config.until_step_2.yaml").read_text() == text
