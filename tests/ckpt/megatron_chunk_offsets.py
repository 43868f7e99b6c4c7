"""Worker for tests/ckpt/test_uneven_chunks_gpu.py, run on 2 GPUs with Megatron-FSDP as
`torchrun --nproc-per-node 2 -m tests.ckpt.megatron_chunk_offsets OUT` from the repository root.

Builds a small Qwen2 through the Megatron-FSDP strategy, trains one step (so Adam state
exists), and compares, tensor by tensor, the chunk offsets `attach_uneven_chunk_metadata`
gives the strategy's model and optimizer state dicts with those of Megatron-FSDP's own
per-tensor `gather_and_compute_chunk_metadata`. Writes OUT/rank<r>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from megatron_fsdp.uneven_dtensor import gather_and_compute_chunk_metadata
from torch.distributed.tensor import DTensor
from transformers import Qwen2Config, Qwen2ForCausalLM

from trainer.config import OptimConfig, StrategyConfig
from trainer.distributed import init_distributed
from trainer.strategies import make_strategy


def chunk(tensor) -> list[int]:
    (only,) = tensor.__create_chunk_list__()
    return [*only.offsets, *only.sizes]


def main(out: Path) -> None:
    env = init_distributed("cuda")
    strategy = make_strategy(StrategyConfig(name="megatron_fsdp", mixed_precision="bf16"), env)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=320,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    with torch.device("cuda"):
        model = strategy.wrap(Qwen2ForCausalLM(config))
    optimizer = strategy.build_optimizer(model, OptimConfig(lr=1e-3))
    batch = torch.randint(0, 512, (2, 64), device="cuda")
    model(input_ids=batch, labels=batch).loss.backward()
    strategy.before_optimizer_step(model)
    optimizer.step()

    model_state = strategy.model_state(model).state_dict()
    adam_state = strategy.optimizer_state(model, optimizer).state_dict()["state"]
    lookup = {f"model.{k}": v for k, v in model_state.items()}
    lookup.update(
        {
            f"optim.{n}.{k}": v
            for n, s in adam_state.items()
            for k, v in s.items()
            if isinstance(v, DTensor)
        }
    )
    ours = {key: chunk(tensor) for key, tensor in lookup.items()}

    held = [None] * dist.get_world_size()
    dist.all_gather_object(held, sorted(ours))
    on_every_rank = sorted(set.intersection(*(set(keys) for keys in held)))
    theirs = {}
    for (
        key
    ) in on_every_rank:  # Megatron's function is collective: same tensors, same order everywhere
        meta = gather_and_compute_chunk_metadata(lookup[key])
        theirs[key] = [*meta.offsets, *meta.sizes]
    report = {
        "compared": len(theirs),
        "mismatches": {k: [ours[k], theirs[k]] for k in theirs if ours[k] != theirs[k]},
        "empty_pieces": sum(1 for v in lookup.values() if v.to_local().numel() == 0),
        "keys_missing_elsewhere": len(ours) - len(on_every_rank),
    }
    (out / f"rank{env.rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
