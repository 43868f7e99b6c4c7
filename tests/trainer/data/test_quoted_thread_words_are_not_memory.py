"""A data file's own fault is named even when its text quotes a thread-start failure.

Running out of memory is recognised by what the failing library says ("can't start new
thread", pyarrow's "Failed to launch worker thread"); that test searched every error's whole
message, so a duplicate jsonl key or parquet column named so (the project's own error, which
quotes the name) was reported as "out of memory reading it", exit 1, hiding the fault.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.lib
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.storage.tensor_memory import is_allocation_failure
from trainer.data.files import DataMemoryError, read_rows_with_origins

WORDS = ("note: can't start new thread", "Failed to launch worker thread")


@pytest.mark.parametrize("name", WORDS)
def test_a_duplicate_jsonl_key_named_so_is_the_files_fault(tmp_path, name):
    path = tmp_path / "dup.jsonl"
    path.write_text(f'{{"prompt": "q", "{name}": 1, "{name}": 2}}\n')
    with pytest.raises(Exception) as caught:
        read_rows_with_origins(str(path))
    assert not isinstance(caught.value, DataMemoryError), caught.value
    assert "appears twice" in str(caught.value)


@pytest.mark.parametrize("name", WORDS)
def test_a_duplicate_parquet_column_named_so_is_the_files_fault(tmp_path, name):
    path = tmp_path / "dup.parquet"
    columns = [pa.array(["q"]), pa.array(["x"]), pa.array(["y"])]
    pq.write_table(pa.Table.from_arrays(columns, names=["prompt", name, name]), path)
    with pytest.raises(Exception) as caught:
        read_rows_with_origins(str(path))
    assert not isinstance(caught.value, DataMemoryError), caught.value
    assert "appears 2 times" in str(caught.value)


def test_only_a_message_that_starts_with_the_words_is_a_thread_failure():
    assert is_allocation_failure(RuntimeError("can't start new thread"))
    assert is_allocation_failure(pyarrow.lib.ArrowException("Failed to launch worker thread: x"))
    assert not is_allocation_failure(RuntimeError("column 'can't start new thread' is bad"))
    assert not is_allocation_failure(MfsdpUsageError("can't start new thread"))
