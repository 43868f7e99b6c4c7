"""`one_error` (tests/support/cli_errors.py), which the hostile-input suites check every
failure with, takes the phase lines a command says before the failure (`checking config
... with transformers ...`, `reading ... ...`) and still allows one error line alone, last."""

from __future__ import annotations

import pytest

from cli.config_check_lines import checking_line
from tests.support.cli_errors import one_error

ERROR = "error: m/config.json: transformers cannot load it (rms_norm_eps)"
CHECKING = checking_line("m/config.json")


def test_phase_lines_before_the_error_line_are_taken():
    reading = "reading ckpt/.metadata (12.0 MiB) ..."
    assert one_error(f"{reading}\n{CHECKING}\n{ERROR}\n", "rms_norm_eps") == ERROR
    assert one_error(f"[sft] loading torch and transformers ...\n{ERROR}\n") == ERROR


@pytest.mark.parametrize(
    "stderr",
    [
        f"{ERROR}\n{ERROR}\n",  # a second error line
        f"{CHECKING}\n{ERROR}\n{ERROR}\n",
        f"{ERROR}\n{CHECKING}\n",  # a phase said after the failure
        f"note: something\n{ERROR}\n",  # a line that is no phase
        f"{CHECKING}\n",  # no error line at all
        "",
    ],
)
def test_anything_but_phase_lines_then_one_error_line_fails(stderr):
    with pytest.raises(AssertionError):
        one_error(stderr)
