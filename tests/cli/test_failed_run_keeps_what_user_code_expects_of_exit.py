"""A failed training run ends its process without the interpreter's teardown (see
test_failed_run_ends_without_teardown.py), but not without what the user's code expects of
any exit: a file it keeps open (a reward module's per-sample log) is flushed, its atexit
hooks run (multiprocessing's ends a daemon helper it started), and a script that calls
`main()` among other work (a sweep catching SystemExit) is not ended at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import EXAMPLES, REPO
from tests.support.sft import write_chat_jsonl
from tests.support.waiting import wait_until

FAILING = ["data.global_batch_size=100000", "trainer.progress_bar=false"]  # after the group

# What the program runs before `main()`, as a reward module does at import: a log kept open
# with a line still in its buffer, and a daemon helper process that would outlive the run.
USER_CODE = """
import multiprocessing, os, sys, time
log = open(sys.argv.pop(1), "w")
log.write("scored 1\\n")
helper = multiprocessing.Process(target=time.sleep, args=(600,), daemon=True)
helper.start()
open(sys.argv.pop(1), "w").write(str(helper.pid))
from cli.main import main
main()
"""


def _sft_args(tmp_path: Path) -> list[str]:
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=24)
    args = ["train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml")]
    return args + [f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}", *FAILING]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_failed_run_flushes_open_files_and_runs_exit_hooks(tmp_path):
    log, helper_pid = tmp_path / "scores.log", tmp_path / "helper.pid"
    command = [sys.executable, "-c", USER_CODE, str(log), str(helper_pid), *_sft_args(tmp_path)]
    done = subprocess.run(
        command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert "exceeds the 22 training rows" in done.stderr
    assert log.read_text() == "scored 1\n"
    pid = int(helper_pid.read_text())
    wait_until(
        lambda: not _alive(pid), 10, lambda: "the daemon helper outlived the failed run", every=0.1
    )


def test_a_script_calling_main_goes_on_after_a_failed_run(tmp_path):
    sweep = tmp_path / "sweep.py"
    sweep.write_text(
        "import sys\n"
        "from cli.main import main\n"
        f"sys.argv = ['mfsdp', *{_sft_args(tmp_path)!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as ended:\n"
        "    print(f'sweep: run exited with {ended.code}', flush=True)\n"
        "print('sweep: next run')\n"
    )
    done = subprocess.run(
        [sys.executable, str(sweep)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["sweep: run exited with 2", "sweep: next run"]
