"""bench/lora.py: the CPU smoke run trains both rows through the SFT step and prints the table;
the LoRA FLOP count and the full fine-tuning memory verdict follow the stated formulas; a row
that ran out of memory or failed keeps its place in the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

from bench.lora import full_finetune_need, need_lines, print_table, step_flops
from tests.support.paths import REPO

GIB = 2**30


def test_cpu_smoke_run_prints_both_rows(tmp_path):
    out = tmp_path / "rows.json"
    command = [
        sys.executable,
        str(REPO / "bench" / "lora.py"),
        "--shapes",
        "tiny",
        "--device",
        "cpu",
        "--strategy",
        "fsdp2",
        "--seq",
        "64",
        "--lora-rank",
        "4",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--json",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    lora, full = rows
    assert (lora["lora_rank"], full["lora_rank"]) == (4, 0)
    assert full["trainable"] == full["params"]
    # rank 4 on the 7 linear layers of 2 layers: 4 * (fan_in + fan_out) each
    assert 0 < lora["trainable"] < full["trainable"] / 10
    assert lora["params"] - lora["trainable"] == full["params"]  # the same base underneath
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["tflops"] > 0 and row["loss"] > 0
    assert "| tiny | fsdp2 | LoRA r4 |" in done.stdout and "| tiny | fsdp2 | full |" in done.stdout


def test_lora_flops_count_the_base_at_two_thirds():
    counts = {"matmul": 1000, "attention_dim": 8}
    timing = SimpleNamespace(tokens=10, attention=50)
    full = step_flops(counts, layers=2, adapter_params=0, timing=timing)
    lora = step_flops(counts, layers=2, adapter_params=30, timing=timing)
    attention = 6 * 2 * 8 * 50
    assert full == 6 * 1000 * 10 + attention
    assert lora - attention == (full - attention) * 2 / 3 + 6 * 30 * 10


# A LoRA row whose full fine-tune (128 GiB of fsdp2 state plus the measured 12 GiB transient)
# misses its 139 GiB GPU by 1 GiB.
LORA_ROW = {
    "shape": "s",
    "strategy": "fsdp2",
    "lora_rank": 64,
    "params": 8 * GIB + GIB // 8,
    "trainable": GIB // 8,
    "transient_gib": 12.0,
    "gpu_total_gib": 139.0,
}


def test_full_finetune_verdict_adds_state_and_measured_transient():
    assert full_finetune_need(10, "fsdp2", 7.0) == 10 * 16 + 7.0
    assert full_finetune_need(10, "megatron_fsdp", 0.0) == 10 * 18
    (line,) = need_lines([LORA_ROW])
    assert "= 128.0 GiB + transient 12.0 GiB" in line and "does not fit by 1.0 GiB" in line
    (line,) = need_lines([{**LORA_ROW, "transient_gib": 1.0}])
    assert "fits, 10.0 GiB spare" in line
    assert "measured:" not in line  # no full row ran: the estimate stands alone


def test_full_finetune_verdict_reports_what_the_full_row_did():
    """The estimate can be wrong both ways; the full row of the same shape and strategy, when
    it ran, says what happened, and a row of another strategy says nothing about this one."""
    lora = LORA_ROW
    full = {"shape": "s", "strategy": "fsdp2", "lora_rank": 0, "tokens_per_s": 1.0}
    ran = {**full, "peak_allocated_gib": 117.9, "peak_reserved_gib": 139.0}
    (line,) = need_lines([lora, ran])
    assert "does not fit by 1.0 GiB; measured: it ran, peak 117.9 GiB allocated, 139.0 GiB" in line
    (line,) = need_lines(
        [lora, {"shape": "s", "strategy": "fsdp2", "lora_rank": 0, "oom": "steps"}]
    )
    assert line.endswith("; measured: out of memory (steps)")
    (line,) = need_lines([lora, {**ran, "strategy": "megatron_fsdp"}])
    assert "measured:" not in line


def test_oom_and_failed_rows_stay_in_the_table(capsys):
    args = SimpleNamespace(
        seq=4096, micro_batch=1, grad_accum=1, loss="chunked", ac=False, steps=5, warmup=2
    )
    rows = [
        {"shape": "s", "strategy": "fsdp2", "lora_rank": 0, "oom": "steps", "trainable": 5e9},
        {"shape": "s", "strategy": "megatron_fsdp", "lora_rank": 0, "error": "exit 1: boom"},
    ]
    print_table(rows, args)
    table = capsys.readouterr().out
    assert "| s | fsdp2 | full | 5,000.0 M |" in table and "OOM (steps)" in table
    assert "failed: exit 1: boom" in table
