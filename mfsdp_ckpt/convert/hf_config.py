"""What a Hugging Face config says the weights must be: names and shapes, without weights.

The model is instantiated on the `meta` device, so this costs no memory and works for any
family transformers knows (Qwen2/2.5, Qwen3, Llama 3, ...), with no per-family table to
keep in sync. `config.json` is parsed as JSON, never executed (`trust_remote_code` is off).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.asset_rewrites import code_map_words
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format.closest_path import where_relative
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory
from mfsdp_ckpt.storage.unique_json import first_nonfinite, parse_json, read_json_file

if TYPE_CHECKING:  # validate reads known families' config.json without transformers
    import torch
    from transformers import PretrainedConfig


class HFConfigError(MfsdpUsageError, ValueError):
    """config.json is missing, unreadable, or names a model transformers cannot build."""


# Told (config.json's location) as a block's first check through transformers begins:
# importing it takes seconds (8-15 on 2 cores), before which a command printed nothing.
_check_notice: ContextVar[list[Callable[[str], None]] | None] = ContextVar(
    "config_check_notice", default=None
)


@contextlib.contextmanager
def reporting_config_checks(notice: Callable[[str], None]) -> Iterator[None]:
    """Within this block, the first config.json read through transformers (`refuse_unloadable`,
    `load_hf_config`) calls `notice(where)` before transformers is imported, so whoever shows
    progress (the CLI) can say what the wait is; later ones, transformers loaded, are quick
    and say nothing. The library prints nothing itself."""
    token = _check_notice.set([notice])
    try:
        yield
    finally:
        _check_notice.reset(token)


def _checking(where: str | os.PathLike) -> None:
    """Tell `reporting_config_checks`' notice, the first time in its block, that config.json
    at `where` is about to be read through transformers."""
    pending = _check_notice.get()
    if pending:
        pending.pop()(str(where))


@dataclass(frozen=True)
class ExpectedWeights:
    model_type: str
    required: dict[str, tuple[int, ...]]  # parameters (tied ones once)
    allowed: dict[str, tuple[int, ...]]  # every key a full state dict may hold
    tie_word_embeddings: bool


MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".distcp", ".gguf")


def weights_file_problem(location: str | os.PathLike) -> str | None:
    """Why `location`, given for a config.json or its model dir, is neither: a weights file
    (tab completion's pick in a model dir), read as JSON it was "not UTF-8 text (byte
    2624)". None for anything else."""
    path = Path(location)
    if path.suffix.lower() not in WEIGHT_SUFFIXES or not path.is_file():
        return None
    return (
        f"{location}: a weights file, not a config.json (give the model dir holding it:"
        f" {path.parent})"
    )


def read_config_json(
    path: str | os.PathLike, root: str | os.PathLike | None = None
) -> tuple[Path, dict]:
    """config.json (from a directory or a file path) as plain data, with a model_type.

    Read by `read_json_file`: a regular file of at most MAX_CONFIG_BYTES and, when `root` is
    given (the checkpoint directory), one that resolves inside it; bad JSON, a 5000-digit
    number or deep nesting is one line."""
    path = Path(path)
    config_file = path / HF_CONFIG_FILE if path.is_dir() else path
    if not os.path.lexists(config_file):
        raise HFConfigError(f"{config_file}: no such file{where_relative(config_file)}")
    problem = weights_file_problem(config_file)
    if problem:
        raise HFConfigError(problem)
    data = read_json_file(config_file, MAX_CONFIG_BYTES, HFConfigError, root, finite=False)
    return config_file, _config_data(data, config_file, HFConfigError)


def parse_config_json(
    text: str | bytes, where: str | os.PathLike, error: type[Exception] = HFConfigError
) -> dict:
    """config.json's `text` (read elsewhere: an export's asset, from a URL too) checked as
    `read_config_json` checks a file: at most MAX_CONFIG_BYTES, valid JSON (`parse_json`),
    an object with a model_type, no NaN or Infinity; else `error` naming `where`."""
    if len(text) > MAX_CONFIG_BYTES:
        raise error(
            f"{where}: {len(text)} bytes, more than the {MAX_CONFIG_BYTES} this file may have"
        )
    return _config_data(parse_json(text, str(where), error), where, error)


