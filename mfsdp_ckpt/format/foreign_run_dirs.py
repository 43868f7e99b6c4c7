"""Another trainer's run dir given as the dir a run saves into and resumes from.

verl's and Megatron-LM's run dirs hold a tracker and step dirs under the names mfsdp's
have, so as `trainer.run_dir` one read as a damaged run of ours: "holds no manifest.json
... move it and the tracker away", or "no step is complete; move the tracker away", advice
that damages the other trainer's run, and `checkpoint.resume=` of one of its steps, which
is refused as well. It is named here as `ckpt inspect` names its layout (resolution
decides it), with what does start a run from it: `model.path`, in another run dir. So is
any dir that `ckpt inspect` reads, or refuses, as another tool's checkpoint, whatever its
step dirs are called: the HF Trainer's output dir (`checkpoint-N/`), Accelerate's
save_state dir, a torchtitan dump folder, DeepSpeed's `latest` + `global_stepN/`. Taken
for an empty run, mfsdp saved its steps in beside the other tool's, and the dir then read
as mfsdp's run: the other tool's checkpoint, what `model.path=DIR` had read, was shadowed.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.dir_entries import children, is_dir
from mfsdp_ckpt.format.layout import MFSDP, CheckpointPathError, ForeignFormatError
from mfsdp_ckpt.format.path_refusals import holds_run_records
from mfsdp_ckpt.format.run_steps import (
    linked_out_part,
    list_complete_steps,
    natural_order,
    step_dirs,
)


def refuse_foreign_run_dir(run: Path) -> None:
    """CheckpointPathError (exit 2, one line) when `run`, given as trainer.run_dir, is a run
    dir of another trainer's layout (`foreign_run_words`)."""
    words = foreign_run_words(run)
    if words is not None:
        raise CheckpointPathError(f"trainer.run_dir: {run} {words}")


def foreign_run_words(run: Path) -> str | None:
    """What `run` is when it is a run dir of another trainer's layout, and what starts a run
    from it ("is a run dir of layout megatron-lm, ...; to train from its step 100, give
    model.path=RUN with another trainer.run_dir"): said of `run` as trainer.run_dir, and of
    the run a checkpoint given as trainer.run_dir belongs to, where "give the run to resume
    it" sent the user to a run dir refused in turn. None for mfsdp's run, or where neither
    it nor any of its step dirs (the HF Trainer's `checkpoint-N` counted) reads as another
    layout's (a damaged run of any layout is then named as before): it holds no complete
    step of mfsdp's, no config.yaml or metrics.jsonl of an mfsdp run, and the run, or else
    its newest step that reads, resolves to another layout or is refused as another tool's
    format: whatever `ckpt inspect RUN` reads there, mfsdp's run saved beside it would
    shadow. A step a part of which links out of it (`linked_out_part`) is never the one
    named: reading it is refused, whatever resolving it found. The steps are looked at
    newest first, only until one reads."""
    if not is_dir(run) or list_complete_steps(run) or holds_run_records(run):
        return None
    try:
        names = children(run)
    except MfsdpError:
        return None  # reading it for the run names the failure
    steps = sorted([*step_dirs(run, names), *_trainer_checkpoints(run, names)], key=natural_order)
    readable = (run / name for name in reversed(steps) if linked_out_part(run / name) is None)
    for given in itertools.chain([run], readable):
        try:
            paths = resolve_checkpoint(given)
        except ForeignFormatError as err:
            return _foreign(err)
        except MfsdpError:
            continue  # an unfinished save, a broken tracker: the next step may read
        if paths.kind == MFSDP:
            return None
        start = f"its step {paths.step}" if paths.step is not None else paths.root
        return (
            f"is a run dir of layout {paths.kind}, not an mfsdp run: mfsdp does not resume it"
            f" or save into it; to train from {start}, give model.path={given} with another"
            " trainer.run_dir"
        )
    return None


def _trainer_checkpoints(run: Path, names: list[str]) -> list[str]:
    """The HF Trainer's `checkpoint-N` dirs among `names`: where the newest did not finish
    its save, an older one names the output dir as the Trainer's."""
    return [n for n in names if hf_trainer.checkpoint_number(n) is not None and is_dir(run / n)]


def _foreign(err: ForeignFormatError) -> str:
    """What a run dir in a format mfsdp does not read is, before that format's own line."""
    return f"is another trainer's run dir, which mfsdp does not resume or save into: {err}"
