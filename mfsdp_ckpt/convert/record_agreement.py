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
`record_values`), which the record holds as the run trained with them; the settings the
config derived from the record sets from it (top-k renormalisation from
moe_router_pre_softmax, the activation from swiglu, attention windows: `config_behaviour`);
and a setting no family exported here computes (a sigmoid router, windowed or L2-normalised
attention, one Mixtral's router cannot give) is refused as when no config is given, from the
same table (`megatron_config.uncomputable`): no config.json makes the weights compute it.

A record that is there but derives no config (a setting missing, a model no family here
computes) is compared on the numbers it does hold; where those leave the head layout open
(no heads or head_dim recorded), that is said (`unchecked_note`), never passed over, since
the same scrambled export would follow. A record that cannot be read at all (not JSON or
YAML, a link out of the checkpoint, a FIFO, a pickle naming os.system), or that states a
value compared here as no number (NaN, a list, "1e-6": `record_values.damaged_values`), is
a damaged checkpoint: CheckpointFormatError / CheckpointFileError naming the file (and the
key), exit 1, whichever config.json it is held to, as without one.

A checkpoint that keeps its own config.json (mfsdp's and verl's huggingface/, the HF
Trainer's) records the model as well: a `--hf-config` of another head split, or of another
family whose tensors have the same names (Llama's and Gemma's), exported a different model
with exit 0. So a config given against a checkpoint's own is compared too, family included,
and the settings that change what the same weights compute (`config_behaviour`).

verl keeps both: huggingface/config.json, the model the run started from, and
transformer_config.json, the TransformerConfig it trained with (`verl_record`), overrides
included. A config is held to the second as to any Megatron record, and to the first as
well; where the second leaves the head layout open the first fixes it, so no note is due.

A checkpoint that keeps neither (an mcore import, whose `args` is None) is not compared, and
that is said too (`unchecked_note`).
"""

from __future__ import annotations

from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.convert.config_behaviour import (
    behaviour_differences,
    differing_behaviour,
    shown_behaviour,
)
from mfsdp_ckpt.convert.hf_config import HFConfigError, check_geometry, read_config_json
from mfsdp_ckpt.convert.megatron_config import (
    DERIVED_FROM,
    MAX_SIZE,
    DerivedConfig,
    MegatronConfigError,
    MegatronSettingsMissing,
    shown_value,
    uncomputable,
    uncomputable_refusal,
)
from mfsdp_ckpt.convert.megatron_record import RecordedSettings, recorded_config, recorded_settings
from mfsdp_ckpt.convert.record_values import damaged_values, value_disagreements
from mfsdp_ckpt.convert.verl_record import VERL_TRANSFORMER_CONFIG
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader

_SPLIT = "its q/k/v rows would be split wrong"
_SIZES = "its tensors have other sizes"
# config.json keys that decide how stored tensors map to Hugging Face ones, and why one that
# differs is refused. Only keys the given config states are compared (a key left out takes
# its family's default, below); names absent from the derived config (another family's) are
# not compared.
_LAYOUT_KEYS = {
    "hidden_size": _SIZES,
    "num_hidden_layers": _SIZES,
    "num_attention_heads": _SPLIT,
    "num_key_value_heads": _SPLIT,
    "head_dim": _SPLIT,
    "intermediate_size": _SIZES,
    "tie_word_embeddings": "its output layer would be written as another",
    "num_experts": _SIZES,
    "num_local_experts": _SIZES,
    "num_experts_per_tok": "each token would reach another number of experts",
    "moe_intermediate_size": _SIZES,
    "shared_expert_intermediate_size": _SIZES,
}
# vocab_size is refused only when smaller than the record's (`disagreements`)
_VOCAB_CUT = "rows past its vocabulary would be dropped as padding"
_TRAINED_WITH = "the weights were trained with the record's values"
# How a line refusing the checkpoint's own config.json (no --hf-config given) ends, in
# export-hf and validate alike: the remedy is a config of the run's model, given
OWN_CONFIG_REMEDY = "pass --hf-config with the model dir the run started from"
_COMPUTES = "the same weights would compute another model"
# transformers' head_dim where config.json leaves it out, for a family whose default is not
# hidden / heads (Qwen3Config: 128)
_FAMILY_HEAD_DIM = {"qwen3": 128}
Finding = tuple[str, str]  # (what differs, why that is refused)

# Qwen MoE configs carry a dense intermediate_size that no layer uses when every layer is
# MoE (the only kind exported); Megatron's ffn_hidden_size there is as unused.
_DENSE_SIZE_UNUSED = ("qwen2_moe", "qwen3_moe")


def contradiction(
    given: dict[str, Any], paths: layout.CheckpointPaths | None, reader: CheckpointReader
) -> str | None:
    """What in `given` (config.json data) contradicts the checkpoint's own record (its
    Megatron settings, then the config.json it keeps beside them, as verl does), as the end
    of a one-line error; None when they agree or there is no record to compare with (a
    record that describes no model exported here is compared on what it holds;
    `unchecked_note` says what was left uncompared). Raises CheckpointFormatError /
    CheckpointFileError for a record that cannot be read or states a damaged value (module
    docstring). A setting no config.json computes is `refuse_uncomputable`'s, which export
    and validate call first: its line names the record, not the config."""
    derived = _record(paths, reader)[0]
    if derived is None:
        return _against_own_config(given, paths)
    recorded = _settings(paths, reader)
    found = disagreements(given, derived)
    if recorded is not None:
        _refuse_damaged_values(recorded)
        found += _value_findings(given, recorded)
        if "model_type" in derived.config:  # derived: what it sets from the record
            found += _behaviour_findings(given, derived, recorded)
    if not found:
        return _against_own_config(given, paths)
    return f"{_joined(found)}: not the model {derived.source} records ({_reasons(found)})"


def refuse_uncomputable(
    given: dict[str, Any],
    paths: layout.CheckpointPaths | None,
    reader: CheckpointReader,
    config: str,
) -> None:
    """MegatronConfigError (exit 1, as without `given`) when the checkpoint's record holds a
    setting no family exported here computes, or `given`'s family cannot
    (`megatron_config.uncomputable`): no config.json makes the weights compute it, so the
    remedy is none of another config's. The line names the record the value came from
    first (verl's transformer_config.json, not the huggingface/config.json beside it), then
    `config`, the config.json the caller would have used."""
    recorded = _settings(paths, reader)
    found = [] if recorded is None else _uncomputable(given, recorded)
    if recorded is not None and found:
        raise uncomputable_refusal(
            recorded.settings,
            f"{recorded.where}: {'; '.join(found)}; no config.json makes the weights"
            f" compute it (nor does {config})",
        )


def _uncomputable(given: dict[str, Any], recorded: RecordedSettings) -> list[str]:
    """`uncomputable` of the record for `given`'s family. verl's transformer_config.json is
    held to the settings no family computes, not to a family's own: verl's config converter
    sets moe_router_pre_softmax for every Mixtral (hf_to_mcore_config_mixtral), and its
    rollout (vLLM, transformers) ran the same weights as Hugging Face Mixtral, whose routing
    the RL samples came from and verl's own merger exports: every verl Mixtral run was refused."""
    family = given.get("model_type")
    known = (
        family if isinstance(family, str) and recorded.record != VERL_TRANSFORMER_CONFIG else None
    )
    return uncomputable(recorded.settings, recorded.names, known)


def _joined(found: list[Finding]) -> str:
    return ", ".join(what for what, _ in found)


def _reasons(found: list[Finding]) -> str:
    """Each finding's reason once, in order."""
    return "; ".join(dict.fromkeys(why for _, why in found))


def _settings(
    paths: layout.CheckpointPaths | None, reader: CheckpointReader
) -> RecordedSettings | None:
    """The record's settings as stated (an unreadable record is named where `_record`
    reads it)."""
    try:
        return recorded_settings(paths, reader)
    except (MegatronSettingsMissing, CheckpointFormatError, CheckpointFileError):
        return None


def _refuse_damaged_values(recorded: RecordedSettings) -> None:
    """CheckpointFormatError naming the record and its keys when a value `record_values`
    compares is stated as no finite number: left uncompared, a rope_theta the weights were
    not trained with exported with exit 0."""
    damaged = damaged_values(recorded.settings, recorded.names)
    if damaged:
        verb = "is" if len(damaged) == 1 else "are"
        raise CheckpointFormatError(
            f"{recorded.where}: {', '.join(damaged)} {verb} not a finite number (a damaged record)"
        )


def _value_findings(given: dict[str, Any], recorded: RecordedSettings) -> list[Finding]:
    """`record_values` of the record's settings."""
    found = value_disagreements(given, recorded.settings, recorded.names)
    return [(what, _TRAINED_WITH) for what in found]


def _behaviour_findings(
    given: dict[str, Any], derived: DerivedConfig, recorded: RecordedSettings
) -> list[Finding]:
    """The settings the derived config sets from a recorded one (`DERIVED_FROM`) that
    `given` states otherwise (or leaves to its family's default), each with the recorded
    setting it contradicts."""
    found = []
    for key, value, _ in differing_behaviour(given, derived.config):
        setting = DERIVED_FROM.get(key)
        if setting is None:  # compared with the record's own value (`record_values`)
            continue
        shown = f"{key}={cut_to(shown_behaviour(key, value), 80)}"
        recorded_value = shown_value(recorded.settings.get(setting))
        found.append(
            (
                f"{shown} (record: {recorded.names.get(setting, setting)} {recorded_value})",
                _COMPUTES,
            )
        )
    return found


def unchecked_note(
    paths: layout.CheckpointPaths | None, reader: CheckpointReader, hf_config_given: bool
) -> str | None:
    """Why a config.json used for this checkpoint was not compared with its Megatron record
    on the head layout, as the rest of a line that names the config; None when it was, or
    when nothing could be. The one line export's note and validate's warning both say: a
    record there that holds no heads or head_dim, or (for a config given, `--hf-config`)
    Megatron-core weights that nothing in the checkpoint describes (an mcore import: `args`
    None, no config.json of its own), where a config of another head split scrambles the
    fused QKV."""
    unread = _record(paths, reader)[1]
    if unread is not None:
        if _keeps_own_config(paths) and _settings(paths, reader) is not None:
            return None  # the head layout is the checkpoint's own config.json's (`contradiction`)
        return _unchecked(unread)
    if not hf_config_given or paths is None or paths.hf_dir is not None:
        return None
    if _record(paths, reader) != (None, None):
        return None
    if not any(_FUSED_QKV in name for name in reader.tensors):
        return None
    return _unchecked("the checkpoint keeps neither Megatron settings nor its own config.json")


_FUSED_QKV = ".linear_qkv."


def _unchecked(why: str) -> str:
    return (
        f"not checked against the checkpoint's record ({why}): a config.json of another"
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
    else those it holds (`_layout_numbers`), None without a record; why the head layout
    could not be taken from a record that is there, or None). A record that cannot be read
    raises its CheckpointFormatError / CheckpointFileError (module docstring)."""
    try:
        return recorded_config(paths, reader), None
    except MegatronSettingsMissing as err:
        why = err.lacking()
    except MegatronConfigError as err:
        why = str(err)
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


def _keeps_own_config(paths: layout.CheckpointPaths | None) -> bool:
    """Whether the checkpoint keeps its own config.json beside its weights (verl's
    huggingface/ beside transformer_config.json): what a config used for it is compared
    with where its Megatron record leaves the head layout open."""
    return (
        paths is not None and paths.hf_dir is not None and (paths.hf_dir / HF_CONFIG_FILE).is_file()
    )


def _against_own_config(given: dict[str, Any], paths: layout.CheckpointPaths | None) -> str | None:
    """`given` against the config.json the checkpoint keeps beside its weights, if any (an
    unreadable one is reported where it is read)."""
    if paths is None or paths.hf_dir is None:
        return None
    try:
        check_geometry(given, HF_CONFIG_FILE)  # impossible sizes are named where export plans
        own_file, own = read_config_json(paths.hf_dir / HF_CONFIG_FILE, paths.root)
    except HFConfigError:
        return None
    if own == given:
        return None
    found = []
    if given.get("model_type") != own["model_type"]:
        found.append(f"model_type={given.get('model_type')!r} (own: {own['model_type']!r})")
    found += [
        what for what, _ in disagreements(given, DerivedConfig(_with_family_defaults(own)), "own")
    ]
    found += behaviour_differences(given, own)
    if not found:
        return None
    return (
        f"{', '.join(found)}: not the model the checkpoint's own {own_file} describes (its"
        " weights would be exported as another model)"
    )


def disagreements(
    given: dict[str, Any], derived: DerivedConfig, label: str = "record"
) -> list[Finding]:
    """(`key=given (record: recorded)`, why that is refused) for each layout number on
    which `given` (config.json data) and the checkpoint's record differ; empty when they
    agree."""
    stated = _with_family_defaults(given)
    recorded = derived.config
    unused = ("intermediate_size",) if recorded.get("model_type") in _DENSE_SIZE_UNUSED else ()
    keys = [k for k in _LAYOUT_KEYS if k in stated and k in recorded and k not in unused]
    found = [
        (f"{key}={stated[key]!r} ({label}: {recorded[key]!r})", _LAYOUT_KEYS[key])
        for key in keys
        if stated[key] != recorded[key]
    ]
    vocab = stated.get("vocab_size")
    # fewer tokens than recorded cuts real rows as "padding"; more (a hub config's padded
    # vocabulary over a tokenizer's count) keeps every row
    if derived.vocab_recorded and isinstance(vocab, int) and vocab < recorded["vocab_size"]:
        found.append((f"vocab_size={vocab} ({label}: {recorded['vocab_size']})", _VOCAB_CUT))
    return found


def _with_family_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The config's values with what its family defaults when a key is left out or null,
    as transformers' config classes do: as many KV heads as query heads; head_dim the
    family's own default (Qwen3's 128), else hidden / heads."""
    values = dict(data)
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    if values.get("num_key_value_heads") is None and heads is not None:
        values["num_key_value_heads"] = heads
    family_head_dim = _FAMILY_HEAD_DIM.get(str(values.get("model_type")))
    if values.get("head_dim") is None and family_head_dim is not None:
        values["head_dim"] = family_head_dim
    elif (
        values.get("head_dim") is None
        and isinstance(heads, int)
        and isinstance(hidden, int)
        and heads > 0
    ):
        values["head_dim"] = hidden // heads
    return {key: value for key, value in values.items() if value is not None}
