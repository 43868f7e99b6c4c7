"""Writing tensors one at a time through a safetensors writer, refusing NaN/Inf, comparing
back, and publishing the result only when that comparison found nothing.

The LoRA exports (merged and adapter, mfsdp and Megatron) compute each tensor on demand
rather than stream planned bytes as `export_hf` does; these are the pieces they share.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportVerifyError, NonFiniteError
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.export_verify import differing_bytes
from mfsdp_ckpt.convert.write_tally import report_writes
from mfsdp_ckpt.format.finite import count_nonfinite_tensor
from mfsdp_ckpt.storage.out_dir import OutputClaim
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter

if TYPE_CHECKING:
    import torch


def finite_only(
    compute: Callable[[str], torch.Tensor], where: Callable[[str], str], allow_nonfinite: bool
) -> Callable[[str], torch.Tensor]:
    """`compute`, refusing (NonFiniteError, naming `where(name)`) a tensor that holds
    NaN/Inf as it is written, unless `allow_nonfinite`: every other export refuses one, a
    LoRA export wrote a diverged adapter, or the model merged with it, without a word."""
    if allow_nonfinite:
        return compute

    def checked(name: str) -> torch.Tensor:
        tensor = compute(name)
        count = count_nonfinite_tensor(tensor)
        if count:
            dtype = str(tensor.dtype).removeprefix("torch.")
            raise NonFiniteError(
                f"{where(name)}: {count} NaN/Inf value(s) as {dtype} (a diverged run?);"
                " --allow-nonfinite exports it anyway"
            )
        return tensor

    return checked


def write_all(
    writer: ShardedSafetensorsWriter,
    order: list[str],
    compute: Callable[[str], torch.Tensor],
    progress: Progress | None,
) -> None:
    """Write each tensor in `order`, one in memory at a time; on failure nothing is kept."""
    on_done = report_writes(writer, progress, len(order))
    writer.open()
    try:
        for name in order:
            writer.write(name, compute(name))
            if on_done is not None:
                on_done()
        writer.close()
    except BaseException:
        writer.abort()
        raise


def compare_written(
    file: Path, names_in_file: list[str], expected: Callable[[str], torch.Tensor]
) -> list[str]:
    """Bit-for-bit comparison of each written tensor with a fresh computation of it, the
    written one read a piece at a time (`differing_bytes`): read whole through `safe_open`
    beside the computed one, a merged export's --verify held twice its largest tensor, and
    the mapped file besides."""
    from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource

    written_file = SafetensorsSource(file.parent, only=file.name)
    problems = []
    for name in names_in_file:
        entry = written_file.tensors.get(name)
        if entry is None:
            problems.append(f"{name}: missing from {file}")
            continue
        wanted = expected(name)
        same = entry.dtype.torch == wanted.dtype and entry.shape == tuple(wanted.shape)
        if not same or differing_bytes(written_file, entry, wanted):
            problems.append(f"{name}: differs in {file} from what its sources give")
        del wanted  # before the next is computed: one at a time
    return problems


def publish_verified(claim: OutputClaim, result: ExportResult) -> None:
    """Publish the work dir of an export written through `write_all`, fsynced first (the
    writer leaves its files unsynced), unless --verify found a mismatch in `result`:
    ExportVerifyError, and nothing appears at --out."""
    if result.mismatches:
        raise ExportVerifyError(result.mismatches)
    claim.publish_synced()
