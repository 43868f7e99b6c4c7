"""Progress bars fitted to the terminal's width: the training step bar, and the bars of the
`mfsdp ckpt` commands and of tokenizing.

tqdm cuts a line wider than the terminal at its last column: at 80 columns SFT's bar lost
its postfix mid-field (tokens/s, MFU never showed) while the bar graphic, one character
wide, and the rate kept their places; at 20 columns export's bar showed `export:  22%|▏|
80.`, its byte counts cut. Here the figures come first: the line drops the bar
graphic and the rate, then the percentage and elapsed time, and writes the figures tighter,
until it fits. Imported only where a bar is drawn (it imports tqdm).
"""

from __future__ import annotations

import re
from typing import Any

from tqdm import tqdm
from tqdm.utils import disp_len

# after tqdm's own line, which is kept while its bar graphic has 10 columns (its width when
# tqdm is given no ncols), these, narrower each
NARROWER_FORMATS = (
    "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]",
    "{desc} {n_fmt}/{total_fmt} <{remaining}{postfix}",
    "{desc} {n_fmt}/{total_fmt}{postfix}",
)
_EXPONENT = re.compile(r"e([+-])0+(\d)")
_TRAILING_ZEROS = re.compile(r"(\.\d*?)0+(?!\d)")
_BARE_POINT = re.compile(r"(?<=\d)\.(?!\d)")


def tight_postfix(postfix: str) -> str:
    """`loss=3.8310, lr=4.81e-04` as `loss=3.831 lr=4.81e-4`: one space between figures, no
    decimal's trailing zeros and no exponent's leading zeros."""
    tight = _BARE_POINT.sub("", _TRAILING_ZEROS.sub(r"\1", postfix.replace(", ", " ")))
    return _EXPONENT.sub(r"e\1\2", tight)


class NarrowBar(tqdm):
    """tqdm whose line takes the first of its formats that fits `ncols`: the bar graphic only
    while it keeps 10 columns, the figures always (the last format, cut by tqdm only when
    even it is too wide). trainer/progress.py gives it no bar_format of its own."""

    @staticmethod
    def format_meter(
        n: float, total: float, elapsed: float, ncols: int | None = None, **kw: Any
    ) -> str:
        kw.pop("bar_format", None)
        if ncols and total and disp_len(tqdm.format_meter(n, total, elapsed, **kw)) > ncols:
            kw["postfix"] = tight_postfix(kw.get("postfix") or "")
            for bar_format in NARROWER_FORMATS:
                line = tqdm.format_meter(n, total, elapsed, bar_format=bar_format, **kw)
                if disp_len(line) <= ncols:
                    return line
            kw["bar_format"] = NARROWER_FORMATS[-1]
        return tqdm.format_meter(n, total, elapsed, ncols=ncols, **kw)
