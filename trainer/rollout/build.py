"""Pick and start the rollout engine a run asked for (`rollout.name`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.convert.export_source import MAX_JSON_ASSET_CONTAINERS
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.generation_config import generation_config
from mfsdp_ckpt.storage.unique_json import parse_json
from trainer.config import ConfigError
from trainer.model import padding_id
from trainer.model_assets import GENERATION_CONFIG_FILE, copied_generation_config
from trainer.prerequisites import VLLM_BROKEN, VLLM_MISSING, installed
from trainer.rollout.base import RolloutEngine
from trainer.rollout.token_ids import checked_token_id
from trainer.rollout.vllm_engine import (
    VLLMRolloutError,
    kv_cache_knob,
    vllm_available,
    vllm_failures,
    vllm_reason,
)
from trainer.rollout.vllm_limits import vllm_version_refusal


def engine_name(requested: str) -> str:
    """`auto`: vllm when it imports, else hf."""
    if requested == "auto":
        return "vllm" if vllm_available() else "hf"
    if requested == "vllm" and not vllm_available():
        raise ConfigError(VLLM_MISSING if not installed("vllm") else VLLM_BROKEN)
    return requested


def eos_token_ids(tokenizer: Any, model_path: str | None, vocab_size: int) -> list[int]:
    """The tokenizer's EOS plus any the model's generation_config.json lists (Qwen lists two).
    That file is the one each checkpoint of the run ships (`copied_generation_config`: the
    model dir's, or a checkpoint's huggingface/), read as a checked asset: a regular file
    inside the dir, bounded, each key once; the GenerationConfig is built from its data,
    never from the path (transformers would follow a link out of the dir and read a file
    of any size). A value no config holds, or an id that is no row of the model's
    embedding (`vocab_size`), is a ConfigError naming the file and key: an id past int64
    was an 82-line traceback at the first rollout, one past the vocab a stop token the
    engine can never sample (transformers' GenerationConfig takes either)."""
    ids = []
    if tokenizer.eos_token_id is not None:
        key = _tokenizer_key(tokenizer, "eos_token_id")
        ids.append(checked_token_id(tokenizer.eos_token_id, key, vocab_size))
    data = copied_generation_config(model_path)
    if data is not None:
        where = f"model.path {model_path}: {GENERATION_CONFIG_FILE}"
        extra = _generation_config(data, where).eos_token_id
        extra = [] if extra is None else [extra] if isinstance(extra, int) else extra
        if not isinstance(extra, list):
            raise ConfigError(
                f"{where}: eos_token_id {cut_to(repr(extra), 80)} is not a token id or a list of"
                " them"
            )
        ids += [checked_token_id(token, f"{where}: eos_token_id", vocab_size) for token in extra]
    return sorted(set(ids))


def _tokenizer_key(tokenizer: Any, key: str) -> str:
    """Where the loaded tokenizer's `key` comes from, for a refusal."""
    return f"model: the tokenizer in {getattr(tokenizer, 'name_or_path', '?')}: {key}"


def _generation_config(data: bytes, where: str) -> Any:
    """transformers' GenerationConfig of generation_config.json's checked bytes, or
    ConfigError naming `where` for one it refuses (`max_new_tokens: -1`)."""
    settings = parse_json(data, where, ConfigError, MAX_JSON_ASSET_CONTAINERS)
    if not isinstance(settings, dict):
        raise ConfigError(f"{where}: holds a JSON {type(settings).__name__}, not an object")
    return generation_config(settings, where, ConfigError)


def build_rollout_engine(
    name: str,
    *,
    hf_config: Any,
    tokenizer: Any,
    model_path: str | None,
    assets_dir: Path,
    write_assets: Any,
    device: torch.device,
    dtype: torch.dtype,
    max_model_len: int,
    seed: int,
    gpu_memory_utilization: float = 0.5,
    enforce_eager: bool = False,
    cuda_graphs: bool = True,
    fused_ops: bool = True,
    max_num_seqs: int = 1024,
) -> RolloutEngine:
    """An engine with the model's architecture; its weights are whatever the trainer pushes next.

    `write_assets(dir)` writes config.json and tokenizer files: vLLM starts from a model dir
    with dummy weights rather than reading a checkpoint the trainer is about to replace.
    """
    vocab_size = hf_config.vocab_size
    eos = eos_token_ids(tokenizer, model_path, vocab_size)
    if name == "hf":
        from transformers import AutoModelForCausalLM

        from trainer.rollout.hf import HFRolloutEngine

        # a copy: `from_config` sets the config's dtype to the engine's, and the caller's is
        # the one the run saves in every step's huggingface/ (a bf16 model was saved as fp32
        # by a GRPO run whose engine runs in fp32, as on CPU)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(
                copy.deepcopy(hf_config), dtype=dtype, trust_remote_code=False
            )
        return HFRolloutEngine(
            model,
            eos,
            checked_token_id(
                padding_id(tokenizer), _tokenizer_key(tokenizer, "pad_token_id"), vocab_size
            ),
            cuda_graphs=cuda_graphs,
            fused_ops=fused_ops,
            max_num_seqs=max_num_seqs,
        )
    from trainer.rollout.vllm_engine import VLLMRolloutEngine

    _check_vllm_version()
    if device.type == "cpu":
        with vllm_failures("vLLM failed to start"):
            _check_cpu_attention(hf_config)
    assets_dir.mkdir(parents=True, exist_ok=True)
    write_assets(assets_dir)
    try:
        engine = VLLMRolloutEngine(
            str(assets_dir),
            dtype="float32" if dtype == torch.float32 else "bfloat16",
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enforce_eager=enforce_eager,
            load_format="dummy",
        )
    except torch.OutOfMemoryError:  # the run's memory advice, not another engine (as generate)
        raise
    except Exception as err:  # vLLM's own classes, its engine core failing, an API it lacks
        raise start_failure(err, max_model_len, device, gpu_memory_utilization) from None
    engine.eos_token_ids = eos
    return engine


