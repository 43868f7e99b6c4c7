"""Every token id the run's tokenizer can emit is a row of the model's embedding.

An id past the model's `vocab_size` passed a check that compared only the tokenizer's
number of tokens (a special token moved to id 5000 leaves the count alike) and failed at
the first step: an IndexError traceback of 110 lines in every rank on CPU, a device-side
assert that poisons the context on CUDA. So the launcher reads the ids from the files
themselves, as plain JSON, before anything loads: tokenizer.json's vocab (merges make only
tokens of it), its added tokens and post-processor's special tokens, tokenizer_config.json's
added tokens and the special tokens it names (one not in the vocab is added by transformers
with a new id), and the bos/eos/pad ids of config.json and generation_config.json. The
largest id past `vocab_size` is refused in one line naming the file, the token and its id,
and so is a negative id of tokenizer.json (the `tokenizers` library reads ids as unsigned,
and fails on one in every rank as it loads the file); a
3-million-entry vocab is refused in the seconds its JSON takes to parse, not after every
rank built the tokenizer from it. Each file is read once. config.json's and
generation_config.json's ids are compared with `vocab_size` only: a negative one is no id a
tokenizer emits but a "none" older LLaMA configs give (`pad_token_id: -1`), which
transformers and the run take as they always did. Each rank checks again from the tokenizer
it loaded (`check_loaded_tokenizer`), for a tokenizer without tokenizer.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.export_source import MAX_JSON_ASSET_BYTES, MAX_JSON_ASSET_CONTAINERS
from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import loads_unique, too_many_containers
from trainer.config import ConfigError
from trainer.model_assets import TOKENIZER_CONFIG_FILE, read_json_asset

TOKENIZER_FILE = "tokenizer.json"
# tokenizer_config.json's special tokens: each is added to the vocab where it is not in it
SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
SPECIAL_TOKEN_LISTS = ("additional_special_tokens", "extra_special_tokens")
# config.json's and generation_config.json's ids (an int or a list of them)
ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


@dataclass(frozen=True)
class TokenId:
    """One id a file gives: where (a file, with its key where it is no vocab entry), the
    token it names (None for a bare id) and the id."""

    where: str
    token: str | None
    id: int


def past_vocab(found: TokenId, vocab_size: int) -> str:
    """The line refusing `found`, an id of `vocab_size` or more."""
    named = f"token {cut_to(repr(found.token), 80)} has id" if found.token is not None else "id"
    return (
        f"{found.where}: {named} {found.id}, past the model's vocab_size {vocab_size} (the"
        f" embedding has a row for ids 0 to {vocab_size - 1} only)"
    )


def negative_id(found: TokenId) -> str:
    """The line refusing `found`, a negative id."""
    named = f"token {cut_to(repr(found.token), 80)} has id" if found.token is not None else "id"
    return (
        f"{found.where}: {named} {found.id}, not a token id (ids are 0 or more; the"
        " tokenizers library fails on the file as it loads it)"
    )


def check_token_ids(tokenizer_dir: Path, model_dir: Path | None, vocab_size: int) -> None:
    """ConfigError unless every id the tokenizer in `tokenizer_dir` (and the config and
    generation config of `model_dir`) can emit is below `vocab_size`, tokenizer.json's are
    none negative, and the tokens tokenizer_config.json adds fit beside the vocab: see the
    module docstring."""
    vocab = _TokenizerJson(tokenizer_dir / TOKENIZER_FILE)
    ids = vocab.ids()
    smallest = min(ids, key=lambda found: found.id, default=None)
    if smallest is not None and smallest.id < 0:
        raise ConfigError(negative_id(smallest))
    config_path = tokenizer_dir / TOKENIZER_CONFIG_FILE
    config = _json_or_none(config_path)
    ids += _added_in_config(config_path, config)
    if model_dir is not None:  # the model's own ids (a borrowed tokenizer dir's are not read)
        ids += _ids_of(model_dir / HF_CONFIG_FILE, _json_or_none(model_dir / HF_CONFIG_FILE))
        ids += _generation_ids(model_dir / GENERATION_CONFIG_FILE)
    largest = max(ids, key=lambda found: found.id, default=None)
    if largest is not None and largest.id >= vocab_size:
        raise ConfigError(past_vocab(largest, vocab_size))
    added = _special_tokens_not_in(config, vocab)
    count = vocab.count + len(added)
    if added and count > vocab_size:
        raise ConfigError(
            f"{tokenizer_dir / TOKENIZER_CONFIG_FILE}: names special tokens not in the vocab of"
            f" {TOKENIZER_FILE} ({first_of([repr(token) for token in added], 3)}), which"
            f" transformers adds: the tokenizer would have {count} tokens, more than the"
            f" model's vocab_size {vocab_size}; name tokens of the vocab there"
        )


def check_loaded_tokenizer(tokenizer: Any, vocab_size: int) -> None:
    """ConfigError unless the loaded `tokenizer`'s ids (its vocab with added tokens) are all
    below `vocab_size`: what `check_token_ids` checks from the files, for a tokenizer read
    from others (a sentencepiece tokenizer.model) or a run started without the launcher."""
    where = f"model: the tokenizer in {tokenizer.name_or_path}"
    token, top = max(tokenizer.get_vocab().items(), key=lambda item: item[1], default=("", -1))
    if top >= vocab_size:
        raise ConfigError(past_vocab(TokenId(where, token, top), vocab_size))
    if len(tokenizer) > vocab_size:
        raise ConfigError(
            f"{where}: has {len(tokenizer)} tokens but the model's vocab_size is {vocab_size}"
        )


class _TokenizerJson:
    """tokenizer.json's tokens and ids (none where the dir has no such file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = _checked_json(path) if os.path.lexists(path) else {}
        self.data = data if isinstance(data, dict) else {}
        model = self.data.get("model")
        vocab = model.get("vocab") if isinstance(model, dict) else None
        if isinstance(vocab, list):  # a Unigram vocab: [[piece, score], ...], its place the id
            vocab = {
                entry[0]: index
                for index, entry in enumerate(vocab)
                if isinstance(entry, list) and entry and isinstance(entry[0], str)
            }
        self.vocab: dict[str, Any] = vocab if isinstance(vocab, dict) else {}
        self.added = {
            entry["content"]: entry.get("id")
            for entry in _list(self.data.get("added_tokens"))
            if isinstance(entry, dict) and isinstance(entry.get("content"), str)
        }
        self.count = len(self.vocab) + len(self.added.keys() - self.vocab.keys())

    def __contains__(self, token: str) -> bool:
        return token in self.vocab or token in self.added

    def ids(self) -> list[TokenId]:
        """The vocab's largest and smallest ids, and each id of the added and post-processor
        tokens."""
        where = str(self.path)
        ends = dict.fromkeys((_extreme(self.vocab, max), _extreme(self.vocab, min)))
        found = [TokenId(where, token, self.vocab[token]) for token in ends if token is not None]
        found += [
            TokenId(f"{where} [added_tokens]", token, id_)
            for token, id_ in self.added.items()
            if _is_id(id_)
        ]
        return found + [
            TokenId(f"{where} [post_processor]", token, id_)
            for token, id_ in _processor_ids(self.data.get("post_processor"))
        ]


