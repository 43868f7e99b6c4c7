"""A config.json naming more tokens than a Megatron-LM run built rows for.

Megatron-LM pads its tokenizer's length, `len(tokenizer)`, to a multiple of
make_vocab_size_divisible_by times the tensor-parallel size (`vocab_size_with_padding`),
and records the result as `padded_vocab_size`. For Qwen2.5 that is 151665 tokens padded to
151680 rows, while Qwen2.5's config.json says vocab_size 151936 (a padded size of its own,
past its tokenizer). Megatron-Bridge's export keeps the rows as they are under the config it
was given (it only cuts rows above vocab_size), so it writes 151680-row tensors under a
config of 151936, which transformers refuses to load (a size mismatch). Export here
writes the stored rows under a config whose vocab_size is that row count instead, with a
note: the model then holds every token of the tokenizer (ids below the rows) and the same
logits for them, the padding rows' included, as Megatron-LM computed.

That is done only where it is proven, never to a config that merely has more tokens: the
record must state `padded_vocab_size` equal to the stored rows
(`recorded_layout.recorded_padding`; not necessarily a multiple of the run's own padding
rule, since Megatron-LM keeps the one of the checkpoint it started from, which may have been
converted at another tensor-parallel size), and the tokenizer export copies, when it has a
tokenizer.json, must hold no token id at or past the rows. Validate checks a config so, and
training from `model.hf_config` builds its model with the rows
(`trainer.model_source.recorded_vocab_rows`).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.convert.export_errors import ExportError
from mfsdp_ckpt.convert.export_source import MAX_JSON_ASSET_BYTES, MAX_JSON_ASSET_CONTAINERS
from mfsdp_ckpt.convert.hf_config import read_config_json
from mfsdp_ckpt.convert.mapping_errors import MappingError
from mfsdp_ckpt.convert.name_maps import model_tensors
from mfsdp_ckpt.convert.recorded_layout import recorded_padding
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.format.state_keys import AmbiguousStateError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.named_writes import write_text
from mfsdp_ckpt.storage.unique_json import loads_unique, too_many_containers

if TYPE_CHECKING:
    from mfsdp_ckpt.format import layout
    from mfsdp_ckpt.storage.reader import CheckpointReader

EMBEDDING = "embedding.word_embeddings.weight"  # Megatron-core's; the padding is found there
TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class VocabFit:
    """The stored rows a config's larger vocab_size is replaced by, and why, in words."""

    rows: int
    vocab_size: int
    source: str

    def note(self) -> str:
        return (
            f"config.json vocab_size {self.rows}, not {self.vocab_size}: the run built"
            f" {self.rows} rows for its tokenizer's tokens ({self.source}); the config's"
            f" other {self.vocab_size - self.rows} are ids no token of it has"
        )


def vocab_fit(
    paths: layout.CheckpointPaths | None, reader: CheckpointReader, vocab_size: Any
) -> VocabFit | None:
    """The fit (module docstring) of a config stating `vocab_size` to this checkpoint, or
    None: the rows are not fewer, or the record does not prove them."""
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        return None
    rows = _stored_rows(reader)
    padding = recorded_padding(paths, reader)
    if rows is None or padding is None or padding.rows != rows or rows >= vocab_size:
        return None
    return VocabFit(rows, vocab_size, padding.source)


def _stored_rows(reader: CheckpointReader) -> int | None:
    """The rows of the Megatron-core embedding, None when there is none (HF names, an
    adapter alone) or the names cannot be told apart (reported where they are mapped)."""
    try:
        stored = model_tensors(reader.tensors)
    except (MappingError, AmbiguousStateError):
        return None
    key = stored.get(EMBEDDING)
    shape = reader.tensors[key].shape if key is not None else ()
    return shape[0] if shape else None


def too_many_tokens(
    directory: Path, root: str | os.PathLike | None, rows: int, named: str | None = None
) -> str | None:
    """Why the tokenizer.json in `directory` (read inside `root`; `named`: the dir the
    message names, where it was copied from) does not fit `rows` rows: a token id at or
    past them; None when it fits, or there is no tokenizer.json to count (other tokenizer
    files are not counted)."""
    file = directory / TOKENIZER_FILE
    if not os.path.lexists(file):
        return None
    raw = safe_files.read_bytes(file, MAX_JSON_ASSET_BYTES, root)
    if too_many_containers(raw, MAX_JSON_ASSET_CONTAINERS) is not None:
        return None  # named by the checks that read the assets (`check_json_asset`)
    try:
        data = loads_unique(raw)
    except ValueError:  # not JSON, too deep, a key twice: named by those checks too
        return None
    top = _top_id(data)
    if top is None or top < rows:
        return None
    shown = file if named is None else Path(named) / TOKENIZER_FILE
    return (
        f"{shown}: token id {top}, past the {rows} rows the run built: not the tokenizer it"
        f" trained with (Megatron-LM built rows for every token of its own)"
    )


def _top_id(data: Any) -> int | None:
    """The largest token id a tokenizer.json names: its model's vocabulary (a dict of ids,
    or Unigram's list, whose positions are the ids) and its added tokens."""
    if not isinstance(data, dict):
        return None
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids = [v for v in vocab.values() if _plain_int(v)] if isinstance(vocab, dict) else []
    if isinstance(vocab, list) and vocab:
        ids.append(len(vocab) - 1)
    added = data.get("added_tokens")
    if isinstance(added, list):
        ids += [t["id"] for t in added if isinstance(t, dict) and _plain_int(t.get("id"))]
    return max(ids, default=None)


def _plain_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def fit_config_file(
    paths: layout.CheckpointPaths | None, reader: CheckpointReader, directory: Path, named: str
) -> list[str]:
    """Export: the config.json written into `directory` (beside the tokenizer it copied
    from `named`) given the stored rows as vocab_size where `vocab_fit` proves them; its
    note, or none. ExportError naming the tokenizer.json when that has ids past the rows."""
    config_file = directory / HF_CONFIG_FILE
    data = read_config_json(config_file)[1]
    fit = vocab_fit(paths, reader, data.get("vocab_size"))
    if fit is None:
        return []
    problem = too_many_tokens(directory, directory, fit.rows, named)
    if problem is not None:
        raise ExportError(problem)
    data["vocab_size"] = fit.rows
    write_text(config_file, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return [fit.note()]


def fitted_config(config: Any, fit: VocabFit | None) -> Any:
    """`config` (a loaded config.json) with vocab_size the fit's rows; itself without one."""
    if fit is None:
        return config
    from mfsdp_ckpt.convert.export_source import JsonConfig, json_config

    if isinstance(config, JsonConfig):
        data = {key: value for key, value in vars(config).items() if key != "hf_shapes"}
        return json_config({**data, "vocab_size": fit.rows}, HF_CONFIG_FILE)
    fitted = copy.copy(config)
    fitted.vocab_size = fit.rows
    return fitted


__all__ = [
    "VocabFit",
    "fit_config_file",
    "fitted_config",
    "too_many_tokens",
    "vocab_fit",
]
