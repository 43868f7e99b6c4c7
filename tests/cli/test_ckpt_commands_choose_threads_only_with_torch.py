"""`ckpt inspect` and `ckpt export-hf` choose a thread count only once they load torch (the
choice samples the CPUs for 0.1 s): they chose one on every call, torch or not. A user's
MKL_NUM_THREADS, which torch sizes its pool by over OMP_NUM_THREADS, is the user's count;
and whether torch caps the count by MKL is asked of torch where it is imported."""

from __future__ import annotations

import sys
import types

import pytest

from tests.cli.test_ckpt_commands_choose_threads import _mfsdp_at_info, checkpoint  # noqa: F401
from trainer.threads import MKL_USER_SET, choose_threads, physical_cores, threads_torch_runs


@pytest.mark.parametrize(
    "command",
    [
        ["ckpt", "inspect", "{root}/run"],
        ["ckpt", "export-hf", "{root}/run", "--out", "{root}/plain_{n}"],
    ],
    ids=["inspect", "export-hf"],
)
def test_a_ckpt_command_that_loads_no_torch_chooses_no_threads(checkpoint, command):  # noqa: F811
    root, _ = checkpoint
    args = [part.format(n=len(list(root.iterdir())), root=root) for part in command]
    done = _mfsdp_at_info(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch threads: None" in done.stderr, done.stderr[-2000:]
    assert "CPU thread(s) per process" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("omp", [None, "1", "3"])
def test_mkl_num_threads_is_the_users_count_over_omp_num_threads(omp):
    environ = {"MKL_NUM_THREADS": "2", **({"OMP_NUM_THREADS": omp} if omp else {})}
    choice = choose_threads(1, idle_cores=0.0, environ=environ)
    assert (choice.threads, choice.user_set, choice.reason) == (2, True, MKL_USER_SET)


@pytest.mark.parametrize("has_mkl", [False, True])
def test_whether_torch_caps_threads_by_mkl_is_asked_of_the_torch_imported(monkeypatch, has_mkl):
    """A torch built without MKL (a source build, an aarch64 wheel, whatever the machine)
    runs the count asked for; one with MKL at most a thread per physical core. Was: told
    from the machine being x86-64, whichever torch was imported."""
    mkl = types.SimpleNamespace(is_available=lambda: has_mkl)
    built = types.SimpleNamespace(backends=types.SimpleNamespace(mkl=mkl))
    monkeypatch.setitem(sys.modules, "torch", built)  # the torch of another build
    asked = 10 * physical_cores()
    assert threads_torch_runs(asked, {}) == (physical_cores() if has_mkl else asked)
