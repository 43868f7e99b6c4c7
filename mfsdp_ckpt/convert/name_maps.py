"""The one place that maps weight names between checkpoint layouts and Hugging Face.

Two layouts are understood:

* ``hf``: module names as `transformers` uses them (what our trainer, FSDP2 and
  `megatron_fsdp.fully_shard` write for HF models), possibly under wrapper segments
  (`module.`, `_orig_mod.`, ...). Names pass through unchanged, but for the experts of an
  MoE family that transformers 5.x holds fused in memory: split into the hub files'
  per-expert tensors (what every transformers version loads; `fused_experts`).
* ``mcore``: Megatron-core GPTModel names (Megatron-LM, Megatron-Bridge and verl with
  ckpt_format `fsdp_dtensor`, stored under `model.module.`). A table per model family
  says which stored tensor becomes which HF tensor(s) and how: copied, QKV
  de-interleaved per query group, or SwiGLU fc1 split into gate and up; MoE experts
  (global ids) become the hub files' per-expert tensors.

Why tables and small exact functions: a conversion that is wrong by one row permutation
still loads and produces garbage, so every rule is explicit, shape-checked against the
config before a byte is read, and tested against independently written inverses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.config_behaviour import (
    FAMILY_DEFAULTS,
    WINDOWED_FAMILIES,
    SlidingWindow,
    sliding_window,
)
from mfsdp_ckpt.convert.fused_tensors import (
    COPY,
    EXPERT_GATE_UP,
    GATE_UP,
    KEEP,
    QKV,
    QKV_MERGE,
    VOCAB,
    Geometry,
    Merge,
    Transform,
    is_int,
)
from mfsdp_ckpt.convert.mapping_errors import MappingError, ShapeError, UnsupportedModelError
from mfsdp_ckpt.convert.record_values import MEGATRON_ROPE, megatron_rope_mismatch
from mfsdp_ckpt.format import state_keys

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from mfsdp_ckpt.convert.export_source import JsonConfig

HF, MCORE = "hf", "mcore"
LAYOUTS = (HF, MCORE)
_HF_ROOTS = state_keys.HF_ROOTS
_MCORE_ROOTS = state_keys.MCORE_ROOTS
_SHOWN_NAMES = 3  # tensor names an error line lists before "(+N more)"


@dataclass(frozen=True)
class Rule:
    """`source` is a regex over the stored (unwrapped) name; `targets` are HF names with {layer}."""

    source: str
    targets: tuple[str, ...]
    transform: Transform = COPY
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pattern", re.compile(self.source))


_L = r"decoder\.layers\.(?P<layer>\d+)\."
_H = "model.layers.{layer}."

# Rules every dense GPT family shares (local spec and Transformer Engine spec names).
_COMMON = (
    Rule(r"embedding\.word_embeddings\.weight", ("model.embed_tokens.weight",), VOCAB),
    Rule(r"decoder\.final_layernorm\.weight", ("model.norm.weight",)),
    Rule(r"output_layer\.weight", ("lm_head.weight",), VOCAB),
    Rule(_L + r"input_layernorm\.weight", (_H + "input_layernorm.weight",)),
    Rule(_L + r"self_attention\.linear_qkv\.layer_norm_weight", (_H + "input_layernorm.weight",)),
    Rule(
        _L + r"self_attention\.linear_qkv\.weight",
        (
            _H + "self_attn.q_proj.weight",
            _H + "self_attn.k_proj.weight",
            _H + "self_attn.v_proj.weight",
        ),
        QKV,
    ),
    Rule(_L + r"self_attention\.linear_proj\.weight", (_H + "self_attn.o_proj.weight",)),
    Rule(_L + r"pre_mlp_layernorm\.weight", (_H + "post_attention_layernorm.weight",)),
    Rule(_L + r"mlp\.linear_fc1\.layer_norm_weight", (_H + "post_attention_layernorm.weight",)),
    Rule(
        _L + r"mlp\.linear_fc1\.weight",
        (_H + "mlp.gate_proj.weight", _H + "mlp.up_proj.weight"),
        GATE_UP,
    ),
    Rule(
        _L + r"mlp\.linear_fc1\.weight_w", (_H + "mlp.gate_proj.weight",)
    ),  # fsdp_dtensor split form
    Rule(_L + r"mlp\.linear_fc1\.weight_v", (_H + "mlp.up_proj.weight",)),
    Rule(_L + r"mlp\.linear_fc2\.weight", (_H + "mlp.down_proj.weight",)),
)
_QKV_BIAS = (
    Rule(
        _L + r"self_attention\.linear_qkv\.bias",
        (_H + "self_attn.q_proj.bias", _H + "self_attn.k_proj.bias", _H + "self_attn.v_proj.bias"),
        QKV,
    ),
)
_QK_NORM = (
    Rule(_L + r"self_attention\.q_layernorm\.weight", (_H + "self_attn.q_norm.weight",)),
    Rule(_L + r"self_attention\.k_layernorm\.weight", (_H + "self_attn.k_norm.weight",)),
)


@dataclass(frozen=True)
class MoeNames:
    """An MoE family's names in the hub's files: the block holding router and experts
    (`model.layers.N.<block>.`), each expert's (gate, up, down) modules under
    `<block>.experts.<E>.`, and whether a gated shared expert sits beside them
    (`mlp.shared_expert.*`, `mlp.shared_expert_gate.weight`: Qwen2-MoE). transformers 4.x
    loads these names as they are; 5.x fuses the experts into `mlp.experts.gate_up_proj` /
    `down_proj` (and renames Mixtral's block to `mlp`) on load (conversion_mapping.py)."""

    block: str
    gate: str
    up: str
    down: str
    expert_size: str  # the config.json key of each expert's intermediate size
    shared_expert: bool = False


MOE_NAMES = {
    "qwen3_moe": MoeNames("mlp", "gate_proj", "up_proj", "down_proj", "moe_intermediate_size"),
    "qwen2_moe": MoeNames(
        "mlp", "gate_proj", "up_proj", "down_proj", "moe_intermediate_size", shared_expert=True
    ),
    "mixtral": MoeNames("block_sparse_moe", "w1", "w3", "w2", "intermediate_size"),
}
# The families whose tables convert mixture-of-experts layers
MOE_FAMILIES = tuple(MOE_NAMES)


def _moe_rules(names: MoeNames) -> tuple[Rule, ...]:
    """A mixture-of-experts layer's router and experts, as Megatron's fsdp_dtensor save
    names them (megatron/core/transformer/fsdp_dtensor_checkpoint.py): experts carry global
    ids (handle_experts_in_state_dict) and each expert's SwiGLU fc1 is split into `_w`
    (gate) / `_v` (up) (handle_swiglu_in_state_dict). TEGroupedMLP (--moe-grouped-gemm)
    holds `experts.linear_fc1.weight<E>`, SequentialMLP `experts.local_experts.<E>.linear_fc1
    .weight`; the fused fc1 forms are what other savers (torch_dist) keep. A shared expert
    (SharedExpertMLP) is `shared_experts.linear_fc1/fc2` with its sigmoid gate `gate_weight`
    [1, hidden]. The pre-MLP norm of an MoE layer is `pre_mlp_layernorm` in both specs (no
    fused norm there), a rule of _COMMON."""
    hf = _H + names.block + "."
    grouped = _L + r"mlp\.experts\."
    sequential = _L + r"mlp\.experts\.local_experts\.(?P<expert>\d+)\."
    experts = hf + "experts.{expert}."
    gate_up = (experts + names.gate + ".weight", experts + names.up + ".weight")
    down = (experts + names.down + ".weight",)
    rules = (
        Rule(_L + r"mlp\.router\.weight", (hf + "gate.weight",)),
        Rule(grouped + r"linear_fc1\.weight(?P<expert>\d+)_w", gate_up[:1]),
        Rule(grouped + r"linear_fc1\.weight(?P<expert>\d+)_v", gate_up[1:]),
        Rule(grouped + r"linear_fc1\.weight(?P<expert>\d+)", gate_up, EXPERT_GATE_UP),
        Rule(grouped + r"linear_fc2\.weight(?P<expert>\d+)", down),
        Rule(sequential + r"linear_fc1\.weight_w", gate_up[:1]),
        Rule(sequential + r"linear_fc1\.weight_v", gate_up[1:]),
        Rule(sequential + r"linear_fc1\.weight", gate_up, EXPERT_GATE_UP),
        Rule(sequential + r"linear_fc2\.weight", down),
    )
    if not names.shared_expert:
        return rules
    shared, hf_shared = _L + r"mlp\.shared_experts\.", _H + "mlp.shared_expert."
    shared_gate_up = (hf_shared + "gate_proj.weight", hf_shared + "up_proj.weight")
    return rules + (
        Rule(shared + r"linear_fc1\.weight_w", shared_gate_up[:1]),
        Rule(shared + r"linear_fc1\.weight_v", shared_gate_up[1:]),
        Rule(shared + r"linear_fc1\.weight", shared_gate_up, GATE_UP),
        Rule(shared + r"linear_fc2\.weight", (hf_shared + "down_proj.weight",)),
        Rule(shared + r"gate_weight", (_H + "mlp.shared_expert_gate.weight",)),
    )


# SequentialMLP's experts as torch_dist stacks them, one tensor per layer [E, ...]
# (`experts.experts.linear_fc1.weight`, each expert's fc1 [gate; up], torch_dist having
# gathered it whole), which Megatron-LM's converter to fsdp_dtensor (checkpoint_inspector.py
# convert-torch-dist-to-fsdp-dtensor) keeps per layer: `fused_experts.stacked_expert_targets`
# splits them per expert (no Megatron-FSDP save names them so)
STACKED_EXPERTS_RE = re.compile(
    _L + r"mlp\.experts\.experts\.(?P<kind>linear_fc1\.weight(?:_w|_v)?|linear_fc2\.weight)"
)


# One table per family, keyed by the HF config's model_type (Qwen2.5 is model_type qwen2).
# Mistral has Llama's names and no biases; its head_dim may differ from hidden / heads,
# which Geometry carries. Qwen3-MoE, Qwen2-MoE and Mixtral are Qwen3, Qwen2 and Llama with
# (some or all) MLPs replaced by a softmax top-k router over experts (and Qwen2-MoE's shared
# expert); dense layers among them (mlp_only_layers) keep _COMMON's names.
MCORE_FAMILIES: dict[str, tuple[Rule, ...]] = {
    "qwen2": _COMMON + _QKV_BIAS,
    "qwen3": _COMMON + _QK_NORM,
    "llama": _COMMON,
    "mistral": _COMMON,
    "qwen3_moe": _COMMON + _QK_NORM + _moe_rules(MOE_NAMES["qwen3_moe"]),
    "qwen2_moe": _COMMON + _QKV_BIAS + _moe_rules(MOE_NAMES["qwen2_moe"]),
    "mixtral": _COMMON + _moe_rules(MOE_NAMES["mixtral"]),
}


def refuse_attention_window(config: JsonConfig | PretrainedConfig) -> None:
    """UnsupportedModelError naming the key unless every layer attends over all positions.

    The mcore form holds weights alone: the Megatron-LM run loading them takes each
    layer's window from its own flags (--window-size, --window-attn-skip-freq), which the
    conversion neither records nor checks, whose window counts the positions before the
    query where transformers' sliding_window counts the query too, and whose window_size
    record export does not convert (`megatron_config` refuses it). So a model some of whose
    layers see a sliding window narrower than its positions is refused: converted either
    way, nothing would keep its windows. A window of
    null or at least max_position_embeddings never narrows attention and converts. Which
    layers slide which window is `config_behaviour.sliding_window`'s answer; a layer that
    layer_types marks sliding_attention with no window in force is refused too, as a model
    transformers' own attention fails on."""
    data = _config_data(config)
    found = sliding_window(data)
    if found is None:
        if data.get("model_type") in WINDOWED_FAMILIES:
            raise UnsupportedModelError(
                "config: num_hidden_layers and max_window_layers must be integers and"
                " layer_types one entry per layer, got"
                f" {cut_to(repr(data.get('num_hidden_layers')), 40)},"
                f" {cut_to(repr(data.get('max_window_layers')), 40)}"
                f" and {cut_to(repr(data.get('layer_types')), 80)}"
            )
        return
    if found.unwindowed:
        where = _layer_list(list(found.unwindowed))
        raise UnsupportedModelError(
            f"config: no sliding window is in force on {where} ({found.decided_by}), which"
            " transformers then marks sliding_attention (use_sliding_window is not true, or"
            " sliding_window is null or 0): its eager and sdpa attention fail there; make"
            " such layers full_attention, or set use_sliding_window and sliding_window"
        )
    if not found.layers:
        return
    window, positions = found.size, found.positions
    if not is_int(window):
        raise UnsupportedModelError(
            "config: sliding_window must be null or a positive integer, got"
            f" {cut_to(repr(window), 80)}"
        )
    if not is_int(positions):
        raise UnsupportedModelError(
            "config: max_position_embeddings must be a positive integer, got"
            f" {cut_to(repr(positions), 80)}"
        )
    if window < positions:
        raise UnsupportedModelError(
            f"config: sliding_window={window} is below max_position_embeddings={positions} on"
            f" {_windowed_layers(found)}; the mcore form carries no attention window (its"
            " layers run full attention unless the Megatron-LM run passes --window-size,"
            " which is neither written nor checked here, nor its window_size converted"
            " back), so the mcore model would not be this one (null or >="
            " max_position_embeddings converts)"
        )


def _config_data(config: JsonConfig | PretrainedConfig) -> dict[str, Any]:
    """config.json's keys of a `JsonConfig` (config.json as read) or a transformers config
    (its defaults filled in, as `sliding_window` reads either)."""
    to_dict = getattr(config, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(vars(config))


def _windowed_layers(found: SlidingWindow) -> str:
    """The layers a window slides on, in words, and the keys that chose them."""
    keys = f" ({found.decided_by})" if found.decided_by else ""
    if len(found.layers) == found.layer_count:
        return f"every layer{keys}"
    return f"{_layer_list(list(found.layers))}{keys}"


def _layer_list(layers: list[int]) -> str:
    """[3] -> "layer 3"; [3, 4, 5] -> "layers 3-5"; else the first few and how many more."""
    if len(layers) == 1:
        return f"layer {layers[0]}"
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"layers {layers[0]}-{layers[-1]}"
    return f"layers {first_of(layers, 4)}"


# ----------------------------------------------------------------- HF -> mcore (import)
# The inverse direction, written out rather than derived from the rules above: those accept
# every variant a checkpoint may hold (local and Transformer Engine norm names, fused and
# split fc1), while an import must emit exactly one. Megatron's fsdp_dtensor save splits
# the SwiGLU fc1 into weight_w (gate) / weight_v (up) (handle_swiglu_in_state_dict), so
# that is what is written, and what its load path turns back into the fused parameter.
# local spec (get_gpt_layer_local_spec) or Transformer Engine's norms fused into the linears
MCORE_NORMS = ("local", "te")
DEFAULT_NORMS = "local"  # Megatron-core's local layer spec: no Transformer Engine
_MCORE_NORM_NAMES = {
    "local": (_L + "input_layernorm.weight", _L + "pre_mlp_layernorm.weight"),
    "te": (
        _L + "self_attention.linear_qkv.layer_norm_weight",
        _L + "mlp.linear_fc1.layer_norm_weight",
    ),
}


@dataclass(frozen=True)
class ImportRule:
    """`target` is the mcore module path (with {layer}, and {expert} for an expert's tensor);
    `sources` the HF names it is made of. `only_with`: an HF name (with {layer}) the layer
    must hold for the rule to apply (an MoE layer's router), else the rule is skipped."""

    target: str
    sources: tuple[str, ...]
    merge: Merge = KEEP
    only_with: str | None = None


def _import_rule(
    target: str, *sources: str, merge: Merge = KEEP, only_with: str | None = None
) -> ImportRule:
    return ImportRule(target.replace(_L, "decoder.layers.{layer}."), sources, merge, only_with)


def _import_common(norms: str) -> tuple[ImportRule, ...]:
    input_norm, pre_mlp_norm = _MCORE_NORM_NAMES[norms]
    return (
        _import_rule(r"embedding.word_embeddings.weight", "model.embed_tokens.weight"),
        _import_rule(r"decoder.final_layernorm.weight", "model.norm.weight"),
        _import_rule(r"output_layer.weight", "lm_head.weight"),
        _import_rule(input_norm, _H + "input_layernorm.weight"),
        _import_rule(
            _L + "self_attention.linear_qkv.weight",
            _H + "self_attn.q_proj.weight",
            _H + "self_attn.k_proj.weight",
            _H + "self_attn.v_proj.weight",
            merge=QKV_MERGE,
        ),
        _import_rule(_L + "self_attention.linear_proj.weight", _H + "self_attn.o_proj.weight"),
        _import_rule(pre_mlp_norm, _H + "post_attention_layernorm.weight"),
        _import_rule(_L + "mlp.linear_fc1.weight_w", _H + "mlp.gate_proj.weight"),
        _import_rule(_L + "mlp.linear_fc1.weight_v", _H + "mlp.up_proj.weight"),
        _import_rule(_L + "mlp.linear_fc2.weight", _H + "mlp.down_proj.weight"),
    )


_IMPORT_QKV_BIAS = (
    _import_rule(
        _L + "self_attention.linear_qkv.bias",
        _H + "self_attn.q_proj.bias",
        _H + "self_attn.k_proj.bias",
        _H + "self_attn.v_proj.bias",
        merge=QKV_MERGE,
    ),
)
_IMPORT_QK_NORM = (
    _import_rule(_L + "self_attention.q_layernorm.weight", _H + "self_attn.q_norm.weight"),
    _import_rule(_L + "self_attention.k_layernorm.weight", _H + "self_attn.k_norm.weight"),
)

# How an MoE model's experts are written: TEGroupedMLP's `experts.linear_fc1.weight<E>`
# (Transformer Engine spec with --moe-grouped-gemm, the usual setting) or SequentialMLP's
# `experts.local_experts.<E>.linear_fc1.weight` (the local spec always; TE's without it:
# backends.py / transformer_engine_spec_provider.py `grouped_mlp_modules`). Megatron's
# fsdp_dtensor load renames neither into the other, so the names must be those of the
# model that loads them.
MCORE_EXPERTS = ("grouped", "sequential")


def default_experts(norms: str) -> str:
    """The expert layout of the spec the norm names come from: the local spec builds
    SequentialMLP experts, the Transformer Engine one TEGroupedMLP with --moe-grouped-gemm."""
    return "grouped" if norms == "te" else "sequential"


def _import_moe(names: MoeNames, experts: str) -> tuple[ImportRule, ...]:
    """An MoE layer's pre-MLP norm, router and experts (global ids, each fc1 split into
    `_w` gate / `_v` up as fsdp_dtensor's save does for experts and shared experts too:
    handle_swiglu_in_state_dict), and Qwen2-MoE's gated shared expert: the inverse of
    `_moe_rules` for one expert layout. The pre-MLP norm of an MoE layer is
    `pre_mlp_layernorm` in both norm specs (no linear to fuse it into), so it comes first,
    applying only where the layer holds a router."""
    hf = _H + names.block + "."
    router = hf + "gate.weight"
    expert_hf = hf + "experts.{expert}."
    if experts == "grouped":
        fc1 = _L + "mlp.experts.linear_fc1.weight{expert}"
        fc2 = _L + "mlp.experts.linear_fc2.weight{expert}"
    else:
        local = _L + "mlp.experts.local_experts.{expert}."
        fc1, fc2 = local + "linear_fc1.weight", local + "linear_fc2.weight"
    rules = (
        _import_rule(
            _L + "pre_mlp_layernorm.weight",
            _H + "post_attention_layernorm.weight",
            only_with=router,
        ),
        _import_rule(_L + "mlp.router.weight", router),
        _import_rule(fc1 + "_w", expert_hf + names.gate + ".weight"),
        _import_rule(fc1 + "_v", expert_hf + names.up + ".weight"),
        _import_rule(fc2, expert_hf + names.down + ".weight"),
    )
    if not names.shared_expert:
        return rules
    shared, hf_shared = _L + "mlp.shared_experts.", _H + "mlp.shared_expert."
    return rules + (
        _import_rule(shared + "linear_fc1.weight_w", hf_shared + "gate_proj.weight"),
        _import_rule(shared + "linear_fc1.weight_v", hf_shared + "up_proj.weight"),
        _import_rule(shared + "linear_fc2.weight", hf_shared + "down_proj.weight"),
        _import_rule(shared + "gate_weight", _H + "mlp.shared_expert_gate.weight"),
    )


# One table per family (norm names and expert layout aside), keyed like MCORE_FAMILIES;
# an MoE family's expert rules come first (see `_import_moe`), its dense layers
# (none, for mcore: `refuse_mixed_moe_layers`) would take the common names.
MCORE_IMPORT_FAMILIES: dict[str, Callable[[str, str], tuple[ImportRule, ...]]] = {
    "qwen2": lambda norms, experts: _import_common(norms) + _IMPORT_QKV_BIAS,
    "qwen3": lambda norms, experts: _import_common(norms) + _IMPORT_QK_NORM,
    "llama": lambda norms, experts: _import_common(norms),
    "mistral": lambda norms, experts: _import_common(norms),
    "qwen3_moe": lambda norms, experts: (
        _import_moe(MOE_NAMES["qwen3_moe"], experts) + _import_common(norms) + _IMPORT_QK_NORM
    ),
    "qwen2_moe": lambda norms, experts: (
        _import_moe(MOE_NAMES["qwen2_moe"], experts) + _import_common(norms) + _IMPORT_QKV_BIAS
    ),
    "mixtral": lambda norms, experts: (
        _import_moe(MOE_NAMES["mixtral"], experts) + _import_common(norms)
    ),
}


def refuse_mixed_moe_layers(config: JsonConfig | PretrainedConfig) -> None:
    """UnsupportedModelError naming the key when a Qwen2/Qwen3-MoE config keeps some layers
    dense (mlp_only_layers, decoder_sparse_step above 1): Megatron-LM builds that with a
    moe_layer_freq pattern, whose record export-hf refuses, so an mcore import of it would
    not convert back. Mixtral's layers are all MoE."""
    if getattr(config, "model_type", None) not in ("qwen3_moe", "qwen2_moe"):
        return
    dense: Any = getattr(config, "mlp_only_layers", None) or []
    step: Any = getattr(config, "decoder_sparse_step", 1)
    if dense:
        raise UnsupportedModelError(
            f"config: mlp_only_layers={cut_to(repr(dense), 80)} keeps dense layers among the MoE"
            " ones;"
            " Megatron's record of such a model (moe_layer_freq) does not export back, so"
            " --layout mcore refuses it (--layout hf imports it)"
        )
    if step != 1:
        raise UnsupportedModelError(
            f"config: decoder_sparse_step={cut_to(repr(step), 40)} keeps dense layers among the"
            " MoE ones;"
            " Megatron's record of such a model (moe_layer_freq) does not export back, so"
            " --layout mcore refuses it (--layout hf imports it)"
        )


# transformers' names of SiLU, the activation Megatron-LM's --swiglu gates its MLPs with
SWIGLU_ACTIVATIONS = ("silu", "swish")
# config.json switches for linear biases that no mcore table here has names for (Qwen2's
# q/k/v biases are always there, and mapped); a family reads those its defaults list
_BIAS_KEYS = ("attention_bias", "mlp_bias")


def refuse_other_computation(config: JsonConfig | PretrainedConfig) -> None:
    """UnsupportedModelError naming each config.json setting under which the Megatron-core
    model an mcore import is loaded into computes something else than transformers' model
    of the same weights, with what the mcore layout supports: an MLP activation other than
    SiLU (fc1 is written as SwiGLU's gate and up, Megatron-LM's --swiglu, the one gated MLP
    export-hf converts back), linear biases a family's table has no names for (Llama's
    attention_bias and mlp_bias, Qwen3's attention_bias: named by their keys instead of as
    tensors without a mapping), and a rope scaling no Megatron-core 'rope' setting computes
    (`megatron_rope_mismatch`, export-hf's own comparison with a record). --layout hf keeps
    each of them, as the model's own config.json travels with it."""
    data = _config_data(config)
    family = str(data.get("model_type"))
    found = []
    activation = data.get("hidden_act", FAMILY_DEFAULTS.get(family, {}).get("hidden_act"))
    if activation is not None and activation not in SWIGLU_ACTIVATIONS:
        found.append(
            f"hidden_act={cut_to(repr(activation), 40)} (the mcore MLPs are Megatron-LM's"
            " --swiglu, silu)"
        )
    biases = [key for key in _BIAS_KEYS if key in FAMILY_DEFAULTS.get(family, {}) and data.get(key)]
    if biases:
        found.append(
            f"{', '.join(f'{key}={cut_to(repr(data[key]), 20)}' for key in biases)} (the {family}"
            " mcore"
            " table maps no linear biases)"
        )
    rope = megatron_rope_mismatch(data)
    if rope is not None:
        found.append(f"{rope} ({MEGATRON_ROPE})")
    if found:
        raise UnsupportedModelError(
            f"config: {'; '.join(found)}: the mcore model would not be this one, so --layout"
            " mcore refuses it (--layout hf imports it)"
        )


@dataclass(frozen=True)
class ImportItem:
    """One tensor to write: its module path in the target layout, the HF tensors it is made of."""

    target: str
    sources: tuple[str, ...]
    shape: tuple[int, ...]
    merge: Merge


def plan_import(
    hf_shapes: dict[str, tuple[int, ...]],
    layout: str,
    model_type: str,
    geometry: Geometry,
    norms: str = DEFAULT_NORMS,
    experts: str = "grouped",
) -> list[ImportItem]:
    """Which HF tensors make which target tensor, with shapes; raises before any I/O.

    `hf` keeps every name (a tied `lm_head.weight` absent from the file is written from the
    embedding, as the trainer's own state dict holds it). `mcore` applies the family's
    table: every HF tensor must be used exactly once, a rule's sources come all or none,
    and a tied model gets no output_layer (Megatron shares the embedding). An MoE model's
    experts keep their (global) ids, named as `experts` (MCORE_EXPERTS) says.
    """
    if layout == HF:
        items = [ImportItem(name, (name,), tuple(shape), KEEP) for name, shape in hf_shapes.items()]
        embedding = hf_shapes.get("model.embed_tokens.weight")
        if geometry.tie_word_embeddings and "lm_head.weight" not in hf_shapes and embedding:
            items.append(
                ImportItem("lm_head.weight", ("model.embed_tokens.weight",), tuple(embedding), KEEP)
            )
        return items
    table = MCORE_IMPORT_FAMILIES.get(model_type)
    if table is None:
        raise MappingError(
            f"model family {model_type!r} has no mcore name table"
            f" (known: {sorted(MCORE_IMPORT_FAMILIES)})"
        )
    if norms not in MCORE_NORMS:
        raise MappingError(f"norm names {norms!r}: choose {', '.join(MCORE_NORMS)}")
    if experts not in MCORE_EXPERTS:
        raise MappingError(f"expert layout {experts!r}: choose {', '.join(MCORE_EXPERTS)}")
    remaining = dict(hf_shapes)
    if geometry.tie_word_embeddings:
        remaining.pop("lm_head.weight", None)  # tied: the same values as the embedding
    layer_of = re.compile(r"model\.layers\.(\d+)\.")
    layers = sorted({int(m.group(1)) for name in hf_shapes if (m := layer_of.match(name))})
    expert_of = re.compile(r"model\.layers\.\d+\.\w+\.experts\.(\d+)\.")
    expert_ids = sorted({int(m.group(1)) for name in hf_shapes if (m := expert_of.match(name))})
    items = []
    for rule in table(norms, experts):
        for fields in _rule_fields(rule, layers, expert_ids):
            if rule.only_with is not None and rule.only_with.format(**fields) not in hf_shapes:
                continue
            sources = tuple(s.format(**fields) for s in rule.sources)
            present = [s for s in sources if s in remaining]
            if not present:
                continue
            if len(present) != len(sources):
                missing = sorted(set(sources) - set(present))
                raise MappingError(
                    f"{rule.target.format(**fields)} needs {', '.join(sources)};"
                    f" missing {first_of(missing, _SHOWN_NAMES)}"
                )
            target = rule.target.format(**fields)
            try:
                shape = rule.merge.shape([tuple(remaining[s]) for s in sources], geometry)
            except ShapeError as err:
                raise type(err)(f"[{target}]: {err}") from None
            items.append(ImportItem(target, sources, shape, rule.merge))
            for source in sources:
                del remaining[source]
    if remaining:
        raise MappingError(
            f"{len(remaining)} tensor(s) have no {model_type} mcore mapping:"
            f" {first_of(sorted(remaining), _SHOWN_NAMES)}"
        )
    return items


def _rule_fields(rule: ImportRule, layers: list[int], experts: list[int]) -> list[dict[str, int]]:
    """The {layer} / {expert} values a rule's names are formatted with: every layer (and
    expert id) the HF names hold when the rule names one, else one empty set."""
    layer_values: list[dict[str, int]] = (
        [{"layer": layer} for layer in layers] if "{layer}" in rule.target else [{}]
    )
    if "{expert}" not in rule.target:
        return layer_values
    return [{**fields, "expert": expert} for fields in layer_values for expert in experts]


@dataclass(frozen=True)
class MappedTensor:
    """One stored tensor and the HF tensors it becomes."""

    source: str  # the stored DCP key
    targets: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    transform: Transform


def _root(path: str) -> str:
    return path.split(".", 1)[0]


def model_tensors(stored_keys: Iterable[str]) -> dict[str, str]:
    """{module path: stored key} for the model weights; optimizer, RNG, args skipped.

    `state_keys.state_roots` finds the model entry: `model.module.decoder.layers.0...`
    (Megatron-LM), `model0.module.decoder...` (verl's name for a model built as one
    virtual-pipeline chunk), `model.model.layers.0...` (our trainer, torch's plain
    `dcp.save({"model": ...})`), `app.model.model.layers.0...` (torch's DCP recipe) lose
    the entry and wrapper segments; a bare model state dict (`dcp.save(model.state_dict())`)
    keeps its names. Transformer Engine's `_extra_state` is no weight. Several chunks
    (`model0`, `model1`) number their layers each from 0 and are refused: their order in
    the model is not in the checkpoint. Two unrelated model entries raise
    `state_keys.AmbiguousStateError`.
    """
    keys = list(stored_keys)
    roots = state_keys.state_roots(keys)
    return weight_paths(roots, keys)


def weight_paths(roots: state_keys.StateRoots, stored_keys: Iterable[str]) -> dict[str, str]:
    """{module path: stored key} for the model weights among `stored_keys` under `roots`:
    `model_tensors`'s reading, for export and validate's check against a config alike.
    Several model entries are refused first: virtual-pipeline chunks each number their
    layers from 0, so their keys collide, and "two stored keys name one weight" would call
    an intact save damaged."""
    if len(roots.models) > 1:
        raise UnsupportedModelError(
            f"model entries {', '.join(roots.models)}: a model saved in virtual-pipeline"
            " chunks numbers each chunk's layers from 0, and their order is not in the"
            " checkpoint; export supports one model entry (save without"
            " --virtual-pipeline-model-parallel-size)"
        )
    return unique_paths((roots.module_path(k), k) for k in roots.weight_keys(stored_keys))


def unique_paths(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{module path: stored key}; MappingError when two stored keys lose their wrapper
    segments to the same path (`model.x` and `model._orig_mod.x`): which one is the
    model's weight cannot be known, and picking one would export the other silently. The
    one reading of the pairs for export and validate's check against a config, so validate
    refuses what export refuses."""
    found: dict[str, str] = {}
    for path, key in pairs:
        if path in found:
            raise MappingError(
                f"{found[path]} and {key} both name the weight {path}; refusing to pick one"
            )
        found[path] = key
    return found


def detect_layout(module_paths: Iterable[str]) -> str:
    """`hf` or `mcore`, by which layout's roots the names use; MappingError naming the
    first tensors that fit neither (or when the two are mixed)."""
    paths = list(module_paths)
    if not paths:
        raise MappingError("the checkpoint holds no model weights")
    hf = [p for p in paths if _root(p) in _HF_ROOTS]
    mcore = [p for p in paths if _root(p) in _MCORE_ROOTS]
    chosen, other = (HF, mcore) if len(hf) >= len(mcore) else (MCORE, hf)
    unknown = sorted(set(paths) - set(hf) - set(mcore)) + sorted(other)
    if unknown or not (hf or mcore):
        raise MappingError(
            f"{len(unknown)} tensor(s) fit neither the hf nor the mcore layout"
            f" (most names are {chosen}): {first_of(unknown, _SHOWN_NAMES)}"
        )
    return chosen


# Parts of a Megatron-core GPT model that no family table converts, by the path that marks
# them: what they are and what to say about them. A mixture-of-experts layer holds a router,
# experts (SequentialMLP `local_experts.E.`, grouped `linear_fc1.weight<E>`) and optional
# shared experts under a layer's `mlp.`. (Multi-token prediction layers, `mtp.`, are taken
# out before names are mapped: `mtp`.)
_MOE_PATH_RE = re.compile(r"\.mlp\.(router|experts|shared_experts)\.")
# MoE parts no MoE family table converts either, each with the setting that makes them
_UNSUPPORTED_MOE_PARTS = (
    (
        re.compile(r"\.mlp\.router\.expert_bias$"),
        "a router expert bias (moe_router_enable_expert_bias) steers top-k selection, and"
        " Qwen3-MoE, Qwen2-MoE and Mixtral route without one",
    ),
    (
        re.compile(r"\.mlp\.router\.bias$"),
        "a router bias (add_bias_linear), which Qwen3-MoE, Qwen2-MoE and Mixtral have none of",
    ),
    (
        re.compile(r"\.mlp\.shared_experts\."),
        "shared experts (moe_shared_expert_intermediate_size), which {family} has none of"
        " (Qwen2-MoE has one)",
    ),
    (
        re.compile(r"\.mlp\.experts\.weight[12]$"),
        "the legacy GroupedMLP expert layout (moe_use_legacy_grouped_gemm), all experts in one"
        " tensor, is not converted here; Megatron-LM converts it: run its training script with"
        " the run's flags and --ckpt-convert-format torch_dist --ckpt-convert-save SAVE"
        " (GroupedMLP.sharded_state_dict saves SequentialMLP's experts, stacked per layer),"
        " then tools/checkpoint/checkpoint_inspector.py convert-torch-dist-to-fsdp-dtensor"
        " SAVE/torch_dist/iter_N OUT --swiglu (its common.pt written first for a"
        " megatron-core 0.19 save, as validate of that dir says), whose output export-hf"
        " reads",
    ),
    (
        re.compile(r"\.mlp\.experts\."),
        "experts in a layout not converted here (e.g. moe_single_grouped_weight);"
        " TEGroupedMLP `linear_fc1.weight<E>`, SequentialMLP `local_experts.<E>.` and"
        " torch_dist's per-layer stack `experts.experts.` (from Megatron-LM's converter) are",
    ),
)


def _refuse_unsupported_parts(
    module_paths: Iterable[str], stored_keys: dict[str, str], rules: tuple[Rule, ...], family: str
) -> None:
    """Weights with no HF counterpart in the family's table: say which part they belong to
    and the setting that made them, naming the first one, rather than listing them as
    unmapped names. MoE weights of a dense family's config are refused as a whole."""
    paths = list(module_paths)
    moe = sorted(p for p in paths if _MOE_PATH_RE.search(p))
    if moe and family not in MOE_FAMILIES:
        raise UnsupportedModelError(
            f"[{stored_keys[moe[0]]}]: mixture-of-experts (MoE) layers are not supported by a"
            f" {family} config ({len(moe)} MoE tensor(s)); MoE models export as"
            f" {', '.join(MOE_FAMILIES)}"
        )
    unmapped = [
        p
        for p in moe
        if not any(r._pattern.fullmatch(p) for r in rules) and not STACKED_EXPERTS_RE.fullmatch(p)
    ]
    for pattern, what in _UNSUPPORTED_MOE_PARTS:
        found = [p for p in unmapped if pattern.search(p)]
        if found:
            raise UnsupportedModelError(
                f"[{stored_keys[found[0]]}]: {what.format(family=family)}"
                f" ({len(found)} tensor(s)); not exported"
            )


def mcore_rules(model_type: str) -> tuple[Rule, ...]:
    """The mcore name table of `model_type`; MappingError naming the families that have
    one. Asked of config.json's model_type alone, so an export can refuse a family before
    it builds the config (`export_source.refuse_family_without_table`)."""
    rules = MCORE_FAMILIES.get(model_type)
    if rules is None:
        raise MappingError(
            f"model family {model_type!r} has no mcore name table (known: {sorted(MCORE_FAMILIES)})"
        )
    return rules


def map_names(
    module_paths: dict[str, tuple[int, ...]],
    stored_keys: dict[str, str],
    layout: str,
    model_type: str,
    geometry: Geometry,
) -> list[MappedTensor]:
    """Plan the conversion: which stored tensor becomes which HF tensors, with shapes.

    `module_paths` maps unwrapped names to stored shapes. Raises MappingError naming the
    first tensors no rule explains, and for shapes the config contradicts. A tied
    output layer is dropped (transformers' save_pretrained omits `lm_head.weight` too;
    the export compares it with the embedding first).
    """
    planned: list[MappedTensor] = []
    if layout == HF:
        from mfsdp_ckpt.convert.fused_experts import fused_expert_targets

        for path, shape in module_paths.items():
            fused = fused_expert_targets(path, shape, model_type)
            if fused is None:
                planned.append(MappedTensor(stored_keys[path], (path,), (shape,), COPY))
                continue
            targets, transform = fused
            shapes = tuple(transform.shapes(shape, geometry))
            planned.append(MappedTensor(stored_keys[path], targets, shapes, transform))
    else:
        rules = mcore_rules(model_type)
        from mfsdp_ckpt.convert.fused_experts import stacked_expert_targets

        _refuse_unsupported_parts(module_paths, stored_keys, rules, model_type)
        unmapped = []
        for path, shape in module_paths.items():
            found = next(((r, m) for r in rules if (m := r._pattern.fullmatch(path))), None)
            stacked = stacked_expert_targets(path, shape, model_type, stored_keys[path])
            if stacked is not None:
                targets, transform = stacked
            elif found is None:
                unmapped.append(path)
                continue
            else:
                rule, match = found
                targets = tuple(t.format(**match.groupdict()) for t in rule.targets)
                transform = rule.transform
            try:
                shapes = tuple(transform.shapes(shape, geometry))
            except ShapeError as err:
                raise type(err)(f"[{stored_keys[path]}]: {err}") from None
            planned.append(MappedTensor(stored_keys[path], targets, shapes, transform))
        if unmapped:
            raise MappingError(
                f"{len(unmapped)} tensor(s) have no {model_type} mcore mapping: "
                f"{first_of(sorted(unmapped), _SHOWN_NAMES)}"
            )
    if geometry.tie_word_embeddings:  # a stored head is the embedding's copy: the export
        # compares the two first (`export_plan._refuse_untied_head`); Megatron-core keeps
        # such a copy as the last pipeline stage's output_layer
        planned = [p for p in planned if p.targets != ("lm_head.weight",)]
    seen: dict[str, str] = {}
    for item in planned:
        for target in item.targets:
            if target in seen:
                raise MappingError(f"{target} comes from both {seen[target]} and {item.source}")
            seen[target] = item.source
    return planned
