"""Whether a Hugging Face config.json describes the model a Megatron checkpoint records.

A Megatron-Bridge iteration keeps run_config.yaml beside its `hf/config.json`, and a
Megatron-LM checkpoint keeps its `args`; export takes a config.json when one is there or
given (`--hf-config`). Two configs can give every tensor the same shape and still split the
fused QKV differently (4 heads of 8 in 2 query groups, or 2 heads of 16 in 1): the export
then writes q/k/v rows in the wrong places and no check fails. A config.json naming fewer
tokens than the record makes the rows past it look like Megatron's vocabulary padding, and
export drops them. So the numbers that decide how stored tensors become Hugging Face ones
are compared with the record's, and any difference is named.

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
    DerivedConfig,
    MegatronConfigError,
    MegatronSettingsMissing,
    recorded_config,
)
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
    describes no model exported here is reported by the checks that derive from it)."""
    try:
        derived = recorded_config(paths, reader)
    except (
        MegatronConfigError,
        MegatronSettingsMissing,
        CheckpointFormatError,
        CheckpointFileError,
    ):
        return None
    if derived is None:
        return _against_own_config(given, paths)
    found = disagreements(given, derived)
    if not found:
        return None
    return (
        f"{', '.join(found)}: not the model {derived.source} records (its q/k/v rows or"
        " vocabulary would be exported wrong)"
    )


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
    if recorded["model_type"] in _DENSE_SIZE_UNUSED:
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
