"""Checkpoint save/load throughput of a Qwen2-1.5B-shaped model + AdamW state on GPUs.

Compares, in one run on the same disk: plain `torch.distributed.checkpoint.save/load`
(the baseline users get from Megatron-LM / verl; the save also with 8 writer threads and as
`dcp.async_save`, see `dcp_baselines`), mfsdp's Checkpointer (atomic protocol,
fsync, per-rank file digests, manifest) with each `--threads` count of writer threads, the
training stall of two async saves (the first one also allocates the pinned host buffers
that later saves reuse), and `dd` with direct I/O writing and reading the same byte count.

    torchrun --nproc-per-node 2 bench/ckpt_io.py --dir /root/ckpt_bench \
        [--shape 1.5b] [--threads 8,16]
    torchrun --nproc-per-node 1 bench/ckpt_io.py --dir /root/ckpt_bench --shape tiny  # quick check
    python bench/ckpt_io.py --dir /tmp/ckpt_bench --device cpu --shape tiny  # CPU smoke (FSDP2)

Prints a table; the last lines are JSON for the record. On CPU (gloo, FSDP2, since
Megatron-FSDP needs CUDA) every row runs too, so the code paths are tested without a GPU;
its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mfsdp_ckpt.checkpointer import Checkpointer, load_checkpoint
from mfsdp_ckpt.format import checkpoint_resolution, layout
from trainer.distributed import init_distributed
from trainer.shapes import SHAPES as MODEL_SHAPES
from trainer.tiny import tiny_config_kwargs


def _qwen2_fields(shape: str) -> dict:
    """The project's own shape table (what `model.shape` builds), as Qwen2Config keywords."""
    fields = dict(MODEL_SHAPES[shape])
    assert fields.pop("model_type") == "qwen2"
    return fields


SHAPES = {
    "1.5b": _qwen2_fields("qwen2-1.5b"),
    "0.5b": _qwen2_fields("qwen2-0.5b"),
    "tiny": tiny_config_kwargs(vocab_size=512),
}


def build(shape: str, env, strategy_name: str = "megatron_fsdp"):
    """The model and optimizer as `mfsdp train` builds them: the Megatron-FSDP strategy (ZeRO-3,
    bf16 compute, fp32 main weights) after one training step, so Adam state exists."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.config import OptimConfig, StrategyConfig
    from trainer.strategies import make_strategy

    strategy = make_strategy(StrategyConfig(name=strategy_name), env)
    torch.manual_seed(0)
    with env.device:
        model = strategy.wrap(Qwen2ForCausalLM(Qwen2Config(**SHAPES[shape])))
    optimizer = strategy.build_optimizer(model, OptimConfig(lr=1e-5))
    batch = torch.randint(0, 500, (1, 128), device=env.device)
    model(input_ids=batch, labels=batch).loss.backward()
    strategy.before_optimizer_step(model)
    optimizer.step()
    strategy.zero_grad(optimizer)
    return strategy, model, optimizer


def chunk_metadata_seconds(model, group) -> tuple[float, float]:
    """Seconds to attach uneven-chunk offsets to the model state dict: Megatron-FSDP's own
    per-tensor collectives (what its state-dict hook runs) against mfsdp's single gather."""
    from megatron_fsdp.uneven_dtensor import preprocess_state_dict_for_uneven_dtensor

    from mfsdp_ckpt.storage.uneven_chunks import attach_uneven_chunk_metadata

    megatron = timed(lambda: preprocess_state_dict_for_uneven_dtensor(model.state_dict()))
    ours = timed(lambda: attach_uneven_chunk_metadata(model.state_dict(), group))
    return megatron, ours


