"""Builders of hostile checkpoint bytes, by class, and a runner that feeds them to the CLI
under an address-space limit and a timeout (tests/reliability/test_reliability_limits.py,
and the report script through it).

A case is a CLI argument list; `run_limited` runs a batch of them in one fresh process
whose RLIMIT_AS is its size after imports plus `budget` bytes, each case under SIGALRM,
and returns per case: exit code, escaped exception (MemoryError and TimeoutError count),
seconds, output size and its first lines.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import torch

from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from tests.support.paths import REPO

BUDGET = (
    3 << 29
)  # 1.5 GiB above the process after imports: the 1 GiB target plus the tiny model's tensors
CASE_TIMEOUT_S = 30

PROBE = r"""
import json, os, resource, signal, sys, time
sys.path.insert(0, sys.argv[1])
budget, timeout, cases = int(sys.argv[2]), int(sys.argv[3]), json.load(open(sys.argv[4]))
from click.testing import CliRunner
from cli.main import app
import torch, mfsdp_ckpt.convert.export_hf, mfsdp_ckpt.check.validate, mfsdp_ckpt.check.describe  # in the baseline
vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + budget, resource.getrlimit(resource.RLIMIT_AS)[1]))

def alarm(*_):
    raise TimeoutError(f"over {timeout} s")

signal.signal(signal.SIGALRM, alarm)
records = []
for args in cases:
    start = time.monotonic()
    signal.alarm(timeout)
    try:
        result = CliRunner().invoke(app, args)
        output, code = result.output, result.exit_code
        escaped = result.exception if not isinstance(result.exception, (SystemExit, type(None))) else None
    except BaseException as err:  # DCP's CheckpointException is a BaseException
        output, code, escaped = "", 1, err
    finally:
        signal.alarm(0)
    lines = [line[:300] for line in output.splitlines() if line.strip()]
    records.append({"args": args, "exit": code, "escaped": type(escaped).__name__ if escaped else None,
                    "seconds": time.monotonic() - start, "output_bytes": len(output.encode("utf-8", "replace")),
                    "output": output if len(output) < 65536 else "",
                    "first": lines[:3], "errors": [line for line in lines if line.startswith("error:")],
                    "verdict": any(line.startswith("INVALID") for line in lines)})
print(json.dumps(records))
"""


def run_limited(
    cases: list[list[str]], scratch: Path, budget: int = BUDGET, timeout: int = CASE_TIMEOUT_S
) -> list[dict]:
    """Run each CLI argument list in one limited process (module docstring)."""
    spec = scratch / "cases.json"
    spec.write_text(json.dumps([[str(a) for a in args] for args in cases]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO), str(budget), str(timeout), str(spec)],
        capture_output=True,
        text=True,
        timeout=timeout * len(cases) + 120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- editing a checkpoint
def step_of(run: Path) -> Path:
    return layout.step_dir(run, 1)


def dist_of(run: Path) -> Path:
    return step_of(run) / layout.DIST_CKPT_DIR


def rehash(run: Path) -> None:
    """Make manifest.json agree with every file now in the step (only the planted fault shows)."""
    step = step_of(run)
    path = step / layout.MANIFEST_FILE
    data = json.loads(path.read_text())
    for name in list(data["files"]):
        file = step / name
        if file.is_file() and not file.is_symlink():
            data["files"][name] = {
                "size": file.stat().st_size,
                "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
            }
    path.write_text(json.dumps(data, indent=2))


def write_metadata(run: Path, data: bytes) -> None:
    (dist_of(run) / layout.DCP_METADATA_FILE).write_bytes(data)
    rehash(run)


def edit_metadata(run: Path, edit) -> None:
    """Load .metadata (DCP classes), let `edit` change it, pickle it back."""
    metadata = load_metadata(dist_of(run) / layout.DCP_METADATA_FILE)
    edit(metadata)
    write_metadata(run, pickle.dumps(metadata))


def model_weight(metadata, dtype=torch.float32) -> str:
    """The largest model tensor of `dtype` (the tiny model's embedding)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    tensors = [
        (k, v)
        for k, v in metadata.state_dict_metadata.items()
        if k.startswith("model.")
        and isinstance(v, TensorStorageMetadata)
        and v.properties.dtype == dtype
    ]
    return max(tensors, key=lambda kv: kv[1].size.numel())[0]


def replace_blob(run: Path, blob: bytes, name: str | None = None) -> str:
    """Append `blob` to a shard and point the first chunk of tensor `name` (default: the
    largest float32 model weight) at it; returns the tensor's name."""
    import dataclasses

    chosen = {}

    def edit(metadata) -> None:
        key = name or model_weight(metadata)
        chosen["name"] = key
        index = next(i for i in metadata.storage_data if i.fqn == key)
        info = metadata.storage_data[index]
        shard = dist_of(run) / info.relative_path
        offset = shard.stat().st_size
        with open(shard, "ab") as handle:
            handle.write(blob)
        metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=len(blob))

    edit_metadata(run, edit)
    return chosen["name"]


def saved_tensor_blob(tensor: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()


def rezip(
    blob: bytes,
    replace: dict[str, bytes] | None = None,
    compress: set[str] = frozenset(),
    extra_members: int = 0,
    pad: int = 0,
    inflated: int = 0,
) -> bytes:
    """A torch.save blob rebuilt with members replaced, padded with `extra_members` empty
    members or one stored member of `pad` bytes (so the blob is as long as the data it
    declares and only a look inside can refuse it), and the members in `compress` DEFLATEd
    (with `inflated`: replaced by that many zero bytes, streamed: a zip bomb)."""
    source = zipfile.ZipFile(io.BytesIO(blob))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compresslevel=1) as target:
        for info in source.infolist():
            short = info.filename.split("/", 1)[1]
            entry = zipfile.ZipInfo(info.filename)
            entry.compress_type = zipfile.ZIP_DEFLATED if short in compress else zipfile.ZIP_STORED
            if short in compress and inflated:
                entry._compresslevel = 1  # zeros compress as well at level 1, several times faster
                with target.open(entry, "w", force_zip64=True) as member:
                    for _ in range(inflated >> 24):
                        member.write(bytes(1 << 24))
                continue
            target.writestr(entry, (replace or {}).get(short, source.read(info)))
        for i in range(extra_members):
            target.writestr(zipfile.ZipInfo(f"archive/pad/{i}"), b"")
        if pad:
            target.writestr(zipfile.ZipInfo("archive/padding"), bytes(pad))
    return out.getvalue()
