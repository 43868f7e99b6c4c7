"""No f-string in cli/, mfsdp_ckpt/ or trainer/ cuts a shown value without marking the cut.

`{value!r:.40}` and `{value[:40]!r}` keep a value's first 40 characters and say nothing of
the rest: a tracker of 44 characters, all zeros but a final `2`, read as 40 zeros. A value an
error line quotes in part goes through `cut_to` (mfsdp_ckpt/check/printable.py), which keeps
its start and end and says how many characters were left out. The scan reads the f-strings
through the `ast` module, so a spec split over lines or quoted either way is still seen.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.support.paths import REPO

SCANNED = ("cli", "mfsdp_ckpt", "trainer")
# a precision with no presentation type (or `s`): on a string, a silent cut
_TEXT_PRECISION = re.compile(r"\.\d+s?$")


def _spec_text(node: ast.FormattedValue) -> str:
    if not isinstance(node.format_spec, ast.JoinedStr):
        return ""
    return "".join(part.value for part in node.format_spec.values if isinstance(part, ast.Constant))


def _is_head_slice(node: ast.expr) -> bool:
    """`X[:N]`: the start of `X` and nothing of its end."""
    if not isinstance(node, ast.Subscript) or not isinstance(node.slice, ast.Slice):
        return False
    cut = node.slice
    return cut.lower is None and cut.step is None and cut.upper is not None


def unmarked_cuts(source: str) -> list[tuple[int, str]]:
    """(line, field) of each f-string field of `source` that cuts a value without marking it:
    a `.N` precision on a converted or untyped field, or a `!r`/`!s`/`!a` of `X[:N]`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FormattedValue):
            continue
        converted = node.conversion != -1
        if _TEXT_PRECISION.search(_spec_text(node)) or (converted and _is_head_slice(node.value)):
            found.append((node.lineno, ast.unparse(node.value)))
    return found


@pytest.mark.parametrize(
    "source",
    [
        'f"found {step!r:.40}"',
        'f"found {step:.40}"',
        'f"found {step!s:.40s}"',
        'f"found {step[:40]!r}"',
        "f'''a {x} b\n{name!r:.80} c'''",
    ],
)
def test_the_scan_finds_an_unmarked_cut(source):
    assert unmarked_cuts(source), source


@pytest.mark.parametrize(
    "source",
    [
        'f"found {cut_to(repr(step), 40)}"',
        'f"{ratio:.3f} {ratio:.2%} {ratio:.3g} {count:,} {step!r}"',
        'f"{key[: at + 1]}"',
    ],
)
def test_the_scan_passes_a_marked_cut_and_a_number(source):
    assert unmarked_cuts(source) == []


def test_no_shown_value_is_cut_without_a_mark():
    found = [
        f"{path.relative_to(REPO)}:{line}: {{{field}}}"
        for root in SCANNED
        for path in sorted((REPO / root).rglob("*.py"))
        for line, field in unmarked_cuts(path.read_text(encoding="utf-8"))
    ]
    assert not found, "cut without a mark, use cut_to(repr(X), N):\n" + "\n".join(found)
