"""Training rows held as a few flat arrays, one per field, each row made again when read.

A list of tokenized rows (`Example`, `RLPrompt`) held each token id and loss-mask flag as
a Python int behind an 8-byte pointer, each prompt turn as a string in a tuple, and an
object per row with its dict: about 2.6 KB a row for a 260-byte chat row, so a 10^6-row
GSM8K-sized file took gigabytes on each rank before the first step. Here a token costs 4
bytes (a one-byte mask flag more), a text its UTF-8 bytes, a value shared by many rows
(a data source) 4 bytes, any other value its pickle; the sampler asks for a row by its
index and is given a row equal to the one appended.
"""

from __future__ import annotations

import itertools
import pickle
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar, overload

Row = TypeVar("Row")


class Column(Protocol):
    """One field of every row, appended in row order and read back by row index."""

    def append(self, value: Any) -> None: ...

    def __getitem__(self, index: int) -> Any: ...


class IntLists:
    """Lists of ints laid end to end in one array of `typecode` ("i": int32 token ids,
    "b": 0/1 flags), with where each one ends."""

    def __init__(self, typecode: str) -> None:
        self._values = array(typecode)
        self._ends = array("q")

    def append(self, values: Sequence[int]) -> None:
        self._values.extend(values)
        self._ends.append(len(self._values))

    def __getitem__(self, index: int) -> list[int]:
        start = self._ends[index - 1] if index else 0
        return self._values[start : self._ends[index]].tolist()


class TextTuples:
    """Tuples of strings, their UTF-8 bytes laid end to end in one buffer."""

    def __init__(self) -> None:
        self._bytes = bytearray()
        self._bounds = IntLists("q")  # per tuple: where its first text starts, each one's end

    def append(self, texts: tuple[str, ...]) -> None:
        bounds = [len(self._bytes)]
        for text in texts:
            # surrogatepass: a lone surrogate a row held comes back as it was
            self._bytes += text.encode("utf-8", "surrogatepass")
            bounds.append(len(self._bytes))
        self._bounds.append(bounds)

    def __getitem__(self, index: int) -> tuple[str, ...]:
        bounds = self._bounds[index]
        return tuple(
            self._bytes[start:end].decode("utf-8", "surrogatepass")
            for start, end in itertools.pairwise(bounds)
        )


class Shared:
    """Values of a field that most rows share (a data source, a kind of note): each
    distinct one held once, each row holding its index."""

    def __init__(self) -> None:
        self._values: list[Any] = []
        self._index: dict[Any, int] = {}
        self._rows = array("I")

    def append(self, value: Any) -> None:
        if value not in self._index:
            self._index[value] = len(self._values)
            self._values.append(value)
        self._rows.append(self._index[value])

    def __getitem__(self, index: int) -> Any:
        return self._values[self._rows[index]]


class Pickled:
    """Values of any kind (a ground truth, a row's extra_info dict) as their pickles laid
    end to end: each read is a new copy, equal to the value appended."""

    def __init__(self) -> None:
        self._bytes = bytearray()
        self._ends = array("q")

    def append(self, value: Any) -> None:
        self._bytes += pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._ends.append(len(self._bytes))

    def __getitem__(self, index: int) -> Any:
        start = self._ends[index - 1] if index else 0
        return pickle.loads(self._bytes[start : self._ends[index]])


class RowTable(Sequence[Row], Generic[Row]):
    """Rows of one kind in the order appended, read back by index (negative too) or by
    iterating, each made by `make` from its fields as `columns` hold them; a slice reads
    as a list. Every field of a row `make` takes is in `columns`."""

    def __init__(self, make: Callable[..., Row], columns: dict[str, Column]) -> None:
        self._make = make
        self._columns = columns
        self._rows = 0

    def append(self, row: Row) -> None:
        for name, column in self._columns.items():
            column.append(getattr(row, name))
        self._rows += 1

    def __len__(self) -> int:
        return self._rows

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._rows))]
        if index < 0:
            index += self._rows
        if not 0 <= index < self._rows:
            raise IndexError(f"row {index} of {self._rows}")
        return self._make(**{name: column[index] for name, column in self._columns.items()})

    def __iter__(self) -> Iterator[Row]:
        return (self[i] for i in range(self._rows))
