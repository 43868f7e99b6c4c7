"""A verl launch script's text as the commands bash runs, for `trainer.verl_script_reader`:
its logical lines (`trainer.shell_lines`) split into words as shlex splits them, with each
command substitution (`$(...)`, backquotes) and arithmetic (`$((...))`, `$[...]`) held
whole as text, never run; a list or pipeline going on over lines joined into one command;
and what is said where bash stops reading (a line whose quotes never close) or where no verl
command is found. A module of its own: turning text into words is one job, reading what the
words do another.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to
from trainer import shell_arithmetic, shell_lines, shell_quoting, shell_unexpanded
from trainer.verl_script_state import GRPO_MODULES, SFT_MODULES, VERL_MODULES, Script
from trainer.verl_source import VerlSourceError

# A launch command, continuations joined, is a few KiB; shlex builds each word a character at
# a time (quadratic: a word of a megabyte takes many seconds), so a longer line is refused
# before it splits.
MAX_LINE_CHARS = 64 << 10
# `$(...)` and backquotes hold a command whose words shlex splits apart
# (`experiment_name=run_$(date +%s)` became `run_$(date`): kept whole as text, never run
COMMAND_SUBSTITUTION = shell_unexpanded.COMMAND_SUBSTITUTION
_NESTING = 4  # passes over nested substitutions; a deeper one is held whole (`_hold_deeper`)
_HELD = "\ue000"  # a private-use character marks a held substitution while shlex splits
# what ends a line where the list or pipeline goes on at the next (`script_commands`)
_GOES_ON = shell_quoting.OPERATORS - {"&"}


def script_commands(
    text: str, source: Path, bodies: list[str], unparsed: list[tuple[int, str]]
) -> Iterator[tuple[int, list[str]]]:
    """The script's commands in order (`A=1; B=2`: two), each with the line it starts on; a
    list or pipeline that goes on at the next line after `&&`, `||` or `|` (past blank lines
    and comments, as bash reads it) is one command: read as two, what its later commands set
    was read as run, and a `&` ending it on a later line as not running the earlier ones in
    the background. Here-doc bodies go to `bodies`. At a line whose quotes never close they
    end, that line (its number and text) put in `unparsed`: bash reads and runs a script
    command by command, so the commands before it have run when it stops there
    (`stop_at_unparsed`); one that goes on into it has not."""
    going_on: list[str] = []  # a list or pipeline not ended yet
    start = 0  # the line it starts on
    for number, line in shell_lines.logical_lines(text, bodies):
        if len(line) > MAX_LINE_CHARS:
            raise VerlSourceError(
                f"{source}: a line of {len(line)} characters (continuations joined),"
                f" {cut_to(line, 40)!r}, more than the {MAX_LINE_CHARS} a launch command needs"
            )
        try:
            words = _shell_words(line)
        except ValueError:
            if going_on:
                raise VerlSourceError(_unparsed_line_message(source, number, line)) from None
            unparsed.append((number, line))
            return
        for command in shell_quoting.commands(words):
            start = start if going_on else number
            going_on += command
            if going_on[-1] not in _GOES_ON:
                yield start, going_on
                going_on = []
    if going_on:
        yield start, going_on


def stop_at_unparsed(script: Script, source: Path, number: int, line: str) -> None:
    """The script read up to line `number`, whose quotes never close (`script_commands`):
    bash stops there with a syntax error, after running the commands before it. A verl
    command among them that stands outside any block still open there has run, with the
    words read (the lines after it cannot change them), and a note says where bash stops;
    otherwise the line is refused (`_unparsed_line_message`): a block that goes on into it
    never runs, no verl command before it was started, or the text from it on (a quote
    never closed runs to the end) holds one, which may be the run meant."""
    stops_before_verl = any(module in line for module in VERL_MODULES)
    if script.launch is None or script.blocks.open or script.array is not None or stops_before_verl:
        raise VerlSourceError(_unparsed_line_message(source, number, line))
    script.launch.notes.append(
        f"line {number}: quotes that do not close: bash runs the commands before it, the"
        " verl command among them, then stops there with a syntax error; the lines from"
        " there on are not read"
    )


def _unparsed_line_message(source: Path, number: int, line: str) -> str:
    """A line this cannot split into words (a quote that never closes): said, whatever it
    holds. Skipping it converted another verl command of the script, or none, and skipping
    an assignment kept the value the variable had before, without a word."""
    launch = any(module in line for module in GRPO_MODULES + SFT_MODULES)
    what = "a verl command whose quotes" if launch else "quotes that"
    return (
        f"{source}: line {number}: {what} do not close (bash stops there with a syntax"
        " error): fix the quoting to convert it"
    )


# an assignment whose value names a verl trainer module (`ENTRYPOINT=${ENTRYPOINT:-"-m
# verl.trainer.sft_trainer"}`), not another module of that name's prefix (`sft_trainer_ray`)
_MODULE_IN_A_VARIABLE = re.compile(
    r"^\s*(?:(?:export|local|declare|readonly)\s+)?([A-Za-z_][A-Za-z0-9_]*)=.*?"
    r"(verl\.trainer\.(?:main_ppo|fsdp_sft_trainer|sft_trainer))(?![\w.])",
    re.MULTILINE,
)


def no_launch_message(source: Path, bodies: list[str], text: str) -> str:
    """No verl trainer command among the script's commands: one inside a here-doc (a job
    script fed to `sbatch <<EOF`) is text another program reads, and said so; a module
    named only in a variable's value (`text`: the script), which the reading does not
    expand where a command uses it (set in a block that may not run, or through another
    variable, as verl's test_sft_engine_all.sh does), is named with that variable."""
    if any(module in body for body in bodies for module in GRPO_MODULES + SFT_MODULES):
        return (
            f"{source}: the verl command is inside a here-doc (<<WORD ... WORD: text another"
            " program reads, such as a job script fed to sbatch): put that command in a"
            " script of its own to convert it"
        )
    held = _MODULE_IN_A_VARIABLE.search(text)
    if held is not None:
        line = text.count("\n", 0, held.start()) + 1
        return (
            f"{source}: the verl trainer {held.group(2)} is named only in the value of"
            f" {held.group(1)} (line {line}), which is known only as the script runs where a"
            " command uses it (set in a block that may not run, or through another variable):"
            f" write that command with `-m {held.group(2)}` to convert it"
        )
    return (
        f"{source}: no `python3 -m verl.trainer.main_ppo ...` or verl SFT trainer "
        "command found (or give a verl YAML config)"
    )


def _shell_words(line: str) -> list[str]:
    """shlex's words of `line`, each command substitution in it one piece of text, each
    word with an expansion bash reads unquoted a `shell_quoting.Word`."""
    line = shell_quoting.mark(line)
    if _HELD in line:
        return [shell_quoting.unmarked_word(word) for word in shlex.split(line)]
    held: list[str] = []

    def hold_text(text: str) -> str:
        held.append(text)
        return f"{_HELD}{len(held) - 1}{_HELD}"

    def hold(match: re.Match) -> str:
        return hold_text(match.group(0))

    line = _hold_arithmetic(line, hold_text)  # `$(( 1024 * 2 ))`, `$[ N + 1 ]`: one word too
    for _ in range(_NESTING):  # innermost first; each pass reads the whole line
        line = COMMAND_SUBSTITUTION.sub(hold, line)
    line = _escaped_parentheses(_hold_deeper(line, hold_text))
    marker = re.compile(f"{_HELD}([0-9]+){_HELD}")

    def restore(text: str) -> str:
        while marker.search(text):  # a held piece holds only pieces held before it
            text = marker.sub(lambda m: held[int(m.group(1))], text)
        return text

    return [shell_quoting.unmarked_word(restore(word)) for word in shlex.split(line)]


def _hold_arithmetic(line: str, hold: Callable[[str], str]) -> str:
    """`line` with each arithmetic expansion (`shell_arithmetic.spans`: `$((...))`, `$[...]`,
    nested to any depth) held whole: split as shlex splits it, `n=$[ N + 1 ]` was the words
    `n=$[`, `N`, `+`, `1` and `]`."""
    out, at = [], 0
    for span in shell_arithmetic.spans(line):
        out += [line[at : span.start], hold(line[span.start : span.end])]
        at = span.end
    return "".join(out) + line[at:]


def _escaped_parentheses(line: str) -> str:
    """`line` (marked, its substitutions held) with each `\\(` and `\\)` left as written
    outside double quotes (in an array's `( ... )`, where bash reads `a\\)` as the element
    `a)`) marked as a parenthesis bash takes as it is (`shell_quoting.QUOTED_PATTERN_CHARS`):
    shlex made it a bare `)`, which ended the array there. In double quotes (`"${X:-\\)}"`)
    bash keeps the backslash, and it stays as written."""
    out: list[str] = []
    quoted = False  # inside double quotes
    index = 0
    while index < len(line):
        char = line[index]
        end = index + 1
        if char == "\\":
            end = index + 2
            escaped = line[index + 1 : end]
            if escaped in ("(", ")") and not quoted:
                out.append(shell_quoting.QUOTED_PATTERN_CHARS[escaped])
                index = end
                continue
        elif char == '"':
            quoted = not quoted
        elif char == "'" and not quoted:  # single-quoted text: no escapes, no `"`
            closing = line.find("'", index + 1)
            end = len(line) if closing < 0 else closing + 1
        out.append(line[index:end])
        index = end
    return "".join(out)


def _hold_deeper(line: str, hold: Callable[[str], str]) -> str:
    """`line` with each `$(` the passes of `_shell_words` left (nested deeper than
    `_NESTING`, or never closed) held whole, to its matching `)` or the end of the line:
    split as shlex splits it, the words inside became settings of their own
    (`run_$(echo a.b=999 ...)` set a.b)."""
    out: list[str] = []
    index = 0
    while (start := line.find("$(", index)) >= 0:
        depth, end = 0, len(line)
        for position in range(start + 1, len(line)):
            depth += (line[position] == "(") - (line[position] == ")")
            if depth == 0:
                end = position + 1
                break
        out += [line[index:start], hold(line[start:end])]
        index = end
    return "".join(out) + line[index:]
