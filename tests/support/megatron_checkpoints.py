"""Megatron-LM and Megatron-Bridge checkpoints of a tiny transformers model, built on CPU
with torch DCP: Megatron-LM's fsdp_dtensor save records its model only in `args` (a pickled
argparse.Namespace holding dtypes, enums and partials beside plain values), Megatron-Bridge's
in `run_config.yaml` with its tokenizer and train state in the iteration dir, verl's (with
Megatron-Bridge building the model) in `transformer_config.json` beside the actor's DCP.
The weights are written under Megatron-core names by tests/support/hf_to_mcore.py's
converter, so an export can be compared with the source model's logits.
"""

from __future__ import annotations

import argparse
import enum
import functools
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
import yaml

from tests.support.export import fixed_inputs
from tests.support.hf_to_mcore import to_mcore

STEP = 100  # the one iteration megatron_run saves


class AttnBackend(enum.Enum):
    """Stands in for megatron.core's enum of the same name, which args holds."""

    flash = 1
    auto = 5


def megatron_args(model, **changes) -> argparse.Namespace:
    """The architecture part of Megatron-LM's Namespace for `model`, with the kinds of
    objects a real one holds beside plain values: a torch.dtype, an enum member, a partial."""
    config = model.config
    family = config.model_type
    settings = dict(
        ckpt_format="fsdp_dtensor",
        use_megatron_fsdp=True,
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        ffn_hidden_size=config.intermediate_size,
        num_attention_heads=config.num_attention_heads,
        group_query_attention=True,
        num_query_groups=config.num_key_value_heads,
        kv_channels=getattr(config, "head_dim", None)
        or config.hidden_size // config.num_attention_heads,
        max_position_embeddings=config.max_position_embeddings,
        seq_length=64,
        rotary_base=config.rope_parameters["rope_theta"]
        if getattr(config, "rope_parameters", None)
        else config.rope_theta,
        norm_epsilon=config.rms_norm_eps,
        normalization="RMSNorm",
        swiglu=True,
        position_embedding_type="rope",
        rotary_percent=1.0,
        # Megatron-LM records its rope scaling switches at their defaults when not given
        use_rope_scaling=False,
        rope_scaling_factor=8.0,
        rotary_seq_len_interpolation_factor=None,
        untie_embeddings_and_output_weights=not config.tie_word_embeddings,
        add_qkv_bias=family in ("qwen2", "qwen2_moe"),
        qk_layernorm=family in ("qwen3", "qwen3_moe"),
        add_bias_linear=False,
        **(moe_settings(config) or {"num_experts": None}),
        padded_vocab_size=config.vocab_size,
        vocab_size=None,
        params_dtype=torch.float32,
        bf16=False,
        fp16=False,
        attention_backend=AttnBackend.auto,
        init_method=functools.partial(torch.nn.init.normal_, mean=0.0, std=0.02),
        tokenizer_type="HuggingFaceTokenizer",
        tokenizer_model="/models/never-read-tokenizer",
    )
    settings.update(changes)
    return argparse.Namespace(**settings)


def moe_settings(config) -> dict:
    """The mixture-of-experts settings Megatron-LM's args (and Bridge's provider, where
    `num_experts` is `num_moe_experts`) record for a Qwen3-MoE, Qwen2-MoE or Mixtral config;
    none for a dense one. Megatron's default softmax after top-k renormalises over the top
    k (norm_topk_prob; Mixtral always does)."""
    if not getattr(config, "num_experts", None):
        return {}
    shared = getattr(config, "shared_expert_intermediate_size", None)
    return dict(
        num_experts=config.num_experts,
        moe_router_topk=config.num_experts_per_tok,
        moe_ffn_hidden_size=getattr(config, "moe_intermediate_size", config.intermediate_size),
        moe_router_pre_softmax=not getattr(config, "norm_topk_prob", True),
        moe_shared_expert_intermediate_size=shared,
        moe_shared_expert_gate=shared is not None,
        moe_layer_freq=1,
        moe_grouped_gemm=True,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=1e-3,
        moe_router_score_function="softmax",
        moe_router_enable_expert_bias=False,
        moe_router_dtype="fp32",
        moe_token_dispatcher_type="alltoall",
        moe_router_topk_scaling_factor=None,
    )


