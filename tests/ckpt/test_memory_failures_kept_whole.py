"""Running out of memory inside code that turns a library's errors into "this file is at
fault" stays running out of memory (the CLI's out-of-memory line), and a write that failed
for the machine's want of memory names no file.

The failures are real: an allocation no machine can make (`bytearray(1 << 62)`, a 4 EiB
mapping), reached from inside the library call."""

from __future__ import annotations

import mmap

import pytest

from mfsdp_ckpt.format.generation_config import generation_config
from mfsdp_ckpt.storage.named_writes import writing
from mfsdp_ckpt.storage.tensor_memory import memory_failure

_UNMAPPED = "libtorch_cpu.so: failed to map segment from shared object"


class _CountNeedingMemory(int):
    """A count whose comparison allocates more than any machine has."""

    def __lt__(self, other: object) -> bool:
        return bool(bytearray(1 << 62))

    __le__ = __gt__ = __ge__ = __lt__


def test_memory_running_out_inside_transformers_is_not_the_generation_configs_fault():
    with pytest.raises(MemoryError):
        generation_config({"max_new_tokens": _CountNeedingMemory(5)}, "g.json", ValueError)


def test_a_write_the_machine_had_no_memory_for_names_no_file(tmp_path):
    with pytest.raises(OSError) as failed, writing(tmp_path / "model.safetensors"):
        mmap.mmap(-1, 1 << 62)  # ENOMEM from the kernel
    assert failed.value.filename is None


def test_an_unmapped_library_under_a_libraries_import_error_is_memory():
    def import_numpy() -> None:
        try:
            raise ImportError(_UNMAPPED)
        except ImportError as unmapped:
            raise ImportError("Importing the numpy C-extensions failed.") from unmapped

    with pytest.raises(ImportError) as failed:
        import_numpy()
    found = memory_failure(failed.value)
    assert found is not None and _UNMAPPED in str(found)


def test_an_import_error_of_a_missing_module_is_not_memory():
    with pytest.raises(ImportError) as failed:
        __import__("mfsdp_no_such_module")
    assert memory_failure(failed.value) is None
