"""Build the Hugging Face causal LM and tokenizer a run trains, and what a checkpoint ships with it.

A model comes from a local model dir (weights, or only its config with `random_init`) or,
for tests and benchmarks, from a named shape (`tiny`, `qwen2-1.5b`, ...) with random
weights, so nothing is ever downloaded. The model's `forward` is replaced by one that
returns the summed token loss: the loss then runs inside the module call, where FSDP2 and
Megatron-FSDP have the LM head's weight gathered, and the state dict keeps the plain
Hugging Face parameter names (a wrapper module would prefix every name).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch

from mfsdp_ckpt.check.printable import error_line
from mfsdp_ckpt.convert.hf_config import read_config_json
from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError
from trainer.attention_names import flash_attention_refusal
from trainer.config import ConfigError, ModelConfig
from trainer.env_ints import process_rank
from trainer.finite_weights import refuse_nonfinite_weights
from trainer.hf_files import keep_tokenizer_files, save_hf_files
from trainer.kernels import apply_kernels
from trainer.local_paths import missing_path
from trainer.lora import apply_lora
from trainer.loss import linear_cross_entropy_sum
from trainer.model_assets import (
    GENERATION_CONFIG_FILE,
    check_asset_dir,
    check_chat_template_value,
    copied_generation_config,
    generation_config_bytes,
    tokenizer_files,
)
from trainer.model_code import (
    SUPPORTED_FAMILIES,
    check_model_config,
    check_tokenizer_class,
    check_tokenizer_files,
)
from trainer.model_overrides import built_over, overridden_config
from trainer.model_source import (
    ModelSource,
    check_tokenizer_present,
    load_checkpoint_weights,
    recorded_vocab_rows,
    resolve_model_source,
)
from trainer.model_weights import check_weight_files
from trainer.rope_check import refuse_invalid_rope, rope_verdicts_held
from trainer.shapes import SHAPES, shape_refusal
from trainer.tokenizer_ids import check_loaded_tokenizer

if TYPE_CHECKING:  # transformers is imported where it is used: loading it takes seconds
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger("mfsdp.model")

# Any tokenizer a model ships encodes this to tokens; one missing its vocabulary (a model
# dir without tokenizer.json) encodes it, and every data row, to nothing: loss 0 each step.
TOKENIZER_PROBE = "Question: what is 3 + 4? Answer: 7"


class ModelFilesError(MfsdpFailedError, ValueError):
    """The model dir's config.json or tokenizer is damaged (a cut-short download, a wrong
    type); names the dir and what transformers said, in one line. Every rank reads the same
    files and meets it alike: rank 0 says it, once (it was one line per rank)."""

    every_rank = True


T = TypeVar("T")


def _read_by_transformers(where: Path, what: str, load: Callable[[], T]) -> T:
    """`load()`, with whatever transformers raises for a damaged file (KeyError,
    JSONDecodeError, its own validation errors, each with a traceback in every rank) made
    one line naming the dir."""
    try:
        return load()
    except Exception as err:
        raise ModelFilesError(
            f"{where}: {what} that transformers cannot read ({error_line(err, joined=True)})"
        ) from None


# What a model class raises for a config value it cannot build from (an unknown hidden_act:
# KeyError; a string rope factor: TypeError; a negative size: RuntimeError from torch).
# OSError (reading weights) and MemoryError stay what they are.
_BUILD_ERRORS = (ArithmeticError, AttributeError, LookupError, TypeError, ValueError, RuntimeError)


def _built_by_transformers(
    cfg: ModelConfig, source: ModelSource | None, build: Callable[[], T]
) -> T:
    """`build()` of the model from its config. config.json (or model.overrides) can hold
    values transformers reads without complaint and fails on only while it builds the
    modules: that was a traceback of 80 lines in every rank. Now one line naming the
    file or the key (exit 1 for a model dir's file, 2 for the run's own config): the
    generation_config.json `from_pretrained` also reads when transformers failed reading
    that (it is checked before, `check_json_asset`; this names it should transformers
    refuse more than that check does), else config.json."""
    try:
        return build()
    except torch.OutOfMemoryError:
        raise
    except MfsdpError:
        raise
    except _BUILD_ERRORS as err:
        where = _file_at_fault(err, source.assets) if source is not None and source.assets else None
        said = error_line(err, joined=True)
        if where is not None:
            also = " with model.overrides" if cfg.overrides else ""
            raise ModelFilesError(
                f"{where}{also}: transformers cannot build the model from it ({said})"
            ) from None
        key = "model.overrides" if cfg.overrides else "model"
        raise ConfigError(f"{key}: transformers cannot build the model ({said})") from None


_GENERATION_CONFIG_CODE = ("transformers", "generation", "configuration_utils.py")


def _file_at_fault(err: BaseException, assets: Path) -> Path:
    """The model dir's file whose reading raised `err`: generation_config.json when it was
    raised in transformers' generation config code, else config.json."""
    generation = any(
        Path(frame.f_code.co_filename).parts[-3:] == _GENERATION_CONFIG_CODE
        for frame, _line in traceback.walk_tb(err.__traceback__)
    )
    return assets / (GENERATION_CONFIG_FILE if generation else "config.json")


