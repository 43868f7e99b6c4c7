"""`mfsdp config from-verl` reads a script of thousands of nested blocks (`if` bodies,
function bodies, subshells, loops, case arms) in time linear in its commands.

Was: whether a command stood in a block that may not run, in a case arm that never runs, or
in a function's body was found by scanning every open block for every command, so a
generated script of 8,000 nested `if true; then` took half a minute, and the time grew as
the square of the depth. Now each open block keeps what those outside it say, and asking
reads the innermost alone: each command costs the same at any depth."""

from __future__ import annotations

import functools
import time

from trainer import shell_lines
from trainer.verl_script_lines import _shell_words

DEPTH = 2_000  # of each kind of block, nested in one another: 10,000 deep in all
OPENERS = {  # each kind of block: the line that opens it, the line that closes it
    "function": ("f() {", "}"),
    "if": ("if true; then", "fi"),
    "subshell": ("(", ")"),
    "loop": ("for x in a; do", "done"),
    "case": ("case $SIZE in", "  7b) :;;\nesac"),
}


@functools.cache
def _words(line: str) -> tuple[str, ...]:
    return tuple(_shell_words(line))


def _read(blocks: shell_lines.Blocks, lines: str) -> list[shell_lines.Piece]:
    """The pieces of `lines` as the script's reader takes them: a command a line."""
    return [piece for line in lines.split("\n") for piece in blocks.read([*_words(line)])]


def test_thousands_of_nested_blocks_are_read_in_linear_time():
    blocks = shell_lines.Blocks()
    started = time.perf_counter()
    for opener, _ in OPENERS.values():
        for _ in range(DEPTH):
            _read(blocks, opener)
    (inner,) = _read(blocks, "MODEL=/models/tiny")
    for _, closer in reversed(OPENERS.values()):
        for _ in range(DEPTH):
            _read(blocks, closer)
    elapsed = time.perf_counter() - started
    assert (inner.inside, inner.function, inner.block, inner.skipped) == (True, "f", "esac", False)
    (after,) = _read(blocks, "MODEL=/models/big")
    assert blocks.open == [] and not (after.inside or after.function or after.skipped)
    # under 1 s on 2 cores; reading every open block for every command took 10 s
    assert elapsed < 5, f"{5 * DEPTH} nested blocks took {elapsed:.1f} s"