def _config_data(data: object, where: str | os.PathLike, error: type[Exception]) -> dict:
    """Parsed config.json `data` if it is an object with a model_type and no NaN or
    Infinity, else `error` naming `where` and what was found there instead."""
    if not isinstance(data, dict):
        raise error(f"{where}: expected a JSON object, found {type(data).__name__}")
    if "model_type" not in data:
        raise error(f"{where}: no model_type")
    if not isinstance(data["model_type"], str):
        raise error(
            f"{where}: model_type must be a string, got {cut_to(repr(data['model_type']), 80)}"
        )
    found = first_nonfinite(data)
    if found is not None:
        raise error(
            f"{where}: {found[0]} is {found[1]}, not a finite number (NaN and Infinity"
            " are not JSON, and a model built from them computes NaN)"
        )
    return data


def refuse_unloadable(
    data: dict, where: str | os.PathLike, error: type[Exception] = HFConfigError
) -> None:
    """`error` naming `where` and the key when transformers refuses config.json `data`:
    its own config class (`rms_norm_eps: "1e-6"`, `hidden_act: ["silu"]`, `layer_types`
    not one per layer), or the model built from it (`rope_parameters` with `factor: "x"`,
    which the config class takes and the rotary embedding fails on): `from_pretrained`
    would refuse the model, though every number export and import read from it is right.
    Built as `AutoConfig` builds it from a model dir: the family's classes from
    transformers itself (never remote code), nothing downloaded, the model on the meta
    device (`meta_causal_lm`). It imports transformers (seconds), so export runs it for
    --verify and validate for --deep; import-hf, which writes a checkpoint from the
    config, always."""
    _checking(where)
    from transformers import AutoConfig

    with _transformers_warnings() as warned:
        try:
            config = AutoConfig.for_model(**data)
        except Exception as err:  # a strict-dataclass error, ValueError, KeyError, ...
            reraise_if_out_of_memory(err)  # the machine's limit, not config.json's fault
            reason = transformers_reason(err)
            raise error(f"{where}: transformers cannot load it ({reason})") from None
        try:
            meta_causal_lm(config)
        except Exception as err:  # a value of a type the model's code never expected, ...
            reraise_if_out_of_memory(err)
            reason = "; ".join([*warned[-1:], _model_build_reason(err)])
            raise error(f"{where}: transformers cannot load it ({reason})") from None


class _KeptWarnings(logging.Handler):
    """Collects the words of the warnings a logger passes it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(" ".join(record.getMessage().split())[:200])


@contextlib.contextmanager
def _transformers_warnings() -> Iterator[list[str]]:
    """The warnings transformers logs inside the block, newest last. Its config classes
    warn of a value they keep but cannot use (`rope_parameters`'s factor field must be a
    float or int >= 1, got x), and the model built from it then fails on it in words that
    name no key: the warning is what says which."""
    kept = _KeptWarnings()
    library = logging.getLogger("transformers")
    library.addHandler(kept)
    try:
        yield kept.said
    finally:
        library.removeHandler(kept)


def meta_causal_lm(config: PretrainedConfig) -> torch.nn.Module:
    """The causal LM transformers builds from `config`, on the meta device: no memory for
    its weights, well under a second for a 7B shape. transformers' own class for the
    model_type (remote code is never run, whatever `auto_map` config.json has), in float32
    whatever dtype config.json names: export writes its own dtype there and import reads
    the weights' own, so that key is not what a load of theirs reads. With the eager
    attention whatever config.json asks (`attn_implementation: flash_attention_2`): a
    kernel this machine lacks says nothing about the file, and the weights are the same.

    Built from a copy: `from_config` sets the config it is given to the dtype and attention
    it builds, and the caller's config is config.json as read (an export's `--dtype auto`
    reads its dtype afterwards, and found float32 over a bf16 release's config)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(
            copy.deepcopy(config),
            trust_remote_code=False,
            dtype=torch.float32,
            attn_implementation="eager",
        )


