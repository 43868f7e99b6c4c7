"""The note that a user's thread count crowds the cores names the variable the count came
from: a count from MKL_NUM_THREADS (which torch reads over OMP_NUM_THREADS) was printed as
`OMP_NUM_THREADS=N`, a variable the user had not set or had set to something else."""

import sys

import pytest

from tests.trainer.test_threads import eight_cores  # noqa: F401
from trainer import threads

MKL_ADVICE = "unset MKL_NUM_THREADS (which torch reads over OMP_NUM_THREADS)"


@pytest.mark.parametrize(
    "environ, shown, advice",
    [
        ({"MKL_NUM_THREADS": "16"}, "MKL_NUM_THREADS=16", MKL_ADVICE),
        ({"MKL_NUM_THREADS": "16", "OMP_NUM_THREADS": "2"}, "MKL_NUM_THREADS=16", MKL_ADVICE),
        ({"OMP_NUM_THREADS": "16"}, "OMP_NUM_THREADS=16", "unset OMP_NUM_THREADS"),
    ],
)
def test_the_crowded_cores_note_names_the_users_variable(
    monkeypatch,
    caplog,
    eight_cores,  # noqa: F811
    environ,
    shown,
    advice,
):
    for name in ("MKL_NUM_THREADS", "OMP_NUM_THREADS", threads.CHOSEN_MARKER):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MKL_DYNAMIC", "FALSE")  # torch then runs the 16 asked for
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # nothing to set in this process
    with caplog.at_level("INFO", logger="mfsdp.threads"):
        threads.configure_threads(1)
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("note: ")]
    assert notes == [
        f"note: {shown} x 1 process(es) = 16 threads on 8 CPU core(s): threads take turns on"
        f" a core; {advice} to let mfsdp choose"
    ]