def checkpoint_matches_model(model, state, run: Path) -> bool:
    """Zero the model's shards, load the run's newest checkpoint into them and compare:
    host staging must have captured exactly what the GPUs held."""
    from torch.distributed.tensor import DTensor

    expected = {
        k: v.to_local().clone() for k, v in state()["model"].items() if isinstance(v, DTensor)
    }
    target = {**state(), "extra": {"step": 0}}
    for value in target["model"].values():  # in place: the shards keep their chunk offsets
        if isinstance(value, DTensor):
            value.to_local().zero_()
    load_checkpoint(checkpoint_resolution.resolve_checkpoint(run), target)
    same = all(torch.equal(target["model"][k].to_local(), v) for k, v in expected.items())
    verdict = torch.tensor([int(same)], device=expected_device(state))
    dist.all_reduce(verdict, op=dist.ReduceOp.MIN)
    return bool(verdict.item())


def dcp_baselines(state, root: Path, group, threads: int) -> list[tuple[str, float]]:
    """DCP's own faster settings, so mfsdp's save is compared with the best plain DCP offers:
    `FileSystemWriter(thread_count=threads)`, and `dcp.async_save` (the training stall, then
    the time until its future resolves), as a user calls it and with torch's other stager.

    `dcp.async_save`'s default stager (`DefaultStager` -> `StateDictStager`) deep-copies the
    state dict: each storage it reaches is copied to host memory, and each Python attribute
    of each tensor is deep-copied too, whatever it refers to. `UntypedStorage.copy_` refuses
    a source with a size but no data ("Attempted to call copy_() on an invalid python
    storage"), which is what a tensor subclass's wrapper storage is; torch 2.11 on 1xH200
    met one in Megatron-FSDP's state (which tensor has not been traced). A failure is a row
    with its error, and the next row is the workaround: `async_stager=BlockingAsyncStager`,
    the other stager torch ships, which copies only tensors and DTensors' local tensors
    (into pinned host buffers kept for the next save). Its local tensors are new, so the
    chunk offsets of unevenly sharded DTensors are attached to its copy again
    (`_OffsetKeepingStager`). Each save writes its own directory, removed afterwards."""
    from torch.distributed.checkpoint import FileSystemWriter

    threaded = root / "plain_threaded"
    writer = FileSystemWriter(str(threaded), thread_count=threads)
    seconds = timed(lambda: dcp.save(state(), storage_writer=writer, process_group=group))
    rows = [(f"dcp.save, FileSystemWriter(thread_count={threads})", seconds)]
    stagers = [("dcp.async_save", None), ("dcp.async_save, BlockingAsyncStager", _stager(group))]
    for index, (name, stager) in enumerate(stagers):
        directory = root / f"plain_async_{index}"
        rows.append(_async_save_row(name, state, directory, group, stager))
        if rank_zero():
            shutil.rmtree(directory, ignore_errors=True)
    if rank_zero():
        shutil.rmtree(threaded)
    dist.barrier()
    return rows


def _async_save_row(name: str, state, directory: Path, group, stager) -> tuple[str, float]:
    """One `dcp.async_save`, to completion; a failure is a row too, with its error."""
    futures = []
    try:
        stall = timed(
            lambda: futures.append(
                dcp.async_save(
                    state(), checkpoint_id=str(directory), process_group=group, async_stager=stager
                )
            )
        )
        done = timed(lambda: futures[0].result())
    except RuntimeError as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"{name}: failed, RuntimeError: {message}", float("nan")
    return f"{name} (to completion; training stalled {stall:.2f} s)", stall + done


def _stager(group):
    """torch's BlockingAsyncStager (pinned host copies kept across saves on a GPU), keeping
    the chunk offsets of uneven DTensors on the staged copy."""
    from torch.distributed.checkpoint.staging import BlockingAsyncStager

    from mfsdp_ckpt.storage.uneven_chunks import attach_uneven_chunk_metadata

    class _OffsetKeepingStager(BlockingAsyncStager):
        def stage(self, state_dict):
            staged = super().stage(state_dict)
            attach_uneven_chunk_metadata(staged, group)
            return staged

    # Pinned host buffers, reused by the next save, as a user would choose them on a GPU.
    return _OffsetKeepingStager(cache_staged_state_dict=torch.cuda.is_available())


def rank_zero() -> bool:
    return dist.get_rank() == 0