def _model_build_reason(err: BaseException) -> str:
    """transformers' complaint building a model, on one line, after the function it failed
    in: a TypeError's words (`unsupported operand type(s) for /=: 'Tensor' and 'str'`) name
    no key, and `_compute_linear_scaling_rope_parameters` says which part of config.json
    it was reading."""
    frames = traceback.extract_tb(err.__traceback__)
    function = frames[-1].name if frames else ""
    reason = transformers_reason(err)
    if not function or function.startswith("__"):  # __init__ says nothing of the key
        return reason
    return f"{function}: {reason}"


def transformers_reason(err: BaseException) -> str:
    """transformers' complaint about a config on one line. A strict-dataclass error's own
    first line says only which field or validator; its cause says what is wrong, and
    names the key (`Field 'rms_norm_eps' expected float, got str (value: '1e-6')`)."""
    from huggingface_hub.errors import StrictDataclassError

    cause = err.__cause__ if isinstance(err, StrictDataclassError) and err.__cause__ else err
    words = " ".join(str(cause).split()).split(". Errors: ")[0]  # a union's per-type tries
    return words[:400] or type(cause).__name__


# The largest released dense models have ~130 layers; a config claiming more than this is
# not a model to export but a way to make name generation run for hours.
MAX_LAYERS = 1024
# The config.json numbers a dense model's tensor names and shapes are computed from. head_dim
# may be absent (it is then hidden_size // num_attention_heads), so it stands apart.
SHAPE_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)
SIZE_KEYS = (*SHAPE_KEYS, "head_dim")
# Released MoE models have at most a few hundred experts a layer; the names of each are
# generated (three tensors an expert, every layer), so a claim of more is refused first.
MAX_EXPERTS = 1 << 14
EXPERT_KEYS = ("num_experts", "num_local_experts")
# Each bound alone still let 1024 layers of 16384 experts through: some 50 million generated
# names, gigabytes before any weight was compared. Released MoE models stay tens of thousands
# of experts in all layers together, far under this.
MAX_EXPERTS_IN_ALL_LAYERS = 1 << 17


def refuse_quantized(
    data: dict, where: str | os.PathLike, error: type[Exception] = HFConfigError
) -> None:
    """`error` naming `where` and its quant_method when config.json `data` is a quantized
    model's (`quantization_config`: fp8 with `weight_scale_inv` tensors, GPTQ, AWQ, ...):
    its weights are not the floating-point tensors its sizes give, and its scales were
    called "tensors unknown to" the family, which did not say what to do."""
    quantized = data.get("quantization_config")
    if quantized is None:
        return
    method = quantized.get("quant_method") if isinstance(quantized, dict) else None
    named = "no quant_method" if method is None else f"quant_method {cut_to(repr(method), 40)}"
    raise error(
        f"{where}: a quantized model (quantization_config, {named}); mfsdp reads and writes"
        " unquantized weights only: dequantize it first (a bfloat16, float16 or float32 save"
        " of the model, with its config.json)"
    )


