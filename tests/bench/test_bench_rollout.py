"""bench/rollout.py: the CPU smoke run prints every row, the EOS line and a decode-step profile;
the weights a decode step reads, its matmul FLOPs and the decode floor follow the stated
formulas.
bench/prefill_chunks.py: its CPU smoke run prints a line per chunk size."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from bench.rollout import (
    build,
    decode_bytes,
    decode_floor,
    decode_matmul_flops,
    decode_weights,
    kv_bytes,
    make_prompts,
)
from tests.support.paths import REPO


def test_cpu_smoke_run_prints_rows_eos_line_and_profile():
    command = [sys.executable, str(REPO / "bench" / "rollout.py"), "--shape", "tiny"]
    command += ["--prompts", "4", "--prompt-len", "16", "--new-tokens", "8", "--device", "cpu"]
    command += ["--dtype", "fp32", "--repeat", "1", "--engines", "generate,hf,hf_eos", "--profile"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert [row["engine"] for row in result["rows"]] == ["generate", "hf", "hf_eos"]
    assert result["eos_time_ratio"] > 0 and result["matmul_floor"] is None  # no GPU peak here
    assert "profiled hf runs: 1 new token" in done.stdout and "8 new tokens" in done.stdout


def test_prefill_chunks_smoke_run_prints_a_line_per_chunk_size():
    command = [sys.executable, str(REPO / "bench" / "prefill_chunks.py"), "--shape", "tiny"]
    command += ["--prompts", "5", "--prompt-len", "16", "--device", "cpu", "--dtype", "fp32"]
    command += ["--tokens", "16,64,100000", "--repeat", "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = json.loads(done.stdout.strip().splitlines()[-1])["lines"]
    vocab = build("tiny", torch.float32, "cpu").config.vocab_size
    longest = max(len(prompt) for prompt in make_prompts(5, 16, vocab))
    assert [line["tokens"] for line in lines] == [16, 64, 100000]
    assert [line["chunks"] for line in lines] == [
        -(-5 // max(1, t // longest)) for t in (16, 64)
    ] + [1]
    assert all(line["best_s"] > 0 for line in lines)


def test_decode_weights_and_flops_count_every_weight_a_step_reads():
    model = build("tiny", torch.float32, "cpu")
    embedding = model.model.embed_tokens.weight.numel()
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    everything = sum(p.numel() for p in model.parameters())  # a tied head is counted once
    assert decode_weights(model) == everything - (0 if tied else embedding)
    rows, steps = 3, 5
    assert decode_matmul_flops(model, [steps] * rows) == 2.0 * decode_weights(model) * rows * 4
    # decode_bytes: the same weights at every decode step, plus the keys and values read
    no_cache = decode_bytes(model, [0] * rows, [1] * rows)
    assert no_cache == 0  # one new token: the prefill makes it, no decode step runs
    per_step = decode_bytes(model, [0], [2])  # one step, attending to the current token only
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    kv = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim
    assert per_step == (decode_weights(model) + kv) * 4


def test_decode_floor_is_the_slower_of_flops_and_bytes_per_step():
    model = build("tiny", torch.float32, "cpu")
    prompts, full, ending = [5, 9, 7], [6, 6, 6], [6, 2, 4]
    bandwidth = 1e9
    # a GPU whose matmuls are free: the floor is the bandwidth limit
    for lengths in (full, ending):
        bytes_s = decode_bytes(model, prompts, lengths) / bandwidth
        assert (
            abs(decode_floor(model, prompts, lengths, bandwidth, 1e30) - bytes_s) < 1e-9 * bytes_s
        )
    # a GPU whose matmuls bind: every generating row's FLOPs at the peak, plus the KV reads;
    # a row generating n tokens is decoded at n - 1 steps
    flops = 1.0
    for lengths in (full, ending):
        matmuls = 2.0 * decode_weights(model) * sum(n - 1 for n in lengths) / flops
        want = matmuls + kv_bytes(model, prompts, lengths) / bandwidth
        assert abs(decode_floor(model, prompts, lengths, bandwidth, flops) - want) < 1e-9 * want
    assert decode_matmul_flops(model, full) / flops < decode_floor(
        model, prompts, full, bandwidth, flops
    )


def test_decode_overlap_smoke_run_times_one_batch_and_two_halves():
    """Both setups are timed with the engine's decoder; the first is the ratio's base; the
    concurrent-stream setups are CUDA's alone."""
    command = [sys.executable, str(REPO / "bench" / "decode_overlap.py"), "--shape", "tiny"]
    command += ["--rows", "4", "--prompt-len", "16", "--steps", "6", "--device", "cpu"]
    command += ["--dtype", "fp32", "--repeat", "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])["rows"]
    assert [row["setup"] for row in rows] == ["one batch", "two halves, one after the other"]
    assert rows[0]["ratio"] == 1.0 and all(row["ms_per_step"] > 0 for row in rows)
