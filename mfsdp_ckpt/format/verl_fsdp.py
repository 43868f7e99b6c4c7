"""verl's FSDP backend saved without its model: `save_contents` without "model".

verl's FSDP checkpoint manager writes one file per rank for each item of
`checkpoint.save_contents`: `model_world_size_W_rank_R.pt`, `optim_world_size_W_rank_R.pt`,
`extra_state_world_size_W_rank_R.pt`. A step saved with `[optimizer, extra]` holds the
optimizer and extra state only, beside `fsdp_config.json` and `huggingface/`: without the
model shards that mark verl's FSDP format it read as "not a checkpoint", which sent the
user looking for a path mistake. It is named here as what it is, the verl FSDP format with
no model weights to read (as a Megatron step whose `save_contents` lists no model is,
`verl_contents`), and where verl saved `hf_model` too, with the Hugging Face dir that holds
them.
"""

from __future__ import annotations

import re
from pathlib import Path

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.format.dir_entries import children, is_dir
from mfsdp_ckpt.format.layout import HF_ASSETS_DIR, ForeignFormatError, looks_like_hf_model

_STATE_SHARD_RE = re.compile(r"^(optim|extra_state)_world_size_[0-9]+_rank_[0-9]+\.pt\Z")


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