def check_geometry(data: dict, where: str | os.PathLike) -> None:
    """HFConfigError (one line naming the key) unless the sizes config.json gives are
    positive integers that divide as attention needs, with at most MAX_LAYERS layers and
    MAX_EXPERTS_IN_ALL_LAYERS experts over all layers. Checked before any name or shape is
    generated from them, and so is that the config is no quantized model's
    (`refuse_quantized`), whose weights those sizes do not describe."""
    refuse_quantized(data, where)
    for key in SIZE_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
            raise HFConfigError(
                f"{where}: {key} must be a positive integer below 2**63 (int64), got"
                f" {cut_to(repr(value), 80)}"
            )
    layers = data.get("num_hidden_layers")
    if layers is not None and layers > MAX_LAYERS:
        raise HFConfigError(f"{where}: num_hidden_layers={layers} is over the {MAX_LAYERS} allowed")
    for key in EXPERT_KEYS:
        experts = data.get(key)
        if experts is None:
            continue
        if isinstance(experts, bool) or not isinstance(experts, int) or experts < 0:
            raise HFConfigError(
                f"{where}: {key} must be a count of experts, got {cut_to(repr(experts), 80)}"
            )
        if experts > MAX_EXPERTS:
            raise HFConfigError(f"{where}: {key}={experts} is over the {MAX_EXPERTS} allowed")
        if layers is not None and layers * experts > MAX_EXPERTS_IN_ALL_LAYERS:
            raise HFConfigError(
                f"{where}: num_hidden_layers={layers} x {key}={experts} is"
                f" {layers * experts} experts in all, over the {MAX_EXPERTS_IN_ALL_LAYERS} allowed"
            )
    heads, kv_heads = data.get("num_attention_heads"), data.get("num_key_value_heads")
    if heads is not None and kv_heads is not None and heads % kv_heads:
        raise HFConfigError(
            f"{where}: num_attention_heads={heads} is not a multiple of"
            f" num_key_value_heads={kv_heads}"
        )
    hidden = data.get("hidden_size")
    if heads is not None and hidden is not None and data.get("head_dim") is None and hidden % heads:
        raise HFConfigError(
            f"{where}: hidden_size={hidden} is not a multiple of num_attention_heads={heads}"
        )


# A decoder layer's index in a weight name, as transformers (`model.layers.3.`) and
# Megatron-core (`decoder.layers.3.`) number them
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def stored_layers(names: Iterable[str]) -> list[int]:
    """The decoder layer indices weight names hold, sorted."""
    found = (_LAYER_INDEX.search(name) for name in names)
    return sorted({int(match.group(1)) for match in found if match})


def layers_beyond_checkpoint(layers: object, names: Iterable[str]) -> str | None:
    """What is wrong when config.json's `num_hidden_layers` names layers past the last one
    the checkpoint holds any weight of (`names`): the config is another model's, whatever
    the size of the difference, so it is said as that one fact (the layer counts of
    both), never as a list of the missing weights or as a limit of the tool's. None when
    the count fits, is no count (check_geometry names that) or no name is numbered by
    layer."""
    held = stored_layers(names)
    if not held or isinstance(layers, bool) or not isinstance(layers, int):
        return None
    if layers <= held[-1] + 1:
        return None
    contiguous = held == list(range(len(held)))
    which = f"0-{held[-1]}" if contiguous and len(held) > 1 else first_of(held, 4)
    plural = "s" if len(held) > 1 else ""
    return (
        f"num_hidden_layers={layers}, but the checkpoint holds weights for layer{plural}"
        f" {which} only ({len(held)} layer{plural})"
    )


def load_hf_config(
    path: str | os.PathLike,
    root: str | os.PathLike | None = None,
    shown_as: str | os.PathLike | None = None,
) -> PretrainedConfig:
    """A transformers config from a directory or a config.json path (local files only);
    `shown_as`: where the file came from, for the line said as transformers loads (an
    export reads a copy in its hidden output dir, which the user never named)."""
    config_file, data = read_config_json(path, root)
    check_geometry(data, config_file)
    _checking(config_file if shown_as is None else shown_as)
    from transformers import AutoConfig

    try:
        return AutoConfig.for_model(**data)
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not config.json's fault
        code = code_map_words(data)  # said first: transformers' reason may be cut off
        raise HFConfigError(
            f"{config_file}: {f'{code}; ' if code else ''}transformers cannot read it"
            f" ({transformers_reason(err)})"
        ) from None