def _extreme(vocab: dict[str, Any], pick: Callable[..., Any]) -> str | None:
    """The token of `vocab`'s largest (`pick` max) or smallest (min) id, None for an empty
    vocab; compared in C where every id is an integer (a 3-million-entry vocab in a fraction
    of a second)."""
    if not vocab:
        return None
    try:
        return pick(vocab, key=vocab.__getitem__)
    except TypeError:  # an id that is no number: transformers refuses the file itself
        ids = (token for token, id_ in vocab.items() if _is_id(id_))
        return pick(ids, key=vocab.__getitem__, default=None)


def _checked_json(path: Path) -> Any:
    """tokenizer.json's data, read once `check_asset_dir` has checked it as a JSON asset
    (a regular file inside its dir, bounded, each key once, bounded nesting): parsed here
    by the json module alone, whose C parser takes seconds where the checking parse of a
    64 MB file took tens of them."""
    try:
        return json.loads(safe_files.read_text(path, MAX_JSON_ASSET_BYTES))
    except (CheckpointFileError, ValueError, RecursionError) as err:
        raise ConfigError(f"{path}: {err}") from None


def _processor_ids(processor: Any) -> Iterator[tuple[str | None, int]]:
    """The ids a post-processor inserts: TemplateProcessing's special_tokens, Bert's and
    Roberta's `sep`/`cls` ([token, id]), and those of a Sequence's processors."""
    if not isinstance(processor, dict):
        return
    for inner in _list(processor.get("processors")):
        yield from _processor_ids(inner)
    for key in ("sep", "cls"):
        pair = processor.get(key)
        if isinstance(pair, list) and len(pair) == 2 and _is_id(pair[1]):
            yield (pair[0] if isinstance(pair[0], str) else None), pair[1]
    specials = processor.get("special_tokens")
    for name, special in specials.items() if isinstance(specials, dict) else ():
        if isinstance(special, dict):
            for id_ in _list(special.get("ids")):
                if _is_id(id_):
                    yield str(name), id_


