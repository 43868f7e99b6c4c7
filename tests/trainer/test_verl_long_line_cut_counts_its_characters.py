"""A launch script's line past MAX_LINE_CHARS is refused with the count of its characters
left out of the quote, not of its repr's.

Was: the quote was cut after `repr`, so a line of 200,000 escaped quotes (`\\"`, 400,103
characters) was said to have "(+600065 chars)" left out: repr writes each backslash as two.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainer.verl_script_lines import MAX_LINE_CHARS, script_commands
from trainer.verl_source import VerlSourceError


@pytest.mark.parametrize(
    "word", ['\\"', "\\", "\t", "x"], ids=["escaped-quote", "backslash", "tab", "plain"]
)
def test_the_cut_note_counts_the_lines_characters(word: str):
    line = f"python3 -m verl.trainer.main_ppo data.path={word * (2 * MAX_LINE_CHARS)}"
    with pytest.raises(VerlSourceError) as refused:
        list(script_commands(line, Path("run.sh"), [], []))
    message = str(refused.value)
    assert f"a line of {len(line)} characters" in message
    note = re.search(r"\(\+(\d+) chars\)", message)
    assert note, message
    left_out = int(note[1])
    assert len(line) - 40 <= left_out < len(line), message
