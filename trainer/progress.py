"""Progress bars on stderr: the training loop's step bar and the bars the `mfsdp ckpt` commands
draw from `mfsdp_ckpt`'s (done, total) callbacks.

`mfsdp_ckpt` draws nothing itself (a library reports progress through callbacks), so the one
place that knows how a bar looks is here, the lowest layer that draws one; the CLI imports it.
tqdm is imported only when a bar is drawn: the offline commands import this module and must
start fast. Whether bars are drawn at all is decided in one place (`bars_drawn`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, TypeVar

from trainer.closing import close_all

# TERM values of terminals that cannot move the cursor: no TERM at all, and `dumb` (Emacs'
# shell and M-x compile, many CI log viewers)
CURSORLESS_TERMS = ("", "dumb")
T = TypeVar("T")
# The size a bar assumes where neither the terminal nor COLUMNS and LINES give one
FALLBACK_SIZE = os.terminal_size((80, 24))
# The least time between two plain progress lines where no bar is drawn (`PlainLines`)
PLAIN_LINE_SECONDS = 30.0
# When the first of them comes, after the first report: setup before that report takes
# seconds more, and 40 s of nothing in a SLURM log or a CI pipe looks hung
FIRST_PLAIN_LINE_SECONDS = 10.0


def bars_drawn() -> bool:
    """Whether progress bars are drawn on stderr: a terminal that moves its cursor. Into a
    log file or a pipe a bar is only carriage returns, and on a dumb terminal (TERM=dumb or
    unset) tqdm's cursor-up escapes and Unicode blocks showed as garbage: there the plain
    lines printed into a log are printed instead (the trainer's line per logged step)."""
    return sys.stderr.isatty() and os.environ.get("TERM", "") not in CURSORLESS_TERMS


def bar_size() -> dict[str, Any]:
    """tqdm's size arguments: follow the terminal's width as it changes, unless the terminal
    reports a size of 0 (a pty whose size was never set: some container runtimes and serial
    consoles). There tqdm drew a bar of no characters, and with 0 lines it hid every bar as
    past the screen's last row: nothing showed at all. A size of 0 is taken from COLUMNS and
    LINES, as `shutil.get_terminal_size` takes it (which asks stdout, not stderr, where the
    bars go), else `FALLBACK_SIZE`: `COLUMNS=20` was drawn 80 columns wide."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError):
        size = os.terminal_size((0, 0))
    if size.columns > 0 and size.lines > 0:
        return {"dynamic_ncols": True}
    return {
        "ncols": size.columns or _size_from_env("COLUMNS", FALLBACK_SIZE.columns),
        "nrows": size.lines or _size_from_env("LINES", FALLBACK_SIZE.lines),
    }


def _size_from_env(name: str, fallback: int) -> int:
    """The positive whole number in environment variable `name`, else `fallback`."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return fallback
    return value if value > 0 else fallback


def draws_bars(configured: bool) -> bool:
    """Whether the trainer draws its bars: `trainer.progress_bar` (this rank's share of it) and
    `bars_drawn`, the same rule as `CallbackBar`; the runner otherwise prints a plain line
    per logged step."""
    return configured and bars_drawn()


def step_bar(desc: str, total: int, initial: int, enabled: bool) -> Any:
    """Steps `initial` (resumed) to `total`, labelled with the runner's name (`desc`); a
    disabled bar (other ranks, `trainer.progress_bar=false`) still takes every call. Its
    figures fit the terminal's width before its bar graphic does (`narrow_bar`)."""
    from trainer.narrow_bar import NarrowBar

    return NarrowBar(
        total=total,
        initial=initial,
        desc=desc,
        unit="step",
        disable=not enabled,
        file=sys.stderr,
        **bar_size(),
    )


def item_bar(items: Iterable[T], desc: str, enabled: bool) -> Iterable[T]:
    """`items`, with a bar counting them while they are worked through (tokenizing rows):
    removed as it ends, drawn at the terminal's size (`bar_size`, `narrow_bar`)."""
    from trainer.narrow_bar import NarrowBar

    return NarrowBar(
        items, desc=desc, disable=not enabled, leave=False, file=sys.stderr, **bar_size()
    )


class PlainLines:
    """Progress as a plain line (`export: 12.3 of 40.1 GB (31%), 85 MB/s, 5m12s left`), the
    first `first` seconds after the first report (or `every`, if sooner), then at most one
    per `every` seconds: where no bar is drawn (a log file, a pipe, a SLURM log) a 10-minute
    export or validate --deep showed nothing until its summary, no sign of a hang or of
    slow work, and a command that ends sooner prints no line at all."""

    def __init__(
        self,
        label: str,
        unit: str,
        unit_scale: bool,
        every: float,
        first: float = FIRST_PLAIN_LINE_SECONDS,
    ):
        self.label, self.unit, self.unit_scale, self.every = label, unit, unit_scale, every
        self.first = min(first, every)
        self._start: tuple[float, int] | None = None  # (time, done) of the first report
        self._due = 0.0  # when the next line may be printed

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._start is None:
            self._start, self._due = (now, done), now + self.first
            return
        if now < self._due:
            return
        self._due = now + self.every
        began, done_then = self._start
        rate = (done - done_then) / (now - began) if now > began else 0.0
        share = f" ({100 * done // total}%)" if total else ""
        left = f", {_duration((total - done) / rate)} left" if rate > 0 and total >= done else ""
        line = (
            f"{self.label}: {self._amount(done, total)} of {self._amount(total, total)}"
            f"{share}, {self._amount(rate, rate)}/s{left}"
        )
        print(line, file=sys.stderr, flush=True)

    def _amount(self, value: float, scale_of: float) -> str:
        """`value` in the unit, scaled as `scale_of` is when `unit_scale` (GB for bytes);
        else a count with thousands separators (`15,450 tensors`: `.4g` wrote 1.545e+04),
        a rate under 10 with a decimal (`0.4 tensors/s`)."""
        if not self.unit_scale:
            whole = value >= 10 or value == int(value)
            shown = f"{value:,.0f}" if whole else f"{value:.1f}"
            return f"{shown} {self.unit}{'' if value == 1 else 's'}"
        power = next((p for p in (4, 3, 2, 1) if abs(scale_of) >= 1000**p), 0)
        prefix = ("", "k", "M", "G", "T")[power]
        return f"{value / 1000**power:.1f} {prefix}{self.unit}"


def _duration(seconds: float) -> str:
    """`1h02m`, `5m12s` or `43s`."""
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"


class CallbackBar:
    """A bar fed `(done, total)` by a library callback, drawn only where `bars_drawn` (a log
    file or a pipe would fill with carriage returns, a dumb terminal with escapes), its
    figures kept before its bar graphic as the terminal narrows (`narrow_bar`); elsewhere a
    plain line every `plain_every` seconds (`PlainLines`).

    As a context manager it yields `update`, or None when disabled, so a caller can pass the
    callback straight on and the library skips the calls altogether.
    """

    def __init__(
        self,
        enabled: bool,
        unit: str,
        desc: str | None = None,
        unit_scale: bool = False,
        plain_every: float = PLAIN_LINE_SECONDS,
    ):
        self.enabled = enabled
        self.unit, self.desc, self.unit_scale = unit, desc, unit_scale
        self._bar: Any = None
        self._lines = (
            None
            if not enabled or bars_drawn()
            else PlainLines(desc or unit, unit, unit_scale, plain_every)
        )

    def update(self, done: int, total: int, postfix: str | None = None) -> None:
        if not self.enabled:
            return
        if self._lines is not None:
            self._lines.update(done, total)
            return
        if self._bar is None:
            from trainer.narrow_bar import NarrowBar

            self._bar = NarrowBar(
                total=total,
                unit=self.unit,
                unit_scale=self.unit_scale,
                desc=self.desc,
                file=sys.stderr,
                leave=False,
                **bar_size(),
            )
        self._bar.update(done - self._bar.n)
        if postfix is not None:
            self._bar.set_postfix_str(postfix, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self):  # -> the callback, or None when nothing is drawn
        return self.update if self.enabled else None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        close_all([self.close], error)  # a bar failing to close never hides `error`
