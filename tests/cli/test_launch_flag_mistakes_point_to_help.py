"""A launch flag's mistake, or an argument that is no override, ends `; see 'mfsdp train
TRAINER --help'` (`mfsdp config check --help`), as click's own usage errors end and README
promises for every command-line mistake: `--nproc-per-node two` had the ending,
`--nproc-per-node 0` and `-1` did not, nor did `mfsdp train sft my.yaml`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.cli.test_launch_argument_checks import config_args, no_torchrun  # noqa: F401 (a fixture)
from tests.support.cli_errors import one_error


@pytest.mark.usefixtures("no_torchrun")
@pytest.mark.parametrize("flags", [["--nproc-per-node", "0"], ["--nproc-per-node=-1"]])
def test_a_flag_below_its_range_points_to_help(flags, tmp_path):
    done = CliRunner().invoke(app, ["train", "sft", *flags, *config_args("sft", tmp_path)])
    assert done.exit_code == 2, (done.output, done.exception)
    line = one_error(done.stderr, "--nproc-per-node must be >= 1")
    assert line.endswith("; see 'app train sft --help'"), line


@pytest.mark.parametrize(
    "command, path", [(["train", "sft"], "train sft"), (["config", "check", "sft"], "config check")]
)
def test_a_config_file_given_as_an_argument_says_how_to_give_it(command, path):
    """`mfsdp train sft my.yaml` read "a config file is given as --config my.yaml", as if
    --config had been given, and had no pointer to --help."""
    done = CliRunner().invoke(app, [*command, "my.yaml"])
    assert done.exit_code == 2, (done.output, done.exception)
    line = one_error(done.stderr)
    assert line == (
        f"error: override 'my.yaml': give a config file as --config my.yaml;"
        f" see 'app {path} --help'"
    ), line