def save_dcp(state: dict, target: Path) -> Path:
    """Save `state` as a torch DCP checkpoint at `target` from this one process."""
    with warnings.catch_warnings():  # DCP warns that it saves without a process group
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(target), no_dist=True)
    return target


def mcore_weights(
    model, rows: int | None = None, experts: str = "grouped"
) -> dict[str, torch.Tensor]:
    """`model`'s weights under Megatron-core names with the `module.` prefix Megatron-LM
    saves; `rows` pads the embedding and output layer to that many rows as Megatron does;
    `experts` (grouped|sequential) names an MoE model's experts as TEGroupedMLP or
    SequentialMLP do."""
    weights = to_mcore(model, norms="local", fc1="split", experts=experts)
    if rows is not None:  # Megatron's vocabulary padding: extra rows no token reaches
        for name in ("embedding.word_embeddings.weight", "output_layer.weight"):
            if name in weights:
                extra = torch.randn(rows - weights[name].shape[0], weights[name].shape[1])
                weights[name] = torch.cat([weights[name], extra])
    return {f"module.{k}": v for k, v in weights.items()}


def mtp_weights(model, layers: int, seed: int = 7) -> dict[str, torch.Tensor]:
    """What Megatron-LM's `--mtp-num-layers` adds to `model`'s fsdp_dtensor save, with
    random values: per MTP layer `enorm`, `hnorm`, `eh_proj` (hidden x 2 hidden), a transformer
    layer named as the decoder's under `transformer_layer.` (handle_mtp_in_state_dict's name
    on disk) and `final_layernorm`, under `module.mtp.layers.<i>.`."""
    generator = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    first = "decoder.layers.0."
    decoder_layer = {
        name.removeprefix(first): value.shape
        for name, value in to_mcore(model, norms="local", fc1="split").items()
        if name.startswith(first)
    }
    found = {}
    for layer in range(layers):
        stem = f"module.mtp.layers.{layer}."
        for norm in ("enorm", "hnorm", "final_layernorm"):
            found[f"{stem}{norm}.weight"] = torch.rand(hidden, generator=generator) + 0.5
        found[stem + "eh_proj.weight"] = torch.randn(hidden, 2 * hidden, generator=generator)
        for name, shape in decoder_layer.items():
            found[f"{stem}transformer_layer.{name}"] = torch.randn(shape, generator=generator)
    return found


# The names Megatron-LM's save gives the states but not their param_to_group_meta records
# (fsdp_dtensor_checkpoint.py): a SwiGLU fc1's `_w` / `_v` halves (handle_swiglu_in_state_dict,
# dense `weight`, TEGroupedMLP's `weight<E>`) and an MTP layer's `transformer_layer`
# (handle_mtp_in_state_dict, for the optimizer's `mtp_model_layer`).
_RECORDED_FC1 = re.compile(r"(\.linear_fc1\.(?:weight|bias)\d*)_[wv]$")
_RECORDED_MTP = re.compile(r"(\.mtp\.layers\.\d+\.)transformer_layer\.")


