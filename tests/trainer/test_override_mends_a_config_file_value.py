"""An override mends a value of the config file it is given with, as in Hydra and verl:
`trainer.device=cpu` over a file's `device: npu` runs on CPU. The file was checked alone
first and refused naming the file, whatever the command line set. A problem of the file's
that no override mends still names the file; an override's own still names the command
line."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config


def _file(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_an_override_mends_the_file_value_it_sets(tmp_path):
    path = _file(tmp_path, "trainer:\n  device: npu\n")
    assert load_config(SFTConfig, path, ["trainer.device=cpu"]).trainer.device == "cpu"


@pytest.mark.parametrize(
    ("file", "overrides", "said"),
    [
        ("trainer:\n  device: npu\n", [], "c.yaml: config key 'trainer.device'"),
        ("trainer:\n  device: npu\n", ["optim.lr=1e-5"], "c.yaml: config key 'trainer.device'"),
        (
            "trainer:\n  device: cpu\n",
            ["trainer.device=npu"],
            "command-line override: config key 'trainer.device'",
        ),
    ],
    ids=["file-alone", "unmended", "override-own"],
)
def test_what_is_not_mended_names_where_it_is(tmp_path, file, overrides, said):
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, _file(tmp_path, file), overrides)
    assert said in str(caught.value) and "got npu" in str(caught.value), caught.value


@pytest.mark.parametrize(
    ("file", "overrides", "said"),
    [
        (
            "trainer:\n  device: npu\n",
            ["trainer.device=cpu", "optim.lr=abc"],
            "command-line override: config key 'optim.lr'",
        ),
        (
            "trainer:\n  device: npu\n  log_every: abc\n",
            ["trainer.device=cpu"],
            "c.yaml: config key 'trainer.log_every'",
        ),
        (
            "trainer:\n  device: npu\n",
            ["trainer.device=tpu"],
            "command-line override: config key 'trainer.device' expects one of auto | cpu |"
            " cuda, got tpu",
        ),
    ],
    ids=["override-own", "file-other-key", "override-same-key"],
)
def test_a_mended_file_value_is_never_blamed_for_another_error(tmp_path, file, overrides, said):
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, _file(tmp_path, file), overrides)
    assert said in str(caught.value) and "npu" not in str(caught.value), caught.value