def expected_device(state) -> torch.device:
    """Where the collectives' tensors live: the model's device."""
    model = state()["model"]
    return next(v for v in model.values() if isinstance(v, torch.Tensor)).device


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def timed(fn) -> float:
    synchronize = torch.cuda.synchronize if torch.cuda.is_initialized() else lambda: None
    synchronize()
    dist.barrier()
    start = time.perf_counter()
    fn()
    synchronize()
    dist.barrier()
    return time.perf_counter() - start


def dd(path: Path, nbytes: int) -> tuple[float, float]:
    """Write then read `nbytes` with direct I/O (NaN where the filesystem refuses O_DIRECT)."""
    block = 64 << 20
    count = max(1, nbytes // block)
    start = time.perf_counter()
    written = subprocess.run(
        ["dd", "if=/dev/zero", f"of={path}", f"bs={block}", f"count={count}", "oflag=direct"],
        capture_output=True,
        check=False,
    )
    if written.returncode != 0:
        path.unlink(missing_ok=True)
        return float("nan"), float("nan")
    write = count * block / (time.perf_counter() - start)
    drop_caches()
    start = time.perf_counter()
    subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", f"bs={block}", "iflag=direct"],
        check=True,
        capture_output=True,
    )
    read = count * block / (time.perf_counter() - start)
    path.unlink()
    return write, read


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--shape", default="1.5b", choices=sorted(SHAPES))
    parser.add_argument(
        "--device",
        default="cuda",
        choices=["cuda", "cpu"],
        help="cpu: gloo and FSDP2 (Megatron-FSDP needs CUDA), to check that every row runs",
    )
    parser.add_argument(
        "--threads",
        default="8,16",
        help="writer thread counts to time, comma-separated; "
        "the last one also serves the load and async rows",
    )
    parser.add_argument(
        "--saves-only",
        action="store_true",
        help="time only the saves (and dd); check the last one loads back equal to the model",
    )
    parser.add_argument(
        "--profile-stall",
        action="store_true",
        help="print rank 0's cProfile (top 25 cumulative) of the second async save's stall",
    )
    args = parser.parse_args(argv)
    strategy_name = "megatron_fsdp" if args.device == "cuda" else "fsdp2"
    thread_counts = [int(n) for n in args.threads.split(",")]
    env = init_distributed(args.device)
    rank = env.rank
    root = Path(args.dir)
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    dist.barrier()
    strategy, model, optimizer = build(args.shape, env, strategy_name)
    model_state, optimizer_state = (
        strategy.model_state(model),
        strategy.optimizer_state(model, optimizer),
    )
    state = lambda: {"model": model_state.state_dict(), "optimizer": optimizer_state.state_dict()}  # noqa: E731
    rows = []

    def record(name: str, seconds: float, nbytes: int, note: str = "") -> None:
        rows.append(
            {
                "method": name,
                "seconds": round(seconds, 2),
                "GB": round(nbytes / 1e9, 2),
                "GB/s": round(nbytes / seconds / 1e9, 3),
                "note": note,
            }
        )

    gloo = dist.new_group(backend="gloo")
    plain = root / "plain"
    seconds = timed(lambda: dcp.save(state(), checkpoint_id=str(plain), process_group=gloo))
    nbytes = dir_bytes(plain)
    record("dcp.save (baseline)", seconds, nbytes, "1 writer thread")
    for name, seconds in dcp_baselines(state, root, gloo, thread_counts[-1]):
        record(name, seconds, nbytes)

    for threads in thread_counts:
        run = root / f"mfsdp_t{threads}"
        checkpointer = Checkpointer(
            run, strategy=strategy_name, io_threads=threads, hash_workers=threads
        )
        seconds = timed(lambda: checkpointer.save(1, {**state(), "extra": {"step": 1}}))
        record(
            f"mfsdp save, {threads} writer threads",
            seconds,
            dir_bytes(layout.step_dir(run, 1)),
            "atomic + fsync + xxh3_128 + manifest",
        )
        if threads != thread_counts[-1] and rank == 0:
            shutil.rmtree(run)

    run = root / f"mfsdp_t{thread_counts[-1]}"
    checked = run
    if not args.saves_only:
        cached = drop_caches()
        seconds = timed(lambda: dcp.load(state(), checkpoint_id=str(plain), process_group=gloo))
        record(
            "dcp.load (baseline)",
            seconds,
            nbytes,
            "page cache dropped" if cached else "page cache warm",
        )
        cached = drop_caches()
        target = {**state(), "extra": {"step": 0}}
        seconds = timed(
            lambda: load_checkpoint(checkpoint_resolution.resolve_checkpoint(run), target)
        )
        record("mfsdp load", seconds, nbytes, "page cache dropped" if cached else "page cache warm")

        if rank == 0:  # keep the disk's free space for the next save
            shutil.rmtree(plain)
            shutil.rmtree(run)
        dist.barrier()
        async_run = root / "mfsdp_async"
        checkpointer = Checkpointer(
            async_run,
            strategy=strategy_name,
            async_save=True,
            io_threads=thread_counts[-1],
            hash_workers=thread_counts[-1],
            keep_last=1,
        )
        for step, what in ((1, "first, pins host buffers"), (2, "reuses them")):
            profiler = (
                cProfile.Profile() if args.profile_stall and step == 2 and rank == 0 else None
            )
            if profiler is not None:
                profiler.enable()
            states = {}
            model_s = timed(lambda: states.update(model=model_state.state_dict()))
            optim_s = timed(lambda: states.update(optimizer=optimizer_state.state_dict()))
            save_s = timed(lambda: checkpointer.save(step, {**states, "extra": {"step": step}}))
            if profiler is not None:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
            total = model_s + optim_s + save_s + timed(checkpointer.wait)
            record(
                f"mfsdp async save {step} (to commit)",
                total,
                nbytes,
                f"training stalled {model_s + optim_s + save_s:.2f} s ({what}): "
                f"model state_dict {model_s:.2f} s "
                f"+ optimizer state_dict {optim_s:.2f} s + save() {save_s:.2f} s",
            )

        checked = async_run
        if strategy_name == "megatron_fsdp":
            megatron_s, ours_s = chunk_metadata_seconds(model, strategy.dp_group)
        if strategy_name == "megatron_fsdp" and rank == 0:
            print(
                "uneven-chunk offsets for the model state dict: "
                f"Megatron-FSDP per-tensor {megatron_s:.3f} s, "
                f"mfsdp one gather {ours_s:.3f} s ({megatron_s / ours_s:.1f}x)"
            )
    exact = checkpoint_matches_model(model, state, checked)
    if rank == 0:
        print(f"{checked.name} loads back equal to the model's shards at save time: {exact}")
        write, read = dd(root / "dd.bin", nbytes)
        rows.append(
            {
                "method": "dd oflag=direct (write)",
                "GB/s": round(write / 1e9, 3),
                "GB": round(nbytes / 1e9, 2),
            }
        )
        rows.append(
            {
                "method": "dd iflag=direct (read)",
                "GB/s": round(read / 1e9, 3),
                "GB": round(nbytes / 1e9, 2),
            }
        )
        for row in rows:
            base = write if "save" in row["method"] or "write" in row["method"] else read
            row["vs dd"] = round(row["GB/s"] * 1e9 / base, 2)
        print(f"\n{'method':<40} {'GB':>7} {'s':>7} {'GB/s':>7} {'vs dd':>6}  note")
        for row in rows:
            print(
                f"{row['method']:<40} {row['GB']:>7} {row.get('seconds', ''):>7} {row['GB/s']:>7} "
                f"{row['vs dd']:>6}  {row.get('note', '')}"
            )
        print(
            json.dumps(
                {
                    "shape": args.shape,
                    "world_size": dist.get_world_size(),
                    "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "none",
                    "rows": rows,
                }
            )
        )
    dist.barrier()
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
