"""GRPO's KL reference as its checkpoints record it, and the resume check that it is the same.

The reference policy is never saved: every start rebuilds it from the initial weights
(`model.path`, or the shape and seed). A full-parameter run with `actor.use_kl_loss` whose
`model.path` held other weights when it resumed (a directory replaced in place, a symlink
moved) took its KL against another model, silently. So each manifest records, under
`info.reference_model`, how to rebuild the reference and, for a separate reference, its
weight files by size and digest, as a LoRA checkpoint records its base
(`trainer.weights_record.describe_model_weights`; a checkpoint as `model.path`, by its
dist_ckpt files); a resume onto other weights is refused naming the file that differs.
Checkpoints saved before the files were recorded resume as before. With LoRA the reference
is the base (the actor with its adapter off), which the adapter's own check covers, and
without `actor.use_kl_loss` there is no reference to check.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest
from mfsdp_ckpt.lora import BaseModelRecord
from trainer.grpo.config import GRPOConfig
from trainer.resume import ResumeMismatchError
from trainer.weights_record import (
    WeightsRecord,
    agreed_mismatch,
    weights_remedy,
    writes_manifests,
)

INFO_KEY = "reference_model"


@dataclass
class ReferenceRecord:
    """`source`: how to rebuild the reference (path, shape, random_init, seed); `weights`:
    the separate reference's weight files, hashed in the background (None when the
    reference is no separate model)."""

    source: dict[str, Any]
    weights: WeightsRecord | None

    @classmethod
    def of(cls, cfg: GRPOConfig, lora: bool) -> ReferenceRecord:
        model, seed = cfg.model, cfg.trainer.seed
        source = {
            "path": model.path,
            "shape": model.shape if model.path is None else None,
            "random_init": model.random_init,
            "seed": seed,
            **({"lora_adapter": "disabled"} if lora else {}),
        }
        weights = None
        if cfg.actor.use_kl_loss and not lora:
            weights = WeightsRecord.of_model(model, seed=seed, label=INFO_KEY)
            if writes_manifests():
                weights.start()
        return cls(source, weights)

    def manifest_info(self) -> dict[str, Any]:
        """`info.reference_model` for a manifest: with the weight files on the rank that
        writes manifests (it waits for the hashing, done long before unless the first save
        comes first)."""
        if self.weights is None or not writes_manifests():
            return dict(self.source)
        return {**self.source, "files": self.weights.result().to_dict()["files"]}

    def check_manifest(self, manifest: Manifest | None, paths: CheckpointPaths) -> None:
        """ResumeMismatchError when the checkpoint's reference was other weights than
        `model.path` holds now (every rank, together)."""
        recorded = manifest.info.get(INFO_KEY) if manifest is not None else None
        if self.weights is None or not isinstance(recorded, dict) or "files" not in recorded:
            return
        source = f"{paths.manifest}: info.{INFO_KEY}"
        problem = agreed_mismatch(
            lambda: recorded_weights(recorded, source),
            self.weights,
            trained="the checkpoint's KL reference (actor.use_kl_loss) was",
            here="this run's model.path",
        )
        if problem is not None:
            remedy = weights_remedy(
                recorded_weights(recorded, source), self.weights.path, "its KL reference"
            )
            raise ResumeMismatchError(f"{paths.manifest}: {problem}; {remedy}")


def recorded_weights(recorded: dict[str, Any], source: str) -> BaseModelRecord:
    """The reference's weights as a manifest recorded them. A model built from its shape
    alone (no path) is a random init of that seed, as `describe_base_model` describes it."""
    record = BaseModelRecord.from_dict(recorded, source)
    return replace(record, random_init=record.random_init or record.path is None)
