"""A parquet read whose decode thread pool cannot start is memory running out, not a
damaged file: under a tight address-space limit (`ulimit -v`) pyarrow raises a plain
ArrowException, "Failed to launch worker thread", which was reported as "not a readable
parquet file" with exit 2, sending the user to look at data that is fine."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.lib
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.storage.tensor_memory import is_allocation_failure
from trainer.data.files import DataMemoryError, read_rows_with_origins

THREAD_FAILURE = "Failed to launch worker thread: Resource temporarily unavailable"


def test_a_thread_that_cannot_start_is_an_allocation_failure():
    assert is_allocation_failure(pyarrow.lib.ArrowException(THREAD_FAILURE))
    assert is_allocation_failure(RuntimeError("can't start new thread"))
    # a library's other errors, "memory" in their words or not, are not
    assert not is_allocation_failure(pyarrow.lib.ArrowException("Couldn't deserialize thrift"))
    assert not is_allocation_failure(ValueError("out of memory budget for column x"))


def test_reading_a_parquet_file_when_its_threads_cannot_start_says_out_of_memory(
    tmp_path, monkeypatch
):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"question": ["1 + 1?"], "answer": ["#### 2"]}), path)

    def no_threads(*args, **kwargs):  # what pyarrow raises with no room for a thread's stack
        raise pyarrow.lib.ArrowException(THREAD_FAILURE)

    monkeypatch.setattr(pq, "ParquetFile", no_threads)
    with pytest.raises(DataMemoryError) as caught:
        read_rows_with_origins(str(path))
    said = str(caught.value)
    assert said.startswith(f"{path}: out of memory reading it"), said
    assert caught.value.exit_code == 1
