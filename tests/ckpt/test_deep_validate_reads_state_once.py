"""validate --deep of a checkpoint without a manifest reads each stored tensor once: the
optimizer's value checks (a negative second moment, a step count no optimizer writes) run
on the tensor the NaN/Inf count reads. Was: every Adam state was read a second time for
them, and optimizer state is two thirds of a real checkpoint's bytes.

Reads are counted at the real reader's chunk read (every tensor read goes through it), on a
real torch AdamW state after one step on a tiny Llama, saved as FSDP2 saves it."""

from __future__ import annotations

from collections import Counter

from mfsdp_ckpt.check.validate import validate_paths
from mfsdp_ckpt.format import checkpoint_resolution
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.ckpt.test_optimizer_kinds import LOST_FROM, OPTIMIZERS, _stepped
from tests.support.megatron_checkpoints import save_dcp


class ChunkCountingReader(CheckpointReader):
    """The real reader, counting the chunks read of each tensor: decoded whole (a small one,
    or one not stored as raw bytes), or found raw and then read a window at a time
    (`storage_checks.tensor_pieces`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.chunk_reads: Counter[str] = Counter()

    def read_chunk(self, entry, chunk):
        self.chunk_reads[entry.name] += 1
        return super().read_chunk(entry, chunk)

    def raw_payload(self, entry, chunk):
        found = super().raw_payload(entry, chunk)
        self.chunk_reads[entry.name] += found is not None
        return found


def test_each_tensor_is_read_once_and_its_optimizer_values_still_checked(tmp_path):
    model, _, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    optimizer_state["state"][LOST_FROM]["exp_avg_sq"].view(-1)[0] = -1.0
    optimizer_state["state"][LOST_FROM]["step"].fill_(-1.0)
    target = save_dcp(
        {"model": model.state_dict(), "optimizer": optimizer_state}, tmp_path / "dist_ckpt"
    )
    model.config.save_pretrained(tmp_path / "huggingface")
    paths = checkpoint_resolution.resolve_checkpoint(target)
    reader = ChunkCountingReader(paths.dist_ckpt)

    report = validate_paths(paths, deep=True, reader=reader)

    stored = {name: sum(1 for c in e.chunks if c.numel) for name, e in reader.tensors.items()}
    assert any(name.endswith(".exp_avg_sq") for name in stored)
    assert reader.chunk_reads == Counter(stored)
    assert sorted((f.where, f.message) for f in report.findings) == [
        (
            f"[optimizer.state.{LOST_FROM}.exp_avg_sq]",
            "1 negative value (a mean of squared gradients, which no optimizer stores below 0)",
        ),
        (
            f"[optimizer.state.{LOST_FROM}.step]",
            "step count -1 (an optimizer counts whole steps from 0)",
        ),
    ]
