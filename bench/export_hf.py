"""export-hf on CPU: wall time and peak RSS against the usual ways out, in one run.

Makes Qwen2.5-shaped checkpoints (random fp32 weights, model only, one process, through
mfsdp's Checkpointer; in a fresh temporary dir removed at the end, or kept in `--dir` for
the next run), then runs each method in a fresh subprocess,
timing it and reading that child's peak RSS from wait4(), so the numbers are independent.
Methods are interleaved and repeated (`--repeat`, rotating the order each round) and the
median wall time is reported, because one run on a shared VM moves by +-50%:

* `cp -r` of the dist_ckpt bytes (the floor any converter is measured against), and
  `cp -r` + `sync` (export fsyncs its files, so this is the like-for-like floor);
* `mfsdp ckpt export-hf` (fp32 like the baselines; also bf16 and with --io tensorstore);
* (i) `dcp_to_torch_save` + `torch.load` + `safetensors.torch.save_file`;
* (ii) `_load_state_dict_from_keys` of everything + `save_file`;
* start-up alone (importing the CLI and the export module), the fixed cost in every row,
  and start-up + `import torch`, which a cast (bf16) or a tensor transform adds; fp32 of
  an fp32 checkpoint does not import torch.

    python bench/export_hf.py --shapes 0.5b 1.5b 3b --baselines-at 1.5b --repeat 3

Prints a markdown table (median wall time, its ratio to cp and to cp + sync, the spread;
peak RSS against the target 1.5 x largest tensor + 0.5 GiB; load average while it ran)
and, last, one JSON line per row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
SHAPES = {
    "0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14
    ),
    "1.5b": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12
    ),
    "3b": dict(
        hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16
    ),
}
COMMON = dict(
    vocab_size=151936,
    num_key_value_heads=2,
    tie_word_embeddings=True,
    max_position_embeddings=32768,
)

MAKE_CHECKPOINT = """
import sys, torch
sys.path.insert(0, {root!r})
from pathlib import Path
from transformers import AutoModelForCausalLM, Qwen2Config
from mfsdp_ckpt.checkpointer import Checkpointer
from trainer.tiny import build_tokenizer
config = Qwen2Config(**{config!r}, dtype="bfloat16")
with torch.device("meta"):
    shapes = {{
        n: tuple(p.shape)
        for n, p in AutoModelForCausalLM.from_config(config).named_parameters()
    }}
generator = torch.Generator().manual_seed(0)
weights = {{n: torch.empty(s).normal_(0, 0.02, generator=generator) for n, s in shapes.items()}}
def assets(target):
    config.save_pretrained(target)
    build_tokenizer().save_pretrained(target)
