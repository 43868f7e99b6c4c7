"""verl's FSDP backend: its per-rank model shards, and a save without its model.

verl's FSDP checkpoint manager writes one file per rank for each item of
`checkpoint.save_contents`: `model_world_size_W_rank_R.pt`, `optim_world_size_W_rank_R.pt`,
`extra_state_world_size_W_rank_R.pt`. A step saved with `[optimizer, extra]` holds the
optimizer and extra state only, beside `fsdp_config.json` and `huggingface/`: without the
model shards that mark verl's FSDP format it read as "not a checkpoint", which sent the
user looking for a path mistake. It is named here as what it is, the verl FSDP format with
no model weights to read (as a Megatron step whose `save_contents` lists no model is,
`verl_contents`), and where verl saved `hf_model` too, with the Hugging Face dir that holds
them. A step whose model shards are not all there (a killed save, a partial copy) is a save
that did not finish: verl's merger loads every rank's shard and cannot convert it either.
"""

from __future__ import annotations

import re
from pathlib import Path

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.format.dir_entries import children, is_dir, is_file
from mfsdp_ckpt.format.layout import (
    HF_ASSETS_DIR,
    VERL_FSDP_LORA_DIR,
    ForeignFormatError,
    IncompleteCheckpointError,
    looks_like_hf_model,
)
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE

_MODEL_SHARD_RE = re.compile(r"^model_world_size_([0-9]+)_rank_([0-9]+)\.pt\Z")
_STATE_SHARD_RE = re.compile(r"^(optim|extra_state)_world_size_[0-9]+_rank_[0-9]+\.pt\Z")
# missing shards named in a line; the rest are counted
_MISSING_SHOWN = 2


def refuse_model_shards(directory: Path, names: list[str]) -> None:
    """Where `directory`, holding `names`, holds verl FSDP model shards: ForeignFormatError
    (exit 2, one line) naming verl's merger, the command that converts it; or, where a
    rank's shard is missing, IncompleteCheckpointError (exit 1) naming it, as the merger,
    which loads every rank's, would fail on the step it was sent to."""
    shards = [name for name in names if _MODEL_SHARD_RE.match(name)]
    if not shards:
        return
    missing = _missing_shards(shards)
    if missing is not None:
        raise IncompleteCheckpointError(f"{directory}: {missing}")
    hint = ""
    hf = directory / HF_ASSETS_DIR
    if is_dir(hf) and looks_like_hf_model(children(hf)):
        hint = f"; its {HF_ASSETS_DIR}/ already holds Hugging Face weights: give model.path={hf}"
    if is_file(directory / VERL_FSDP_LORA_DIR / ADAPTER_CONFIG_FILE):
        hint += (  # fsdp_workers.py saves a LoRA run's adapter there, PEFT's format
            f"; its {VERL_FSDP_LORA_DIR}/ holds the LoRA adapter in Hugging Face PEFT"
            " format (peft.PeftModel.from_pretrained(base_model, DIR) loads it)"
        )
    raise ForeignFormatError(
        f"{directory}: a verl FSDP checkpoint ({min(shards)}, not Megatron), which mfsdp"
        " does not read; convert it with `python -m verl.model_merger merge --backend fsdp"
        f" --local_dir {directory} --target_dir OUT`{hint}"
    )


def _missing_shards(shards: list[str]) -> str | None:
    """What a verl FSDP save whose model shards are `shards` lacks ("a verl FSDP checkpoint
    missing model_world_size_2_rank_1.pt (1 of its 2 ranks' model shards): ..."), or None
    where every rank of a world size its names give has its shard. Of several world sizes
    (saves of runs of other sizes into one dir), the one with the most shards is told. The
    missing ranks are found among the first len(shards) + _MISSING_SHOWN, so a name
    claiming a world size of 10**9 costs no more than the names there."""
    ranks: dict[int, set[int]] = {}
    for name in shards:
        match = _MODEL_SHARD_RE.match(name)
        if match:
            world, rank = int(match.group(1)), int(match.group(2))
            held = ranks.setdefault(world, set())
            if rank < world:  # a rank past its world size is no rank of that save
                held.add(rank)
    if any(len(held) == world for world, held in ranks.items()):
        return None
    world, held = max(ranks.items(), key=lambda item: (len(item[1]), item[0]))
    limit = min(world, len(held) + _MISSING_SHOWN)
    missing = [f"model_world_size_{world}_rank_{r}.pt" for r in range(limit) if r not in held]
    count = world - len(held)
    left = f" (+{count - _MISSING_SHOWN} more)" if count > _MISSING_SHOWN else ""
    return (
        f"a verl FSDP checkpoint missing {', '.join(missing[:_MISSING_SHOWN])}{left} ({count}"
        f" of its {world} ranks' model shards): a save that did not finish, which verl's"
        " merger cannot convert either"
    )


def refuse_without_model(directory: Path, names: list[str]) -> None:
    """ForeignFormatError (exit 2, one line) when `directory`, holding `names`, holds verl
    FSDP optimizer or extra state shards: a verl FSDP checkpoint holding no model weights,
    which mfsdp does not read. Asked after the model shards (`model_world_size_*`) were
    looked for, so a step holding them is never named so."""
    shards = sorted(name for name in names if _STATE_SHARD_RE.match(name))
    if not shards:
        return
    line = (
        f"{directory}: a verl FSDP checkpoint holding no model weights ({first_of(shards, 2)}:"
        " saved with checkpoint.save_contents without 'model'), which mfsdp does not read"
    )
    hf = directory / HF_ASSETS_DIR
    if is_dir(hf) and looks_like_hf_model(children(hf)):
        line += (
            f"; its {HF_ASSETS_DIR}/ holds the model's weights as a Hugging Face dir: give"
            f" model.path={hf} (or load it with transformers)"
        )
    raise ForeignFormatError(line)
