"""import-hf's peak RSS against the number of tensors a model holds: the memory each
tensor's entry costs, apart from its bytes.

A mixture-of-experts model holds three tensors per expert per layer: a qwen3_moe dir of 2
layers and E experts (every tensor tiny: megabytes of weights in all) holds 6E + 21
tensors. Each size is written once, then imported in a fresh subprocess (`mfsdp ckpt
import-hf --layout mcore`), whose peak RSS comes from wait4 (`bench/export_hf.py`'s
measurement). The slope between the smallest and the largest size is the bytes each
entry adds: what the headers, the plan, the writer's records and the `.metadata` built from
them hold per tensor.

    python bench/import_hf_many_tensors.py --experts 1024 16384

Prints one JSON line per size, then the slope in KiB per tensor.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.export_hf import GIB, run_measured  # noqa: E402

LAYERS, HIDDEN, EXPERT_SIZE, VOCAB, HEADS, KV_HEADS, HEAD_DIM = 2, 8, 4, 16, 2, 1, 4


def write_moe_dir(out: Path, experts: int) -> int:
    """A qwen3_moe model dir of `experts` experts a layer, every weight zero; returns how
    many tensors it holds."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    config = {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "moe_intermediate_size": EXPERT_SIZE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "num_experts": experts,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
        "max_position_embeddings": 64,
        "dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config))
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,)}
    shapes["lm_head.weight"] = (VOCAB, HIDDEN)
    for layer in range(LAYERS):
        at = f"model.layers.{layer}."
        shapes |= {
            f"{at}input_layernorm.weight": (HIDDEN,),
            f"{at}post_attention_layernorm.weight": (HIDDEN,),
            f"{at}self_attn.q_proj.weight": (q, HIDDEN),
            f"{at}self_attn.k_proj.weight": (kv, HIDDEN),
            f"{at}self_attn.v_proj.weight": (kv, HIDDEN),
            f"{at}self_attn.o_proj.weight": (HIDDEN, q),
            f"{at}self_attn.q_norm.weight": (HEAD_DIM,),
            f"{at}self_attn.k_norm.weight": (HEAD_DIM,),
            f"{at}mlp.gate.weight": (experts, HIDDEN),
        }
        for expert in range(experts):
            of = f"{at}mlp.experts.{expert}."
            shapes[f"{of}gate_proj.weight"] = (EXPERT_SIZE, HIDDEN)
            shapes[f"{of}up_proj.weight"] = (EXPERT_SIZE, HIDDEN)
            shapes[f"{of}down_proj.weight"] = (HIDDEN, EXPERT_SIZE)
    tensors = {name: torch.zeros(shape) for name, shape in shapes.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return len(tensors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, nargs="+", default=[1024, 16384])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for experts in sorted(args.experts):
            model, out = Path(tmp) / f"moe_{experts}", Path(tmp) / f"out_{experts}"
            tensors = write_moe_dir(model, experts)
            cli = [sys.executable, "-m", "cli.main", "ckpt", "import-hf", str(model)]
            wall, peak = run_measured([*cli, "--out", str(out), "--json"])
            row = {"experts": experts, "tensors": tensors, "wall_s": round(wall, 1)}
            row["peak_rss_mib"] = round(peak * GIB / 2**20)
            rows.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(model)
            shutil.rmtree(out)
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        grown = (last["peak_rss_mib"] - first["peak_rss_mib"]) * 1024
        per = grown / (last["tensors"] - first["tensors"])
        print(f"{per:.1f} KiB of peak RSS per tensor entry")


if __name__ == "__main__":
    main()