def start_failure(
    err: Exception, max_model_len: int, device: torch.device, gpu_memory_utilization: float
) -> MfsdpError:
    """The one-line error for vLLM failing to start with `err`: ConfigError for a length
    over the model's context, else VLLMRolloutError with vLLM's reason; a KV cache refusal
    keeps its numbers and names the knob that sizes the cache on `device` (vLLM's own advice
    names `gpu_memory_utilization`, which does nothing on CPU)."""
    refusal = _context_refusal(err)
    if refusal is not None:
        return ConfigError(
            f"data.max_prompt_length + rollout.max_response_length = {max_model_len} tokens:"
            f" vLLM refuses it for this model ({refusal}); lower them"
        )
    reason = vllm_reason(err)
    if _is_memory_refusal(err):
        reason += (
            f"; raise {kv_cache_knob(device, gpu_memory_utilization)} or lower"
            f" data.max_prompt_length + rollout.max_response_length ({max_model_len})"
        )
    return VLLMRolloutError.of(f"vLLM failed to start: {reason}")


def _check_vllm_version() -> None:
    """VLLMRolloutError, one line, for a vLLM older than the engine's calls need: each call
    it lacks (an import, a keyword) was a traceback of its own, at start or at the first
    weight push."""
    import vllm

    refusal = vllm_version_refusal(str(getattr(vllm, "__version__", "")))
    if refusal is not None:
        raise VLLMRolloutError.of(refusal)


def _is_memory_refusal(err: Exception) -> bool:
    """Whether `err` is vLLM refusing to start for the memory its KV cache was given (too
    little for one request of the run's length, or none at all)."""
    text = str(err)
    return "KV cache memory" in text or "No available memory for the cache blocks" in text


def _check_cpu_attention(hf_config: Any) -> None:
    """VLLMRolloutError for a head size vLLM's CPU attention does not run, as its backend
    declares them, before the engine starts: vLLM itself only finds out at the first
    generate, after the actor and the engine are built."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    heads = getattr(hf_config, "num_attention_heads", None)
    hidden = getattr(hf_config, "hidden_size", None)
    head_dim = getattr(hf_config, "head_dim", None) or (
        hidden // heads if heads and hidden else None
    )
    if head_dim is None or CPUAttentionBackend.supports_head_size(head_dim):
        return
    sizes = ", ".join(map(str, CPUAttentionBackend.get_supported_head_sizes()))
    raise VLLMRolloutError.of(
        f"vLLM's CPU attention does not run this model's head_dim={head_dim} (it runs {sizes})"
    )


def _context_refusal(err: Exception) -> str | None:
    """vLLM's sentence refusing max_model_len (prompt + response) over the model's context,
    where the run's own check (`prerequisites.check_context_length`) could not tell from the
    config (a named shape, a rope scaling read otherwise); None for any other error."""
    for line in str(err).splitlines():
        if "max_model_len" in line and "greater than" in line:
            sentence = line.strip().removeprefix("Value error, ")
            return sentence.split(" To allow", 1)[0].rstrip(".")
    return None