def adam_state(weights: dict[str, torch.Tensor]) -> dict:
    """Megatron-LM's distributed-optimizer state for `weights` (`module.`-prefixed model
    keys) as fsdp_dtensor saves it: `state.module.module.<param>.{exp_avg, exp_avg_sq,
    step}` per parameter, split like the model's SwiGLU fc1 and with an MTP layer's inner
    layer as `transformer_layer`, and its group settings, `param_to_group_meta.<param>`
    under the names the optimizer gives the parameters, which those renames leave alone
    (fc1 unsplit, `mtp_model_layer`): one record for both fc1 halves."""
    state, meta = {}, {}
    for key, value in weights.items():
        param = f"module.module.{key}"
        state[param] = {
            "exp_avg": torch.full_like(value, 1e-3),
            "exp_avg_sq": torch.full_like(value, 1e-6),
            "step": torch.tensor(float(STEP)),
        }
        recorded = _RECORDED_FC1.sub(r"\1", _RECORDED_MTP.sub(r"\1mtp_model_layer.", param))
        meta[recorded] = {"lr": 1e-5, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    return {"state": state, "param_to_group_meta": meta}


def megatron_run(
    root: Path,
    model,
    args,
    rows: int | None = None,
    experts: str = "grouped",
    optimizer: bool | Callable[[dict], dict] = False,
    mtp_layers: int = 0,
    extra: dict[str, torch.Tensor] | None = None,
) -> Path:
    """RUN/{latest_checkpointed_iteration.txt, iter_0000100/} as Megatron-LM saves an
    fsdp_dtensor checkpoint: `args` beside the Megatron-core weights of `model` (and
    `mtp_layers` multi-token prediction layers, and the weights `extra` names by their
    saved key), and with `optimizer` its Adam state (or, a function, what it makes of
    that state: another optimizer's, or none lost)."""
    run = root / "megatron"
    weights = {**mcore_weights(model, rows, experts), **mtp_weights(model, mtp_layers)}
    weights.update(extra or {})
    state = {
        "args": args,
        "checkpoint_version": 3.0,
        "iteration": STEP,
        "model": weights,
    }
    if optimizer:
        adam = adam_state(weights)
        state["optimizer"] = optimizer(adam) if callable(optimizer) else adam
    save_dcp(state, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run


def source_logits(model) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed inputs for `model`'s vocabulary and the logits `model` gives them: what an
    export of its checkpoint must reproduce."""
    ids = fixed_inputs(model.config.vocab_size)
    with torch.no_grad():
        return ids, model(input_ids=ids).logits


def word_level_tokenizer(target: Path, vocab: int) -> None:
    """A word-level tokenizer of `vocab` tokens saved at `target`, as Bridge keeps one in
    each iteration dir."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab - 1)} | {"<unk>": vocab - 1}
    backend = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>").save_pretrained(target)


def bridge_model_section(model) -> dict:
    """What Megatron-Bridge's GPTModelProvider writes under `model:` in run_config.yaml."""
    config = model.config
    family = config.model_type
    return {
        "_target_": f"megatron.bridge.models.{family}.{family.capitalize()}ModelProvider",
        "num_layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "ffn_hidden_size": config.intermediate_size,
        "num_attention_heads": config.num_attention_heads,
        "num_query_groups": config.num_key_value_heads,
        "kv_channels": getattr(config, "head_dim", None)
        or config.hidden_size // config.num_attention_heads,
        "seq_length": config.max_position_embeddings,
        "rotary_base": config.rope_parameters["rope_theta"],
        "layernorm_epsilon": config.rms_norm_eps,
        "normalization": "RMSNorm",
        "gated_linear_unit": True,
        "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False},
        "position_embedding_type": "rope",
        "rotary_percent": 1.0,
        "share_embeddings_and_output_weights": config.tie_word_embeddings,
        "add_qkv_bias": family in ("qwen2", "qwen2_moe"),
        "add_bias_linear": False,
        "qk_layernorm": family in ("qwen3", "qwen3_moe"),
        **{
            "num_moe_experts" if k == "num_experts" else k: v
            for k, v in (moe_settings(config) or {"num_experts": None}).items()
        },
        "vocab_size": config.vocab_size,
        "should_pad_vocab": True,
        "make_vocab_size_divisible_by": 128,
        "params_dtype": {"_target_": "torch.float32", "_call_": False},
        "bf16": False,
    }


# The fields Megatron-LM's GPTModelConfig (megatron/training/models/gpt.py) holds itself; a
# provider's others are its TransformerConfig's.
GPT_BUILD_FIELDS = (
    "vocab_size",
    "make_vocab_size_divisible_by",
    "should_pad_vocab",
    "seq_length",
    "share_embeddings_and_output_weights",
    "position_embedding_type",
    "rotary_percent",
    "rotary_base",
    "rope_scaling",
    "rope_scaling_factor",
    "seq_len_interpolation_factor",
)


def bridge_builder_model_section(model) -> dict:
    """What Megatron-Bridge's builder-backed BridgeGPTModelConfig (AutoBridge's
    `get_model_config()`, the recipes built on it) writes under `model:`:
    `ModelConfig.as_dict`'s GPT build fields flat, the TransformerConfig's under
    `transformer:`, the activation by its short name (`utils/activation_map.py`)."""
    flat = bridge_model_section(model)
    inner = {k: v for k, v in flat.items() if k not in GPT_BUILD_FIELDS and k != "_target_"}
    inner.update(
        _target_="megatron.bridge.models.transformer_config.TransformerConfig",
        activation_func="silu",
    )
    return {
        "_target_": "megatron.bridge.models.gpt.model_config.BridgeGPTModelConfig",
        "_builder_": "megatron.bridge.models.gpt.gpt_builder.GPTModelBuilder",
        **{k: v for k, v in flat.items() if k in GPT_BUILD_FIELDS},
        "transformer": inner,
    }


def train_state(step: int) -> dict:
    """Megatron-Bridge's train_state.pt contents after `step` steps."""
    return {
        "step": torch.tensor(step, dtype=torch.int64),
        "consumed_train_samples": torch.tensor(step * 8, dtype=torch.int64),
        "skipped_train_samples": torch.tensor(0, dtype=torch.int64),
        "consumed_valid_samples": torch.tensor(0, dtype=torch.int64),
        "floating_point_operations_so_far": torch.tensor(1e12, dtype=torch.float64),
        "do_train": torch.tensor(True),
        "do_valid": torch.tensor(False),
        "do_test": torch.tensor(False),
    }


def bridge_run(
    root: Path,
    model,
    steps=(10, 20),
    rows: int | None = None,
    experts: str = "grouped",
    model_section=bridge_model_section,
) -> Path:
    """RUN/{latest_train_state.pt, latest_checkpointed_iteration.txt, iter_N/{DCP,
    train_state.pt, run_config.yaml, tokenizer/}} as Megatron-Bridge's save_checkpoint
    writes them with ckpt_format fsdp_dtensor (its tracker names the last step);
    `model_section` writes run_config.yaml's `model:` (a provider's flat fields, or
    `bridge_builder_model_section`)."""
    run = root / "bridge"
    for step in steps:
        it = save_dcp({"model": mcore_weights(model, rows, experts)}, run / f"iter_{step:07d}")
        torch.save(train_state(step), it / "train_state.pt")
        section = {
            "model": model_section(model),
            "tokenizer": {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "/m/q"},
            "checkpoint": {"ckpt_format": "fsdp_dtensor", "save": str(run)},
        }
        (it / "run_config.yaml").write_text(yaml.safe_dump(section))
        word_level_tokenizer(it / "tokenizer", model.config.vocab_size)
    torch.save(train_state(steps[-1]), run / "latest_train_state.pt")
    (run / "latest_checkpointed_iteration.txt").write_text(str(steps[-1]))
    return run


def verl_bridge_run(root: Path, model, rows: int | None = None, **fields) -> Path:
    """RUN/global_step_N/actor/{dist_ckpt/, huggingface/, transformer_config.json} as verl's
    Megatron checkpoint manager writes them with use_mbridge: transformer_config.json is
    asdict() of Megatron-Bridge's provider as JSON, objects as their str(), should_pad_vocab
    false as verl builds it (`fields` change or, as None, remove entries); `rows` as
    `mcore_weights`."""
    run = root / "verl"
    actor = run / f"global_step_{STEP}" / "actor"
    save_dcp({"model": mcore_weights(model, rows)}, actor / "dist_ckpt")
    model.config.save_pretrained(actor / "huggingface")
    provider = {k: v for k, v in bridge_model_section(model).items() if k != "_target_"}
    provider |= {
        "activation_func": "<function silu>",
        "params_dtype": "torch.float32",
        "should_pad_vocab": False,
        "tensor_model_parallel_size": 1,
        **fields,
    }
    config = {k: v for k, v in provider.items() if not (k in fields and v is None)}
    (actor / "transformer_config.json").write_text(json.dumps(config))
    (actor.parent / "data.pt").write_bytes(b"dataloader state")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run
