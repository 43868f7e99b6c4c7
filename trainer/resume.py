"""Resume a run where its newest checkpoint left off, and refuse when that would be wrong.

Every runner (SFT, GRPO) places data by the step alone: a step's rows are a function of
(global batch size, number of training rows, seed, shuffle, step) (`trainer.data.batching`).
So a checkpoint stores just those numbers next to the weights and optimizer, and resume is:
load them, then check that this run would map steps to the same rows. One place does this so
the runners cannot drift apart in what they check.

Rows edited or reordered with their count unchanged, or `data.shuffle` flipped, place steps
on other rows too, but fixing the data is legitimate: the checkpoint also stores a digest of
the training rows in order, one of their prompts as the data file holds them, and the
shuffle flag, and a resume that differs in them is told so in one warning line
(`data_change_warning`), not refused. An SFT digest is of the rows' trained tokens: where
it differs but the prompts' matches, the rows are the same and their trained tokens are
not (another template, or a step an older mfsdp trained with its loss mask), and the line
says that, not that the steps read other rows. An SFT checkpoint saved before the digests
were stored is told that its trained tokens cannot be compared (it was resumed without a
word, onto a loss mask that has changed since); a GRPO one resumes without that line.

A checkpoint is resumed only by the kind of run that wrote it (`check_run_kind`): GRPO
continuing an SFT step took its step count and Adam state as its own.

A step is resumed only into a run dir that holds no complete step after it
(`refuse_saving_over_newer_steps`): another run's step 2 resumed into a run dir at its own
step 4 (the run dir's config.yaml records `checkpoint.resume` of the step it began from, so
`--config RUN/config.yaml` does that) trained steps 3-4 again and saved over its step 4, and
a rollback to the run dir's own step 2 did the same. Rolling back is done by moving the
later steps away first. `checkpoint.resume=auto` resumes the tracker's step, as verl and
Megatron-LM resume theirs, over any complete step dirs past it (saves stopped before the
tracker's update, one per interrupted run, or a tracker set back), each named in one note
(`trained_over_note`) with the `checkpoint.resume` that continues the newest instead.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mfsdp_ckpt.check.removed_while_read import removal_of
from mfsdp_ckpt.convert.hf_config import SIZE_KEYS, HFConfigError, load_hf_config
from mfsdp_ckpt.errors import MfsdpError, MfsdpUsageError
from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.lora_fields import base_weights_dir
from mfsdp_ckpt.format.manifest import CONTENT_KINDS, Manifest, ManifestError, read_manifest
from mfsdp_ckpt.format.newer_steps import newer_than_tracked
from mfsdp_ckpt.lora import read_base_model
from trainer.config import end_step
from trainer.resume_key import WORDS as RESUME_WORDS
from trainer.resume_key import named_resume_error
from trainer.resume_state import STEP, check_trainer_state

if TYPE_CHECKING:  # torch loads with it: the names here are read without it
    from mfsdp_ckpt.checkpointer import Checkpointer

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


class NewerStepsError(MfsdpUsageError, ValueError):
    """The run dir holds complete steps after the step resumed, which this run's saves would
    replace with steps of another history."""


@dataclass(frozen=True)
class RunKind:
    """A kind of training run as resume names it: `name` ("sft", "grpo": `mfsdp train NAME`,
    recorded in every manifest's info as `run`), and the config keys behind the numbers that
    place its data (`DATA_POSITION_KEYS`), so a refusal names what the user sets."""

    name: str
    batch_key: str  # the key whose value is global_batch_size
    rows_keys: tuple[str, ...]  # the keys that decide which rows train

    def key_for(self, position_key: str) -> str:
        return {"global_batch_size": self.batch_key, "seed": "trainer.seed"}[position_key]


RUN_INFO_KEY = "run"  # manifest info: the kind of run that wrote the checkpoint


def run_kind_of(info: dict[str, Any]) -> str | None:
    """The kind of run that wrote a checkpoint, from its manifest's info: `run` where it is
    recorded, else (checkpoints saved before it was) what only that kind saves: GRPO its
    `reference_model` and `rollout`, SFT its `train_loss`. None for other writers."""
    recorded = info.get(RUN_INFO_KEY)
    if isinstance(recorded, str):
        return recorded
    if "reference_model" in info or "rollout" in info:
        return "grpo"
    return "sft" if "train_loss" in info else None


ROWS_DIGEST, SHUFFLE = "rows_digest", "shuffle"  # compared on resume, warned about
PROMPTS_DIGEST = "prompts_digest"  # the rows' prompts as the data file holds them
# their turns' other keys (`name`, `reasoning_content`, ...), recorded apart so that
# PROMPTS_DIGEST keeps the form checkpoints recorded before those keys reached the template
PROMPT_KEYS_DIGEST = "prompt_keys_digest"


def new_progress(
    global_batch_size: int,
    train_rows: int,
    seed: int,
    rows_digest: int,
    shuffle: bool,
    prompts_digest: int,
    prompt_keys_digest: int | None = None,
) -> dict[str, int]:
    """The checkpoint's `extra` state: the step plus what places a step's data.
    `prompt_keys_digest` (`PROMPT_KEYS_DIGEST`) is recorded where given."""
    progress = {
        "step": 0,
        "global_batch_size": global_batch_size,
        "train_rows": train_rows,
        "seed": seed,
        ROWS_DIGEST: rows_digest,
        SHUFFLE: int(shuffle),
        PROMPTS_DIGEST: prompts_digest,
    }
    if prompt_keys_digest is not None:
        progress[PROMPT_KEYS_DIGEST] = prompt_keys_digest
    return progress


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


class PromptedRow(Protocol):
    """A training row with its prompt's turns as the data file holds them (SFT's and GRPO's)."""

    @property
    def prompt(self) -> tuple[str, ...]: ...

    @property
    def prompt_keys(self) -> tuple[str, ...]: ...


Row = TypeVar("Row", bound=PromptedRow)


def rows_digests(
    rows: Sequence[Row], parts: Callable[[Row], Sequence[RowPart]]
) -> tuple[int, int, int]:
    """What a run's trainer state records of its rows (`new_progress`: ROWS_DIGEST,
    PROMPTS_DIGEST, PROMPT_KEYS_DIGEST), and the machines of a run compare
    (`trainer.machines_read`): each row's `parts` (what it trains on), its prompt's turns and
    those turns' other keys."""
    return (
        rows_digest(parts(row) for row in rows),
        rows_digest(row.prompt for row in rows),
        rows_digest(row.prompt_keys for row in rows),
    )


ManifestCheck = Callable[[Manifest | None, CheckpointPaths], None]


def resume_if_any(
    checkpointer: Checkpointer,
    resume: str,
    states: dict[str, Any],
    kind: RunKind,
    model_config: dict[str, Any] | None = None,
    checks: Sequence[ManifestCheck] = (),
) -> CheckpointPaths | None:
    """Load the checkpoint `resume` names ("auto", "disable" or a path) into `states`.

    `states["extra"]` is the run's progress dict (`new_progress`); after the load it holds the
    checkpoint's trainer state as saved (one saved before a digest was recorded lacks it:
    `data_change_warning` says so). The checkpoint must have been written by this `kind` of run, and
    `model_config` (the run's HF config as a dict) must agree with the step's
    huggingface/config.json, and its adapter rank with this run's (`states["model"]`'s
    `lora_rank`, which a LoRA run's model state has: `trainer.lora.AdapterState`). `checks`
    then see the manifest once the step's data position is known to fit (GRPO: its KL
    reference). Returns the checkpoint loaded, or None when the run starts fresh.
    """
    found = resume_target(
        checkpointer.run_dir, resume, kind, model_config, find=checkpointer.find_resume
    )
    if found is None:
        return None
    with removal_of(found):  # another run's keep_last removing it meanwhile: said to be so
        model = states.get("model")  # a LoRA run's: its rank, and the adapter dir it is from
        check_lora_rank(
            found, getattr(model, "lora_rank", 0), getattr(model, "adapter_config", None)
        )
        progress = states["extra"]
        expected = dict(progress)
        manifest = checkpointer.load(found, states)
    check_trainer_state(progress, found, manifest)  # its numbers, before any is used
    if found.step is None:  # a bare dist_ckpt: its step is known once its state is loaded
        refuse_saving_over_newer_steps(checkpointer.run_dir, found, progress[STEP], resume)
    check_data_position(expected, progress, found.dist_ckpt, kind)
    for check in checks:
        check(manifest, found)
    return found


def resume_target(
    run_dir: Path,
    resume: str,
    kind: RunKind,
    model_config: dict[str, Any] | None = None,
    *,
    find: Callable[[str], CheckpointPaths | None] | None = None,
) -> CheckpointPaths | None:
    """The checkpoint `resume` names in `run_dir` ("auto", "disable" or a path), refused for
    what its files and the run's config alone tell: another trainer's layout (verl,
    Megatron-LM: `checkpointer.find_resume`), this run dir's own newer steps, a step another
    kind of run wrote, another model config, a manifest without optimizer or trainer state.
    No model, checkpointer or file write is needed, so a runner asks before it builds
    anything (GRPO before its rollout engine starts and writes its model dir into the run
    dir); `resume_if_any` asks again when it loads. `find`: the lookup (default
    `checkpointer.find_resume` in `run_dir`). What needs the model or the saved state (the
    adapter rank, the keys and shapes, the data position) is checked at the load. A path
    that names no checkpoint is refused naming `checkpoint.resume` (`named_resume_error`)."""
    from mfsdp_ckpt.checkpointer import find_resume, refuse_absent_contents

    try:
        found = _found_by_rank_0(find or partial(find_resume, run_dir), resume)
    except MfsdpError as err:
        if resume in RESUME_WORDS:  # auto's problems are the run dir's, named by it
            raise
        raise named_resume_error(resume, err) from None
    if found is None:
        return None
    refuse_saving_over_named_step(run_dir, found, resume)
    with removal_of(found):  # another run's keep_last removing it meanwhile: said to be so
        check_run_kind(found, resume, kind)
        if model_config is not None:
            check_model_config(found, model_config)
        manifest = manifest_of(found)
        if manifest is not None:
            refuse_absent_contents(found, manifest, CONTENT_KINDS)
    return found


def _found_by_rank_0(
    find: Callable[[str], CheckpointPaths | None], resume: str
) -> CheckpointPaths | None:
    """The checkpoint `resume` names (`find`: `Checkpointer.find_resume`), looked up by rank 0
    alone and handed to every rank. Each rank looking it up itself, the dir of another run still
    saving resolved to its newest step in each process at its own moment: a save committing
    in between had the ranks load different steps into one model. One that rank 0 cannot
    look up fails it, and each other rank looks it up itself, which says the same."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return find(resume)
    handed: list[Any] = [None]
    try:
        if dist.get_rank() == 0:
            handed[0] = (find(resume),)
    finally:  # a failure hands over None: the others are not left waiting
        dist.broadcast_object_list(handed, src=0)
    if handed[0] is None:
        return find(resume)
    found: CheckpointPaths | None = handed[0][0]
    return found


def refuse_saving_over_named_step(run_dir: Path, found: CheckpointPaths, resume: str) -> None:
    """`refuse_saving_over_newer_steps` for the checkpoint `found` whose step its name tells,
    before the load, not after it: `resume_target` asks it, and so does the launching
    process before torch loads (`local_paths.check_run_dir_steps`, for `config check` and
    `mfsdp train`), which otherwise passed a path train refused once the model was built.
    A bare dist_ckpt's step is known once its state is loaded (`resume_if_any` asks then)."""
    if found.step is not None:
        refuse_saving_over_newer_steps(run_dir, found, found.step, resume)


def refuse_saving_over_newer_steps(
    run_dir: Path, found: CheckpointPaths, step: int, resume: str
) -> None:
    """NewerStepsError (exit 2) when `run_dir` holds complete steps after `step`, the step of
    the checkpoint `found` resumed (`resume`: how it was named): this run's saves would
    replace them, or sit beside them, with steps of another history. Whatever else a save
    after `step` would replace is refused too (`run_steps.refuse_replacing_steps`: a file or an
    incomplete step dir at a step's name; `checkpoint.resume=auto` checks it already).

    The run dir's own step resumed on purpose to train again from it (a rollback) is refused
    alike: its later steps are the user's to move away first, as `checkpoint.keep_last`
    only ever removes steps older than the newest; the newest is named by its path, the
    `checkpoint.resume` that continues it (auto resumes the tracker's step, which may be
    older). `checkpoint.resume=auto` is not refused: the tracker is a save's commit point,
    and complete step dirs past it are saves killed between their rename and the tracker's
    update (one per run stopped so; a save schedule changed since leaves an earlier one
    standing) or a tracker set back. Which it is, the dirs cannot tell; auto resumes the
    tracker's step as verl and Megatron-LM do, trains on over them as after any crash
    mid-save ("run the same command again"), and `trained_over_note` names each."""
    if resume == "auto":
        return
    newer = [n for n in run_steps.list_complete_steps(run_dir) if n > step]
    if newer:
        where = found.step_dir or found.dist_ckpt
        newest = layout.step_dir(run_dir, newer[-1])
        raise NewerStepsError(
            f"{run_dir}: holds its own steps after step {step} (up to {newest}); resuming"
            f" {where} into it trains them again and saves over them: give"
            f" checkpoint.resume={newest} to continue from step {newer[-1]}, or another"
            f" trainer.run_dir (to train again from step {step} here, move"
            f" {_step_names(newer)} away first)"
        )
    run_steps.refuse_replacing_steps(run_dir, step)


def trained_over_note(run_dir: Path, resumed: CheckpointPaths) -> str | None:
    """The note of a run that resumed `resumed` and trains over the complete step dirs of
    `run_dir` past it (`checkpoint.resume=auto` resumes the tracker's step over any:
    `refuse_saving_over_newer_steps`), each named (the newest few of many), in the words
    `ckpt validate` and `export-hf` say of a step past another trainer's tracker
    (`newer_than_tracked`). None when there is none, or `resumed` is another run dir's
    step. They were replaced, or left beside the run's new steps, without a line."""
    if resumed.step is None or resumed.run_dir is None:
        return None
    if os.path.realpath(resumed.run_dir) != os.path.realpath(run_dir):
        return None
    newer = [n for n in run_steps.list_complete_steps(run_dir) if n > resumed.step]
    steps = {layout.step_dir(run_dir, n).name: layout.step_dir(run_dir, n) for n in newer}
    return newer_than_tracked(run_dir, str(resumed.step), steps, resumed=True)


def _step_names(steps: list[int]) -> str:
    """The step dirs of `steps` (ascending), the first and last of more than two."""
    names = [layout.step_dir("", n).name for n in steps]
    if len(names) <= 2:
        return " and ".join(names)
    return f"{names[0]} .. {names[-1]} ({len(names)} step dirs)"


def check_run_kind(found: CheckpointPaths, resume: str, kind: RunKind) -> None:
    """ResumeMismatchError when another kind of run wrote the checkpoint: its step count and
    optimizer state are that run's (SFT's Adam moments continued as GRPO's). Starting from
    its weights is what works: `model.path` takes the step dir (a LoRA step, its export)."""
    manifest = manifest_of(found)
    written = run_kind_of(manifest.info) if manifest is not None else None
    if manifest is None or written is None or written == kind.name:
        return
    where = found.step_dir or found.dist_ckpt
    fresh = "a new trainer.run_dir" + ("" if resume == "auto" else " and checkpoint.resume=auto")
    refused = (
        f"{where}: `mfsdp train {written}` wrote this checkpoint; `mfsdp train {kind.name}`"
        " does not resume its step and optimizer state as its own"
    )
    if manifest.lora is not None and base_weights_dir(read_base_model(manifest)) is None:
        raise ResumeMismatchError(
            f"{refused}, and it holds a LoRA adapter on a random-init base: no weights to"
            f" start from (export-hf has nothing to merge it onto); give {fresh}"
        )
    start = f"model.path={where}"
    if manifest.lora is not None:  # model.path refuses an adapter alone
        start = f"`mfsdp ckpt export-hf {where} --out DIR`, then model.path=DIR"
    raise ResumeMismatchError(
        f"{refused}: to start {kind.name} from its weights, give {start} and {fresh}"
    )


def manifest_of(found: CheckpointPaths) -> Manifest | None:
    """The checkpoint's manifest, None where it has none or it cannot be read (the load
    names what is wrong with it)."""
    if found.manifest is None:
        return None
    try:
        return read_manifest(found.manifest)
    except (ManifestError, OSError):
        return None


def check_lora_rank(found: CheckpointPaths, rank: int, adapter_config: Path | None = None) -> None:
    """ResumeMismatchError naming model.lora_rank when the training run that wrote the
    checkpoint had another adapter rank than this run's `rank` (its manifest records the
    adapter's PEFT config, `r` in it; none: a full-parameter run; 0 here: none). Checked
    before the load, which refused the same step by tensor names (a full-parameter step
    resumed with an adapter, or the other way) or by shapes (another rank), not by the key.
    A rank that is the `r` of this run's adapter dir (`adapter_config`) is named as that
    file's, with what resumes the step: model.lora_rank is not used beside it, and "set it
    back" named a key no value of which cleared the refusal."""
    manifest = manifest_of(found)
    if manifest is None or run_kind_of(manifest.info) is None:  # no training run's step
        return
    lora = manifest.lora if isinstance(manifest.lora, dict) else None
    trained = lora.get("r") if lora is not None else 0
    if not isinstance(trained, int) or trained == rank:
        return
    was = f"with model.lora_rank={trained}" if trained else "without LoRA (model.lora_rank=0)"
    has = f"model.lora_rank={rank}" if rank else "model.lora_rank=0 (no LoRA)"
    remedy = "set it back"
    if adapter_config is not None:  # imported here: torch is not loaded where this module is
        from trainer.lora_adapter_dir import adapter_resume_remedy, set_by_adapter

        was = f"with r {trained}" if trained else was
        has = set_by_adapter(adapter_config, "r", rank)
        remedy = adapter_resume_remedy(lora or {}, found.run_dir)
    raise ResumeMismatchError(
        f"{found.manifest}: checkpoint was trained {was}, this run has {has}: {remedy}"
        " (or a new trainer.run_dir to start over)"
    )


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


def check_data_position(
    expected: dict[str, Any], restored: dict[str, Any], where: Path, kind: RunKind
) -> None:
    """Raise ResumeMismatchError when the checkpoint's steps would map to other data in this
    run, naming the config keys that differ (for the row count, the keys that decide it)."""
    for key in DATA_POSITION_KEYS:
        then, now = int(restored[key]), int(expected[key])
        if then == now:
            continue
        if key == "train_rows":
            what = (
                f"checkpoint was trained on {then} training rows, this run has {now}"
                f" ({', '.join(kind.rows_keys)} decide them)"
            )
        else:
            setting = kind.key_for(key)
            what = f"checkpoint was trained with {setting}={then}, this run has {setting}={now}"
        raise ResumeMismatchError(
            f"{where}: {what}; steps would map to different data"
            " (use a new trainer.run_dir to start over)"
        )


# Why an unchanged data file's SFT rows digest differently (`ROWS_DIGEST` is of their trained
# tokens): a GRPO run's digest is of the rows' own values, so its warning never says this.
_RETOKENIZED = (
    ", or rows that tokenize to other trained tokens (another chat template or tokenizer, or"
    " prompt/response rows trained before mfsdp tokenized them as verl's SFTDataset does)"
)
_DIGESTS_TOKENS = "sft"  # the kind of run whose ROWS_DIGEST is of the rows' trained tokens
# The loss mask an SFT step trains changed on that day (5ec4898), and its tokens' digest was
# first recorded the day before it (459dd17), with the warmup verl computes (940826c).
_MASK_SINCE, _DIGEST_SINCE = "2026-12-05", "2026-12-03"


def data_change_warning(
    kind: RunKind,
    expected: dict[str, Any],
    restored: dict[str, Any],
    where: Path,
    train_files: Sequence[str],
) -> str | None:
    """One line when the checkpoint was trained on other rows, or rows in another order, or
    rows an SFT run now tokenizes to other trained tokens (`ROWS_DIGEST`), or rows whose
    prompts were edited (`PROMPTS_DIGEST`, and `PROMPT_KEYS_DIGEST` where both record it),
    or with the other `data.shuffle`: the steps after it then read other rows than an
    uninterrupted run would. An SFT step whose trained tokens differ on the same prompts in
    the same order read the same rows: the line names what changes the tokens instead
    (`_retrained`). None when they agree; a checkpoint that predates the digests is not
    compared, and in SFT says so (`_not_compared`). `kind`: the run resuming; tokenizing is
    named as a cause in SFT only (`_RETOKENIZED`)."""
    step = int(restored["step"])
    files = ", ".join(train_files)
    tokens = kind.name == _DIGESTS_TOKENS
    if ROWS_DIGEST not in restored:
        return _not_compared(where) if tokens else None
    reasons, retrained = [], False
    if int(restored[ROWS_DIGEST]) != int(expected[ROWS_DIGEST]):
        retrained = (
            tokens and PROMPTS_DIGEST in restored and not _prompts_differ(expected, restored)
        )
        reasons.append(
            _retrained(files)
            if retrained
            else f"data.train_files ({files}) hold other rows, or rows in another order, than"
            f" the checkpoint was trained on{_RETOKENIZED if tokens else ''}"
        )
    elif PROMPTS_DIGEST in restored and _prompts_differ(expected, restored):
        reasons.append(
            f"data.train_files ({files}) hold other prompts than the checkpoint was trained on"
        )
    if SHUFFLE in restored and int(restored[SHUFFLE]) != int(expected[SHUFFLE]):
        now, then = (str(bool(x[SHUFFLE])).lower() for x in (expected, restored))
        reasons.append(
            f"data.shuffle={now} but the checkpoint was trained with data.shuffle={then}"
        )
        retrained = False  # the rows each step reads differ too
    if not reasons:
        return None
    then = (
        "train other tokens of the rows an uninterrupted run reads"
        if retrained
        else "read other rows than an uninterrupted run would"
    )
    return (
        f"warning: {where}: {'; '.join(reasons)}: the steps after {step} {then}"
        " (a new trainer.run_dir starts over)"
    )


def _retrained(files: str) -> str:
    """Why an SFT run's trained tokens differ from the checkpoint's on the same prompts in
    the same order: the rows are the same, the tokens trained of them are not (it said the
    steps read other rows, and named only causes that were false for a file nobody touched,
    resumed by a newer mfsdp)."""
    return (
        f"data.train_files ({files}) hold the prompts the checkpoint was trained on, in its"
        " order, but their trained tokens differ: another tokenizer or chat template, edited"
        " responses, or a step written by an mfsdp before its loss-mask change of"
        f" {_MASK_SINCE}, which did not train the newline after each assistant turn's"
        " end-of-turn token (this mfsdp masks as verl's MultiTurnSFTDataset), or"
        " prompt/response rows trained before mfsdp tokenized them as verl's SFTDataset does"
    )


def _not_compared(where: Path) -> str:
    """The line of an SFT checkpoint saved before its trained tokens' digest was recorded:
    the mask and warmup changed since, and nothing in it says which it was trained with."""
    return (
        f"warning: {where}: saved before mfsdp recorded the digest of the tokens a step trains"
        f" ({_DIGEST_SINCE}): the tokens it trained cannot be compared with this run's; mfsdp"
        " since then trains each assistant turn's end-of-turn token and the newline after it"
        " (verl's MultiTurnSFTDataset mask) and warms up as verl does (optim.warmup_ratio"
        " rounded down, from lr 0), so the steps after it may train other tokens at other"
        " learning rates than those before (a new trainer.run_dir starts over)"
    )


def _prompts_differ(expected: dict[str, Any], restored: dict[str, Any]) -> bool:
    """Whether the prompts' digests differ: their role and content text, and their turns'
    other keys where the checkpoint and this run both record that digest (a checkpoint saved
    before it was recorded compares the text alone, so an unchanged file resumes quietly)."""
    if int(restored[PROMPTS_DIGEST]) != int(expected[PROMPTS_DIGEST]):
        return True
    then, now = restored.get(PROMPT_KEYS_DIGEST), expected.get(PROMPT_KEYS_DIGEST)
    return then is not None and now is not None and int(then) != int(now)


def end_setting(cfg: Any, total_steps: int) -> tuple[str, int]:
    """The key that sets where a run of `cfg` taking `total_steps` ends, and its value:
    `trainer.stop_at_step`, else `trainer.epochs` where they decide the steps (no
    `trainer.total_steps`, or `trainer.steps_within_epochs` ending the run before it), else
    `trainer.total_steps`: the key to raise is one the user sets."""
    stop = end_step(total_steps, cfg)
    if stop != total_steps:
        return "trainer.stop_at_step", stop
    if total_steps != cfg.trainer.total_steps:
        return "trainer.epochs", cfg.trainer.epochs
    return "trainer.total_steps", stop


def nothing_left_line(checkpoint: Path, step: int, cfg: Any, total_steps: int) -> str:
    """What a run resumed from `checkpoint`, at `step`, at or past its end is told: nothing
    is left to train, and which key moves the end."""
    key, value = end_setting(cfg, total_steps)
    return (
        f"{checkpoint} is at step {step} and {key}={value}: nothing left to train (raise"
        f" {key} to train on, or give another trainer.run_dir to start afresh)"
    )