def _model_dir_config(assets: Path) -> Any:
    """The transformers config of a model dir, its config.json checked first as the
    launcher checks it (`check_model_config`: shipped code, NaN, impossible sizes, a dtype
    torch lacks, each one line naming the key, exit 2)."""
    check_model_config(assets)
    return _read_by_transformers(assets, "config.json", lambda: _from_model_dir(assets, {}))


def _from_model_dir(assets: Path, overrides: dict[str, Any]) -> Any:
    """`AutoConfig.from_pretrained` of a model dir (local files only, no shipped code), built
    again from its config.json's fields with `overrides` written into them (`built_over`:
    given to from_pretrained, they were set after the config derived its other fields)."""
    from transformers import AutoConfig, PreTrainedConfig

    with rope_verdicts_held():  # refused once, from the final config (build_hf_config)
        config = AutoConfig.from_pretrained(
            str(assets), local_files_only=True, trust_remote_code=False
        )
        if not overrides:
            return config
        fields, _ = PreTrainedConfig.get_config_dict(str(assets), local_files_only=True)
        build = functools.partial(type(config).from_dict, name_or_path=str(assets))
        return built_over(build, fields, overrides)


def load_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """The tokenizer named by `tokenizer`, else the model dir's (a checkpoint's huggingface/ or
    `hf_config` dir), else the embedded tiny one. Local files only: nothing is downloaded."""
    model_source = None
    source: Path | None
    if cfg.tokenizer is not None:
        if not Path(cfg.tokenizer).exists():
            raise missing_path("model.tokenizer", cfg.tokenizer, "a local tokenizer dir")
        source = Path(cfg.tokenizer)
    else:
        model_source = resolve_model_source(cfg)
        check_tokenizer_present(cfg, model_source)
        source = model_source.tokenizer if model_source is not None else None
        if model_source is not None and model_source.assets is not None:
            # AutoTokenizer reads config.json too: name a damaged one as such
            _model_dir_config(model_source.assets)
    if source is None:
        from trainer.tiny import build_tokenizer

        return build_tokenizer()
    if source.is_dir():  # else transformers names what is wrong with the path
        if model_source is None or source != model_source.tokenizer_dir:  # Bridge's: checked
            check_asset_dir(source, model_source)
        check_tokenizer_files(source)
        check_tokenizer_class(source)
        check_chat_template_value(source)
    from transformers import AutoTokenizer

    # a wrong type in tokenizer_config.json fails only when encoding
    def load_and_encode() -> tuple[PreTrainedTokenizerBase, list[int]]:
        with rope_verdicts_held():  # it builds the config too; build_hf_config refuses them
            tokenizer = AutoTokenizer.from_pretrained(
                str(source), local_files_only=True, trust_remote_code=False
            )
        return tokenizer, tokenizer(TOKENIZER_PROBE)["input_ids"]

    tokenizer, probe_ids = _read_by_transformers(source, "tokenizer", load_and_encode)
    if not probe_ids:
        raise ModelFilesError(
            f"{source}: its tokenizer turns text into no tokens ({len(tokenizer)} in its"
            " vocabulary; is tokenizer.json missing?), so every row would train on nothing;"
            " set model.tokenizer=DIR, a local dir with the model's tokenizer files"
        )
    if not tokenizer.chat_template:  # a base model's tokenizer often has none
        key = "model.tokenizer" if model_source is None else model_source.tokenizer_key
        raise ConfigError(
            f"{key}: the tokenizer in {source} has no chat template, and every SFT and RL row"
            " is a chat (messages, or a prompt of them); set model.tokenizer=DIR to one"
            " that has a template (its tokenizer_config.json or chat_template.jinja)"
        )
    # each checkpoint ships these files as they are, not transformers' re-save of them
    keep_tokenizer_files(tokenizer, tokenizer_files(source, model_source))
    return tokenizer


