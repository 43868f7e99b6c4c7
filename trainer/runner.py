"""The skeleton every training run shares; SFT (`trainer.sft`) and GRPO (`trainer.grpo.runner`)
supply only what differs: their config checks, model and data, and one optimizer step.

A run: process group -> config check -> build -> resume -> step loop -> final save -> result.
`run_in_process_group` starts and always tears down the group; `TrainingRun.open` makes the
checkpointer, resumes from the newest step (`trainer.resume`) and writes the resolved config;
`TrainingRun.loop` runs the steps with the metrics log and the progress bar and closes them
however the loop ends. One skeleton, so the two runners cannot drift apart in how they resume,
save, count steps or shut down.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from mfsdp_ckpt.check.printable import printable
from mfsdp_ckpt.checkpoint_failures import raised_by_every_rank
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format.layout import CheckpointPaths
from trainer.closing import close_all
from trainer.config import ConfigError, end_step, write_resolved_config
from trainer.config_history import keep_changed_config, own_config_note, unused_changes_note
from trainer.distributed import DistEnv, distributed_run, resolve_device
from trainer.lora import lora_enabled
from trainer.lr_continuity import TrainedLr, schedule_break_warning
from trainer.machines_agree import check_machines_agree
from trainer.memory_estimate import (
    check_model_states,
    gpu_room,
    host_memory_rooms,
    model_states,
    ranks_here,
)
from trainer.metrics import MetricsLogger, drop_steps_after, jsonl_note
from trainer.micro_batch_ranks import rank_change_warning
from trainer.model import check_attention_backend, count_parameters
from trainer.model_source import weights_lines
from trainer.optim import (
    NonFiniteGradientError,
    apply_settings,
    clip_grad_norm,
    lr_at,
    set_lr,
    warmup_past_the_end,
)
from trainer.progress import draws_bars, step_bar
from trainer.resume import (
    RUN_INFO_KEY,
    ManifestCheck,
    RunKind,
    data_change_warning,
    new_progress,
    nothing_left_line,
    resume_if_any,
    resume_target,
    trained_over_note,
)
from trainer.resume_state import STEP
from trainer.run_ended import run_ended
from trainer.strategies.base import Strategy
from trainer.thread_record import THREADS_INFO_KEY, thread_change_warning, threads_of_every_rank

Result = TypeVar("Result")


@dataclass
class RunResult:
    """What every run returns, whatever its kind adds (SFT's losses, GRPO's rewards): where it
    wrote, the step it reached, the steps it was set to train, the step it resumed from and
    its last checkpoint, which `cli.run_report.report_run` reports alike for both kinds."""

    run_dir: Path
    final_step: int
    resumed_from: int | None
    last_checkpoint: Path | None = None
    total_steps: int = 0  # the steps this run was set to train (`TrainingRun.total_steps`)


Finished = TypeVar("Finished", bound=RunResult)


def run_in_process_group(name: str, cfg: Any, body: Callable[[Any, DistEnv], Result]) -> Result:
    """`body(cfg, env)` inside the run's process group, destroyed even when the run fails, once
    the model's attention can train on the run's device. The main rank first says that the
    model and data are being built: seconds (minutes for a large model) before the run's
    first line."""
    with distributed_run(cfg.trainer.device) as env:
        check_machines_agree(cfg)  # one config and one run dir on every machine, before a step
        check_attention_backend(cfg.model, env.device)
        if env.is_main:
            print(f"[{name}] building the model and reading the data ...", file=sys.stderr)
        return body(cfg, env)


def check_resume_target(kind: RunKind, cfg: Any, hf_config: Any) -> CheckpointPaths | None:
    """Refuse the step `checkpoint.resume` names for what `TrainingRun.open` checks of it
    without a model (`trainer.resume.resume_target`: another trainer's layout, another kind
    of run, another model config, ...), for a runner to ask before it builds its models and
    anything that writes into the run dir: GRPO's rollout engine took minutes to start and
    left its model dir in a verl run dir given as the step to resume, before the refusal
    that `TrainingRun.open` makes again when it loads the step. Every rank asks alike. So is
    a config.yaml in the run dir that the run would replace and must not (`own_config_note`:
    a file of the user's, the --config file itself included), fresh start or resume.
    Returns the step to resume, None for a fresh start."""
    run_dir = Path(cfg.trainer.run_dir)
    with raised_by_every_rank():
        found = resume_target(run_dir, cfg.checkpoint.resume, kind, hf_config.to_dict())
        own_config_note(run_dir, cfg, found)  # its note is said as the run writes its own
    return found


def warn_of_model_states(
    kind: RunKind, cfg: Any, hf_config: Any, resumed: CheckpointPaths | None, total_steps: int
) -> None:
    """One warning line, from the main rank, when the model's states (float32 weights, grads
    and AdamW moments, sharded over the ranks; `trainer.memory_estimate`) cannot fit in the
    memory this rank may use: its GPU's free memory, else the host's. A model that could not
    fit failed at its first step, after it was built, advised to lower the batch. None for a
    run of `total_steps` `resumed` (`check_resume_target`) at or past its end: it trains no
    step, and a rerun for its `--json` values was told it would likely fail out of memory
    before "nothing left to train"."""
    step = resumed.step if resumed is not None else None
    if step is not None and step >= end_step(total_steps, cfg):
        return
    counts = count_parameters(hf_config)
    tied = getattr(hf_config, "tie_word_embeddings", False)
    params = counts["matmul"] + (0 if tied else counts["embedding"])
    distributed = torch.distributed.is_initialized()
    shards = torch.distributed.get_world_size() if distributed else 1
    states = model_states(params, lora=lora_enabled(cfg.model), shards=shards)
    if resolve_device(cfg.trainer.device) == "cuda":
        index = torch.cuda.current_device()
        rooms = [gpu_room(torch.cuda.mem_get_info(index)[0], index)]
    else:
        rooms = host_memory_rooms()
    line = check_model_states(states, rooms, ranks_here(shards))
    if line is not None and (not distributed or torch.distributed.get_rank() == 0):
        print(f"[{kind.name}] warning: {line}", file=sys.stderr)


def compile_line(model_cfg: Any, device: torch.device) -> str | None:
    """What `model.compile=true` costs, said before the first step: the first steps compile
    each decoder layer, and on CPU that was minutes without a line, which read as a hang."""
    if not model_cfg.compile:
        return None
    cost = "minutes on CPU" if device.type == "cpu" else "a while"
    return f"model.compile=true: compiling each decoder layer, the first steps take {cost}"


def planned_steps(cfg: Any, batch_key: str, batch_size: int, rows: int, rows_named: str) -> int:
    """`trainer.total_steps`, else `trainer.epochs` full batches per epoch; with
    `trainer.steps_within_epochs`, whichever of the two is fewer (verl's rule: a converted
    verl run trains the steps verl trains; its learning-rate schedule still spans
    `trainer.total_steps`, `lr_schedule_steps`). ConfigError naming `batch_key` when
    not one batch fits in the `rows` training rows."""
    per_epoch = rows // batch_size
    if per_epoch == 0:
        raise ConfigError(f"{batch_key}={batch_size} exceeds the {rows} {rows_named}")
    by_epochs = cfg.trainer.epochs * per_epoch
    if not cfg.trainer.total_steps:
        return by_epochs
    if cfg.trainer.steps_within_epochs:
        return min(cfg.trainer.total_steps, by_epochs)
    return cfg.trainer.total_steps


def checked_steps(
    kind: RunKind, cfg: Any, hf_config: Any, batch_size: int, rows: int, rows_named: str
) -> int:
    """What a runner checks of its run once its data are read and before it builds a model
    or writes into the run dir: the steps it trains over `rows` batches of `batch_size`
    (`planned_steps`, refusing `kind.batch_key`), the step to resume
    (`check_resume_target`), then whether the model states can fit (`warn_of_model_states`).
    Returns the planned steps."""
    total_steps = planned_steps(cfg, kind.batch_key, batch_size, rows, rows_named)
    resumed = check_resume_target(kind, cfg, hf_config)
    warn_of_model_states(kind, cfg, hf_config, resumed, total_steps)
    return total_steps


def optimizer_update(
    run: TrainingRun,
    strategy: Strategy,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
) -> float:
    """One optimizer step of update `step` (0-based) from the gradients accumulated in
    `model`: the strategy's work before it, the gradient norm clipped to `optim.clip_grad`,
    the step at the run's learning rate (`TrainingRun.lr`), the gradients zeroed. A
    non-finite norm stops the run before the update (`NonFiniteGradientError`), so no
    checkpoint holds the weights it would make. Returns the norm `clip_grad_norm` measured."""
    strategy.before_optimizer_step(model)
    trainable = strategy.trainable_params(model, optimizer)
    grad_norm = clip_grad_norm(trainable, run.cfg.optim.clip_grad, run.env.device)
    if not math.isfinite(grad_norm):
        raise NonFiniteGradientError(
            f"step {step + 1}: gradient norm is {grad_norm}; stopping before the update"
        )
    set_lr(optimizer, run.lr(step))
    optimizer.step()
    strategy.zero_grad(optimizer)
    return grad_norm


def _step_draws_seed(seed: int, step: int, rank: int) -> int:
    """The seed of rank `rank`'s random draws in step `step` (0-based) of a run seeded `seed`:
    64 bits of a hash of the three, so the streams of different (seed, step, rank) are
    unrelated, and none lands on the small seeds derived by arithmetic (the rollout's
    sampling seed, the mini-batch shuffle's) unless by a 2^-64 chance."""
    key = f"{seed}/{step}/{rank}".encode()
    digest = hashlib.blake2b(key, digest_size=8, person=b"mfsdp-step-rng").digest()
    return int.from_bytes(digest, "little")


def _seed_step_draws(seed: int, step: int, rank: int) -> None:
    """Seed the global generators (CPU and every CUDA device) for step `step`: its dropout
    masks become a function of (seed, step, rank), so a run resumed at step k draws at k+1
    what an uninterrupted run drew there, with no RNG state in the checkpoint; what ran
    between steps (validation, a save) cannot shift them. Re-derived rather than saved, as
    verl and Megatron-LM save theirs, because a saved state is per rank: a resume on another
    number of ranks would have none for the new ranks."""
    torch.manual_seed(_step_draws_seed(seed, step, rank))


def lr_schedule_steps(cfg: Any, total_steps: int) -> int:
    """The steps the learning-rate schedule (warmup ratio, decay) spans in a run that takes
    `total_steps`: `trainer.total_steps` where set, even when `trainer.steps_within_epochs`
    ends the run sooner, as verl's PPO/GRPO trainer and its `sft_trainer` size the schedule
    by trainer.total_training_steps and stop at the last epoch's end (warmup and decay were
    squeezed into the shorter run); else the run's own steps."""
    return cfg.trainer.total_steps or total_steps


class StepHooks:
    """What a runner kind does each step; `TrainingRun.loop` calls these in this order. A kind
    subclasses this as a dataclass whose first field is its `run`."""

    run: TrainingRun

    @property
    def cfg(self) -> Any:
        return self.run.cfg

    @property
    def env(self) -> DistEnv:
        return self.run.env

    def logs_before_first_step(self) -> bool:
        """Whether `before_first_step` logs a record at the step the run starts from (GRPO's
        `val_before_train`): a resume's record of that step is merged into the one an
        earlier run logged there (`MetricsLogger`'s `merge_step`)."""
        return False

    def before_first_step(self, metrics: MetricsLogger) -> None:
        """Anything logged before the first step (GRPO's `val_before_train`); called only
        when a step is left to train."""

    def train_step(self, step: int) -> dict[str, Any]:
        """One optimizer step (0-based `step`); the record of metrics it logs."""
        raise NotImplementedError

    def after_step(self, done: int, record: dict[str, Any], metrics: MetricsLogger) -> None:
        """Evaluate, save and log step `done` (1-based), in the order this kind needs."""
        raise NotImplementedError

    def bar_postfix(self, record: dict[str, Any]) -> dict[str, str]:
        raise NotImplementedError

    def after_last_step(self, metrics: MetricsLogger) -> None:
        """Final evaluation and save, once the loop ran its steps."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the kind holds (a rollout engine), however the loop ended."""


@dataclass
class TrainingRun:
    """The parts every run has besides its model and data: where it writes, how many steps it
    takes, its checkpointer and the state that checkpoints hold."""

    name: str  # "sft" or "grpo": labels the log lines and the progress bar
    cfg: Any
    env: DistEnv
    run_dir: Path
    total_steps: int
    checkpointer: Checkpointer
    states: dict[str, Any]
    resume: CheckpointPaths | None
    hf_assets: Callable[[Path], None]
    start: int  # the first step to run: the resumed checkpoint's, else 0
    last_saved: Path | None = field(default=None)
    cpu_threads: list[int] = field(default_factory=list)  # by rank, recorded in every step

    @classmethod
    def open(
        cls,
        kind: RunKind,
        cfg: Any,
        env: DistEnv,
        *,
        strategy: Strategy,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        hf_config: Any,
        hf_assets: Callable[[Path], None],
        batch_size: int,
        train_rows: int,
        digests: tuple[int, int, int],
        total_steps: int,
        checks: Sequence[ManifestCheck] = (),
    ) -> TrainingRun:
        """Make the checkpointer, load the step to resume (if any) into the model and optimizer,
        and write the resolved config into the run dir (main rank). `digests`, as
        `check_splits_read_alike` returns them: the training rows in order, their prompts as
        the data file holds them and their turns' other keys (`trainer.resume.rows_digest`);
        `checks`: what else the step's manifest must agree with (`resume_if_any`)."""
        name = kind.name
        rows_digest, prompts_digest, prompt_keys_digest = digests
        run_dir = Path(cfg.trainer.run_dir)
        checkpointer = Checkpointer(
            run_dir,
            strategy=strategy.name,
            keep_last=cfg.checkpoint.keep_last,
            async_save=cfg.checkpoint.async_save,
            model_family=hf_config.model_type,
        )
        trained_lr = TrainedLr(strategy.optimizer_state(model, optimizer))
        cpu_threads = threads_of_every_rank(env.device)  # every rank: a collective
        states: dict[str, Any] = {
            "model": strategy.model_state(model),
            "optimizer": trained_lr,
            "extra": new_progress(
                batch_size,
                train_rows,
                cfg.trainer.seed,
                rows_digest,
                cfg.data.shuffle,
                prompts_digest,
                prompt_keys_digest,
            ),
        }
        expected = dict(states["extra"])
        with raised_by_every_rank():  # each rank resumes the same step, and refuses it alike
            resume = resume_if_any(
                checkpointer, cfg.checkpoint.resume, states, kind, hf_config.to_dict(), checks
            )
        restored = dict(states["extra"])  # the checkpoint's record, before this run's replaces it
        if resume is not None:
            apply_settings(optimizer, cfg.optim)
            # the steps this run saves record what this run trains: the restored digests kept
            # (a digest of another loss mask, say) warned again at every later resume of them
            states["extra"].update({k: v for k, v in expected.items() if k != STEP})
        step = int(restored[STEP])
        trains = resume is None or step < end_step(total_steps, cfg)
        if env.is_main:
            schedule = lr_schedule_steps(cfg, total_steps)
            late = warmup_past_the_end(cfg.optim, total_steps, schedule)
            if late is not None:
                print(f"[{name}] {late}", file=sys.stderr)
            lines = []
            if resume is not None:
                where = resume.root
                lines.append(
                    data_change_warning(kind, expected, restored, where, cfg.data.train_files)
                )
                lines.append(trained_over_note(run_dir, resume) if trains else None)
            if trains:  # a run that trains no step leaves the config its steps were trained with
                if resume is not None:
                    changed = keep_changed_config(run_dir, step, cfg, resume)
                    lines.append(changed)
                    if changed is None:  # changed settings name why the lr differs, if it does
                        lrs = trained_lr.lrs
                        lines.append(schedule_break_warning(where, step, lrs, cfg.optim, schedule))
                    lines.append(thread_change_warning(resume, cpu_threads, env.device))
                    lines.append(rank_change_warning(resume, cfg, env.world_size))
                else:
                    lines.append(own_config_note(run_dir, cfg, None) or None)
                write_resolved_config(run_dir, cfg)
            elif resume is not None:  # config.yaml stays; what changed since it is unused
                lines.append(unused_changes_note(run_dir, step, cfg, resume))
            for line in lines:
                if line is not None:
                    print(printable(f"[{name}] {line}"), file=sys.stderr)
        return cls(
            name,
            cfg,
            env,
            run_dir,
            total_steps,
            checkpointer,
            states,
            resume,
            hf_assets,
            start=step,  # the step of the checkpoint loaded
            last_saved=resume.root if resume is not None else None,
            cpu_threads=cpu_threads,
        )

    def lr(self, step: int) -> float:
        """The learning rate of update `step` (0-based): a function of the step and the
        config alone, so a resumed run follows the schedule an uninterrupted one follows."""
        return lr_at(step, self.cfg.optim, lr_schedule_steps(self.cfg, self.total_steps))

    @property
    def stop(self) -> int:
        """One past the last step this process runs (`trainer.stop_at_step` ends it early)."""
        return end_step(self.total_steps, self.cfg)

    @property
    def resumed_from(self) -> int | None:
        return self.start if self.resume is not None else None

    @property
    def final_step(self) -> int:
        return max(self.stop, self.start)

    def announce(self, what: str) -> None:
        """One line on stderr (main rank): what runs, and from which step to which; or, for a
        run resumed at or past its last step, that nothing is left to train and which key
        moves the end (the line said "steps 20 -> 12", and the run ended without a step).
        A run not resumed whose model.path is a checkpoint then says which step's weights
        it read (`model_source.weights_lines`)."""
        if not self.env.is_main:
            return
        # `root`: the step dir, or a bare dist_ckpt's own dir (one without step_dir)
        resumed = f" (resumed from {self.resume.root})" if self.resume else ""
        line = f"[{self.name}] {what}, steps {self.start} -> {self.total_steps}{resumed}"
        if self.resume is not None and self.start >= self.stop:
            left = nothing_left_line(self.resume.root, self.start, self.cfg, self.total_steps)
            line = f"[{self.name}] {what}; {left}"
        said = [*weights_lines(self.cfg.model)] if self.resume is None else []
        compiling = (
            compile_line(self.cfg.model, self.env.device) if self.start < self.stop else None
        )
        if compiling is not None:
            said.append(compiling)
        for each in (line, *(f"[{self.name}] {one}" for one in said)):
            print(printable(each), file=sys.stderr)  # the run dir's name may hold escapes

    def save(self, step: int, info: dict[str, Any]) -> Path:
        """Checkpoint the state at `step` (1-based), with `info` in its manifest (and the kind
        of run that wrote it, which resume compares, and its processes' CPU threads)."""
        self.states["extra"]["step"] = step
        self.last_saved = self.checkpointer.save(
            step,
            self.states,
            hf_assets=self.hf_assets,
            info={RUN_INFO_KEY: self.name, THREADS_INFO_KEY: self.cpu_threads, **info},
        )
        return self.last_saved

    def loop(self, hooks: StepHooks) -> None:
        """Steps `start` to `stop`, then the final evaluation and save; an async save in
        flight, the metrics log, the progress bar and what `hooks` holds are closed however
        it ends (a Ctrl-C in one close included), and a close that fails never hides the
        failure that ended the steps (`closing.close_all`). A run with nothing left to train
        logs nothing and starts no tracker: a rerun of a finished run validated again,
        logged the last step once more and started an empty wandb run, each time."""
        self._drop_later_records()
        trains = self.start < self.stop
        merge_step = self.start if trains and hooks.logs_before_first_step() else None
        metrics = MetricsLogger(
            self.run_dir, self.env.is_main and trains, self.cfg.trainer, merge_step
        )
        note = jsonl_note(self.cfg.trainer.logger)
        if note is not None and self.env.is_main and trains:
            print(f"[{self.name}] {note}", file=sys.stderr)
        console = "console" in self.cfg.trainer.logger
        bars: list[Any] = []  # the bar, once drawn

        def closers() -> list[Callable[[], object]]:
            return [*(bar.close for bar in bars), metrics.close, hooks.close]

        try:
            try:
                if trains:
                    hooks.before_first_step(metrics)
                drawn = draws_bars(self.env.is_main and self.cfg.trainer.progress_bar)
                bar = step_bar(self.name, self.total_steps, self.start, drawn)
                bars.append(bar)
                for step in range(self.start, self.stop):
                    _seed_step_draws(self.cfg.trainer.seed, step, self.env.rank)
                    record = hooks.train_step(step)
                    hooks.after_step(step + 1, record, metrics)
                    bar.set_postfix(hooks.bar_postfix(record), refresh=False)
                    bar.update(1)
                    shown = self.env.is_main and console and not drawn
                    if shown and self.should_log(step + 1, record):
                        self._say_step(step + 1, hooks.bar_postfix(record))
                hooks.after_last_step(metrics)
                self.checkpointer.close()
            except BaseException as err:
                # Ctrl-C or a failure with an async save in flight: it commits first, while
                # the process group and the run dir's lock are still held (it went on
                # committing after both were gone, and the line said the step before was the
                # newest). A second Ctrl-C it held back meanwhile is raised once every other
                # closer ran too; a close failing now must not replace `err`, which says why
                close_all([self.checkpointer.settle, *closers()], err)
                raise
            # a close that fails after the steps went well (TensorBoard's last write on a
            # full disk) fails the run, with the same line as a failure of a step
            close_all(closers(), None)
        except BaseException as err:
            ended = run_ended(err, self.run_dir, self.cfg.checkpoint.resume)
            if ended is not None:  # a full disk: its line names the step to resume
                raise ended from None
            raise

    def finish(self, result: Finished) -> Finished:
        """`result` once `loop` returned: the step the run reached, the steps it was set to
        train and the checkpoint it saved last (the resumed one where it saved none)."""
        result.final_step = self.final_step
        result.total_steps = self.total_steps
        result.last_checkpoint = self.last_saved
        return result

    def _drop_later_records(self) -> None:
        """On the main rank of a run that trains: metrics.jsonl loses an earlier run's records
        of the steps after the one this run starts from, which it logs again (one line says
        so). A run with nothing left to train leaves them: no step of theirs is redone."""
        if not self.env.is_main or self.start >= self.stop:
            return
        dropped = drop_steps_after(self.run_dir, self.start if self.resume is not None else -1)
        if dropped is not None:
            print(printable(f"[{self.name}] {dropped}"), file=sys.stderr)

    def _say_step(self, done: int, shown: dict[str, str]) -> None:
        """Without a bar (`trainer.progress_bar=false`, or stderr a log file), one plain line
        per logged step, so a log still shows how the run goes; none where `trainer.logger`
        leaves out `console` (verl's name for these lines)."""
        fields = " ".join(f"{key}={value}" for key, value in shown.items())
        print(f"[{self.name}] step {done}/{self.total_steps} {fields}", file=sys.stderr)

    def warn_non_finite(self, done: int, values: dict[str, float]) -> None:
        """One warning line, from the main rank, per validation value of step `done` that is
        not finite (`val/loss` nan): the run goes on and its exit code stays (as verl's), but
        a result line reading `val loss nan` was all that told of weights whose outputs
        overflow (a learning rate far too high), with the weights themselves still finite."""
        if not self.env.is_main:
            return
        from tqdm import tqdm  # writes above a progress bar being drawn, not through it

        for key, value in values.items():
            if not math.isfinite(value):
                tqdm.write(
                    f"warning: step {done}: {key} is {value}: the model's outputs at this step's"
                    " weights overflow (the weights themselves may be finite; is the learning"
                    " rate too high?); training goes on",
                    file=sys.stderr,
                )

    def is_due(self, every: int, done: int) -> bool:
        """Whether an `every`-steps event (0: never) falls on step `done`."""
        return bool(every) and done % every == 0

    def should_log(self, done: int, record: dict[str, Any]) -> bool:
        """Every `trainer.log_every` steps, the last step this process runs, and a step whose
        `record` holds a validation (`val/...`): one on a step between two logged ones was
        run and never recorded (eval_every 6 under log_every 5 left holes in the val curve)."""
        validated = any(key.startswith("val/") for key in record)
        return validated or done % self.cfg.trainer.log_every == 0 or done == self.stop
