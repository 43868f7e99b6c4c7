"""Builders of hostile checkpoint bytes, by class, and a runner that feeds them to the CLI
under an address-space limit and a timeout (tests/reliability/test_reliability_limits.py,
and the report script through it).

A case is a CLI argument list; `run_limited` runs a batch of them in one fresh process
whose RLIMIT_AS is its size after imports plus `budget` bytes, each case stopped (a
TimeoutError) after `timeout` seconds of CPU time, or WALL_FACTOR times that of wall time
(a case blocked on a file uses no CPU), and returns per case: exit code, escaped exception
(MemoryError and TimeoutError count), wall and CPU seconds, output size and its first
lines. CPU time is the work a case did: a busy machine stretches wall time, not it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import torch

from mfsdp_ckpt.format import layout
from tests.support.ckpt_edits import edit_metadata, point_at_appended_blob
from tests.support.paths import REPO

BUDGET = (
    3 << 29
)  # 1.5 GiB above the process after imports: the 1 GiB target plus the tiny model's tensors
CASE_TIMEOUT_S = 30
WALL_FACTOR = 4  # a case's wall-time stop: this many times its CPU-time one

PROBE = r"""
import json, os, resource, signal, sys, time
sys.path.insert(0, sys.argv[1])
budget, timeout, cases = int(sys.argv[2]), int(sys.argv[3]), json.load(open(sys.argv[4]))
wall = int(sys.argv[5])
from click.testing import CliRunner
from cli.main import app
# imported before the baseline is taken, so their size is not charged to a case
import torch, mfsdp_ckpt.convert.export_hf, mfsdp_ckpt.check.validate, mfsdp_ckpt.check.describe
vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + budget, resource.getrlimit(resource.RLIMIT_AS)[1]))

def stop(what):
    def raised(*_):
        raise TimeoutError(what)
    return raised

signal.signal(signal.SIGPROF, stop(f"over {timeout} s of CPU time"))
signal.signal(signal.SIGALRM, stop(f"over {wall} s"))
records = []
for args in cases:
    start, cpu_start = time.monotonic(), time.process_time()
    signal.setitimer(signal.ITIMER_PROF, timeout)
    signal.alarm(wall)
    try:
        result = CliRunner().invoke(app, args, prog_name="mfsdp")
        output, code = result.output, result.exit_code
        failed_with = result.exception
        escaped = None if isinstance(failed_with, (SystemExit, type(None))) else failed_with
    except BaseException as err:  # DCP's CheckpointException is a BaseException
        output, code, escaped = "", 1, err
    finally:
        signal.alarm(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
    lines = [line[:300] for line in output.splitlines() if line.strip()]
    records.append({
        "args": args, "exit": code, "escaped": type(escaped).__name__ if escaped else None,
        "seconds": time.monotonic() - start, "cpu_seconds": time.process_time() - cpu_start,
        "output_bytes": len(output.encode("utf-8", "replace")),
        "output": output if len(output) < 65536 else "",
        "first": lines[:3], "errors": [line for line in lines if line.startswith("error:")],
        "verdict": any(line.startswith("INVALID") for line in lines),
    })
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
        [
            sys.executable,
            "-c",
            PROBE,
            str(REPO),
            str(budget),
            str(timeout),
            str(spec),
            str(timeout * WALL_FACTOR),
        ],
        capture_output=True,
        text=True,
        timeout=timeout * WALL_FACTOR * len(cases) + 120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- editing a checkpoint
def step_of(run: Path) -> Path:
    """The one step (1) the limits tests' run saved."""
    return layout.step_dir(run, 1)


def dist_of(run: Path) -> Path:
    return step_of(run) / layout.DIST_CKPT_DIR


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
    chosen = {}

    def edit(metadata) -> None:
        key = name or model_weight(metadata)
        chosen["name"] = key
        index = next(i for i in metadata.storage_data if i.fqn == key)
        point_at_appended_blob(step_of(run), metadata, index, blob)

    edit_metadata(step_of(run), edit)
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
