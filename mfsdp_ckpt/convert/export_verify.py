"""--verify: re-open the written safetensors and compare every tensor, bit for bit, with its
source after conversion and cast.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportUsageError
from mfsdp_ckpt.convert.export_plan import ExportPlan, _natural_key, convert, plan_export
from mfsdp_ckpt.convert.export_scheduler import MIN_BUFFER_BYTES, _run_tasks
from mfsdp_ckpt.convert.export_source import _resolve_source, load_config
from mfsdp_ckpt.convert.hf_config import HFConfigError
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.storage.safetensors_writer import INDEX_FILE
from mfsdp_ckpt.storage.unique_json import loads_unique

if TYPE_CHECKING:
    import torch


def verify_export(
    plan: ExportPlan,
    out_dir: str | os.PathLike,
    *,
    workers: int = 4,
    buffer_bytes: int = MIN_BUFFER_BYTES,
) -> list[str]:
    """Re-open the written safetensors and compare every tensor, bit for bit, with its
    source after conversion and cast. Returns one line per problem (empty: all equal)."""
    import torch
    from safetensors import SafetensorError, safe_open

    out = Path(out_dir)
    where = _written_files(out)
    problems: list[str] = []
    expected = {name for item in plan.items for name in item.targets}
    problems += [
        f"{name}: missing from {out}" for name in sorted(expected - set(where), key=_natural_key)
    ]
    problems += [
        f"{name}: in {where[name]} but not in the checkpoint"
        for name in sorted(set(where) - expected)
    ]
    lock = threading.Lock()

    def work(item: MappedTensor) -> int:
        found = []
        for name, wanted in convert(plan, item):
            if name not in where:
                continue
            try:
                with safe_open(str(out / where[name]), framework="pt") as handle:
                    written = handle.get_tensor(name)
            except (SafetensorError, OSError) as err:
                found.append(f"{name}: unreadable in {where[name]} ({err})")
                continue
            if written.dtype != wanted.dtype or written.shape != wanted.shape:
                found.append(
                    f"{name}: {tuple(written.shape)} {written.dtype} written, "
                    f"{tuple(wanted.shape)} {wanted.dtype} expected"
                )
            elif not torch.equal(_bits(written), _bits(wanted)):
                differing = int((_bits(written) != _bits(wanted)).sum())
                found.append(
                    f"{name}: {differing} byte(s) differ from {item.source} in {where[name]}"
                )
        with lock:
            problems.extend(found)
        return sum(math.prod(s) for s in item.shapes)

    _run_tasks(plan, work, workers, buffer_bytes, None, 0)
    return problems


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _written_files(out: Path) -> dict[str, str]:
    """{tensor name: file} from the index, or from the single file's header."""
    from safetensors import safe_open

    index = out / INDEX_FILE
    if index.is_file():
        return dict(loads_unique(index.read_text())["weight_map"])
    files = sorted(out.glob("*.safetensors"))
    mapping = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            mapping.update({name: file.name for name in handle.keys()})
    return mapping


def verify_export_dir(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    layout_name: str = "auto",
    io: str = "auto",
    workers: int = 4,
) -> list[str]:
    """Verify an existing export against its checkpoint, using the export's own config.json
    (so the dtype is the one written)."""
    source = _resolve_source(str(ckpt), io)
    try:
        config = load_config(Path(out_dir) / "config.json")
    except HFConfigError as err:
        raise ExportUsageError(str(err)) from None
    return verify_export(
        plan_export(source, config, layout_name=layout_name), out_dir, workers=workers
    )
