"""An exception quoted in an error line (`error_line`) is one line, bounded and printable.

Was: seven helpers with seven rules; four kept a library's whole first line (the reward file's
import error, a tracker's start error, a tensorstore or Rust writer error, a failed save's
cause), so a message of megabytes on one line, or an ANSI escape in it, reached the terminal
as it was."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.check.printable import MAX_ERROR_CHARS, error_line, printable
from trainer.rewards.custom import RewardError, load_reward_function

HUGE = "x" * 1_000_000
CONTROLS = "red \x1b[31m\u202e bell\x07"


def test_a_huge_first_line_is_cut_to_the_limit_keeping_both_ends():
    line = error_line(ValueError(f"start {HUGE} end\nsecond line"))
    assert line.startswith("ValueError: start ") and line.endswith(" end ...")
    assert len(line) < len("ValueError: ") + MAX_ERROR_CHARS + 40
    assert error_line(ValueError(HUGE), limit=50) == f"ValueError: {printable(HUGE, 50)}"


def test_control_characters_are_escaped_as_printable_escapes_them():
    line = error_line(RuntimeError(f"{CONTROLS}\nmore"), with_type=False)
    assert line == f"{printable(CONTROLS)} ..."
    assert "\x1b" not in line and "\\x1b" in line and "\\u202e" in line


@pytest.mark.parametrize("message", ["first\nsecond", "first\r\nsecond", "first\u2028second"])
def test_only_the_first_line_is_kept_and_more_is_marked(message):
    assert error_line(OSError(message)) == "OSError: first ..."
    assert error_line(OSError(message), with_type=False) == "first ..."


def test_joined_keeps_every_line_on_one():
    said = error_line(TypeError("heading:\n   the reason\n\n\tand more"), joined=True)
    assert said == "TypeError: heading: the reason and more"
    cut = error_line(TypeError(f"a\n{HUGE}\nz"), joined=True, limit=40)
    assert cut.startswith("TypeError: a x") and cut.endswith("x z") and "\n" not in cut


def test_an_exception_that_says_nothing_is_its_type():
    assert error_line(StopIteration()) == "StopIteration"
    assert error_line(ValueError("  \n "), with_type=False) == "ValueError"


def test_a_reward_file_whose_import_fails_with_a_huge_message_is_one_bounded_line(tmp_path):
    """The reward loader quoted the first line of the import error whole."""
    file = tmp_path / "reward.py"
    file.write_text(f"raise ValueError('\\x1b[2J' + 'y' * {len(HUGE)} + ' the end')\n")
    with pytest.raises(RewardError) as raised:
        load_reward_function(file)
    said = str(raised.value)
    assert said.startswith(f"reward.path {str(file)!r}: importing it failed: ValueError: \\x1b[2J")
    assert said.endswith(" the end") and "\n" not in said and "\x1b" not in said
    assert len(said) < len(str(file)) + MAX_ERROR_CHARS + 100
