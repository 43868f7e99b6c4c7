"""Resume a run where its newest checkpoint left off, and refuse when that would be wrong.

Every runner (SFT, GRPO) places data by the step alone: a step's rows are a function of
(global batch size, number of training rows, seed, shuffle, step) (`trainer.data.batching`).
So a checkpoint stores just those numbers next to the weights and optimizer, and resume is:
load them, then check that this run would map steps to the same rows. One place does this so
the runners cannot drift apart in what they check.

Rows edited or reordered with their count unchanged, or `data.shuffle` flipped, place steps
on other rows too, but fixing the data is legitimate: the checkpoint also stores a digest of
the training rows in order and the shuffle flag, and a resume that differs in them is told
so in one warning line (`data_change_warning`), not refused. Checkpoints saved before these
were stored resume as before.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.convert.hf_config import SIZE_KEYS, HFConfigError, load_hf_config
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format.layout import CheckpointPaths

DATA_POSITION_KEYS = ("global_batch_size", "train_rows", "seed")
# The HF config fields that decide which tensors a model has and how they are computed
# from each other; a run resuming a step must agree with it on every one.
MODEL_CONFIG_KEYS = (
    "model_type",
    *SIZE_KEYS,
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "hidden_act",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",  # transformers 5 keeps rope_theta and the scaling here
    "max_position_embeddings",
)


class ResumeMismatchError(MfsdpUsageError, ValueError):
    """The checkpoint to resume was trained with data settings that place steps differently."""


ROWS_DIGEST, SHUFFLE = "rows_digest", "shuffle"  # compared on resume, warned about


def new_progress(
    global_batch_size: int, train_rows: int, seed: int, rows_digest: int, shuffle: bool
) -> dict[str, int]:
    """The checkpoint's `extra` state: the step plus what places a step's data."""
    return {
        "step": 0,
        "global_batch_size": global_batch_size,
        "train_rows": train_rows,
        "seed": seed,
        ROWS_DIGEST: rows_digest,
        SHUFFLE: int(shuffle),
    }


RowPart = Sequence[int] | str


def rows_digest(rows: Iterable[Sequence[RowPart]]) -> int:
    """A digest of the training rows in order, each row given as its parts (token ids, or a
    text such as a ground truth); computed once at load, it is cheap next to tokenizing.
    56 bits, so that it is a plain non-negative int64 in the checkpoint."""
    digest = hashlib.blake2b(digest_size=7)
    for row in rows:
        for part in row:
            data = part.encode() if isinstance(part, str) else array("q", part).tobytes()
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        digest.update(b"\xff" * 8)  # end of row: (a, b)(c) differs from (a)(b, c)
    return int.from_bytes(digest.digest(), "little")


def resume_if_any(
    checkpointer: Checkpointer,
    resume: str,
    states: dict[str, Any],
    model_config: dict[str, Any] | None = None,
) -> CheckpointPaths | None:
    """Load the checkpoint `resume` names ("auto", "disable" or a path) into `states`.

    `states["extra"]` is the run's progress dict (`new_progress`); after the load it holds the
    checkpoint's step. `model_config` (the run's HF config as a dict) must agree with the
    step's huggingface/config.json. Returns the checkpoint loaded, or None when the run
    starts fresh.
    """
    found = checkpointer.find_resume(resume)
    if found is None:
        return None
    if model_config is not None:
        check_model_config(found, model_config)
    progress = states["extra"]
    expected = dict(progress)
    checkpointer.load(found, states)
    check_data_position(expected, progress, found.dist_ckpt)
    for key, value in expected.items():  # an older checkpoint lacks them: taken as unchanged
        progress.setdefault(key, value)  # (the load drops what the checkpoint does not hold)
    return found


def check_model_config(found: CheckpointPaths, model_config: dict[str, Any]) -> None:
    """ResumeMismatchError naming the first field where the checkpoint's HF config and this
    run's differ (a step without huggingface/config.json is checked by keys and shapes only;
    a field only one transformers version knows is not compared)."""
    config_file = found.hf_assets / "config.json" if found.hf_assets else None
    if config_file is None or not config_file.is_file():
        return
    try:  # through transformers, so fields save_pretrained left out (defaults) are filled in
        saved = load_hf_config(config_file).to_dict()
    except HFConfigError as err:
        raise ResumeMismatchError(f"cannot compare model configs: {err}") from None
    for key in MODEL_CONFIG_KEYS:
        if key in saved and key in model_config and saved[key] != model_config[key]:
            raise ResumeMismatchError(
                f"{config_file}: checkpoint was trained with {key}={saved[key]!r}, this run has "
                f"{model_config[key]!r}; it is another model"
                " (use a new trainer.run_dir to start over)"
            )


def check_data_position(expected: dict[str, Any], restored: dict[str, Any], where: Path) -> None:
    """Raise ResumeMismatchError when the checkpoint's steps would map to other data in this run."""
    for key in DATA_POSITION_KEYS:
        if int(restored[key]) != int(expected[key]):
            raise ResumeMismatchError(
                f"{where}: checkpoint was trained with {key}={restored[key]}, this run has "
                f"{expected[key]}; "
                "steps would map to different data (use a new trainer.run_dir to start over)"
            )


def data_change_warning(
    expected: dict[str, Any], restored: dict[str, Any], where: Path, train_files: Sequence[str]
) -> str | None:
    """One line when the checkpoint was trained on other rows, or rows in another order
    (`ROWS_DIGEST`), or with the other `data.shuffle`: the steps after it then read other rows
    than an uninterrupted run would. None when they agree, or the checkpoint predates them."""
    step = int(restored["step"])
    reasons = []
    if int(restored[ROWS_DIGEST]) != int(expected[ROWS_DIGEST]):
        files = ", ".join(train_files)
        reasons.append(
            f"data.train_files ({files}) hold other rows, or rows in another order, than the"
            f" checkpoint was trained on"
        )
    if int(restored[SHUFFLE]) != int(expected[SHUFFLE]):
        now, then = (str(bool(x[SHUFFLE])).lower() for x in (expected, restored))
        reasons.append(
            f"data.shuffle={now} but the checkpoint was trained with data.shuffle={then}"
        )
    if not reasons:
        return None
    return (
        f"warning: {where}: {'; '.join(reasons)}: the steps after {step} read other rows than an"
        " uninterrupted run would (a new trainer.run_dir starts over)"
    )
