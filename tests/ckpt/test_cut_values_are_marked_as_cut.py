"""A value an error line quotes only in part is shown as cut: its start and end, and how many
characters were left out between them (`cut_to`).

Were: a tracker file of 44 characters, all zeros but a final `2`, was quoted as its first 40
(`'0000000000000000000000000000000000000000'`), which reads as the whole of it; values quoted
in config and data errors were cut the same way, with no sign of the cut.
"""

from __future__ import annotations

import pytest

from mfsdp_ckpt.format.layout import TRACKER_FILE, DamagedRunDirError
from mfsdp_ckpt.format.run_steps import read_tracker, read_tracker_text
from trainer.rewards.dispatch import no_built_in_reward
from trainer.shown_value import MAX_SHOWN_CHARS, shown_value
from trainer.verl_hydra_value import HydraValueError, hydra_override_value

LONG_STEP = "0" * 43 + "2"


@pytest.mark.parametrize("read", [read_tracker, read_tracker_text])
def test_a_long_tracker_value_is_quoted_as_cut(read, tmp_path):
    (tmp_path / TRACKER_FILE).write_text(LONG_STEP)
    with pytest.raises(DamagedRunDirError) as raised:
        read(tmp_path)
    quoted = repr(LONG_STEP)
    left_out = len(quoted) - 40
    assert f"found {quoted[:20]}…(+{left_out} chars)…{quoted[-20:]}" in str(raised.value)


def test_a_short_tracker_value_is_quoted_whole(tmp_path):
    (tmp_path / TRACKER_FILE).write_text("latest")
    with pytest.raises(DamagedRunDirError, match="found 'latest'"):
        read_tracker(tmp_path)


def test_a_long_config_value_shows_its_end_and_how_much_was_left_out():
    value = "a" * 500 + "z"
    shown = shown_value(value)
    assert shown.endswith("az")
    assert f"(+{len(value) - MAX_SHOWN_CHARS} chars)" in shown


def test_a_long_data_source_is_quoted_as_cut():
    source = "s" * 200 + "!"
    quoted = repr(source)
    assert f"{quoted[:40]}…(+{len(quoted) - 80} chars)…{quoted[-40:]}" in no_built_in_reward(source)


def test_a_long_hydra_sweep_is_quoted_as_cut():
    value = "a," * 100 + "z"
    quoted = repr(value)
    with pytest.raises(HydraValueError) as raised:
        hydra_override_value(value)
    assert str(raised.value).startswith(
        f"{quoted[:40]}…(+{len(quoted) - 80} chars)…{quoted[-40:]}: a comma outside brackets"
    )
