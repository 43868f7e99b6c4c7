"""A full disk while a (resumed) run rewrites config.yaml or metrics.jsonl: the file is left
as it was (config.yaml was truncated to 0 bytes, then the write failed), and the error is
one line naming it ("[Errno 28] No space left on device", no path). The disk fills
deterministically: RLIMIT_FSIZE in a child process (writes past it fail with EFBIG)."""

from __future__ import annotations

import json
import subprocess
import sys

from trainer.config import RESOLVED_CONFIG_FILE
from trainer.metrics import METRICS_FILE

LIMITED = """
import resource, sys
from pathlib import Path
from trainer.config import SFTConfig, write_resolved_config
from trainer.metrics import drop_steps_after
run, limit = Path(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
for write in (lambda: write_resolved_config(run, SFTConfig()), lambda: drop_steps_after(run, 3)):
    try:
        write()
        print("written")
    except Exception as err:
        print(err)
"""
LIMIT = 400  # bytes: less than config.yaml or three records (written, not read, are limited)


def test_a_full_disk_leaves_the_run_files_as_they_were_and_names_them(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    old_config = "trainer:\n  total_steps: 12\n"
    (run / RESOLVED_CONFIG_FILE).write_text(old_config)
    records = "".join(json.dumps({"step": s, "pad": "x" * 120}) + "\n" for s in range(1, 7))
    (run / METRICS_FILE).write_text(records)
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, str(run), str(LIMIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.splitlines() == [
        f"{run / RESOLVED_CONFIG_FILE}: cannot write it (File too large); it is left as it was",
        f"{run / METRICS_FILE}: cannot remove the records of steps after 3 from it"
        " (File too large); it is left as it was",
    ], done.stdout + done.stderr
    assert (run / RESOLVED_CONFIG_FILE).read_text() == old_config
    assert (run / METRICS_FILE).read_text() == records
    assert sorted(p.name for p in run.iterdir()) == [RESOLVED_CONFIG_FILE, METRICS_FILE]


RESUMED = """
import resource, sys
from pathlib import Path
from trainer.config import SFTConfig, write_resolved_config
from trainer.config_history import keep_changed_config
run, limit = Path(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
print(keep_changed_config(run, 4, SFTConfig()))
try:
    write_resolved_config(run, SFTConfig())
except Exception as err:
    print(err)
"""


def test_a_full_disk_on_a_resume_with_changed_settings_keeps_config_yaml(tmp_path):
    """The config step 4 was trained with was renamed to config.until_step_4.yaml before the
    new config.yaml was written: when that write failed, the run dir had no config.yaml."""
    run = tmp_path / "run"
    run.mkdir()
    old_config = "optim:\n  lr: 0.5\n"
    (run / RESOLVED_CONFIG_FILE).write_text(old_config)
    done = subprocess.run(
        [sys.executable, "-c", RESUMED, str(run), str(LIMIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("resumed with settings changed since step 4: "), lines
    assert lines[1].startswith(f"{run / RESOLVED_CONFIG_FILE}: cannot write it"), lines
    assert (run / RESOLVED_CONFIG_FILE).read_text() == old_config
    assert (run / "config.until_step_4.yaml").read_text() == old_config


def test_a_temp_file_a_killed_rewrite_left_does_not_block_the_next(tmp_path):
    """The temp file was named by the pid and opened exclusively: one left by a rewrite
    killed mid-way failed every later rewrite under the same pid (a fresh container's)."""
    import os

    from trainer.config import SFTConfig, write_resolved_config

    run = tmp_path / "run"
    run.mkdir()
    (run / f".{RESOLVED_CONFIG_FILE}.{os.getpid()}.tmp").write_text("left by a killed rewrite")
    write_resolved_config(run, SFTConfig())
    assert "trainer:" in (run / RESOLVED_CONFIG_FILE).read_text()


def test_a_rewritten_run_file_keeps_to_the_umask(tmp_path):
    """The unique temp file was made 0o644 whatever the umask: under `umask 077` a run's
    config.yaml became readable to everyone."""
    import os

    from trainer.config import SFTConfig, write_resolved_config

    run = tmp_path / "run"
    run.mkdir()
    previous = os.umask(0o077)
    try:
        write_resolved_config(run, SFTConfig())
    finally:
        os.umask(previous)
    assert (run / RESOLVED_CONFIG_FILE).stat().st_mode & 0o777 == 0o600
