"""Too many open files (the process's limit, EMFILE, or the system's, ENFILE) is not the
fault of the file being written: a writer named it (`PATH: not written (Too many open
files)`), as if that file were the one to fix. The limit is real here: the process's soft
limit is lowered to just above the descriptors it holds."""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mfsdp_ckpt.storage.file_errors import naming_file
from mfsdp_ckpt.storage.named_writes import writing


@contextmanager
def _few_descriptors_left() -> Iterator[None]:
    """The process may open only a few more descriptors inside the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 4, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_write_past_the_open_file_limit_names_no_file(tmp_path):
    source = os.open(tmp_path, os.O_RDONLY)
    copies: list[int] = []
    try:
        with (
            _few_descriptors_left(),
            pytest.raises(OSError) as failed,
            writing(tmp_path / "model.safetensors"),
        ):
            while True:
                copies.append(os.dup(source))  # EMFILE, naming no file, as a library's is
    finally:
        for fd in (source, *copies):
            os.close(fd)
    assert failed.value.errno == errno.EMFILE
    assert failed.value.filename is None


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE], ids=["EMFILE", "ENFILE"])
def test_an_open_file_limit_is_not_pinned_on_the_file(number):
    err = naming_file(OSError(number, os.strerror(number)), "/runs/out/model.safetensors")
    assert err.filename is None and err.errno == number