def padding_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token id SFT and GRPO batches are padded with: the tokenizer's pad token, else
    its end-of-text token (a base model's tokenizer often has no pad token)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def build_hf_config(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> Any:
    """The transformers config the run trains: its model source's, with `model.overrides`
    (each key checked against that config first: `trainer.model_overrides`), and its RoPE
    parameters as transformers validates them (`trainer.rope_check`: what it only warns
    about is refused, naming the field in config.json or model.overrides)."""
    base, make = _config_source(cfg, tokenizer)
    if base.model_type not in SUPPORTED_FAMILIES:
        raise ConfigError(
            f"model: family {base.model_type!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_FAMILIES)}"
        )
    config = overridden_config(base, make, cfg.overrides)
    fit = recorded_vocab_rows(cfg, resolve_model_source(cfg), config.vocab_size)
    if fit is not None:
        if process_rank() == 0:  # one line, not one per rank
            log.warning("note: model.hf_config's %s", fit.note().removeprefix("config.json "))
        config = overridden_config(base, make, {**cfg.overrides, "vocab_size": fit.rows})
    check_loaded_tokenizer(tokenizer, config.vocab_size)  # the files' ids: the launcher's check
    refuse_invalid_rope(config, cfg.overrides, *_written_fields(cfg))
    config._attn_implementation = cfg.attn_implementation
    return config


def _written_fields(cfg: ModelConfig) -> tuple[str, dict[str, Any]]:
    """Where the run's config (all but model.overrides) is written, and its fields there: a
    model dir's config.json, a checkpoint's record, or a named shape."""
    source = resolve_model_source(cfg)
    if source is not None and source.derived is not None:
        return "model.path", source.derived
    if source is not None and source.assets is not None:
        config_file, fields = read_config_json(source.assets)
        return str(config_file), fields
    return "model.shape", SHAPES.get(cfg.shape, {})


def _config_source(
    cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase
) -> tuple[Any, Callable[[dict[str, Any]], Any]]:
    """The config of the run's model source (a checkpoint's derived fields, a model dir, a
    named shape) without `model.overrides`, and how to build it again with them."""
    source = resolve_model_source(cfg)
    if source is not None and source.derived is not None:
        fields = dict(source.derived)
    elif source is not None and source.assets is not None:
        return _model_dir_config(source.assets), functools.partial(_from_model_dir, source.assets)
    elif cfg.shape == "tiny":
        from trainer.tiny import tiny_config_fields

        fields = {"model_type": "qwen2", **tiny_config_fields(tokenizer)}
    elif cfg.shape in SHAPES:
        fields = dict(SHAPES[cfg.shape])
    else:
        raise ConfigError(shape_refusal(cfg.shape))
    make = functools.partial(_for_model, fields.pop("model_type"), fields)
    return make({}), make


def _for_model(model_type: str, fields: dict[str, Any], overrides: dict[str, Any]) -> Any:
    """`AutoConfig.for_model` of `fields` (a named shape's, a checkpoint's) with `overrides`
    written into them (`built_over`)."""
    from transformers import AutoConfig

    def build(given: dict[str, Any]) -> Any:
        return AutoConfig.for_model(model_type, **given)

    with rope_verdicts_held():  # refused once, from the final config (build_hf_config)
        return built_over(build, fields, overrides)


def check_attention_backend(cfg: ModelConfig, device: torch.device) -> None:
    """ConfigError for an attention that cannot train on `device`, before anything is built:
    FlexAttention has no backward pass on CPU, and a run reached it at its first step as a
    traceback of 129 lines in every rank; FlashAttention on CPU or without its package
    (`flash_attention_refusal`) was a Hub download, then such a traceback."""
    if cfg.attn_implementation == "flex_attention" and device.type == "cpu":
        raise ConfigError(
            "model.attn_implementation=flex_attention: FlexAttention cannot train on CPU (torch"
            " has no backward pass for it there); use sdpa, or train on CUDA"
        )
    refusal = flash_attention_refusal(cfg.attn_implementation, device.type)
    if refusal is not None:
        raise ConfigError(refusal)


def build_model(cfg: ModelConfig, config: Any, device: torch.device, seed: int) -> torch.nn.Module:
    """fp32 model on `device` (the strategy casts compute to bf16); every rank builds the same one.
    From a checkpoint, the weights stream into the model built from its config.

    The model gets its own copy of `config`: the caller's is the one the run saves in every
    step's huggingface/ (and GRPO builds its reference from it too), and `from_config` set
    its dtype to float32 there, so a run from a checkpoint of a bf16 model saved and
    exported it as fp32 where the same run from the model dir kept bf16 (`from_pretrained`
    copies the config it is given)."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(config)
    torch.manual_seed(seed)
    source = resolve_model_source(cfg) if not cfg.random_init else None
    if source is not None and source.checkpoint is None:
        assert source.assets is not None  # a source without a checkpoint is a model dir
        files = check_weight_files(source.assets, config, dict(cfg.overrides or {}))
        generation_config_bytes(source.assets, source)  # from_pretrained reads it too
        # ignore below: transformers types PreTrainedModel.to (`@wraps(Module.to)`) as
        # wanting the model as its first argument
        model = _built_by_transformers(
            cfg,
            source,
            lambda: AutoModelForCausalLM.from_pretrained(
                str(source.assets),
                config=config,
                dtype=torch.float32,
                attn_implementation=cfg.attn_implementation,
                local_files_only=True,
                trust_remote_code=False,
                use_safetensors=True,
            ),
        ).to(device)  # type: ignore[arg-type]
        refuse_nonfinite_weights(model, files)  # where the weights now are, not their files
    else:
        with torch.device(device):
            model = _built_by_transformers(
                cfg,
                source,
                lambda: AutoModelForCausalLM.from_config(
                    config,
                    dtype=torch.float32,
                    attn_implementation=cfg.attn_implementation,
                    trust_remote_code=False,
                ),
            )
        if source is not None:
            load_checkpoint_weights(model, source)
    model.train()
    apply_lora(model, cfg, seed)  # no-op unless model.lora_rank > 0 or lora_adapter_path is set
    if cfg.activation_checkpointing:
        # transformers >= 5.2x renames gradient_checkpointing_enable to
        # activation_checkpointing_enable
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    apply_kernels(model, cfg)
    if cfg.compile:
        for layer in decoder_layers(model):
            layer.compile()  # in place: parameter names stay as they are
    attach_loss_forward(model, cfg.loss, cfg.loss_chunk_tokens)
    return model


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """`model` in eval mode for a pass that scores rather than trains (SFT's validation loss,
    GRPO's old and reference log-probs, as verl's compute_log_prob), its mode restored after:
    with dropout on, the same weights gave another validation loss every step, and old
    log-probs drawn under other dropout masks than the update's made clipping and ppo_kl
    measure noise before any update."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return list(cast(Any, model.model).layers)  # torch types submodules as Tensor | Module


def decoder_layer_class(model: torch.nn.Module) -> type:
    return type(decoder_layers(model)[0])


def attach_loss_forward(model: torch.nn.Module, mode: str, chunk_tokens: int) -> None:
    """Make `model(input_ids, position_ids, targets, attention_mask=None, cu_seqlens=None)` return
    the summed loss; `cu_seqlens` (packed rows) reaches every attention call (trainer/attention)."""

    def forward(self, input_ids, position_ids, targets, attention_mask=None, cu_seqlens=None):
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        hidden = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=attention_mask,
            use_cache=False,
            **packed,
        ).last_hidden_state
        return linear_cross_entropy_sum(hidden, self.lm_head.weight, targets, mode, chunk_tokens)

    model.forward = types.MethodType(forward, model)


def write_hf_assets(
    target: Path, config: Any, tokenizer: PreTrainedTokenizerBase, model_path: str | None
) -> None:
    """config.json, tokenizer files (those the tokenizer was read from, as they are) and
    generation_config.json: what export needs besides weights (`hf_files.save_hf_files`: a
    failure names the file). The model's generation_config.json is copied only as a
    checked asset (`trainer.model_assets`): never through a link out of its dir, never
    unbounded."""
    save_hf_files(target, config, tokenizer, copied_generation_config(model_path))


def count_parameters(config: Any) -> dict[str, int]:
    """Matmul parameters (what 6*N*tokens counts: layers + LM head) and the embedding, from the
    config."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    attention = hidden * head_dim * (heads + 2 * kv_heads) + heads * head_dim * hidden
    mlp = 3 * hidden * config.intermediate_size
    per_layer = attention + mlp
    head = config.vocab_size * hidden
    return {
        "matmul": layers * per_layer + head,
        "embedding": head,
        "attention_dim": heads * head_dim,
    }
