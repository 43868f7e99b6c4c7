"""Running out of memory where a library loads or builds something: the out-of-memory line.

Under an address-space limit (`ulimit -v`) a little above what a command needs, the first
`import torch` failed with a traceback (its shared library could not be mapped), an export's
worker threads each failed their own way importing it, import-hf said config.json was at
fault ("transformers cannot load it (MemoryError)"), and an ENOMEM that a writer named its
file with blamed that file. The failures here are real: the limit is set in a fresh
interpreter just above what it holds, so the next large load cannot fit."""

from __future__ import annotations

import errno
import mmap
import os
import signal
import subprocess
import sys

import pytest
import torch

from mfsdp_ckpt.format.finite import count_nonfinite_tensor
from mfsdp_ckpt.storage.file_errors import naming_file
from tests.support.cli_errors import one_error
from tests.support.export import save_single_process_checkpoint
from tests.support.paths import REPO

# Caps the address space a little above what this interpreter holds once `setup` ran, then
# runs `body` through mfsdp's error handling (report_errors), as a command would.
_CAPPED = """
import resource, sys
from cli.errors import report_errors
from mfsdp_ckpt.check.printable import printable  # what the error line needs, loaded first
{setup}
with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (held + (48 << 20), resource.RLIM_INFINITY))
report_errors(lambda: {body}, memory_advice=lambda: "raise the limit: ulimit -v")
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _capped(setup: str, body: str) -> subprocess.CompletedProcess:
    return _python(_CAPPED.format(setup=setup, body=body))


def test_an_import_whose_library_cannot_be_mapped_is_the_out_of_memory_line():
    """libtorch_cpu.so is far larger than the headroom: mapping it fails, an ImportError."""
    done = _capped("import importlib", 'importlib.import_module("torch")')
    assert done.returncode == 1, done.stderr
    one_error(done.stderr, "error: out of memory: ", "ulimit -v")


def test_transformers_running_out_of_memory_building_a_config_is_not_the_files_fault():
    """Qwen2's config lists one attention type per layer: ten million of them do not fit the
    headroom, a MemoryError inside transformers, which config.json was blamed for."""
    setup = (
        "from transformers import AutoConfig\n"
        "from mfsdp_ckpt.convert.hf_config import refuse_unloadable\n"
        'AutoConfig.for_model(model_type="qwen2")  # its config class loaded\n'
        'data = {"model_type": "qwen2", "num_hidden_layers": 10**7}'
    )
    done = _capped(setup, 'refuse_unloadable(data, "m/config.json")')
    assert done.returncode == 1, done.stderr
    line = one_error(done.stderr, "error: out of memory", "ulimit -v")
    assert "config.json" not in line


# Loads the CLI, has every thread started say whether torch was loaded by then, and exports
# with a cast (float32 to bfloat16: torch's work, in the export's threads).
_EXPORT_NOTING_THREADS = """
import sys, threading
from cli.main import main
started = threading.Thread.start
def start(thread):
    print("torch loaded" if "torch" in sys.modules else "torch not loaded")
    started(thread)
threading.Thread.start = start
sys.argv = ["mfsdp", "ckpt", "export-hf", sys.argv[1], "--out", sys.argv[2], "--dtype", "bf16"]
main()
"""


def test_export_threads_start_with_torch_loaded(tmp_path):
    """Loading torch first in several export threads at once, under memory pressure, failed
    in each its own way (a module another thread left half loaded); loaded before they
    start, a failure is the one import in the command's thread (the test above)."""
    from trainer.tiny import build_tiny_model_dir

    run = tmp_path / "run"
    save_single_process_checkpoint(run, build_tiny_model_dir(tmp_path / "assets"))
    done = _python(_EXPORT_NOTING_THREADS, str(run), str(tmp_path / "hf"))
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert "torch loaded" in said and "torch not loaded" not in said, done.stdout


def _enomem() -> OSError:
    """The ENOMEM the kernel gives a mapping larger than any address space."""
    try:
        mmap.mmap(-1, 1 << 62)
    except OSError as err:
        return err
    raise AssertionError("a 4 EiB mapping succeeded")


def test_a_write_out_of_memory_is_not_pinned_on_its_file(capsys):
    """A writer names the file a failed write was for; ENOMEM is the machine's, and the
    out-of-memory line named the file as if it were the cause."""
    from cli.errors import report_errors

    err = naming_file(_enomem(), "/runs/out/model.safetensors")
    assert err.filename is None
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exited:
            report_errors(lambda: (_ for _ in ()).throw(err))
    finally:
        signal.signal(signal.SIGINT, handler)
    assert exited.value.code == 1
    line = one_error(capsys.readouterr().err, "error: out of memory: Cannot allocate memory")
    assert "model.safetensors" not in line


@pytest.mark.parametrize("number", [errno.EAGAIN, errno.EINTR, errno.ENOBUFS, errno.ENOMEM])
def test_an_errno_about_the_machine_names_no_file(number):
    err = naming_file(OSError(number, os.strerror(number)), "/runs/out/model.safetensors")
    assert err.filename is None and err.errno == number


def test_a_write_that_failed_for_its_file_still_names_it():
    err = naming_file(OSError(errno.EFBIG, os.strerror(errno.EFBIG)), "/runs/out/x")
    assert err.filename == "/runs/out/x" and err.errno == errno.EFBIG


# Every one-byte float format with its NaN/Inf bit patterns; one value of each kind.
_ONE_BYTE_FLOATS = [
    getattr(torch, name)
    for name in (
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    )
    if hasattr(torch, name)
]


@pytest.mark.parametrize("dtype", _ONE_BYTE_FLOATS, ids=str)
def test_one_byte_floats_are_counted_without_a_copy_to_the_cpu(dtype):
    """An fp8 tensor is counted from its bit patterns on its own device: copied to the CPU
    for numpy, a GPU tensor's bytes were all held in host memory at once. The count on a
    device-resident tensor must match the float32 values it holds; `.cpu()` is refused."""
    values = torch.tensor([1.0, 2.0, float("nan"), float("inf"), -float("inf"), 0.5] * 3)
    tensor = values.to(dtype)
    expected = int((~tensor.float().isfinite()).sum())
    assert count_nonfinite_tensor(_NoCpuCopy(tensor)) == expected
    assert count_nonfinite_tensor(_NoCpuCopy(tensor[::2])) == int(
        (~tensor[::2].float().isfinite()).sum()
    )


class _NoCpuCopy(torch.Tensor):
    """A tensor standing for one on an accelerator: the count must stay on its device, so
    moving it to the CPU (`.cpu()`, `.to("cpu")`, `.numpy()`) fails the test."""

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> _NoCpuCopy:
        return torch.Tensor._make_subclass(cls, data)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.cpu, torch.Tensor.numpy) or (
            func is torch.Tensor.to and "cpu" in map(str, [*args[1:], *(kwargs or {}).values()])
        ):
            raise AssertionError(f"{func.__name__}: the tensor left its device")
        return super().__torch_function__(func, types, args, kwargs)
