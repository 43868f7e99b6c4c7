"""export-hf --verify of a sharded export names each changed tensor and each missing file.

(That each file's header is read once, not once per tensor, is held by
test_export_verify_reads_tensor_by_tensor.py.)
"""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from tests.support.export import save_single_process_checkpoint, verify_export_dir

SHARD_BYTES = 60_000  # several files of the tiny model's fp32 weights


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("verify_opens")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"), seed=3)
    return root / "run"


def test_verify_of_a_sharded_export_still_names_each_changed_tensor(run_dir, tmp_path):
    out = tmp_path / "hf"
    export_hf(run_dir, out, dtype="fp32", max_shard_size=SHARD_BYTES)
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    last = sorted(set(weight_map.values()))[-1]
    changed = sorted(name for name, file in weight_map.items() if file == last)[0]
    data = (out / last).read_bytes()
    header_len = int.from_bytes(data[:8], "little")
    begin = json.loads(data[8 : 8 + header_len])[changed]["data_offsets"][0] + 8 + header_len
    with open(out / last, "r+b") as handle:
        handle.seek(begin)
        handle.write(b"\x01\x02\x03\x04")
    problems = verify_export_dir(run_dir, out)
    assert len(problems) == 1 and problems[0].startswith(f"{changed}: "), problems
    assert f"in {last}" in problems[0]

    first = sorted(set(weight_map.values()))[0]
    (out / first).unlink()
    problems = verify_export_dir(run_dir, out)
    count = sum(1 for file in weight_map.values() if file == first)
    assert problems[0] == f"{first}: missing; its {count} tensor(s) not compared", problems
    assert len(problems) == 2, problems  # the file once, and the tensor changed above
