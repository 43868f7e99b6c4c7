"""A checkpoint's small records, decoded once for all the checks of one command.

Megatron-LM's `args` (a pickled Namespace of hundreds of fields) is what several readers
need: the recorded layout, the config a check or an export derives, the optimizer the run
used, whether the checkpoint records a config at all; its `iteration` is read by the step
check. Each read the blob and unpickled it again (`args` five times in a validate). The
reader of the checkpoint is what those readers are all handed, so it carries this: one
per reader, gone with it at the end of the command (no module state that a later command,
or a checkpoint changed in between, could see).

A record that cannot be read fails the same way each time it is asked for: the error is
kept, not the attempt repeated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage.byte_store import CheckpointFileError

T = TypeVar("T")


class DecodedRecords:
    """Each named record's value (or the error reading it gave), decoded on first use."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[Any, CheckpointFormatError | CheckpointFileError | None]] = {}
        self._said: set[str] = set()

    def once(self, name: str, decode: Callable[[], T]) -> T:
        """`decode()`'s value, called the first time `name` is asked for; its
        CheckpointFormatError / CheckpointFileError is raised again on each later ask."""
        if name not in self._found:
            try:
                self._found[name] = (decode(), None)
            except (CheckpointFormatError, CheckpointFileError) as err:
                self._found[name] = (None, err)
        value, failed = self._found[name]
        if failed is not None:
            raise failed.with_traceback(None)
        return value

    def said_unreadable(self, name: str) -> None:
        """Mark `name` as a record whose failure a check put in its report."""
        self._said.add(name)

    def unreadable_said(self, name: str) -> bool:
        """Whether a check reported `name` as unreadable (`said_unreadable`): validate's
        decode of every entry leaves it to that line, one line a defect."""
        return name in self._said

    def peek(self, name: str) -> tuple[Any] | None:
        """(value,) of `name` where it was decoded already; None where it was not asked for,
        or failed (nothing is decoded or kept here)."""
        found = self._found.get(name)
        return None if found is None or found[1] is not None else (found[0],)
