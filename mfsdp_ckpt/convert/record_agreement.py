"""Whether a Hugging Face config.json describes the model a Megatron checkpoint records.

A Megatron-Bridge iteration keeps run_config.yaml beside its `hf/config.json`, and a
Megatron-LM checkpoint keeps its `args`; export takes a config.json when one is there or
given (`--hf-config`). Two configs can give every tensor the same shape and still split the
fused QKV differently (4 heads of 8 in 2 query groups, or 2 heads of 16 in 1): the export
then writes q/k/v rows in the wrong places and no check fails. A config.json naming fewer
tokens than the record makes the rows past it look like Megatron's vocabulary padding, and
export drops them. So the numbers that decide how stored tensors become Hugging Face ones
are compared with the record's, and any difference is named; so are the values no shape
shows that decide what the weights compute (RoPE base and scaling, norm epsilon:
`record_values`), which the record holds as the run trained with them.

A record that is there but derives no config (a setting missing, a model no family here
computes) is compared on the numbers it does hold; where those leave the head layout open
(no heads or head_dim recorded), or the record cannot be read at all, that is said
(`unchecked_note`), never passed over, since the same scrambled export would follow.

A checkpoint that keeps its own config.json (mfsdp's and verl's huggingface/, the HF
Trainer's) records the model as well: a `--hf-config` of another head split, or of another
family whose tensors have the same names (Llama's and Gemma's), exported a different model
with exit 0. So a config given against a checkpoint's own is compared too, family included,
and the settings that change what the same weights compute (`config_behaviour`).
"""

from __future__ import annotations

from typing import Any

from mfsdp_ckpt.convert.config_behaviour import behaviour_differences
from mfsdp_ckpt.convert.hf_config import HFConfigError, check_geometry, read_config_json
from mfsdp_ckpt.convert.megatron_config import (
    MAX_SIZE,
    DerivedConfig,
    MegatronConfigError,
    MegatronSettingsMissing,
    recorded_config,
    recorded_settings,
)
from mfsdp_ckpt.convert.record_values import value_disagreements
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader

# config.json keys that decide how stored tensors map to Hugging Face ones. Only keys the
# given config states are compared (a key left out takes its family's default, below);
# names absent from the derived config (another family's) are not compared.
_LAYOUT_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "tie_word_embeddings",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)
# Qwen MoE configs carry a dense intermediate_size that no layer uses when every layer is
# MoE (the only kind exported); Megatron's ffn_hidden_size there is as unused.
_DENSE_SIZE_UNUSED = ("qwen2_moe", "qwen3_moe")


def contradiction(
    given: dict[str, Any], paths: layout.CheckpointPaths | None, reader: CheckpointReader
) -> str | None:
    """What in `given` (config.json data) contradicts the checkpoint's own record (its
    Megatron settings, else its own config.json), as the end of a one-line error; None when
    they agree or there is no record to compare with (a record that cannot be read or
    describes no model exported here is compared on what it holds; `unchecked_note` says
    what was left uncompared)."""
    derived, unread = _record(paths, reader)
    if derived is None:
        return _against_own_config(given, paths) if unread is None else None
    found = disagreements(given, derived)
    values = _value_disagreements(given, paths, reader)
    if not found and not values:
        return None
    why = ["its q/k/v rows or vocabulary would be exported wrong"] if found else []
    why += ["the weights were trained with the record's values"] if values else []
    return f"{', '.join(found + values)}: not the model {derived.source} records ({'; '.join(why)})"


def _value_disagreements(
    given: dict[str, Any], paths: layout.CheckpointPaths | None, reader: CheckpointReader
) -> list[str]:
    """`record_values` of the record's settings as stated (an unreadable record is named
    where `_record` reads it)."""
    try:
        recorded = recorded_settings(paths, reader)
    except (MegatronSettingsMissing, CheckpointFormatError, CheckpointFileError):
        return []
    if recorded is None:
        return []
    return value_disagreements(given, recorded.settings, recorded.names)


def unchecked_note(paths: layout.CheckpointPaths | None, reader: CheckpointReader) -> str | None:
    """Why a config.json used for this checkpoint was not compared with its Megatron record
    on the head layout (the record is there but unreadable, or holds no heads or head_dim),
    as the rest of a line that names the config; None when it was, or there is no record."""
    unread = _record(paths, reader)[1]
    if unread is None:
        return None
    return (
        f"not checked against the checkpoint's record ({unread}): a config.json of another"
        " head layout (attention heads, query groups, head_dim) gives every tensor the same"
        " shape and exports q/k/v scrambled, so make sure it is the run's model"
    )


# With these compared (and the stored shapes, checked where export plans) the q/k/v split
# is the record's: the number of KV heads follows from the fused QKV's rows.
_HEAD_LAYOUT = ("num_attention_heads", "head_dim")


