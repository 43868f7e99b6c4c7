"""A Ctrl-C of `mfsdp demo` once it printed `train:` names the training stage.

The stage was set only after the demo had loaded and configured torch's threads (seconds
on 2 cores), so a Ctrl-C there said "interrupted while writing the demo's data and model"
right under the `train:` line, of a demo whose data and model were complete. The Ctrl-C is
made to land there every time: the thread setup the demo calls right after that line
raises it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.support.paths import REPO

_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import trainer.threads

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    trainer.threads.configure_threads = ctrl_c
    from cli.demo import _Phase, _run

    out = Path(sys.argv[1])
    phase = _Phase(out, 2, 1)
    try:
        _run(out, 1, 2, phase)
    except KeyboardInterrupt:
        print("said:", phase.interrupted())
    """
)


def test_a_ctrl_c_after_the_train_line_names_training(tmp_path):
    out = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2].startswith("[demo] train: "), done.stdout
    said = lines[-1]
    assert "writing the demo's data and model" not in said, said
    assert f"no checkpoint was saved in {out / 'sft'} yet" in said, said
