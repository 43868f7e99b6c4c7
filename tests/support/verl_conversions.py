"""A `mfsdp config from-verl` conversion's config as its source gave it, without the verl
defaults written for the keys the source leaves out (`trainer.verl_defaults`), for tests
about how a source's own keys are read."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

from trainer.verl_import import Conversion, convert_verl

WRITTEN = ": verl's default ("  # how the note on a default written reads


def as_given(conversion: Conversion) -> dict[str, Any]:
    """`conversion.tree` less each key a note says holds verl's default, and sections left
    empty."""
    tree = copy.deepcopy(conversion.tree)
    for note in conversion.notes:
        if WRITTEN in note:
            *sections, leaf = note.split("=", 1)[0].split(".")
            holder = tree
            for name in sections:
                holder = holder[name]
            del holder[leaf]
    return {key: value for key, value in tree.items() if value != {}}


# Scripts compared with bash: `LAUNCH` stands where the verl command is, which reads $MODEL
LAUNCH = "@LAUNCH"
MODEL_LAUNCH = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    ' actor_rollout_ref.model.path="$MODEL"'
)
MODEL_KEY = "actor_rollout_ref.model.path"


def bash_model_value(tmp_path: Path, lines: str) -> str:
    """$MODEL where the verl command stands in `lines`, as bash runs them in `tmp_path`
    (their own output discarded)."""
    lines = lines.replace(LAUNCH, 'printf %s "$MODEL" >&3')
    script = f"exec 3>&1 >/dev/null 2>&1\n{lines}"
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def convert_launch(tmp_path: Path, lines: str) -> Conversion:
    """`lines` with the verl command where `LAUNCH` stands, converted from `tmp_path`/run.sh."""
    script = tmp_path / "run.sh"
    script.write_text(lines.replace(LAUNCH, MODEL_LAUNCH))
    return convert_verl(script)
