"""The shell's expansions a value may still hold once a launch script has been read: one
definition for every check that decides a value still holds shell syntax (a config's path
key refused at load, a converted value listed as still to edit, a command's output kept as
text while a script's words are split). Each check kept its own list, and `$[ ... ]` missing
from one of them put `/models/qwen$[ N ** 2 ]` into a converted config as text, unlisted,
where the same sum written `$(( ))` was listed.
"""

from __future__ import annotations

import re

from trainer import shell_arithmetic

# `$(command)` and backquotes: a command's output, never run here
COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)|`[^`]*`")

# each form, in the order tried: arithmetic before a command (`$((N*2))` is a sum, while
# `$((cd x) && ls)` is no sum and is read as a command), `$[` deeper or unclosed too
_FORMS = {
    "arithmetic": shell_arithmetic.ARITHMETIC.pattern + r"|\$\[[^\]]*\]?",
    "command": r"\$\([^)]*\)?|`[^`]*`",
    "braces": r"\$\{[^}]*\}",  # `${X}`, `${X:-a}`, `${10}`, OmegaConf's `${oc.env:HOME}`
    # `$NAME`, the positional and special parameters `$0`..`$9` `$@` `$*` `$#` `$?` `$$`
    # `$!` `$-` (verl's SFT examples set `save_path=$2`)
    "parameter": r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])",
}
UNEXPANDED = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _FORMS.items()))


def form(found: re.Match) -> str:
    """Which of the forms an `UNEXPANDED` match is: "arithmetic", "command", "braces" or
    "parameter"."""
    return next(name for name in _FORMS if found.group(name) is not None)


def forms(value: str) -> set[str]:
    """The forms (`form`) of every expansion `value` holds: empty where it holds none."""
    return {form(found) for found in UNEXPANDED.finditer(value)}
