"""The words for a run that lost a peer: gloo's own text cut to what it says, and the line a
machine of a run across several says when another machine of it went away.

gloo's error names the C++ source it was raised in, as built (`[/__w/pytorch/pytorch/
third_party/gloo/gloo/transport/tcp/pair.cc:553]`), then advice for its own developers and an
emoji ("Check the logs of the remote worker before reporting an error. GLHF!"): a line
naming a build path was the survivor's only word when another machine's ranks stopped. Its
first sentence, without the path, keeps what matters: what happened and the peer's address.
"""

from __future__ import annotations

import re

LOST_CONTACT = "lost contact with the other ranks: "  # a rank's line (cli.errors), then why

# `[/path/to/file.cc:553] ` before gloo's (and torch's C++) messages
_SOURCE_PREFIX = re.compile(r"^\s*\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\]\s*")
# A sentence ends at `. ` followed by a capital (`[127.0.0.1]:33002. This ...`), not in an
# address or a number
_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z])")


def peer_said(said: str) -> str:
    """The first line of `said` (a lost peer's error text) without a C++ source location
    before it and cut after its first sentence."""
    lines = said.strip().splitlines()
    first = _SOURCE_PREFIX.sub("", lines[0] if lines else "")
    return _SENTENCE_END.split(first, maxsplit=1)[0].rstrip(".").strip()


def machine_went_away(why: str) -> str:
    """`another machine of this run went away (why)`: what stopped this machine's ranks,
    said before the step reached and the checkpoint to resume from (`cli.launch`)."""
    return f"another machine of this run went away ({why})"
