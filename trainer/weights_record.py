"""What a run records about weights it does not train but depends on, and the resume check
that they are still those weights.

Two kinds of run lean on frozen weights that live outside the checkpoint: a LoRA run on its
base model (the checkpoint holds the adapter alone) and a full-parameter GRPO run with
`actor.use_kl_loss` on its KL reference (rebuilt from `model.path` at every start). Either
resumed onto other weights at that path would load without complaint and train against
another model. So each records the weight files (size and digest: `describe_base_model`)
in its manifest and compares them on resume (`base_mismatch`).

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

from mfsdp_ckpt.format.manifest import ManifestError
from mfsdp_ckpt.lora import BaseModelRecord, base_mismatch, describe_base_model, rehashed_like


def writes_manifests() -> bool:
    """Whether this process is the rank that writes manifests (rank 0, or a lone process)."""
    return not dist.is_initialized() or dist.get_rank() == 0


class WeightsRecord:
    """The record of some weights (`describe()`, a `BaseModelRecord`), made once in a
    background thread started by `start` (or by the first `result`)."""

    def __init__(self, describe: Callable[[], BaseModelRecord], label: str):
        self.describe, self.label = describe, label
        self._future: Future[BaseModelRecord] | None = None

    @classmethod
    def of_dir(cls, path: str | None, *, random_init: bool, seed: int, label: str) -> WeightsRecord:
        """The weight files of the model dir `path` (`describe_base_model`)."""
        return cls(partial(describe_base_model, path, random_init=random_init, seed=seed), label)

    def start(self) -> None:
        if self._future is None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"hash-{self.label}")
            self._future = pool.submit(self.describe)
            pool.shutdown(wait=False)

    def result(self) -> BaseModelRecord:
        self.start()
        assert self._future is not None
        return self._future.result()


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


def weights_remedy(recorded: BaseModelRecord, model_path: str | None, role: str) -> str:
    """What lets a resume refused for other weights than the checkpoint `recorded` go on
    (`agreed_mismatch`), `role` naming those weights ("the base it was trained on", "its KL
    reference"), given this run's `model.path`. Where model.path already is that dir, its
    files changed since the step was saved: only restoring them helps (telling the user to
    set model.path to it sent them round in a circle). A random init is drawn again from
    its seed alone."""
    fresh = "or use a new trainer.run_dir to start over"
    if recorded.random_init or recorded.path is None:
        return (
            f"resume on the random init it was trained on (trainer.seed={recorded.seed},"
            f" no weights loaded: model.path unset or model.random_init=true), {fresh}"
        )
    here = str(Path(model_path).resolve()) if model_path is not None else None
    if here == recorded.path:
        return f"so its files changed since this step was saved: restore them, {fresh}"
    return f"set model.path={recorded.path} ({role}), {fresh}"
