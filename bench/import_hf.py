"""import-hf on CPU: wall time and peak RSS against copying the safetensors files, in one run.

Writes Qwen2.5-shaped Hugging Face model dirs (random bf16 weights, as releases ship,
sharded at 5 GB like `save_pretrained`; written tensor by tensor through mfsdp's own
safetensors writer, so making a 3B model does not need 3B in memory; in a fresh temporary
dir removed at the end, or kept in `--dir` for the next run), then runs each method in a
fresh subprocess, timing it and reading that child's peak RSS from wait4()
(`bench/export_hf.py`'s measurement). Methods are interleaved and repeated (`--repeat`,
order rotated each round), and the median wall time is reported:

* `cp -r` of the model dir (the floor) and `cp -r` + `sync` (import fsyncs, so this is
  the like-for-like floor);
* `mfsdp ckpt import-hf --layout mcore` (the DCP dir alone) and `--layout hf` (our run
  layout, which also hashes every byte for the manifest, and holds a tied `lm_head`
  as the model's state dict does, as an alias of the embedding's bytes);
* start-up alone (importing the CLI and the import modules), the fixed cost in every
  import row, and start-up + `import torch`, which only a `--dtype` cast adds.

    python bench/import_hf.py --shapes 0.5b 1.5b 3b --repeat 3

Prints a markdown table (median wall, ratio to cp and to cp + sync, spread, median CPU
seconds of the child, peak RSS, the largest tensor, load average) and one JSON line per
row. On a machine shared with other jobs the wall times follow the share of the cores a
method gets; its CPU seconds do not, so they tell what each method costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.export_hf import (  # noqa: E402
    COMMON,
    CPU_COLUMN,
    LOAD_COLUMN,
    PEAK_RSS_COLUMN,
    SHAPES,
    WALL_COLUMNS,
    add_dir_arguments,
    bench_dir,
    interleaved_rounds,
    print_results,
    summary_rows,
)

SHARD_BYTES = 5 * 10**9
CP, CP_SYNC = "cp -r model dir", "cp -r model dir + sync (durable, as import is)"
STARTUP = "start-up only: import cli + import modules"
STARTUP_TORCH = "start-up + import torch (what a --dtype cast adds)"
IMPORT_COLUMNS = [*WALL_COLUMNS, CPU_COLUMN, PEAK_RSS_COLUMN, LOAD_COLUMN]


def make_model_dir(shape: str, base: Path) -> Path:
    """In a child process (so its memory is not counted in the children measured later)."""
    model = base / f"hf_{shape}"
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, __file__, "--make", shape, "--dir", str(base)], check=True)
    return model


def _make_model_dir(shape: str, base: Path) -> Path:
    """config.json + sharded bf16 safetensors of random N(0, 0.02) weights, one tensor in memory."""
    import torch

    from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes
    from mfsdp_ckpt.format.dtypes import BFLOAT16
    from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter

    model = base / f"hf_{shape}"
    if (model / "config.json").exists():
        return model
    shutil.rmtree(model, ignore_errors=True)
    tmp = base / f".hf_{shape}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config = {
        **COMMON,
        **SHAPES[shape],
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "dtype": "bfloat16",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
    }
    shapes = hf_state_dict_shapes(config)
    shapes.pop("lm_head.weight")  # tied, so save_pretrained leaves it out
    writer = ShardedSafetensorsWriter(
        tmp, [(n, BFLOAT16, s) for n, s in shapes.items()], SHARD_BYTES
    )
    writer.open()
    generator = torch.Generator().manual_seed(0)
    for name, shape_ in shapes.items():
        writer.write(
            name, torch.empty(shape_).normal_(0, 0.02, generator=generator).to(torch.bfloat16)
        )
    writer.close()
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    os.rename(tmp, model)
    return model


def model_stats(model: Path) -> tuple[int, int]:  # headers only: no weights in this process
    from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource

    sizes = [entry.nbytes for entry in SafetensorsSource(model).tensors.values()]
    return sum(sizes), max(sizes)


def methods(model: Path, out: Path) -> list[tuple[str, list[str]]]:
    run = [
        sys.executable,
        "-c",
        "from cli.main import main; main()",
        "ckpt",
        "import-hf",
        str(model),
        "--out",
        str(out),
    ]
    return [
        (CP, ["cp", "-r", str(model), str(out)]),
        (CP_SYNC, ["sh", "-c", f"cp -r {model} {out} && sync -f {out}"]),
        ("mfsdp import-hf --layout mcore", run + ["--layout", "mcore"]),
        ("mfsdp import-hf --layout hf", run + ["--layout", "hf"]),
        (
            STARTUP,
            [
                sys.executable,
                "-c",
                "import cli.app, mfsdp_ckpt.convert.import_hf, "
                "mfsdp_ckpt.storage.dcp_stream_writer",
            ],
        ),
        (
            STARTUP_TORCH,
            [sys.executable, "-c", "import cli.app, mfsdp_ckpt.convert.import_hf, torch"],
        ),
    ]


def measure_shape(shape: str, args: argparse.Namespace) -> list[dict]:
    model = make_model_dir(shape, args.dir)
    total, largest = model_stats(model)
    out = args.dir / f"out_{shape}"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["cp", "-r", str(model), str(out)], check=True)  # warm the page cache
    shutil.rmtree(out)
    measured = interleaved_rounds(
        shape, [methods(model, out)] * args.repeat, lambda: shutil.rmtree(out, ignore_errors=True)
    )
    if args.cleanup:
        shutil.rmtree(model)
    return summary_rows(shape, measured, total, largest, baselines=(CP, CP_SYNC))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_dir_arguments(parser, "model dirs")
    parser.add_argument("--shapes", nargs="+", default=["0.5b", "1.5b", "3b"], choices=list(SHAPES))
    parser.add_argument(
        "--repeat", type=int, default=3, help="Interleaved rounds (median reported)."
    )
    parser.add_argument(
        "--cleanup",
        action="store_true",
        help="Delete the model dirs afterwards (default: keep them in --dir).",
    )
    parser.add_argument(
        "--make", choices=list(SHAPES), help=argparse.SUPPRESS
    )  # the child of make_model_dir
    args = parser.parse_args()
    if args.make:  # the parent names its --dir
        args.dir.mkdir(parents=True, exist_ok=True)
        _make_model_dir(args.make, args.dir)
        return
    with bench_dir(args.dir, keep=args.keep, prefix="mfsdp_bench_import_") as args.dir:
        results = [row for shape in args.shapes for row in measure_shape(shape, args)]
    print_results(results, IMPORT_COLUMNS)


if __name__ == "__main__":
    main()
