"""What a resumed run changed of the config its step was trained with, said once and kept.

A run writes the config it really uses into `RUN/config.yaml`. Resuming with another
`optim.lr` or `trainer.total_steps` is legitimate (a longer schedule, a lower rate), but it
happened without a word and the new config.yaml replaced the one steps 0..N were trained
with. Now the changed keys are named on stderr, and the earlier file is kept beside as
`config.until_step_N.yaml`.

The config compared against is the record of the run dir that holds the resumed step (a
step holds no config of its own; of the configs kept there, the one kept for the first step
at or past it: `_trained_with`): a step of another run (`checkpoint.resume=base/
global_step_4` into a new run dir) was compared with the new run dir's config.yaml, which
did not exist, and lr 3e-3 -> 1 passed without a word. A record that is missing or cannot
be read is one line saying the settings were not compared and why (it was silently
skipped), and a damaged `RUN/config.yaml`, which the run then replaces, is kept aside first.
A LoRA step's adapter settings that config.yaml does not hold (a loaded adapter's
lora_dropout, read from its adapter_config.json) are compared with the step's manifest and
said in the same line; the manifest keeps those the step was trained with.

A path key is compared by the file it names, not by its spelling: `data.train_files` given
relative once and absolute once (or through a link, with `./` or a trailing slash) was named
as changed. A recorded relative path was read from the directory that run was started in,
which the record does not hold; it is the one from which the recorded `trainer.run_dir`
leads to the run dir holding the record (`_started_in`). Where that is not known (the run
dir was given absolute), a recorded relative path is compared by its spelling alone.

A step of another run resumed into a run dir that has a config.yaml of its own replaced that
file without a word: with this run's settings it is replaced and the note says so; with
other settings (a run that stopped before its first save, a config the user wrote there) it
would be lost, and the resume is refused (`OwnConfigError`) before anything is written. Where
the run dir holds steps of its own, the file is theirs (its `checkpoint.resume` names the step
of another run they began from) and the refusal says to continue them
(`checkpoint.resume=auto`), not to move the file away. A run dir holding no step, whose
config.yaml resumed the very step this run resumes, holds an earlier attempt of this resume
(one that failed before its first save, out of memory say): it trained nothing there, so it
is replaced and the note names the settings changed since it; it was refused, though the same
file was replaced without a word by a run started fresh over it (`_earlier_attempt`).

A fresh start replaced any config.yaml in its run dir without a word, the very --config file
it read included (its comments gone, a one-off command-line override now its value). It
gets the same decision (`own_config_note`): a config.yaml mfsdp did not write (not in the
form `write_resolved_config` writes) is refused on a fresh start and on a resume alike; one
it wrote for a run in the run dir that saved no step there is replaced, and the note names
the settings changed since it; one with other settings and of another run dir is refused.

A record written by an older mfsdp lacks the keys added since: such a key at the value that
reproduces what that run trained is no change (that run could not set it), one set otherwise
is named as a new key, and a recorded key this mfsdp no longer has is named too, after the
values changed. Each added key was named as changed (`model.lora_rank None -> 0`), so a
resume with the same command kept a copy of the config, and the setting the user did change
was hidden behind "(+N more)". For most added keys that value is the default; for a key whose
default changed what the record's settings train (`_LEGACY_VALUES`), it is the value the record
trained as: a GRPO run on `seq-mean-token-sum-norm` recorded before `actor.loss_normalization`
existed divided its loss by the micro-batch count, and resumed with the default `global` it
went on 16 times smaller with no word, its config.yaml rewritten as if it had always been so.
An SFT run recorded before `data.loss_normalization` trained as `global`: resumed with
`micro_batch` (a re-converted verl `fsdp_sft_trainer` script sets it) it is told so, not only
"new key".
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest, ManifestError, read_manifest
from mfsdp_ckpt.storage import safe_files
from trainer.config import RESOLVED_CONFIG_FILE, config_to_dict, path_values, set_dotted
from trainer.config_yaml import MAX_CONFIG_BYTES, dump_yaml, parse_yaml
from trainer.run_files import RunFileError, replacing

# Keys that say how this command was started, not what trains: changing them changes nothing
# a checkpoint holds.
_HOW_STARTED = (
    "checkpoint.resume",
    "trainer.progress_bar",
    "trainer.stop_at_step",
    "trainer.run_dir",
)
_SHOWN_CHANGES = 6
_ABSENT = object()  # a key one side of a comparison lacks (None is a value a key may hold)


def _loss_normalization_then(record: dict[str, Any]) -> str:
    """How a GRPO run recorded before `actor.loss_normalization` existed normalized its loss:
    `seq-mean-token-sum-norm` divided by the micro-batch count (`micro_batch`), every other
    mode by the global count (`global`)."""
    mode = _dotted(record, "actor.loss_agg_mode")
    return "micro_batch" if mode == "seq-mean-token-sum-norm" else "global"


def _sft_loss_normalization_then(record: dict[str, Any]) -> str:
    """How an SFT run recorded before `data.loss_normalization` existed normalized its loss:
    by the global count of target tokens (`global`), whatever the record's settings; its
    verl `fsdp_sft_trainer` conversion (now `micro_batch`) trained so too."""
    return "global"


# Keys added since some records were written whose default does not reproduce what such a
# record trained, or whose other value changes it mid-run: the value that does, from the
# record's own settings, so a change is named with what the earlier steps trained as
# ("new key" said nothing of them).
_LEGACY_VALUES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "actor.loss_normalization": _loss_normalization_then,
    "data.loss_normalization": _sft_loss_normalization_then,
}


class ConfigRecordError(MfsdpFailedError):
    """The record of the config a step was trained with is missing or is no config; the
    message names the file and what is wrong with it (said as a note: the run goes on)."""


class OwnConfigError(MfsdpUsageError, ValueError):
    """The run dir a step of another run is resumed into has a config.yaml of its own that
    this run's would replace, and it records other settings (or cannot be read): the user's,
    which would be lost."""


def keep_changed_config(
    run_dir: Path, step: int, config: Any, resumed: CheckpointPaths | None = None
) -> str | None:
    """The note a resume from step `step` says, in one line: the config keys that changed
    since it (`_config_changes`) and the LoRA adapter settings (`_lora_changes`); None when
    neither changed."""
    return _changes_note(run_dir, step, config, resumed, trains=True)


def unused_changes_note(
    run_dir: Path, step: int, config: Any, resumed: CheckpointPaths | None = None
) -> str | None:
    """`keep_changed_config`'s note for a run resumed from step `step` at or past its end,
    which trains nothing and writes no config: the settings changed since the step, named
    as unused, nothing kept or moved. A rerun of a finished run with a changed (or mistyped)
    override was told only "nothing left to train", with no sign the change went unused."""
    return _changes_note(run_dir, step, config, resumed, trains=False)


def _changes_note(
    run_dir: Path, step: int, config: Any, resumed: CheckpointPaths | None, *, trains: bool
) -> str | None:
    recorded = resumed.manifest if resumed is not None else _own_manifest(run_dir, step)
    manifest = _manifest(recorded)
    notes = (
        _config_changes(run_dir, step, config, resumed, manifest, trains),
        _lora_changes(step, config, recorded, manifest, trains),
    )
    return "; ".join(note for note in notes if note) or None


def _own_manifest(run_dir: Path, step: int) -> Path:
    return layout.step_dir(run_dir, step) / layout.MANIFEST_FILE


def _manifest(recorded: Path | None) -> Manifest | None:
    """The resumed step's manifest; None where it has none or it cannot be read (the load
    read it, and named what is wrong with it)."""
    if recorded is None:
        return None
    try:
        return read_manifest(recorded)
    except (ManifestError, OSError):
        return None


_UNUSED = "nothing is left to train with them"


def _lora_changes(
    step: int, config: Any, recorded: Path | None, manifest: Manifest | None, trains: bool
) -> str:
    """What of the LoRA settings this run applies differs from those the resumed step's
    manifest `recorded` holds ("" when none, or the step is no LoRA one). A loaded adapter's
    come from its adapter_config.json, read anew at every start, which config.yaml does not
    hold: an edited lora_dropout trained on from the step without a word, and the next
    manifest recorded it for the whole run."""
    if manifest is None or manifest.lora is None:
        return ""
    # only a LoRA run gets here, which has imported torch and peft already
    from trainer.lora import changed_since_checkpoint

    changes = changed_since_checkpoint(manifest.lora, config.model)
    if not changes:
        return ""
    listed = first_of(changes, _SHOWN_CHANGES)
    if not trains:
        return f"LoRA settings changed since step {step}: {listed}; {_UNUSED}"
    return (
        f"resumed with LoRA settings changed since step {step}: {listed};"
        f" {recorded} records those step {step} was trained with"
    )


def _config_changes(
    run_dir: Path,
    step: int,
    config: Any,
    resumed: CheckpointPaths | None,
    manifest: Manifest | None,
    trains: bool = True,
) -> str | None:
    """When the config step `step`'s checkpoint was trained with differs from `config` in a
    key that trains: keep it as `config.until_step_<step>.yaml` in `run_dir` and return the
    note naming the changes (None when it is the same: nothing to keep). When no readable
    record of it is found, the note says the settings were not compared and why.
    `manifest`: the step's, which tells a LoRA step (`_weights_not_read`). A run that
    `trains` no step writes no config: nothing is kept or set aside, the changes are named
    as unused.

    `resumed` is the checkpoint loaded; its run dir holds the record (`_trained_with`). None:
    the step is `run_dir`'s own. One of another run dir, resumed into a `run_dir` holding a
    config.yaml with other settings than `config`, is refused (`own_config_note`).

    A kept `config.until_step_<step>.yaml` is that config, and is never replaced: a run
    resumed from the step with other settings and stopped before its next save left its
    own config.yaml, which trained no step that was saved; a second resume from the same
    step had overwritten the kept file with it, and compared against it."""
    trained_in = run_dir
    replaced = ""
    if resumed is not None:
        note = own_config_note(run_dir, config, resumed) if trains else ""
        replaced = f"; {note}" if note else ""
        if resumed.run_dir is None:  # a bare dist_ckpt dir given as checkpoint.resume
            why = f"{resumed.dist_ckpt} is in no run dir, whose config.yaml records them"
            return _not_compared(step, why) + replaced
        trained_in = resumed.run_dir
    record = _trained_with(trained_in, step)
    kept = until_step_file(run_dir, step)
    try:
        earlier = _read_config(record, trained_in)
    except ConfigRecordError as err:
        aside = _set_aside(record, run_dir, kept) if trains else ""
        return _not_compared(step, f"{err}{aside}") + replaced
    changes = _changed_settings(earlier, config, trained_in)
    if not changes:
        return replaced.removeprefix("; ") or None
    source = "" if _same_path(trained_in, run_dir) else f" (trained with {record})"
    if not trains:
        listed = first_of(changes, _SHOWN_CHANGES)
        return (
            f"settings changed since step {step}{source}: {listed}; {_UNUSED}, and {record}"
            f" still records those step {step} was trained with"
        )
    if not _same_path(record, kept):
        # a copy, not a rename: config.yaml stays until the new one replaces it whole, so a
        # full disk meanwhile leaves it (a rename left the run dir without one)
        text = safe_files.read_text(record, MAX_CONFIG_BYTES, trained_in)
        with replacing(kept, f"keep in it the config step {step} was trained with") as out:
            out.write(text.encode())
    listed = first_of(_weights_not_read(changes, step, _lora_base(manifest)), _SHOWN_CHANGES)
    return (
        f"resumed with settings changed since step {step}{source}: {listed};"
        f" the config step {step} was trained with is kept as {kept}{replaced}"
    )


# Keys whose value picks the weights a run starts training from: a resume trains on from
# the step's weights instead. Named like any other change, `model.path None -> 'hf/np2'`
# read as accepted, and the run went on from the step's weights, not hf/np2's. (What a
# resume still reads from model.path, a LoRA run's frozen base and GRPO's reference, is
# checked against the step's record; another architecture is refused as the step loads.)
_START_WEIGHTS = frozenset(
    ("model.path", "model.lora_adapter_path", "model.shape", "model.random_init")
)
# Those of them that pick a LoRA run's frozen base, which a resume reads from them anew.
_BASE_WEIGHTS = frozenset(("model.path", "model.shape", "model.random_init"))


def _lora_base(manifest: Manifest | None) -> bool:
    """Whether the resumed step is a LoRA step whose manifest records its base: the resume
    read the base from this run's model keys and checked it equal to that record
    (`trainer.lora`'s `check_manifest`), so a changed model.path was read, not ignored."""
    return manifest is not None and manifest.lora is not None and manifest.base_model is not None


def _weights_not_read(changes: list[str], step: int, lora_base: bool = False) -> list[str]:
    """`changes` (`changed_keys`'s), those of `_START_WEIGHTS` first, each saying that the
    run continues from step `step`'s weights and how to start from the new ones instead;
    of a LoRA step (`lora_base`), a key that picks the frozen base says that the base is
    read from the new value, checked equal to the one the step was trained on (the line
    said the run trained on from the step's weights, "not the new value's")."""
    said, rest = [], []
    name = layout.step_dir(Path(), step).name
    for change in changes:
        key = change.partition(" ")[0]
        if key not in _START_WEIGHTS:
            rest.append(change)
        elif lora_base and key in _BASE_WEIGHTS:
            said.append(
                f"{change} (the frozen base is read from the new value, checked equal to the"
                f" base {name} was trained on; the adapter trains on from {name}'s)"
            )
        else:
            said.append(
                f"{change} (the run trains on from {name}'s weights, not the new value's;"
                " give a new trainer.run_dir to start from those)"
            )
    return said + rest


def own_config_note(run_dir: Path, config: Any, resumed: CheckpointPaths | None) -> str:
    """What is said of the config.yaml `run_dir` holds, which this run replaces with its own
    (`write_resolved_config`), when it is not the record of the steps this run continues:
    `resumed` is the step of another run this run starts from, None for a fresh start. ""
    when there is none, or it is `resumed`'s own run dir's (a resume of its own steps).

    OwnConfigError naming it, before it is lost: when mfsdp did not write it
    (`_written_by_mfsdp`: a config of the user's, the very --config file the run reads
    included, whose comments and values a fresh run replaced without a word, the
    command-line overrides baked in), when it cannot be read, or when it records other
    settings than this run's and is not an earlier attempt of this same start
    (`_earlier_attempt`), whose changed settings the note names. The same settings are
    named as replaced only on a resume."""
    own = run_dir / RESOLVED_CONFIG_FILE
    if resumed is not None and resumed.run_dir is not None and _same_path(resumed.run_dir, run_dir):
        return ""
    if not os.path.lexists(own):
        return ""
    where = None if resumed is None else resumed.step_dir or resumed.dist_ckpt
    starting = "training" if where is None else f"resuming {where}"
    recorded: dict[str, Any] = {}
    try:
        recorded = _read_config(own, run_dir)
        changes = _changed_settings(recorded, config, run_dir)
    except ConfigRecordError as err:
        changes = [f"it cannot be read: {err}"]
    if recorded and not _written_by_mfsdp(own, recorded, run_dir):
        raise OwnConfigError(
            f"{own}: not a config mfsdp wrote (a file of yours, the --config file itself"
            f" maybe), and {starting} into {run_dir} would replace it with this run's config;"
            " keep it outside the run dir, or give another trainer.run_dir"
        )
    listed = first_of(changes, _SHOWN_CHANGES)
    if not changes:
        settings = "the same settings"
    elif _earlier_attempt(run_dir, recorded, config.checkpoint.resume, resumed):
        since = "that saved no step" if resumed is None else "from the same step that saved none"
        settings = f"an earlier run {since}: {listed}"
    else:
        raise OwnConfigError(
            f"{own}: records other settings than this run's ({listed}), and {starting}"
            f" into {run_dir} would replace it with this run's config;"
            f" {_keep_own(run_dir, recorded)}"
        )
    if where is None:
        return f"{own} ({settings}) is replaced by this run's config" if changes else ""
    return f"{own} ({settings}) is replaced by this run's config, resumed from {where}"


def _written_by_mfsdp(own: Path, recorded: dict[str, Any], run_dir: Path) -> bool:
    """Whether `own`, read as `recorded`, is in the form `write_resolved_config` writes: the
    text `dump_yaml` makes of what it holds, so no comment, no key of another layout. A
    file the user wrote (or kept there as its --config) is not; replaced, it was lost."""
    try:
        return safe_files.read_text(own, MAX_CONFIG_BYTES, run_dir) == dump_yaml(recorded)
    except OSError:  # read a moment ago: what else it is now is not mfsdp's either
        return False


def _earlier_attempt(
    run_dir: Path, recorded: dict[str, Any], resume: str, resumed: CheckpointPaths | None
) -> bool:
    """Whether `run_dir`'s config.yaml, recording `recorded`, is that of an earlier run of this
    same start that stopped before its first save: `run_dir` holds no step, and for a fresh
    start (`resumed` None) that is all (the file is mfsdp's, checked before: one of a run dir
    since moved or copied, whose recorded run_dir is another, trained nothing either); for a
    resume (`checkpoint.resume=resume`, loaded as `resumed`) its `checkpoint.resume` names
    the same checkpoint, however spelled (its step dir or its dist_ckpt, through a link; a
    relative one read from where that run started, or spelled as `resume` where that is not
    known). Such a file trained nothing there; for a resume, one of another source, or none,
    may be the user's (a copy of another run's config, given as --config)."""
    if run_steps.list_complete_steps(run_dir):
        return False
    if resumed is None:
        return True
    began = _dotted(recorded, "checkpoint.resume")
    if not isinstance(began, str) or began in ("auto", "disable"):
        return False
    place = _place(began, _started_in(recorded, run_dir))
    if place is None:  # relative, and where that run started is not known
        place = resume if _same_file(began, resume, None) else None
    if place is None:
        return False
    try:
        return _same_path(
            checkpoint_resolution.resolve_checkpoint(place).dist_ckpt, resumed.dist_ckpt
        )
    except (MfsdpError, OSError):  # it names no checkpoint (now): not this resume's
        return False


def _keep_own(run_dir: Path, recorded: dict[str, Any]) -> str:
    """What a refused resume into `run_dir`, whose config.yaml records `recorded`, should do
    instead. A run dir holding steps of its own: the file is theirs, and its
    `checkpoint.resume` names the step of another run they began from, so `--config
    RUN/config.yaml` resumes that step again; moving the file away, as once advised, trained
    over the run dir's own steps. Else the file is the config of a run that saved no step
    there, or the user's."""
    steps = run_steps.list_complete_steps(run_dir)
    if not steps:
        return "move it away, or give another trainer.run_dir"
    newest = layout.step_dir(run_dir, steps[-1])
    began = _dotted(recorded, "checkpoint.resume")
    pinned = (
        f", and pins checkpoint.resume={began}" if began not in (None, "auto", "disable") else ""
    )
    return (
        f"it is the config of {run_dir}'s own steps (up to {newest}){pinned}: give"
        " checkpoint.resume=auto to continue them, or another trainer.run_dir"
    )


def _changed_settings(earlier: dict[str, Any], config: Any, trained_in: Path) -> list[str]:
    """`changed_keys` between the config recorded in run dir `trained_in` and `config`, each
    path key compared by the file it names (`_recorded_as_now`), and a key the record lacks
    compared with its default (the mfsdp that wrote the record had no such key)."""
    started_in = _started_in(earlier, trained_in)
    compared = copy.deepcopy(earlier)
    for key, now in path_values(config):
        then = _dotted(earlier, key)
        if then is not None:
            set_dotted(compared, key, _recorded_as_now(then, now, started_in))
    return changed_keys(compared, config_to_dict(config), config_to_dict(type(config)()))


def _recorded_as_now(then: Any, now: Any, started_in: Path | None) -> Any:
    """The recorded value `then` of a path key, as compared with this run's `now`: `now` when
    each of its paths names the file this run's does; where a path spelled alike names
    another file (the run was started from another directory), that file, so the note
    shows the change; else `then` as recorded."""
    paired = _path_pairs(then, now)
    if paired is None:
        return then
    if all(_same_file(old, new, started_in) for old, new in paired):
        return now
    if then == now:
        places = [_place(old, started_in) or old for old, _ in paired]
        return places if isinstance(then, list) else places[0]
    return then


def _path_pairs(then: Any, now: Any) -> list[tuple[str, str]] | None:
    """The recorded and current paths of one key side by side (a list key item by item), or
    None when they are not alike in shape (one path against a list, lists of other lengths)."""
    olds, news = (value if isinstance(value, list) else [value] for value in (then, now))
    if type(then) is not type(now) or len(olds) != len(news):
        return None
    if not all(isinstance(path, str) for path in (*olds, *news)):
        return None
    return list(zip(olds, news, strict=True))


def _same_file(then: str, now: str, started_in: Path | None) -> bool:
    """Whether the recorded path `then` (relative ones read from `started_in`) and this run's
    `now` (read from this process's directory) name the same file. A relative `then` whose
    starting directory is not known is compared by its spelling (`./a/` is `a`)."""
    place = _place(then, started_in)
    if place is None:
        return not os.path.isabs(now) and Path(then).parts == Path(now).parts
    return place == os.path.realpath(now)


def _place(path: str, started_in: Path | None) -> str | None:
    """The file `path` names, links resolved; None for a relative one whose starting
    directory is not known."""
    if os.path.isabs(path):
        return os.path.realpath(path)
    return None if started_in is None else os.path.realpath(started_in / path)


def _started_in(earlier: dict[str, Any], trained_in: Path) -> Path | None:
    """The directory the run that recorded `earlier` was started in, which its relative paths
    were read from: the one from which its recorded relative `trainer.run_dir` leads to
    `trained_in`, where the record is. This process's directory and `trained_in`'s parents
    are tried; None when the recorded run_dir is absolute (nothing records where the run
    started), none of them leads there, or two different ones do."""
    given = _dotted(earlier, "trainer.run_dir")
    if not isinstance(given, str) or not given or os.path.isabs(given):
        return None
    here = os.path.realpath(trained_in)
    depth = len(Path(given).parts)
    tried = [Path.cwd()]
    if ".." not in Path(given).parts:
        for seen in (Path(here), Path(os.path.abspath(trained_in))):
            if 0 < depth <= len(seen.parents):
                tried.append(seen.parents[depth - 1])
    found = {os.path.realpath(d) for d in tried if os.path.realpath(d / given) == here}
    return Path(found.pop()) if len(found) == 1 else None


def _dotted(tree: dict[str, Any], dotted: str, missing: Any = None) -> Any:
    """The value at `a.b.c` of a nested dict, `missing` where a part is missing."""
    node: Any = tree
    for part in dotted.split("."):
        node = node.get(part, missing) if isinstance(node, dict) else missing
    return node


def _trained_with(run_dir: Path, step: int) -> Path:
    """The file in `run_dir` that records the config its step `step` was trained with: the
    config kept when a step N >= `step` was resumed with other settings (the smallest such
    N: steps up to N were trained with it), else config.yaml. The exact N alone was looked
    up: step 2 of a run continued from step 4 with `trainer.total_steps` 4 -> 6 was
    compared with (and its record kept as) the later config, total_steps 6. The file named
    for `step` itself is its record whatever its mtime says: a copy made without keeping
    mtimes (`cp -r`, `scp -r`) can make it look older than the step, and a later N's file,
    whose mtime alone says whether it was kept after this step was saved, was taken."""
    for until in _kept_until_steps(run_dir):
        kept = until_step_file(run_dir, until)
        if until == step or (until > step and _kept_for_this_step(kept, run_dir, step)):
            return kept
    return run_dir / RESOLVED_CONFIG_FILE


def _not_compared(step: int, why: str) -> str:
    """The note of a resume whose settings could not be compared, and `why`."""
    return f"settings not compared with those step {step} was trained with: {why}"


def _set_aside(record: Path, run_dir: Path, kept: Path) -> str:
    """Move a damaged `run_dir/config.yaml` to `kept` when it is the record: this run
    replaces config.yaml with its own, and a file the user may mend must not vanish. What
    is said about it; nothing is moved from another run dir, which this run never writes."""
    if not _same_path(record, run_dir / RESOLVED_CONFIG_FILE) or not _regular(record):
        return ""
    try:
        os.replace(record, kept)
        os.utime(kept)  # kept now: `_kept_for_this_step` takes it as this step's record
    except OSError as err:
        raise RunFileError(
            f"{record}: cannot keep it aside as {kept} ({err.strerror or err}) before this run"
            " writes its own config.yaml; it is left as it was"
        ) from None
    return f"; its bytes are kept as {kept}"


def _regular(path: Path) -> bool:
    return os.path.isfile(path) and not os.path.islink(path)


def _same_path(one: Path, other: Path) -> bool:
    """Whether two names reach the same place (a run dir given through a link included)."""
    return os.path.realpath(one) == os.path.realpath(other)


def _kept_for_this_step(kept: Path, run_dir: Path, step: int) -> bool:
    """Whether `kept` records the config of the step-`step` checkpoint now in the run dir: it
    was kept when that checkpoint (or a later step of the same run) was resumed, so after it
    was saved. One older than the checkpoint is an earlier run's whose steps were removed (a
    user starting over in the same run dir), or one kept before the step was trained anew
    from an earlier step: taken as this step's, it named changes against other settings."""
    try:
        kept_at = kept.stat().st_mtime
    except OSError:
        return False
    try:
        saved_at = (layout.step_dir(run_dir, step) / layout.MANIFEST_FILE).stat().st_mtime
    except OSError:  # the step is gone from the run dir: the kept file is the run's record
        return True
    return kept_at >= saved_at


def until_step_file(run_dir: Path, step: int) -> Path:
    """Where the config the steps up to `step` were trained with is kept."""
    return run_dir / f"config.until_step_{step}.yaml"


_UNTIL_STEP_NAME = re.compile(r"config\.until_step_([0-9]+)\.yaml")


def _kept_until_steps(run_dir: Path) -> list[int]:
    """The steps N of the `until_step_file`s `run_dir` holds, smallest first; none where it
    cannot be listed (a run dir not made yet)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    return sorted(int(m[1]) for m in map(_UNTIL_STEP_NAME.fullmatch, names) if m is not None)


def _read_config(path: Path, run_dir: Path) -> dict[str, Any]:
    """The config recorded in `path`, read inside `run_dir` within the bounds of a config
    file; ConfigRecordError naming it when it is missing, unreadable or no mapping."""
    if not os.path.lexists(path):
        raise ConfigRecordError(f"{path}: missing")
    try:
        recorded = parse_yaml(safe_files.read_text(path, MAX_CONFIG_BYTES, run_dir), str(path))
    except OSError as err:  # CheckpointFileError names the file already
        raise ConfigRecordError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
    except ValueError as err:  # YAMLConfigError too (it names the file): an alias bomb
        raise ConfigRecordError(str(err)) from None
    if not isinstance(recorded, dict):
        raise ConfigRecordError(f"{path}: not a mapping of config keys")
    return recorded


def changed_keys(
    earlier: dict[str, Any], now: dict[str, Any], defaults: dict[str, Any] | None = None
) -> list[str]:
    """What differs between the recorded config `earlier` and `now`, dotted key by key: values
    changed (`key: old -> new`) first, then keys `earlier` lacks (`new key X = v`), then keys
    `now` lacks (`X = v (no longer a key)`). A key `earlier` lacks whose value now is its
    default in `defaults` is no change: the record was written by an mfsdp that had no such
    key, so it could not have been set. Listed as changes, the keys a newer mfsdp added came
    first in key order and hid the one setting the user did change behind "(+N more)".
    A key of `_LEGACY_VALUES` is compared with the value the record trained as instead, and
    a difference is a changed value, with the setting that keeps the record's behaviour."""
    changed: list[str] = []
    added: list[str] = []
    dropped: list[str] = []
    known = defaults or {}
    for dotted, old, new in _differing(earlier, now, known):
        if old is _ABSENT and dotted in _LEGACY_VALUES:
            then = _LEGACY_VALUES[dotted](earlier)
            if new != then:
                changed.append(
                    f"{dotted} {then!r} -> {new!r} (no such key when the step was trained,"
                    f" which trained as {then}: {dotted}={then} keeps that)"
                )
        elif old is _ABSENT:
            if new != _dotted(known, dotted, _ABSENT):
                added.append(f"new key {dotted} = {new!r}")
        elif new is _ABSENT:
            dropped.append(f"{dotted} = {old!r} (no longer a key)")
        else:
            changed.append(f"{dotted} {old!r} -> {new!r}")
    return changed + added + dropped


def _both_sections(old: Any, new: Any, default: Any) -> bool:
    """Whether `old` and `new` are a section of the config to compare key by key: both
    dicts (a mapping setting, empty by default, is one value), or one a section the record
    lacks (an older mfsdp had no such section: its keys are each new, not the section whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return default != {}
    one_absent = (old is _ABSENT and isinstance(new, dict)) or (
        new is _ABSENT and isinstance(old, dict)
    )
    return one_absent and isinstance(default, dict) and default != {}


def _entries(section: Any) -> dict[str, Any]:
    return {} if section is _ABSENT else section


def _differing(
    earlier: dict[str, Any], now: dict[str, Any], defaults: Any, prefix: str = ""
) -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, recorded value, value now) of each key whose values differ, in key order,
    `_ABSENT` for the side that lacks it; the keys of how the run was started left out. A
    section is compared key by key; a mapping setting (`model.overrides`, empty by default)
    as one value, so an entry of it is never taken for a key of the config."""
    for key in sorted(set(earlier) | set(now), key=str):
        dotted = f"{prefix}{key}"
        old, new = earlier.get(key, _ABSENT), now.get(key, _ABSENT)
        default = defaults.get(key, _ABSENT) if isinstance(defaults, dict) else _ABSENT
        if _both_sections(old, new, default):
            yield from _differing(_entries(old), _entries(new), default, f"{dotted}.")
        elif old != new and dotted not in _HOW_STARTED:
            yield dotted, old, new