# an int64 id has at most 19 digits; longer keys would only be refused as past vocab_size
_ID_DIGITS = 19


def _added_in_config(path: Path, data: Any) -> list[TokenId]:
    """tokenizer_config.json's added_tokens_decoder (`data`, from `path`): id (the key) ->
    token."""
    decoder = data.get("added_tokens_decoder") if isinstance(data, dict) else None
    if not isinstance(decoder, dict):
        return []
    where = f"{path} [added_tokens_decoder]"
    for key in decoder:
        # transformers calls int() on every key: '²' and 5000 digits pass isdigit() only
        if not (key.isascii() and key.isdigit() and len(key) <= _ID_DIGITS):
            raise ConfigError(f"{where}: key {cut_to(repr(key), 80)} is not a token id")
    return [
        TokenId(where, entry.get("content") if isinstance(entry, dict) else None, int(key))
        for key, entry in decoder.items()
    ]


def _special_tokens_not_in(data: Any, vocab: _TokenizerJson) -> list[str]:
    """The special tokens tokenizer_config.json (its `data`) names that `vocab` lacks
    (transformers adds each); none where tokenizer.json gave no vocab to compare with."""
    if not vocab.count or not isinstance(data, dict):
        return []
    named = [data.get(key) for key in SPECIAL_TOKEN_KEYS]
    for key in SPECIAL_TOKEN_LISTS:
        named += _list(data.get(key))
    decoder = data.get("added_tokens_decoder")
    known = {
        entry.get("content")
        for entry in (decoder.values() if isinstance(decoder, dict) else ())
        if isinstance(entry, dict)
    }
    texts = [value.get("content") if isinstance(value, dict) else value for value in named]
    missing = (t for t in texts if isinstance(t, str) and t not in vocab and t not in known)
    return list(dict.fromkeys(missing))


def _json_or_none(path: Path) -> Any:
    """The JSON of a model or tokenizer dir's file (`read_json_asset`), None where there is
    no such file."""
    return read_json_asset(path) if os.path.lexists(path) else None


def _ids_of(path: Path, data: Any) -> list[TokenId]:
    """The token ids (ID_KEYS) config.json or generation_config.json (`data`, from `path`)
    gives."""
    if not isinstance(data, dict):
        return []
    return [
        TokenId(f"{path} [{key}]", None, id_)
        for key in ID_KEYS
        for id_ in (data[key] if isinstance(data.get(key), list) else [data.get(key)])
        if _is_id(id_)
    ]


def _generation_ids(path: Path) -> list[TokenId]:
    """generation_config.json's ids, read and parsed once; none from one that is no JSON,
    which transformers' model loader skips and the run leaves out of its checkpoints with a
    note of its own (`model_assets.unparsable_generation_config`)."""
    if not os.path.lexists(path):
        return []
    try:
        text = safe_files.read_text(path, MAX_JSON_ASSET_BYTES)
    except CheckpointFileError as err:
        raise ConfigError(str(err)) from None
    crowded = too_many_containers(text, MAX_JSON_ASSET_CONTAINERS)
    if crowded is not None:
        raise ConfigError(f"{path}: {crowded}")
    try:
        data = loads_unique(text)
    except ValueError:  # no JSON (`asset_rewrites.generation_config_problem`)
        return []
    return _ids_of(path, data)


def _is_id(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
