"""What a run records about weights it does not train but depends on, and the resume check
that they are still those weights.

Two kinds of run lean on frozen weights that live outside the checkpoint: a LoRA run on its
base model (the checkpoint holds the adapter alone) and a full-parameter GRPO run with
`actor.use_kl_loss` on its KL reference (rebuilt from `model.path` at every start). Either
resumed onto other weights at that path would load without complaint and train against
another model. So each records the weight files (size and digest: `describe_model_weights`)
in its manifest and compares them on resume (`base_mismatch`). `model.path` may name a model
dir or a checkpoint (an SFT step, a run, an import-hf result, a bare DCP dir), which both
kinds of run record alike, here: a model dir's rule finds no weights in a checkpoint, and
an empty record matched any weights put there later.

Hashing reads every byte of the weights, so it runs once per run, in a background thread
on the rank that writes manifests, overlapping the model build and the first steps (the hash
releases the GIL while it runs); the resume check waits for it on that rank and tells the
others its verdict, so every rank stops together. One helper for both, so the LoRA base and
the GRPO reference cannot drift apart in how they are hashed and compared.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

import torch.distributed as dist

from mfsdp_ckpt.format.layout import DIST_CKPT_DIR, CheckpointPaths
from mfsdp_ckpt.format.manifest import ManifestError, read_manifest
from mfsdp_ckpt.lora import BaseModelRecord, base_mismatch, describe_base_model, rehashed_like
from trainer.config import ModelConfig
from trainer.model_source import resolve_model_source


def writes_manifests() -> bool:
    """Whether this process is the rank that writes manifests (rank 0, or a lone process)."""
    return not dist.is_initialized() or dist.get_rank() == 0


class WeightsRecord:
    """The record of some weights (`describe()`, a `BaseModelRecord`), made once in a
    background thread started by `start` (or by the first `result`). `path` is the dir the
    record will name (known without hashing, on every rank): what a refused resume
    compares with the dir the checkpoint recorded (`weights_remedy`)."""

    def __init__(
        self, describe: Callable[[], BaseModelRecord], label: str, path: str | None = None
    ):
        self.describe, self.label, self.path = describe, label, path
        self._future: Future[BaseModelRecord] | None = None

    @classmethod
    def of_model(cls, cfg: ModelConfig, *, seed: int, label: str) -> WeightsRecord:
        """The weights a run of `cfg` starts from (`describe_model_weights`): `model.path`
        is resolved here, in the calling thread, as the run's model build resolves it."""
        checkpoint = model_checkpoint(cfg)
        describe = partial(describe_model_weights, cfg, seed, checkpoint)
        return cls(describe, label, recorded_dir(cfg, checkpoint))

    def start(self) -> None:
        if self._future is None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"hash-{self.label}")
            self._future = pool.submit(self.describe)
            pool.shutdown(wait=False)

    def result(self) -> BaseModelRecord:
        self.start()
        assert self._future is not None
        return self._future.result()


def model_checkpoint(cfg: ModelConfig) -> CheckpointPaths | None:
    """The checkpoint `model.path` names, when it is one rather than a model dir (None for
    a model dir, a named shape or a random init, whose weights are no file)."""
    source = resolve_model_source(cfg) if not cfg.random_init else None
    return source.checkpoint if source is not None else None


def recorded_dir(cfg: ModelConfig, checkpoint: CheckpointPaths | None) -> str | None:
    """The absolute dir a record of `cfg`'s weights names: the checkpoint's DCP dir, else
    `model.path` (None without one)."""
    where = checkpoint.dist_ckpt if checkpoint is not None else cfg.path
    return str(Path(where).resolve()) if where is not None else None


def describe_model_weights(
    cfg: ModelConfig, seed: int, checkpoint: CheckpointPaths | None
) -> BaseModelRecord:
    """The weight files a run of `cfg` starts from: a model dir's by size and digest
    (`describe_base_model`); for an mfsdp checkpoint as `model.path` (an SFT step, an
    import-hf result), its dist_ckpt files as its manifest records them (hashed when that
    step was saved; hashing its optimizer state again would cost more than the model
    build); a checkpoint without one (verl's, Megatron-LM's, a bare DCP dir) by its own
    DCP files, hashed here."""
    if checkpoint is None:
        return describe_base_model(cfg.path, random_init=cfg.random_init, seed=seed)
    root = recorded_dir(cfg, checkpoint)
    if checkpoint.manifest is None:
        return describe_base_model(root, random_init=False, seed=seed)
    prefix = f"{DIST_CKPT_DIR}/"
    files = {
        name.removeprefix(prefix): record
        for name, record in read_manifest(checkpoint.manifest).files.items()
        if name.startswith(prefix)
    }
    return BaseModelRecord(root, False, seed, files)


def agreed_mismatch(
    recorded: Callable[[], BaseModelRecord | None],
    current: WeightsRecord,
    *,
    trained: str,
    here: str,
) -> str | None:
    """Why the weights `recorded()` reads from the manifest are not `current` (in
    `base_mismatch`'s words: `trained` says what the checkpoint used, `here` what this run
    has), or None when they are the same, or nothing was recorded. The manifest-writing rank
    decides, rehashing like the record where it must (`rehashed_like`); every rank must call
    this, and every rank gets that verdict."""
    problem = None
    if writes_manifests():
        try:
            trained_on = recorded()
            if trained_on is not None:
                now = rehashed_like(current.result(), trained_on)
                problem = base_mismatch(trained_on, now, trained=trained, here=here)
        except (ManifestError, OSError) as err:  # the other ranks wait for a verdict
            problem = str(err)
    if dist.is_initialized() and dist.get_world_size() > 1:
        verdict = [problem]
        dist.broadcast_object_list(verdict, src=0)
        problem = verdict[0]
    return problem


def weights_remedy(recorded: BaseModelRecord, here: str | None, role: str) -> str:
    """What lets a resume refused for other weights than the checkpoint `recorded` go on
    (`agreed_mismatch`), `role` naming those weights ("the base it was trained on", "its KL
    reference"), given the dir this run's record names (`WeightsRecord.path`). Where that
    already is the recorded dir, its files changed since the step was saved: only
    restoring them helps (telling the user to set model.path to it sent them round in a
    circle). A random init is drawn again from its seed alone."""
    fresh = "or use a new trainer.run_dir to start over"
    if recorded.random_init or recorded.path is None:
        return (
            f"resume on the random init it was trained on (trainer.seed={recorded.seed},"
            f" no weights loaded: model.path unset or model.random_init=true), {fresh}"
        )
    if here == recorded.path:
        return f"so its files changed since this step was saved: restore them, {fresh}"
    return f"set model.path={recorded.path} ({role}), {fresh}"