def expected_weights(config: PretrainedConfig) -> ExpectedWeights:
    """The weights transformers' own model of `config` has, by name and shape, built on the
    meta device: for a family no shape table knows, the model is the one authority on them.
    Experts are named as the hub files name them; a config transformers builds no causal LM
    from is an HFConfigError naming why."""
    try:
        model = meta_causal_lm(config)
    except Exception as err:  # t5, a vision-language config, sizes transformers refuses
        reraise_if_out_of_memory(err)  # the machine's limit, not config.json's fault
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise HFConfigError(
            f"config.json (model_type {config.model_type!r}): transformers builds no causal"
            f" LM from it ({cut_to(first_line, 200)})"
        ) from None
    from mfsdp_ckpt.convert.fused_experts import hub_expert_names

    # experts under the hub files' per-expert names, which exports write and every
    # transformers version loads (5.x fuses them in memory)
    family = config.model_type
    required = hub_expert_names({n: tuple(p.shape) for n, p in model.named_parameters()}, family)
    allowed = hub_expert_names({n: tuple(t.shape) for n, t in model.state_dict().items()}, family)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return ExpectedWeights(config.model_type, required, allowed, tied)


def expected_weights_for(
    path: str | os.PathLike, root: str | os.PathLike | None = None
) -> ExpectedWeights:
    """The weights config.json implies. Known families (Qwen2, Qwen3, Llama, Mistral) come from
    hf_shapes' table in milliseconds, without importing transformers (validate runs before
    every resume and export); anything else from a meta-device model."""
    from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes

    config_file, data = read_config_json(path, root)
    check_geometry(data, config_file)
    shapes = hf_state_dict_shapes(data)
    if shapes is None:
        return expected_weights(load_hf_config(path, root))
    return weights_from_table(
        data["model_type"], shapes, bool(data.get("tie_word_embeddings", False))
    )


def weights_disagreement(
    where: object,
    shapes: dict[str, tuple[int, ...]],
    expected: ExpectedWeights,
    unknown: bool,
    set_by: Callable[[str], str | None] | None = None,
) -> str | None:
    """How stored weights (`shapes`, by name) disagree with what config.json implies, as one
    line starting with `where`, or None: a tensor config.json has no place for (`unknown`:
    transformers' loader would drop it; training names it itself, trainer/model_weights.py),
    a shape config.json does not give it, a parameter no file holds (transformers would
    initialise it at random). A stranger's name is the file's own, quoted: an empty or blank
    one shows.

    `set_by` names, for a tensor's name, what other than config.json gave it its place or
    shape (`model.overrides sets num_hidden_layers=4`), None where config.json did: a
    value the run's overrides set is not said to be config.json's."""
    strangers = sorted(name for name in shapes if name not in expected.allowed)
    if unknown and strangers:
        return (
            f"{where}: {len(strangers)} tensor(s) unknown to {expected.model_type},"
            f" e.g. {strangers[0]!r}"
        )
    said = set_by or (lambda _name: None)
    for name, shape in shapes.items():
        if name in expected.allowed and tuple(expected.allowed[name]) != tuple(shape):
            wanted, setter = tuple(expected.allowed[name]), said(name)
            given = (
                f"the model has {wanted} as {setter}" if setter else f"config.json says {wanted}"
            )
            return f"{where} [{name}]: shape {tuple(shape)}, but {given}"
    missing = sorted(set(expected.required) - set(shapes))
    own = [name for name in missing if said(name) is None]
    if own:
        return f"{where}: weights lack {len(own)} tensor(s) config.json needs, e.g. {own[0]}"
    if missing:
        return (
            f"{where}: weights lack {len(missing)} tensor(s) the model needs as"
            f" {said(missing[0])}, e.g. {missing[0]}"
        )
    return None


def weights_from_table(
    model_type: str, shapes: dict[str, tuple[int, ...]], tied: bool
) -> ExpectedWeights:
    """ExpectedWeights from a full state-dict shape table; a tied lm_head is optional."""
    required = {
        name: shape for name, shape in shapes.items() if not (tied and name == "lm_head.weight")
    }
    return ExpectedWeights(model_type, required, dict(shapes), tied)
