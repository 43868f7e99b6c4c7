"""Before a run starts: nothing but what the run writes stands where it writes in its run
dir, no symlink, and no FIFO, directory or device where it writes a file (or file where it
makes a directory).

A run dir copied from elsewhere (or made by hand) may hold `config.yaml -> ../notes.txt` or
`metrics.jsonl -> ../log.txt`: resuming into it replaced the notes with a config and appended
records to the log, files outside the run dir. Each writer refuses a link as it writes
(`trainer.run_files.refuse_link`, O_NOFOLLOW), but some write only after steps have trained
(metrics.jsonl at the first logged step, a tracker's dir, a checkpoint's temp dir at the
first save), so every name a run writes is checked here, by the launching process, before
anything starts: one line naming the first link found (exit 2). So is anything else there
the run cannot write (`run_files.refuse_foreign`): a directory or FIFO at metrics.jsonl
was found at the first logged step, after torch loaded and a step trained, and the line
then said to run the same command again, which failed the same way.

Step dirs (`global_step_N`) are not among them: a save replaces a step dir whole by a
rename, which replaces a link there (a step moved to another disk and linked back), never
what it leads to.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from mfsdp_ckpt.format import layout
from trainer.config import RESOLVED_CONFIG_FILE
from trainer.metrics import METRICS_FILE, TENSORBOARD_DIR, WANDB_DIR
from trainer.run_files import refuse_foreign, refuse_link

ROLLOUT_ASSETS_DIR = "rollout_model"  # GRPO's rollout engine reads the model files from here

# Every name a run writes directly in its run dir, as fnmatch patterns, each with whether
# it is a directory there: its own files, the trackers' dirs, GRPO's rollout files, the
# checkpointer's tracker (and the temp file that replaces it: `step_saving.write_tracker`)
# and a save's temp dir.
WRITTEN_NAMES = (
    (RESOLVED_CONFIG_FILE, False),
    ("config.until_step_*.yaml", False),  # trainer.config_history.until_step_file
    (METRICS_FILE, False),
    (TENSORBOARD_DIR, True),
    (WANDB_DIR, True),
    (ROLLOUT_ASSETS_DIR, True),
    (layout.TRACKER_FILE, False),
    (f".{layout.TRACKER_FILE}.*.tmp", False),
    (f"{layout.STEP_DIR_PREFIX}*{layout.TMP_STEP_SUFFIX}", True),
)


def check_run_dir_entries(run_dir: str | os.PathLike) -> None:
    """RunDirEntryError naming the first entry at a name the run writes in `run_dir` that
    the run cannot write (`refuse_foreign`: a symlink, a FIFO, a directory where a file
    goes), or a symlink anywhere in its rollout dir, whose files the run writes over each
    time. A missing or unreadable run dir is left to the checks that name that."""
    run = Path(run_dir)
    try:
        names = sorted(entry.name for entry in os.scandir(run))
    except OSError:
        return
    for name in names:
        for pattern, directory in WRITTEN_NAMES:
            if fnmatch.fnmatchcase(name, pattern):
                refuse_foreign(run / name, directory)
    for parent, dirs, files in os.walk(run / ROLLOUT_ASSETS_DIR):  # follows no link
        for name in sorted(dirs + files):
            refuse_link(Path(parent) / name)