def _record(
    paths: layout.CheckpointPaths | None, reader: CheckpointReader
) -> tuple[DerivedConfig | None, str | None]:
    """(the layout numbers the checkpoint's Megatron record gives: the config it derives,
    else those it holds (`_layout_numbers`), None without a readable record; why the head
    layout could not be taken from a record that is there, or None)."""
    try:
        return recorded_config(paths, reader), None
    except MegatronSettingsMissing as err:
        why = err.lacking()
    except MegatronConfigError as err:
        why = str(err)
    except (CheckpointFormatError, CheckpointFileError) as err:
        return None, str(err)
    try:
        recorded = recorded_settings(paths, reader)
    except MegatronSettingsMissing:  # run_config.yaml without a model section
        return None, why
    if recorded is None:  # read a moment ago: removed since
        return None, why
    numbers = _layout_numbers(recorded.settings)
    partial = DerivedConfig(numbers, source=recorded.where, vocab_recorded=False)
    return partial, why if any(key not in numbers for key in _HEAD_LAYOUT) else None


def _layout_numbers(settings: dict[str, Any]) -> dict[str, Any]:
    """The dense layout numbers (`_LAYOUT_KEYS`) a record that derives no config holds, as
    config.json keys: each only when recorded as a count (or a flag), so what the record
    lacks is left uncompared, never defaulted; KV heads only when the record says whether
    attention is grouped, head_dim hidden / heads when no kv_channels is recorded (as
    Megatron-LM defaults it)."""

    def count(key: str) -> int | None:
        value = settings.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
            return None
        return value

    hidden, heads = count("hidden_size"), count("num_attention_heads")
    grouped = settings.get("group_query_attention")
    head_dim = count("kv_channels")
    if settings.get("kv_channels") is None and hidden and heads and hidden % heads == 0:
        head_dim = hidden // heads
    kv_heads = count("num_query_groups") if grouped is True else heads if grouped is False else None
    untied = settings.get("untie_embeddings_and_output_weights")
    numbers = {
        "hidden_size": hidden,
        "num_hidden_layers": count("num_layers"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        # an MoE model's dense size is unused (`_DENSE_SIZE_UNUSED`)
        "intermediate_size": None if settings.get("num_experts") else count("ffn_hidden_size"),
        "tie_word_embeddings": not untied if isinstance(untied, bool) else None,
    }
    return {key: value for key, value in numbers.items() if value is not None}


def _against_own_config(given: dict[str, Any], paths: layout.CheckpointPaths | None) -> str | None:
    """`given` against the config.json the checkpoint keeps beside its weights, if any (an
    unreadable one is reported where it is read)."""
    if paths is None or paths.hf_dir is None:
        return None
    try:
        check_geometry(given, "config.json")  # impossible sizes are named where export plans
        own_file, own = read_config_json(paths.hf_dir / "config.json", paths.root)
    except HFConfigError:
        return None
    if own == given:
        return None
    found = []
    if given.get("model_type") != own["model_type"]:
        found.append(f"model_type={given.get('model_type')!r} (own: {own['model_type']!r})")
    found += disagreements(given, DerivedConfig(_with_family_defaults(own)), label="own")
    found += behaviour_differences(given, own)
    if not found:
        return None
    return (
        f"{', '.join(found)}: not the model the checkpoint's own {own_file} describes (its"
        " weights would be exported as another model)"
    )


def disagreements(
    given: dict[str, Any], derived: DerivedConfig, label: str = "record"
) -> list[str]:
    """`key=given (record: recorded)` for each layout number on which `given` (config.json
    data) and the checkpoint's record differ; empty when they agree."""
    stated = _with_family_defaults(given)
    recorded = derived.config
    keys = [k for k in _LAYOUT_KEYS if k in stated and k in recorded]
    if recorded.get("model_type") in _DENSE_SIZE_UNUSED:
        keys.remove("intermediate_size")
    found = [
        f"{key}={stated[key]!r} ({label}: {recorded[key]!r})"
        for key in keys
        if stated[key] != recorded[key]
    ]
    vocab = stated.get("vocab_size")
    # fewer tokens than recorded cuts real rows as "padding"; more (a hub config's padded
    # vocabulary over a tokenizer's count) keeps every row
    if derived.vocab_recorded and isinstance(vocab, int) and vocab < recorded["vocab_size"]:
        found.append(f"vocab_size={vocab} ({label}: {recorded['vocab_size']})")
    return found


def _with_family_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The config's values with what every family exported here defaults when a key is
    left out or null: as many KV heads as query heads, head_dim hidden / heads."""
    values = dict(data)
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    if values.get("num_key_value_heads") is None and heads is not None:
        values["num_key_value_heads"] = heads
    if (
        values.get("head_dim") is None
        and isinstance(heads, int)
        and isinstance(hidden, int)
        and heads > 0
    ):
        values["head_dim"] = hidden // heads
    return {key: value for key, value in values.items() if value is not None}
