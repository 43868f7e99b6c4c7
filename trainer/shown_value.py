"""How a config error quotes the value it refuses: short enough for one line, whatever the
value. A YAML integer may run to thousands of digits (and Python refuses to write one of
more than 4,300 in decimal at all), a string or list to a megabyte; an error quoting one
whole is no longer one line a user can read, and one that fails to format it is a traceback."""

from __future__ import annotations

import sys
from typing import Any

from mfsdp_ckpt.check.printable import cut_to

MAX_SHOWN_CHARS = 80


def shown_value(value: Any) -> str:
    """`repr(value)` cut to MAX_SHOWN_CHARS characters (`cut_to`: its start and end, and how
    many were left out between them); an integer of more digits shows its
    first 40 and says how many it has (or that it has more than Python writes)."""
    try:
        text = repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits(), the one repr that fails
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    if isinstance(value, int):
        return f"{text[:40]}... ({len(text.lstrip('-'))} digits)"
    return cut_to(text, MAX_SHOWN_CHARS)
