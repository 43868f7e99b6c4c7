"""inspect, validate and validate --deep on a Megatron-FSDP checkpoint with many parameters.

Megatron-FSDP's distributed optimizer saves, beside each parameter's Adam state, about twenty
non-tensor entries (`optimizer.param_to_group_meta.<param>.<lr, betas, eps, ...>`), each a
small pickled blob with its own `.metadata` entry: a 2000-parameter model (a mixture of
experts with every expert its own parameter) has ~44k of them. This builds such a
checkpoint on CPU in one process (`dcp.save`, keys as Megatron-LM's `fsdp_dtensor` format
names them: tests/fixtures/megatron_lm_optim/) for each `--params`, then runs each command
in a fresh process under `/usr/bin/time -v` (wall and CPU seconds; peak RSS, the largest
of the three).

    python bench/metadata_scan.py --params 2000 --params 4000

Prints a markdown table and one JSON line per row (stderr).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures.megatron_lm_optim.make_megatron_lm_optim import (  # noqa: E402
    CONFIG,
    MODEL_WRAPPERS,
    OPTIMIZER_WRAPPERS,
    state_dict,
)

EXPERTS_PER_LAYER = 64
LABELS = ("inspect", "validate", "validate_deep")
MAIN = "import sys; from cli.main import main; sys.exit(main())"
# torch.optim.AdamW's param_group keys next to Megatron's own, as Megatron-FSDP saves them
GROUP_META = {
    "lr": 1e-5,
    "betas": (0.9, 0.95),
    "eps": 1e-8,
    "weight_decay": 0.1,
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": None,
    "decoupled_weight_decay": True,
    "bias_correction": True,
    "wd_mult": 1.0,
    "lr_mult": 1.0,
    "is_expert_parallel": True,
    "is_decoupled_lr": False,
    "max_lr": 1e-5,
    "min_lr": 0.0,
    "default_config": True,
}


def build(params: int, out: Path) -> Path:
    """`out`/dist_ckpt with `params` 4x4 expert weights, each with Adam state and group meta."""
    import torch
    import torch.distributed.checkpoint as dcp

    state = state_dict(CONFIG)
    model, adam, meta = {}, {}, {}
    generator = torch.Generator().manual_seed(0)
    for i in range(params):
        layer, expert = divmod(i, EXPERTS_PER_LAYER)
        name = f"decoder.layers.{layer}.mlp.experts.linear_fc2.weight{expert}"
        model[MODEL_WRAPPERS + name] = torch.randn(4, 4, generator=generator)
        adam[OPTIMIZER_WRAPPERS + name] = {
            "exp_avg": torch.randn(4, 4, generator=generator),
            "exp_avg_sq": torch.rand(4, 4, generator=generator),
            "step": torch.tensor(100.0),
        }
        meta[OPTIMIZER_WRAPPERS + name] = dict(GROUP_META)
    state["model"] = model
    state["optimizer"] = {"state": adam, "param_to_group_meta": meta}
    state["args"].num_layers = -(-params // EXPERTS_PER_LAYER)
    state["args"].num_experts = EXPERTS_PER_LAYER
    with warnings.catch_warnings():  # DCP warns that it saves without a process group: intended
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(out / "dist_ckpt"), no_dist=True)
    return out / "dist_ckpt"


def entries(ckpt: Path) -> int:
    """How many entries the checkpoint's `.metadata` holds (tensors and blobs)."""
    from mfsdp_ckpt.format.dcp_metadata import load_plain_metadata_bytes

    return len(load_plain_metadata_bytes((ckpt / ".metadata").read_bytes()).state_dict_metadata)


def timed(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (bytes) of one `mfsdp`
    command in a fresh process. CPU seconds are what the command costs on a machine of
    its own: on a busy one wall time also counts the waits for a core."""
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-c", MAIN, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"mfsdp {' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    lines = done.stderr.splitlines()

    def field(label: str) -> float:
        return float(next(x for x in lines if label in x).split()[-1])

    cpu = field("User time (seconds)") + field("System time (seconds)")
    return seconds, cpu, int(field("Maximum resident set size")) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, action="append", help="repeatable; default 2000")
    args = parser.parse_args()
    print("wall seconds (CPU seconds, user + system); peak MiB: the largest peak RSS of the three")
    print("| params | .metadata entries | inspect s | validate s | validate --deep s | peak MiB |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for params in args.params or [2000]:
            ckpt = build(params, Path(scratch) / f"p{params}")
            row: dict[str, float | int] = {"params": params, "entries": entries(ckpt)}
            peak = 0
            for label in LABELS:
                command, *extra = label.replace("_deep", " --deep").split()
                seconds, cpu, rss = timed(["ckpt", command, str(ckpt), *extra])
                row[f"{label}_s"] = round(seconds, 2)
                row[f"{label}_cpu_s"] = round(cpu, 2)
                peak = max(peak, rss)
            row["peak_mib"] = round(peak / 2**20)
            said = [f"{row[f'{label}_s']} ({row[f'{label}_cpu_s']})" for label in LABELS]
            print(
                f"| {params} | {row['entries']} | " + " | ".join(said) + f" | {row['peak_mib']} |"
            )
            print(json.dumps(row), file=sys.stderr)


if __name__ == "__main__":
    main()
