"""`validate --deep` holds a bounded window of a tensor, whatever its size, and
`export-hf --verify` about one tensor at a time.

validate --deep read each tensor whole: 2.5 GiB of memory for a 2 GiB tensor (and, before
that, it kept the tensor just checked alive while it read the next, so an Adam
checkpoint's two moments of the embedding held twice the largest). It now reads each stored
chunk a window at a time (`storage_checks.WINDOW_BYTES`), as export --verify reads its
source. export-hf --verify read each written tensor whole beside the converted source: 2.4x
the largest tensor. Peak RSS is measured in fresh processes, each against a checkpoint
without the large tensor, so torch's own memory cancels out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

MIB = 1 << 20
ROWS, COLUMNS = 65536, 1024  # float32: 256 MiB
LARGE = ROWS * COLUMNS * 4
DEEP_ROWS = 8192  # float32: 32 MiB


# Run first in each child: writes the child's own peak RSS (VmHWM, in KiB) to the file named
# by its first argument as it exits. Not `wait4`'s ru_maxrss: a child started by vfork
# inherits the peak of this process (which made the checkpoints) across exec, so every
# child seemed to hold as much as the largest of them.
_RECORD_PEAK = """
import atexit, sys
def _record(path=sys.argv.pop(1)):
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(peak)
atexit.register(_record)
"""


def _peak_rss(tmp_path: Path, code: str, *args: str) -> int:
    """Peak RSS in bytes of a fresh interpreter running `code` with `args`."""
    record = tmp_path / "peak"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", _RECORD_PEAK + code, str(record), *args]
    subprocess.run(command, cwd=REPO, env=env, check=True)
    return int(record.read_text()) * 1024


_VALIDATE_DEEP = """
import sys
from mfsdp_ckpt.check.validate import validate_checkpoint
report = validate_checkpoint(sys.argv[1], deep=True)
assert not [f for f in report.findings if f.severity == "error"], report.findings
"""


def _save(run: Path, tensors: dict) -> Path:
    from mfsdp_ckpt.checkpointer import Checkpointer

    Checkpointer(run, strategy="none").save(1, {"model": tensors}, contents=("model",))
    return run


def test_validate_deep_holds_a_window_of_a_tensor_not_the_tensor(tmp_path):
    """Five times the tensor, the same memory: the check's own buffers (a window, a hash
    block, the read-ahead of small chunks) are the same whatever the tensor; up to ~40 MiB
    of them and of the allocator's noise, so the tensor grows by 128 MiB (read whole, it
    added more than that)."""
    import torch

    from mfsdp_ckpt.check.storage_checks import WINDOW_BYTES

    rows = {"one": DEEP_ROWS, "five": 5 * DEEP_ROWS}
    runs = {
        name: _save(tmp_path / name, {"a.weight": torch.full((count, COLUMNS), 0.01)})
        for name, count in rows.items()
    }
    grown = 4 * DEEP_ROWS * COLUMNS * 4  # float32: 128 MiB more, many windows
    assert grown >= 16 * WINDOW_BYTES
    added = _peak_rss(tmp_path, _VALIDATE_DEEP, str(runs["five"])) - _peak_rss(
        tmp_path, _VALIDATE_DEEP, str(runs["one"])
    )
    assert added < grown // 2, f"a tensor {grown / MIB:.0f} MiB larger added {added / MIB:.0f} MiB"


_EXPORT_VERIFY = """
import sys
from cli.main import main
sys.argv = ["mfsdp", "ckpt", "export-hf", sys.argv[1], "--out", sys.argv[2], "--verify"]
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
"""


def _save_model(run: Path, vocab_size: int) -> Path:
    """A one-layer qwen2 checkpoint with its config and tokenizer, whose largest tensor is
    the tied float32 embedding: `vocab_size` x COLUMNS."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.tiny import build_tokenizer

    config = AutoConfig.for_model(
        "qwen2",
        vocab_size=vocab_size,
        hidden_size=COLUMNS,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        tie_word_embeddings=True,
        dtype="float32",
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    weights = {n: torch.full(tuple(p.shape), 0.01) for n, p in model.named_parameters()}

    def assets(target: Path) -> None:
        config.save_pretrained(target)
        build_tokenizer().save_pretrained(target)

    Checkpointer(run, strategy="none", model_family="qwen2").save(
        1, {"model": weights}, contents=("model",), hf_assets=assets
    )
    return run


def test_export_verify_compares_the_written_tensor_a_piece_at_a_time(tmp_path):
    large, small = _save_model(tmp_path / "large", ROWS), _save_model(tmp_path / "small", 512)
    with_large = _peak_rss(tmp_path, _EXPORT_VERIFY, str(large), str(tmp_path / "out_large"))
    without = _peak_rss(tmp_path, _EXPORT_VERIFY, str(small), str(tmp_path / "out_small"))
    # the converted tensor and a 64 MiB piece of the written one; whole, the two held 2x
    assert with_large - without < LARGE * 3 // 2, (
        f"verifying a {LARGE / MIB:.0f} MiB tensor added {(with_large - without) / MIB:.0f} MiB"
    )
