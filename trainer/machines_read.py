"""What each machine of a `--nnodes` run read through the paths its config names, compared
once the data are read and before any step (`trainer.machines_agree.check_same_reads`).

The machines agree on the config's text, yet each reads its paths itself: a relative
`data.train_files` from its own working dir, an absolute one from its own disk. A stale
copy of the data on one node trained rank 0 on 100 rows and rank 1 on 25 others with exit
0 (the checkpoint recorded rank 0's rows alone), or hung once the row counts made another
number of steps. So each machine's tokenizer, model config and rows are compared, by the
digests the run computes anyway or that cost little next to loading them:

- the tokenizer as loaded (its vocabulary and rules as the fast tokenizer serializes them,
  its chat template and special tokens): what it does, whichever files it came from, at a
  cost far below loading it;
- the model config the run builds (config.json with model.overrides);
- each split's row count and row digests (`trainer.resume.rows_digests`, recorded in the
  trainer state), tokenizer first: a tokenizer that differs changes the rows it makes.

The weights at `model.path` are not compared: a digest of them reads every byte on every
machine, which the run does not do (only the rank that writes manifests hashes a LoRA base
or a KL reference, in the background). A run on one machine compares nothing: its ranks
read the same files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainer.config import ModelConfig
from trainer.machines_agree import Read, check_same_reads, on_several_machines
from trainer.model_source import resolve_model_source
from trainer.resume import Row, RowPart, rows_digests

SHOWN_HEX = 12  # digest hex digits a line shows: 48 bits, enough to tell two reads apart


def check_machines_read_alike(
    model: ModelConfig,
    tokenizer: Any,
    hf_config: Any,
    splits: Mapping[str, tuple[int, Sequence[int]]],
) -> None:
    """Refuse, in one line naming the key (exit 2, every rank), a run whose machines read
    another tokenizer, model config or rows: `splits` maps each data key
    (data.train_files) to this rank's row count and row digests. A no-op on one machine."""
    if not on_several_machines():
        return
    reads = [tokenizer_read(model, tokenizer), model_config_read(model, hf_config)]
    reads += [rows_read(key, rows, digests) for key, (rows, digests) in splits.items()]
    check_same_reads(reads)


def check_splits_read_alike(
    model: ModelConfig,
    tokenizer: Any,
    hf_config: Any,
    splits: tuple[Sequence[Row], Sequence[Row]],
    parts: Callable[[Row], Sequence[RowPart]],
) -> tuple[int, int, int]:
    """`check_machines_read_alike` for a run's (train, val) rows as `rows_digests` sees
    each row through `parts`, the one call SFT and GRPO make once their data are read.
    Returns the training rows' digests, which the run's trainer state records."""
    train, val = splits
    digests = rows_digests(train, parts)
    check_machines_read_alike(
        model,
        tokenizer,
        hf_config,
        {
            "data.train_files": (len(train), digests),
            "data.val_files": (len(val), rows_digests(val, parts)),
        },
    )
    return digests


def rows_read(key: str, rows: int, digests: Sequence[int]) -> Read:
    """A split's rows as `key` read them: how many, and their digests as one."""
    shown = _digest(json.dumps([rows, *digests]).encode())
    return Read(key, "data", f"{rows} rows (digest {shown})")


def tokenizer_read(model: ModelConfig, tokenizer: Any) -> Read:
    """The tokenizer as loaded, under the key that named its dir."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    rules = (
        backend.to_str()
        if backend is not None
        else json.dumps(sorted(tokenizer.get_vocab().items()))
    )
    rest = json.dumps(
        [tokenizer.chat_template, tokenizer.special_tokens_map], sort_keys=True, default=str
    )
    shown = _digest(rules.encode(), rest.encode())
    return Read(
        _tokenizer_key(model),
        "tokenizers",
        f"a tokenizer of {len(tokenizer)} tokens (digest {shown})",
    )


def model_config_read(model: ModelConfig, hf_config: Any) -> Read:
    """The model config the run builds, under the key that named its source. The
    transformers version it records is left out: it says which transformers wrote it."""
    fields = {k: v for k, v in hf_config.to_dict().items() if k != "transformers_version"}
    shown = _digest(json.dumps(fields, sort_keys=True, default=str).encode())
    kind, layers = fields.get("model_type"), fields.get("num_hidden_layers")
    shape = f"a {kind} config of {layers} layers, hidden size {fields.get('hidden_size')}"
    return Read(_source_key(model), "model configs", f"{shape} (digest {shown})")


def _tokenizer_key(model: ModelConfig) -> str:
    return "model.tokenizer" if model.tokenizer is not None else _source_key(model)


def _source_key(model: ModelConfig) -> str:
    """The key that named the dir the model's config and tokenizer are read from."""
    if model.path is None:
        return "model.shape"
    source = resolve_model_source(model)
    return source.tokenizer_key if source is not None else "model.path"


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()[:SHOWN_HEX]
