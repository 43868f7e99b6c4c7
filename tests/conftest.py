import os
import signal
import threading

import pytest

# Child processes inherit this: two cores, so one thread each keeps multi-process tests fast.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A terminal that draws progress bars (trainer.progress.bars_drawn), whatever ran the suite
# (a CI job has no TERM): the tests of bars fake a terminal's stderr, not its TERM.
os.environ["TERM"] = "xterm"


def pytest_sessionstart(session):
    """`./dev test` sets MFSDP_REQUIRE_VLLM where it installs vLLM: then the vllm engine's tests
    must run, so an import failure stops the suite instead of turning into skips."""
    if os.environ.get("MFSDP_REQUIRE_VLLM"):
        try:
            import vllm  # noqa: F401
        except Exception as err:  # any import failure of the engine is the point
            raise RuntimeError(f"vLLM is required here but does not import: {err}") from err


@pytest.fixture(autouse=True)
def _stop_signals_handled_as_before():
    """Ctrl-C and SIGTERM handled after each test as before it. A test that runs a launched
    rank's error path in-process (MFSDP_CONFIG_CHECKED set) makes this process ignore both, as
    a rank that printed its outcome does (`cli.errors.settle_command`); the subprocesses later
    tests start then inherit the ignoring, and a SIGTERM test waited out its timeout."""
    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
    before = {number: signal.getsignal(number) for number in numbers}
    yield
    if threading.current_thread() is not threading.main_thread():
        return
    for number, handler in before.items():
        if handler is not None and signal.getsignal(number) != handler:
            signal.signal(number, handler)


@pytest.fixture(scope="session")
def grpo_warm_start(tmp_path_factory):
    """The GRPO learning tests' warm-started tiny model (two SFT runs: minutes on 2 cores),
    built once in a run for the full-parameter and the LoRA learning tests, whichever xdist
    workers their files run on (tests/support/once_per_run.py). Each test trains into a run
    dir of its own name beside it and reads the rest."""
    from tests.grpo.test_grpo_learning import build_warm_start
    from tests.support.once_per_run import built_once_per_run

    return built_once_per_run(tmp_path_factory, "grpo_warm_start", build_warm_start)


@pytest.fixture(scope="module")
def trainable(tmp_path_factory):
    """A Hugging Face model dir `mfsdp train sft` can start from and the SFT table to train it
    on (tests/support/model_dirs.py), built once for each module that trains from one."""
    from tests.support.model_dirs import trainable_model_dir

    return trainable_model_dir(tmp_path_factory.mktemp("trainable"))
