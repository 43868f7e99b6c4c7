"""What one command of a verl launch script (a piece of a list or pipeline) is, from its
words alone, for `trainer.verl_script_reader`: whether it only sets variables in a branch,
whether it is a loop's or condition's header, its words past `{`, `!` and `time`, and its
arguments less redirections. A module of its own: these read words only, never the
script's variables or what it has found so far.
"""

from __future__ import annotations

import re

from trainer import shell_command_targets, shell_lines

# the compound commands whose header runs where the command stands (`opens_only_its_header`)
_HEADERS = frozenset({"for", "select", "while", "until", "if"})
# the blocks whose body runs as a whole or not at all, and the words that start a branch of
# one before its first command (`sets_in_branch`)
_BRANCH_CLOSERS = frozenset({"done", "fi"})
BRANCH_STARTS = frozenset({"then", "do", "else"})
# a redirection (`2>&1`, `>log`, `2>`, `&>`): the word after one standing alone is its file
_REDIRECTION = re.compile(r"[0-9]*(?:[<>]&?|&>)>?(?:&?[0-9-]*)?")
# the words before a command that leave it in the script's shell (`past_openers`)
_OPENERS = frozenset({"{", "!", "time"})


def sets_in_branch(piece: shell_lines.Piece) -> bool:
    """Whether the command only sets variables (`NAME=value`, nothing known only when it
    runs) inside a loop's body or an `if` branch, where it runs whenever the verl command
    after it there does (`Variables.assign_in_branch`)."""
    words = piece.words[piece.words[0] in BRANCH_STARTS :]
    return (
        piece.inside
        and not piece.conditional
        and piece.block in _BRANCH_CLOSERS
        and bool(words)
        and all(shell_command_targets.ASSIGNMENT.match(word) for word in words)
        and not any(word.split("=", 1)[1].startswith("(") for word in words)
        and not shell_command_targets.unknowable_targets(words)
    )


def opens_only_its_header(piece: shell_lines.Piece) -> bool:
    """Whether the command is a loop's or condition's header and nothing else that may not
    run: a `for`/`select` loop sets its name, and a `while`/`until`/`if` condition (`while
    read -r line`) runs, where the command stands, whether the body runs or not."""
    words = piece.words
    return words[0] in _HEADERS and not any(word.startswith("(") for word in words[1:])


def past_openers(words: list[str]) -> list[str]:
    """`words` less the words at their start that leave the command after them in the
    script's shell: `{` opening groups, `!` and `time` (`time -p`). In `{ MODEL=/m/g; }`,
    which always runs, and `! MODEL=/m/g`, `MODEL=/m/g` is a command that only sets a
    variable."""
    start = 0
    while start < len(words) and words[start] in _OPENERS:
        start += 1 + (words[start] == "time" and words[start + 1 : start + 2] == ["-p"])
    return words[start:]


def command_arguments(words: list[str]) -> list[str]:
    """A command's arguments less its redirections (`2>&1`, `> log.txt`)."""
    arguments: list[str] = []
    target_next = False  # after a redirection operator standing alone: its file
    for word in words:
        redirection = _REDIRECTION.match(word)
        if not target_next and redirection is None:
            arguments.append(word)
        target_next = redirection is not None and redirection.end() == len(word)
    return arguments