Checkpointer({run!r}, strategy="none", model_family="qwen2").save(
    1, {{"model": weights}}, contents=("model",), hf_assets=assets
)
"""

DCP_TO_TORCH_SAVE = """
import torch
from safetensors.torch import save_file
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
dcp_to_torch_save({src!r}, {out!r} + ".pt")
state = torch.load({out!r} + ".pt", weights_only=True)["model"]
save_file(
    {{k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"}},
    {out!r} + ".safetensors",
)
"""

LOAD_FROM_KEYS = """
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
state = _load_state_dict_from_keys(checkpoint_id={src!r})["model"]
save_file(
    {{k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"}},
    {out!r} + ".safetensors",
)
"""


def run_measured(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (GiB) of one child process, from wait4 (this child only)."""
    wall, peak, _cpu = run_measured_cpu(argv)
    return wall, peak


def run_measured_cpu(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (GiB) and CPU seconds (user + system, all its threads) of one
    child process, from wait4: the CPU time does not grow when other jobs share the cores."""
    started = time.monotonic()
    child = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    if status != 0:
        raise RuntimeError(f"{argv[:4]} failed ({status}): {child.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss * 1024 / GIB, usage.ru_utime + usage.ru_stime


def make_checkpoint(shape: str, base: Path) -> Path:
    run = base / f"ckpt_{shape}"
    if (run / "latest_checkpointed_iteration.txt").exists():
        return run
    shutil.rmtree(run, ignore_errors=True)
    config = {**COMMON, **SHAPES[shape]}
    code = MAKE_CHECKPOINT.format(root=str(ROOT), config=config, run=str(run))
    wall, _rss = run_measured([sys.executable, "-c", code])
    print(f"# made {run} in {wall:.0f} s", file=sys.stderr)
    return run


def checkpoint_stats(run: Path) -> tuple[int, int]:
    sys.path.insert(0, str(ROOT))
    from mfsdp_ckpt.storage.reader import CheckpointReader

    reader = CheckpointReader(run / "global_step_1" / "dist_ckpt")
    sizes = [entry.nbytes for entry in reader.tensors.values()]
    return sum(sizes), max(sizes)


CP, CP_SYNC = "cp -r dist_ckpt", "cp -r dist_ckpt + sync (durable, as export is)"
STARTUP = "start-up only: import cli + export module"
STARTUP_TORCH = "start-up + import torch (what a cast adds)"


def export_argv(run: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from cli.main import main; main()",
        "ckpt",
        "export-hf",
        str(run),
        "--out",
        str(out),
    ]


def methods(run: Path, out: Path) -> list[tuple[str, list[str]]]:
    """The methods every shape runs, repeated and interleaved."""
    dist_ckpt = str(run / "global_step_1" / "dist_ckpt")
    export = export_argv(run, out)
    return [
        (CP, ["cp", "-r", dist_ckpt, str(out)]),
        (CP_SYNC, ["sh", "-c", f"cp -r {dist_ckpt} {out} && sync -f {out}"]),
        ("mfsdp export-hf fp32", export + ["--dtype", "fp32"]),
        ("mfsdp export-hf bf16 (auto)", export),
        (STARTUP, [sys.executable, "-c", "import cli.app, mfsdp_ckpt.convert.export_hf"]),
        (
            STARTUP_TORCH,
            [sys.executable, "-c", "import cli.app, mfsdp_ckpt.convert.export_hf, torch"],
        ),
    ]


def baseline_methods(run: Path, out: Path) -> list[tuple[str, list[str]]]:
    """The slow ways out (each holds the whole model), at --baselines-at shapes."""
    dist_ckpt = str(run / "global_step_1" / "dist_ckpt")
    export = export_argv(run, out)
    return [
        (
            "mfsdp export-hf fp32 --io tensorstore",
            export + ["--dtype", "fp32", "--io", "tensorstore"],
        ),
        (
            "(i) dcp_to_torch_save+load+save_file",
            [sys.executable, "-c", DCP_TO_TORCH_SAVE.format(src=dist_ckpt, out=str(out))],
        ),
        (
            "(ii) _load_state_dict_from_keys+save_file",
            [sys.executable, "-c", LOAD_FROM_KEYS.format(src=dist_ckpt, out=str(out))],
        ),
    ]


def clear(out: Path) -> None:
    for path in (out, Path(f"{out}.pt"), Path(f"{out}.safetensors")):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def measure_shape(shape: str, args: argparse.Namespace) -> list[dict]:
    """Every method for one shape: `--repeat` interleaved rounds (order rotated each round),
    baselines `--baseline-repeat` times; median wall time, max peak RSS."""
    run = make_checkpoint(shape, args.dir)
    total, largest = checkpoint_stats(run)
    out = args.dir / f"out_{shape}"
    clear(out)
    subprocess.run(
        ["cp", "-r", str(run / "global_step_1" / "dist_ckpt"), str(out)], check=True
    )  # warm the page cache
    clear(out)
    rounds = [methods(run, out)] * args.repeat
    if shape in args.baselines_at:
        rounds = [
            r + (baseline_methods(run, out) if i < args.baseline_repeat else [])
            for i, r in enumerate(rounds)
        ]
    measured = interleaved_rounds(shape, rounds, lambda: clear(out))
    if args.cleanup:
        shutil.rmtree(run)
    return [
        {**row, "rss_target_gib": round(1.5 * largest / GIB + 0.5, 2)}
        for row in summary_rows(shape, measured, total, largest)
    ]


@dataclass
class Measured:
    """Per method: every wall and CPU time, the largest peak RSS; the load averages seen."""

    walls: dict[str, list[float]] = field(default_factory=dict)
    cpus: dict[str, list[float]] = field(default_factory=dict)
    rss: dict[str, float] = field(default_factory=dict)
    loads: list[float] = field(default_factory=lambda: [os.getloadavg()[0]])


def interleaved_rounds(
    shape: str, rounds: list[list[tuple[str, list[str]]]], clear_out: Callable[[], None]
) -> Measured:
    """Run every round's methods, each in a fresh child, the order rotated by one each round
    (so no method always runs right after the same other), each after an `os.sync()` so that
    it starts with no dirty pages of the one before; `clear_out` removes what it wrote."""
    measured = Measured()
    for index, row in enumerate(rounds):
        for name, argv in row[index % len(row) :] + row[: index % len(row)]:
            os.sync()
            wall, peak, cpu = run_measured_cpu(argv)
            clear_out()
            measured.walls.setdefault(name, []).append(wall)
            measured.cpus.setdefault(name, []).append(cpu)
            measured.rss[name] = max(measured.rss.get(name, 0.0), peak)
            measured.loads.append(os.getloadavg()[0])
            print(
                f"# {shape} {name}: {wall:.1f} s, CPU {cpu:.1f} s, {peak:.2f} GiB,"
                f" load {measured.loads[-1]:.1f}",
                file=sys.stderr,
            )
    return measured


def summary_rows(
    shape: str,
    measured: Measured,
    total: int,
    largest: int,
    baselines: tuple[str, str] = (CP, CP_SYNC),
) -> list[dict]:
    """One row per method: median wall (with min-max), its ratio to the `baselines` (the
    methods named as `cp` and `cp` + sync), median CPU seconds, peak RSS, the model's size and
    the load averages seen."""
    cp = statistics.median(measured.walls[baselines[0]])
    cp_sync = statistics.median(measured.walls[baselines[1]])
    return [
        dict(
            shape=shape,
            method=name,
            wall_s=round(statistics.median(times), 2),
            runs=len(times),
            wall_min_max=[round(min(times), 2), round(max(times), 2)],
            ratio_vs_cp=round(statistics.median(times) / cp, 2),
            ratio_vs_cp_sync=round(statistics.median(times) / cp_sync, 2),
            cpu_s=round(statistics.median(measured.cpus[name]), 2),
            peak_rss_gib=round(measured.rss[name], 2),
            model_gb=round(total / 1e9, 2),
            largest_tensor_gib=round(largest / GIB, 3),
            load_min_max=[round(min(measured.loads), 1), round(max(measured.loads), 1)],
        )
        for name, times in measured.walls.items()
    ]


# A column of the printed table: its header and how a summary row's cell reads.
Column = tuple[str, Callable[[dict], object]]
# The columns every conversion bench prints first: the shape, the method, its wall time.
WALL_COLUMNS: list[Column] = [
    ("shape", itemgetter("shape")),
    ("model GB", itemgetter("model_gb")),
    ("largest tensor GiB", itemgetter("largest_tensor_gib")),
    ("method", itemgetter("method")),
    (
        "median wall s (min-max, runs)",
        lambda r: f"{r['wall_s']} ({r['wall_min_max'][0]}-{r['wall_min_max'][1]}, {r['runs']})",
    ),
    ("x cp", itemgetter("ratio_vs_cp")),
    ("x cp+sync", itemgetter("ratio_vs_cp_sync")),
]
CPU_COLUMN: Column = ("median CPU s (user + sys)", itemgetter("cpu_s"))
PEAK_RSS_COLUMN: Column = ("peak RSS GiB", itemgetter("peak_rss_gib"))
RSS_TARGET_COLUMN: Column = ("RSS target GiB", itemgetter("rss_target_gib"))
LOAD_COLUMN: Column = ("load", lambda r: f"{r['load_min_max'][0]}-{r['load_min_max'][1]}")
EXPORT_COLUMNS = [*WALL_COLUMNS, PEAK_RSS_COLUMN, RSS_TARGET_COLUMN, LOAD_COLUMN]


def _table_line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def print_results(rows: list[dict], columns: Sequence[Column]) -> None:
    """The rows as a markdown table (for docs/benchmarks.md), then each as one JSON line
    (every field, for a script)."""
    print(_table_line([header for header, _cell in columns]))
    print("|---" * len(columns) + "|")
    for row in rows:
        print(_table_line([cell(row) for _header, cell in columns]))
    for row in rows:
        print(json.dumps(row))


def add_dir_arguments(parser: argparse.ArgumentParser, kept: str) -> None:
    """--dir and --keep: where the `kept` things (made once, slow) and the outputs go."""
    parser.add_argument(
        "--dir",
        type=Path,
        help=f"Keep the {kept} here and reuse them next run"
        " (default: a fresh temporary dir, removed at the end).",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="Keep the temporary dir (its path is printed) when --dir is not given.",
    )


@contextlib.contextmanager
def bench_dir(chosen: Path | None, *, keep: bool, prefix: str) -> Iterator[Path]:
    """`chosen` (made if missing, never removed: its models are reused), else a fresh dir
    under the system's temporary dir, removed at the end unless `keep`: a run with no --dir
    leaves nothing behind and needs no particular path on the machine."""
    if chosen is not None:
        chosen.mkdir(parents=True, exist_ok=True)
        yield chosen
        return
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield scratch
    finally:
        if keep:
            print(f"# kept {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_dir_arguments(parser, "checkpoints")
    parser.add_argument("--shapes", nargs="+", default=["0.5b", "1.5b", "3b"], choices=list(SHAPES))
    parser.add_argument("--baselines-at", nargs="*", default=["1.5b"])
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="Interleaved rounds of the main methods (median reported).",
    )
    parser.add_argument(
        "--baseline-repeat", type=int, default=1, help="Rounds that include the slow baselines."
    )
    parser.add_argument(
        "--cleanup",
        action="store_true",
        help="Delete the checkpoints afterwards (default: keep them in --dir).",
    )
    args = parser.parse_args()
    with bench_dir(args.dir, keep=args.keep, prefix="mfsdp_bench_export_") as args.dir:
        results = [row for shape in args.shapes for row in measure_shape(shape, args)]
    print_results(results, EXPORT_COLUMNS)


if __name__ == "__main__":
    main()
