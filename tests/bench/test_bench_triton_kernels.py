"""bench/decode_attention.py and bench/token_pick.py run end to end: their CPU smoke runs
(Triton's interpreter); bench/splitk_matmul.py's kernel computes its product."""

import json
import os
import subprocess
import sys

from tests.support.paths import REPO, repo_env
from tests.support.triton import needs_triton, run_interpreted

pytestmark = needs_triton


def _smoke_run(script: str, *args: str) -> tuple[str, list[dict]]:
    done = subprocess.run(
        [sys.executable, os.fspath(REPO / "bench" / script), *args],
        capture_output=True,
        text=True,
        env={**repo_env(), "TRITON_INTERPRET": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(done.stdout.strip().splitlines()[-1])["lines"]


def test_decode_attention_prints_a_line_per_rows_and_slot():
    stdout, lines = _smoke_run(
        "decode_attention.py",
        *("--device", "cpu", "--dtype", "fp32", "--rows", "4,3", "--heads", "4"),
        *("--kv-heads", "2", "--dim", "16", "--width", "64", "--slots", "20,40"),
        *("--layers", "1", "--repeat", "1"),
    )
    assert [(line["rows"], line["slot"]) for line in lines] == [(4, 20), (4, 40), (3, 20), (3, 40)]
    for line in lines:
        filled = line["kv_mb_per_layer"] * 1e6 / (2 * 16 * 2 * 4)  # slots read, fp32 K and V
        assert line["rows"] <= filled <= line["rows"] * (line["slot"] + 1)
        assert line["split_us"] > 0
    assert "| 3 | 40 |" in stdout


def test_token_pick_kernel_chooses_what_the_eager_ops_do():
    stdout, lines = _smoke_run(
        "token_pick.py", "--device", "cpu", "--rows", "4,2", "--vocab", "3000", "--repeat", "1"
    )
    assert [line["rows"] for line in lines] == [4, 2]
    assert all(line["kernel_differ"] == 0 and line["kernel_us"] > 0 for line in lines)
    assert "| 2 |" in stdout


def test_split_k_matmul_computes_the_product():
    """bench/decode_matmuls.py's split-K alternative (bench/splitk_matmul.py) computes
    x @ w.T, with one split and with several, where tiles overhang the shape."""
    results = run_interpreted("tests.bench.splitk_interpreted")
    assert len(results) == 3
    for name, result in results.items():
        shape, splits = name.split("/")
        rows, out_features = (int(n) for n in shape.split("x")[:2])
        assert result["shape"] == [rows, out_features], name
        assert result["error"] < 4e-3, (name, result)  # fp16 rounding of values up to ~4
        # several splits: fp32 partials; one: the fp16 result itself
        assert result["partials_error"] < (4e-3 if splits == "1" else 1e-4), (name, result)
