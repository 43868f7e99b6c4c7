"""Typed run configuration: dataclass defaults, then a YAML file, then `key=value` overrides.

The same loader serves every command (`mfsdp train sft`, `mfsdp train grpo`): a command
defines a top-level dataclass whose fields are section dataclasses and calls
`load_config(ThatClass, yaml_path, overrides)`. Sections shared between commands
(`model`, `optim`, `strategy`, `checkpoint`, `trainer`) are defined once here in `RunConfig`;
a command subclasses it and adds its own sections as fields.

Mistakes fail before any work starts, with one line that names the key: an unknown key
lists its closest matches (a typo like `optim.lrr` must not silently train with the
default), a wrong type says what was expected, and a value out of its field's range
(declared on the field: `lr: NonNegative[float]`) says which range.

Why a hand-written loader and not OmegaConf structured configs (what verl uses) or pydantic:
whichever typed the values, three parts would stay ours, because neither library does them:
reading YAML under bounds (`trainer.config_yaml`: size, alias expansion, python tags, depth),
verl's key names (`trainer.verl_keys` rewrites keys before anything is typed), and the one-line
error with its "did you mean" list (`trainer.config_suggestions`). A library would replace only
`trainer.config_coercion`, and bring:
- OmegaConf: a new dependency (this project does not install verl); no value ranges, so the
  range checks stay here; an unknown key raises its own multi-line error (key, full key, object
  type) with no close match, which every call would have to catch and rewrite.
- pydantic (installed only as another package's dependency): errors are multi-line
  ("1 validation error for ...", the location, a documentation link) and an unknown key says
  "Extra inputs are not permitted" with no close match; and either mode changes what configs
  are accepted: lax mode takes `trainer.total_steps: "5"` as 5 where this loader refuses a
  string, strict mode refuses `lr: 2e-5`, which PyYAML (YAML 1.1) reads as a string and this
  loader takes as a number.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.convert.hf_config import HFConfigError, check_geometry
from mfsdp_ckpt.format.layout import RUN_CONFIG_FILE
from mfsdp_ckpt.storage.output_path import collapse_dot_dot
from trainer import verl_keys
from trainer.attention_names import attention_refusal
from trainer.config_base import (
    COMMAND_LINE,
    RUN_NAMES,
    TEXT_VALUES,
    Checked,
    ConfigError,
    ExpandUser,
    LocalPath,
    Range,
    unannotated,
)
from trainer.config_coercion import NullIsEmpty, build_section
from trainer.config_suggestions import unknown_key_message
from trainer.config_yaml import (
    MAX_EXPANDED_CHARS,
    ExpansionBudget,
    YAMLConfigError,
    dump_yaml,
    parse_yaml,
    read_config_text,
)
from trainer.grpo.aggregation import LossNormalization
from trainer.lora_scale import refuse_overflowing_scale
from trainer.override_text import dropped_markup, folded_or_trimmed
from trainer.run_files import replacing
from trainer.shapes import SHAPE_NAMES, shape_refusal
from trainer.shown_value import overrides_typed, typed_text
from trainer.verl_hydra_files import deletion_hint, refused_selection
from trainer.verl_null_flags import null_switch
from trainer.verl_shared_keys import SHARED_WITH_VERL
from trainer.verl_source import VerlSourceError, parse_verl_yaml

RESOLVED_CONFIG_FILE = RUN_CONFIG_FILE  # in the run dir: the config the run used


# --------------------------------------------------------------------------- ranges


def path_values(config: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(`section.key`, value) of every path field (`LocalPath`, alone, optional or in a
    list) of a built config, for the checks that apply to paths alone."""
    found = []
    hints = typing.get_type_hints(type(config), include_extras=True)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            found += path_values(value, f"{prefix}{f.name}.")
        elif _is_path(hints[f.name]):
            found.append((f"{prefix}{f.name}", value))
    return found


def _is_path(kind: Any) -> bool:
    if typing.get_origin(kind) is Annotated:  # a path, or a list of paths with checks of its own
        base, *checks = typing.get_args(kind)
        return any(isinstance(check, ExpandUser) for check in checks) or _is_path(base)
    return any(_is_path(arg) for arg in typing.get_args(kind))


T = typing.TypeVar("T")
Positive = Annotated[T, Range("> 0", lambda v: v > 0)]
NonNegative = Annotated[T, Range(">= 0", lambda v: v >= 0)]
Fraction = Annotated[float, Range("in [0, 1]", lambda v: 0 <= v <= 1)]
UnitOpen = Annotated[float, Range("in [0, 1)", lambda v: 0 <= v < 1)]  # Adam betas, held-out shares
UnitPositive = Annotated[float, Range("in (0, 1]", lambda v: 0 < v <= 1)]


def _geometry_refusal(overrides: dict[str, Any], key: str) -> str | None:
    """Why `overrides` (HF config fields) make no model, as the same values in config.json
    are refused (`num_hidden_layers=2000 is over the 1024 allowed`); None where they do."""
    try:
        check_geometry(overrides, f"config key '{key}'")
    except HFConfigError as err:
        return str(err)
    return None


HFOverrides = Annotated[dict[str, Any], Checked(_geometry_refusal)]
# the key whose values no typed field reads: transformers takes them as they are
UNTYPED = "model.overrides"


# --------------------------------------------------------------------------- sections


@dataclass
class ModelConfig:
    """Which causal LM to train. With no `path`, a random model of shape `shape` is built."""

    path: LocalPath | None = (
        None  # local HF model dir (config.json, tokenizer, weights) or any checkpoint
    )
    hf_config: LocalPath | None = (
        None  # with a checkpoint `path` only: the HF config + tokenizer dir
    )
    shape: str = "tiny"  # without `path` only: tiny | qwen2-0.5b | qwen2-1.5b | qwen2.5-7b | ...
    random_init: bool = False  # with `path`: take only its config.json, initialise randomly
    tokenizer: LocalPath | None = None  # default: `path`, else the embedded tiny tokenizer
    overrides: HFOverrides = field(default_factory=dict)  # HF config fields: {num_hidden_layers: 4}
    # sdpa | varlen (packed rows through flash attention: trainer/attention.py) | flex_attention
    # | ... (trainer/attention_names.py)
    attn_implementation: Annotated[str, Checked(attention_refusal)] = "sdpa"
    activation_checkpointing: bool = False
    compile: bool = False  # torch.compile each decoder layer
    # chunked: never materialises full fp32 logits; liger: liger-kernel's fused linear CE
    loss: Literal["chunked", "plain", "liger"] = "chunked"
    loss_chunk_tokens: Positive[int] = 2048
    liger: bool = False  # liger-kernel RoPE, RMSNorm, SwiGLU (trainer/kernels.py)
    # LoRA (verl's names; docs/lora.md): rank 0 trains every weight; > 0 trains adapters only.
    lora_rank: int = 0
    lora_alpha: float = 16.0
    target_modules: str | list[str] = "all-linear"  # module names (q_proj, ...) or all-linear
    lora_adapter_path: LocalPath | None = None  # start from this PEFT adapter dir (implies LoRA)


def check_lora_fields(cfg: ModelConfig) -> None:
    """LoRA settings that cannot work, one line naming the key: refused where the config is
    checked (`check_across_keys`: `mfsdp config check`, and train before it loads torch) and
    as LoRA is built. Alpha and targets are read only by a fresh adapter, as in verl: with
    rank 0 (LoRA off) or an adapter dir (its own config sets them) they are left unchecked."""
    if cfg.lora_rank < 0:
        raise ConfigError(f"model.lora_rank must be >= 0 (0 turns LoRA off), got {cfg.lora_rank}")
    if cfg.lora_rank == 0 or cfg.lora_adapter_path is not None:
        return
    if cfg.lora_alpha <= 0:
        raise ConfigError(f"model.lora_alpha must be > 0, got {cfg.lora_alpha}")
    targets = [cfg.target_modules] if isinstance(cfg.target_modules, str) else cfg.target_modules
    if not targets or any(not name for name in targets):
        raise ConfigError("model.target_modules: give module names (q_proj, ...) or all-linear")
    refuse_overflowing_scale({"r": cfg.lora_rank, "lora_alpha": cfg.lora_alpha}, "model.lora_alpha")


# verl's sft_trainer.yaml sets the dict keys null, meaning none (`NullIsEmpty`)
StructFields = Annotated[list[str], NullIsEmpty()]
# verl's SFT trainer sets `data.val_files: null`, meaning no validation files: the default;
# verl users write `val_files: ""` for none too
ValFiles = Annotated[list[LocalPath], NullIsEmpty(blank=True)]


@dataclass
class DataConfig:
    """Chat data (`messages` or `prompt`/`response` columns) and how it becomes micro-batches."""

    train_files: list[LocalPath] = field(default_factory=list)  # parquet or jsonl
    val_files: ValFiles = field(default_factory=list)
    val_ratio: UnitOpen = 0.0  # without val_files: hold out this fraction of train rows
    messages_key: str = "messages"
    prompt_key: str = "prompt"
    response_key: str = "response"
    # which columns a row's chat is read from (verl's data.multiturn.enable true / false):
    # auto reads messages_key where a row has it, unless prompt/response keys are set; not
    # given, it is prompt_response where the file or an override gives data.prompt_key or
    # response_key, at any value (`_named_chat_columns`; trainer/data/chat_source.py)
    chat_columns: Literal["auto", "messages", "prompt_response"] = "auto"
    # verl's: fields to descend into when prompt_key / response_key name a struct column
    # (verl's GSM8K SFT example: extra_info with prompt_dict_keys [question], response [answer])
    prompt_dict_keys: StructFields = field(default_factory=list)
    response_dict_keys: StructFields = field(default_factory=list)
    max_length: Positive[int] = 1024
    truncation: Literal["error", "left", "right"] = "error"
    packing: bool = True  # token-budget micro-batches of packed sequences; False: padded
    global_batch_size: Positive[int] = 16  # sequences per optimizer step, all ranks together
    max_tokens_per_micro_batch: Positive[int] = 4096  # packing: tokens per micro-batch per rank
    micro_batch_size: Positive[int] = 2  # padded mode: sequences per micro-batch per rank
    # `global`: one token mean over the global batch (verl's sft_trainer); `micro_batch`: each
    # micro-batch's own token mean, averaged (verl's fsdp_sft_trainer): trainer/sft.py
    loss_normalization: LossNormalization = "global"
    shuffle: bool = True


Betas = Annotated[list[UnitOpen], Range("two numbers in [0, 1)", lambda v: len(v) == 2)]
Scheduler = Literal["cosine", "linear", "constant"]  # the learning rate after warmup
Precision = Literal["auto", "bf16", "fp32"]  # auto: bf16 on CUDA, fp32 on CPU


@dataclass
class OptimConfig:
    """AdamW with warmup then cosine / linear / constant decay to `min_lr` (verl's SFT defaults)."""

    lr: NonNegative[float] = 1e-5
    betas: Betas = field(default_factory=lambda: [0.9, 0.95])
    eps: Positive[float] = 1e-8
    weight_decay: NonNegative[float] = 0.01
    warmup_steps: NonNegative[int] = 0  # wins over warmup_ratio when > 0
    warmup_ratio: Fraction = 0.0
    scheduler: Scheduler = "cosine"
    min_lr: NonNegative[float] = 0.0
    clip_grad: NonNegative[float] = 1.0  # global grad-norm clip; 0 disables
    fused: bool | None = None  # None: fused AdamW on CUDA, foreach on CPU


@dataclass
class StrategyConfig:
    """How the model is sharded. `auto`: megatron_fsdp on CUDA with >= 2 ranks, else fsdp2."""

    name: Literal["auto", "megatron_fsdp", "fsdp2"] = "auto"
    mixed_precision: Precision = "auto"
    # Megatron-FSDP options (see megatron_fsdp.fully_shard).
    zero_dp_strategy: Literal["no_shard", "optim", "optim_grads", "optim_grads_params"] = (
        "optim_grads_params"
    )
    unit_modules: Literal["decoder", "decoder+embedding"] = "decoder"
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    fsdp_double_buffer: bool = False
    disable_bucketing: bool = False
    bucket_size: Positive[int] | None = None  # elements per gradient bucket; None: Megatron-FSDP's
    # FSDP2 options.
    reshard_after_forward: bool = True


@dataclass
class CheckpointConfig:
    save_every: NonNegative[int] = 0  # steps; 0: only at the end
    keep_last: Positive[int] | None = None
    async_save: bool = False
    resume: LocalPath = "auto"  # auto | disable | PATH (run, step or dist_ckpt dir)


@dataclass
class TrainerConfig:
    run_dir: LocalPath = "runs/sft"
    epochs: Positive[int] = 1
    total_steps: Positive[int] | None = None  # default: epochs x (train rows // global_batch_size)
    # true: the run also ends once `epochs` epochs are done, when that comes before
    # `total_steps` (verl's rule: its fit loop stops after trainer.total_epochs whatever
    # trainer.total_training_steps says), and its learning-rate schedule still spans
    # `total_steps`, as verl's PPO trainer and sft_trainer size theirs by
    # trainer.total_training_steps; `mfsdp config from-verl` writes it. false: mfsdp's
    # rule, `total_steps` wins and the data goes round as often as it takes
    steps_within_epochs: bool = False
    stop_at_step: Positive[int] | None = None  # stop early, after a checkpoint (a job's time limit)
    seed: NonNegative[int] = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    log_every: Positive[int] = 1
    eval_every: NonNegative[int] = 0  # steps; 0: only at the end when there is validation data
    tensorboard: bool = False  # same as adding tensorboard to `logger`
    # Experiment trackers, verl's names: console (a line per logged step without a bar), jsonl
    # (RUN_DIR/metrics.jsonl: written even without it, as resume reads it);
    # tensorboard (RUN_DIR/tensorboard/) and wandb (RUN_DIR/wandb/; WANDB_MODE=offline works).
    logger: list[Literal["console", "jsonl", "tensorboard", "wandb"]] = field(
        default_factory=lambda: ["console", "jsonl"]
    )
    project_name: str = "mfsdp"  # wandb project
    experiment_name: str | None = None  # wandb run name; default: the run dir's name
    progress_bar: bool = True
    peak_tflops: Positive[float] | None = None  # per device, MFU; default: 790 on an H200 only

    def __post_init__(self) -> None:
        # `RUN/new/..` was checked as typed, naming nothing while `new` did not exist, and
        # then trained into RUN past every check of what RUN holds (`output_path`)
        self.run_dir = collapse_dot_dot(self.run_dir)


@dataclass
class RunConfig:
    """The sections every training command has; a command's config subclasses this, adds its
    own sections, and may narrow a shared one (GRPO's actor optimizer defaults)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


@dataclass
class SFTConfig(RunConfig):
    data: DataConfig = field(default_factory=DataConfig)


# --------------------------------------------------------------------------- loading


def load_config(
    cls: type[T], path: str | os.PathLike | None = None, overrides: Sequence[str] = ()
) -> T:
    """Defaults of `cls`, updated by the YAML file at `path`, then by `a.b=value` overrides.
    verl's keys are read with the whole run's, file and overrides together: a rule that
    reads another key (Megatron's betas, LoRA on or off) gives one result wherever that key
    is written."""
    tree: dict[str, Any] = {}
    file_keys: list[tuple[str, Any]] = []
    source = str(path) if path else "config"
    loaded = None if path is None else _read_config_file(cls, path)
    for key, value in (loaded or {}).items():
        _refuse_selection(cls, key, value, source, hydra_form_only=True)
    pairs, typed = _override_pairs(cls, list(overrides))
    if path is not None:
        tree, file_keys = verl_keys.adopt_tree(cls, loaded or {}, source, pairs)
        if _holds_verl_keys(cls, loaded):
            _unset_verl_nulls(cls, tree, source)
    try:  # the file alone first, so an error of its own names the file
        config, file_error = _build_config(cls, tree, source), None
    except ConfigError as err:  # unless an override mends it (`trainer.device=cpu` over `npu`)
        config, file_error = None, err
    with overrides_typed(typed):  # an error quotes an override's value as it was typed
        adopted = verl_keys.adopt_pairs(cls, pairs, COMMAND_LINE, file_keys)
        if not adopted:
            if config is None:
                raise cast(ConfigError, file_error)
            return check_across_keys(config)
        if file_error is not None:  # the file's first problem no override mends, named so
            _build_config(cls, _without(tree, [key for key, _ in adopted]), source)
        for key, value in adopted:
            set_dotted(tree, key, value)
        return check_across_keys(_build_config(cls, tree, COMMAND_LINE))


def overrides_set(cls: type, overrides: Sequence[str], key: str) -> bool:
    """Whether one of the `key=value` `overrides` of a config of `cls` sets the mfsdp key
    `key`, named so or by verl's name for it (`trainer.default_local_dir` for
    `trainer.run_dir`), Hydra's `+` aside."""
    for item in overrides:
        given = item.partition("=")[0].strip().lstrip("+")
        if (verl_keys.value_target(cls, given) or given) == key:
            return True
    return False


def _without(tree: dict[str, Any], dotted_keys: list[str]) -> dict[str, Any]:
    """A copy of `tree` without the values of `dotted_keys` (`a.b.c`), where it has them:
    the file's settings an override does not replace."""
    copied = copy.deepcopy(tree)
    for dotted in dotted_keys:
        *sections, last = dotted.split(".")
        node: Any = copied
        for part in sections:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return copied


def _unset_verl_nulls(cls: type, tree: dict[str, Any], source: str, prefix: str = "") -> None:
    """In a verl config, a null on an mfsdp key that takes none (`data.val_files: null`, as
    the config verl's SFT trainer prints has it) is verl's "not set": the key is removed, so
    the mfsdp default stays, with the note `mfsdp config from-verl` gives for it, where an
    mfsdp file's null there is refused ("expects a list of strings"). A null on a switch is
    false, as verl reads it (trainer.verl_null_flags)."""
    for key in list(tree):
        dotted = f"{prefix}{key}"
        if isinstance(tree[key], dict):
            _unset_verl_nulls(cls, tree[key], source, f"{dotted}.")
            continue
        shared = dotted in SHARED_WITH_VERL[verl_keys.command_of(cls)]  # a key verl reads
        switch = null_switch(cls, dotted, dotted, source) if shared and tree[key] is None else None
        if switch is not None:  # a switch verl tests for truth: false (trainer.verl_null_flags)
            tree[key] = False
            continue
        found = _field_of(cls, dotted) if tree[key] is None else None
        if found is not None and type(None) not in typing.get_args(found[2]):
            del tree[key]
            verl_keys.log.warning(
                "note: %s: %s: null in verl, the mfsdp default stays", source, dotted
            )


def _read_config_file(cls: type, path: str | os.PathLike) -> dict[str, Any] | None:
    """The YAML file at `path` for a config of `cls`: a mapping of sections, or None where
    it is empty. A file that sets verl's keys (`_holds_verl_keys`) is a verl config, read as
    `mfsdp config from-verl` reads it (`_verl_reading`), so that both give one file's run
    one name (read by mfsdp's rules, `1e3` named it `1e3` here and `1000.0` converted).
    mfsdp's own files keep mfsdp's rules, which refuse what Hydra and YAML 1.2 read
    otherwise (`012`, `1:30`)."""
    source = str(path)
    try:
        text = read_config_text(path)
    except YAMLConfigError as err:
        raise ConfigError(str(err)) from None
    try:
        loaded = parse_yaml(text, source)
    except YAMLConfigError as err:  # perhaps a form verl reads (`012`) in a verl config
        loaded = _verl_reading(text, source, err)
        if not _holds_verl_keys(cls, loaded):
            raise ConfigError(str(err)) from None
    else:
        if _holds_verl_keys(cls, loaded):
            loaded = _verl_reading(text, source, None)
        elif _untyped_values(loaded) is not None:
            loaded["model"]["overrides"] = _untyped_values(
                parse_yaml(text, source, hydra_floats=True)
            )
    return _sections(loaded, source)


def _untyped_values(loaded: Any) -> Any:
    """The file's `model.overrides` (`UNTYPED`), None where it has none. Its numbers are
    read as Hydra reads them (`1e-5` a float, `config_yaml.parse_yaml`'s `hydra_floats`):
    a typed key makes a number of YAML 1.1's text `1e-5`, but transformers got
    `rope_theta: 1e6` as text and the model failed on it naming no key."""
    model = loaded.get("model") if isinstance(loaded, dict) else None
    return model.get("overrides") if isinstance(model, dict) else None


def _verl_reading(text: str, source: str, refused: YAMLConfigError | None) -> Any:
    """The verl config `text` as OmegaConf reads it for verl (`verl_source.parse_verl_yaml`:
    `1e3` a float, `012` 10), its run's names as verl names the run
    (`_names_as_verl_gives_them`). Where it is no YAML verl reads either, the error is
    `refused`, mfsdp's reading's, if there is one."""
    try:
        loaded = parse_verl_yaml(text, source, ExpansionBudget(max_chars=MAX_EXPANDED_CHARS))
    except VerlSourceError as err:
        raise ConfigError(str(refused or err)) from None
    if isinstance(loaded, dict):
        _names_as_verl_gives_them(loaded)
    return loaded


def _sections(loaded: Any, source: str) -> dict[str, Any] | None:
    """`loaded`, a config file's document, once it is a mapping of sections (or empty)."""
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(
            f"{source}: top level must be a mapping of sections, found {type(loaded).__name__}"
        )
    return loaded


def _holds_verl_keys(cls: type, loaded: Any) -> bool:
    """Whether the document `loaded` sets a key of verl's that is no key of `cls`, one the
    loader maps to an mfsdp key with a note (`actor_rollout_ref.model.path`,
    `trainer.total_training_steps`): a verl config, maybe with mfsdp keys beside."""
    if not isinstance(loaded, dict):
        return False
    _native, foreign = verl_keys.split_foreign(cls, loaded)
    return any(
        not verl_keys.is_native(cls, key) and verl_keys.carries(cls, key) for key, _ in foreign
    )


def _names_as_verl_gives_them(tree: dict[str, Any]) -> None:
    """In `tree`, a verl config, a number or boolean for one of its run's names (RUN_NAMES)
    is the text verl names the run by (`1000.0` for `1e3`, `True`), as `mfsdp config
    from-verl` writes it; in mfsdp's own file it is refused, saying to quote it."""
    for key in RUN_NAMES:
        section, _, name = key.partition(".")
        values = tree.get(section)
        if isinstance(values, dict) and isinstance(values.get(name), (bool, int, float)):
            values[name] = str(values[name])


def _override_pairs(
    cls: type, overrides: list[str]
) -> tuple[list[tuple[str, Any]], dict[str, tuple[str, Any]]]:
    """The `key=value` overrides as (key, value) pairs, values read as `_override_value`
    reads them, and the text each was typed as (`shown_value.overrides_typed`: by the key
    as given, `+` dropped, and by the mfsdp key it sets); an argument that is no override
    is refused in one line."""
    _refuse_split_overrides(overrides)
    pairs = []
    typed: dict[str, tuple[str, Any]] = {}
    for index, item in enumerate(overrides):
        if item.startswith("~"):
            raise ConfigError(_hydra_delete(item))
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise NotAnOverride(_not_an_override(item, overrides[index + 1 :]))
        value = _override_value(cls, key.strip(), text)
        _refuse_selection(cls, key.strip(), value, COMMAND_LINE)
        pairs.append((key.strip(), value))
        given = key.strip().lstrip("+")
        typed[given] = typed[verl_keys.value_target(cls, given) or given] = (text, value)
    return pairs, typed


def _refuse_selection(
    cls: type, key: Any, value: Any, source: str, hydra_form_only: bool = False
) -> None:
    """Refuse `key: value` of `source` where it is one of verl's config-group selections
    (`refused_selection`), before the key is split on its dots. `hydra_form_only`: only in
    the forms no mfsdp key has, a package (`actor@actor_rollout_ref.actor`) or Hydra's
    `+`: a config file's top-level key copied from a verl command line."""
    if not isinstance(key, str) or (hydra_form_only and "@" not in key and key[:1] != "+"):
        return
    selection = refused_selection(key, value, verl_keys.field_types(cls))
    if selection is not None:
        raise ConfigError(f"{source}: {selection}")


def end_step(total_steps: int, cfg: Any) -> int:
    """The step a run of `cfg` taking `total_steps` ends at (`trainer.stop_at_step` ends it
    early). Here, not in `trainer.runner`, so the launcher uses it without loading torch."""
    return min(total_steps, cfg.trainer.stop_at_step or total_steps)


def no_config_file(command: str) -> str:
    """What a run given no --config and no training files (`mfsdp train sft`, perhaps with a
    few overrides) is told: that no --config was given and how to start one. The error named
    only data.train_files, the first key the defaults leave unset, as if one key were
    missing."""
    write = mfsdp_command(f"config defaults {command} > {command}.yaml")
    return (
        f"no --config given, and data.train_files is not set: a run's settings come from a"
        f" YAML file; write one with {write} (or"
        f" start from examples/{command}_tiny_cpu.yaml of the repository), set its"
        f" data.train_files, and give --config {command}.yaml"
    )


class NotAnOverride(ConfigError):
    """An argument that is no `key=value` override (`my.yaml`, `trainer.total_steps 2`): a
    mistake in the command line, which the command's line ends with where its --help is
    (cli/launch.py), as click's own usage errors end."""


def _not_an_override(item: str, rest: list[str]) -> str:
    """The error for an argument without `=`: a config file given without --config, or a key
    and its value as two arguments (`trainer.total_steps 2`), say what to write instead."""
    if item.lower().endswith((".yaml", ".yml")):
        return f"override {item!r}: give a config file as --config {item}"
    if "." in item and rest and "=" not in rest[0]:
        return f"override {item!r}: expected key=value; write {item}={rest[0]}"
    return f"override {item!r}: expected key=value, e.g. optim.lr=2e-5"


def _hydra_delete(item: str) -> str:
    """The error for Hydra's delete (`~key`, `~key=value`), which no override here is: a
    verl config group's (`~engine`) is a file of verl's config, another key's is left out
    for its default. Read as a key, `~engine` was "expected key=value"."""
    key = item[1:].partition("=")[0].strip()
    removed = deletion_hint(key)
    if removed is not None:
        return f"override {item!r}: {removed}"
    return (
        f"override {item!r}: `~key` is Hydra's delete, which mfsdp train does not take;"
        f" leave {key or 'the key'} out of the config file for its default"
    )


def _refuse_split_overrides(overrides: list[str]) -> None:
    """`optim.lr = 1e-4` typed with spaces reaches us as three arguments (`optim.lr=` and
    `1e-4` with a space after `=`): say so, with the override meant, rather than "expected
    key=value" for the key alone or "empty value" for `optim.lr=`."""
    for index, item in enumerate(overrides):
        rest = overrides[index + 1 :]
        if "=" not in item and rest and rest[0].startswith("="):
            parts = [item, rest[0]] + (rest[1:2] if rest[0] == "=" else [])
        elif item.endswith("=") and item.count("=") == 1 and rest and "=" not in rest[0]:
            parts = [item, rest[0]]
        else:
            continue
        typed = " ".join(parts)
        raise ConfigError(
            f"override {typed!r}: spaces around '=' make {len(parts)} arguments of one"
            f" override; write {''.join(parts)}"
        )


def _override_value(cls: type, key: str, text: str) -> Any:
    """The value of the override `key=text` for a config of `cls`: for a key that takes only
    text (a run dir, a name, checkpoint.resume, a list of files), the text as typed where
    YAML reads it as a number or boolean: `trainer.run_dir=6` was refused ("expects a
    string, got 6"), though a dir named 6 is one, and `0x1f` or `1_000` would have become
    other text. The key is judged by the mfsdp key it sets, so verl's name of it
    (`trainer.default_local_dir=6`) is read alike. A boolean stays one for a key of named
    values (`checkpoint.resume=true` means auto or disable, not a dir named true), for its
    error to name them."""
    target = verl_keys.value_target(cls, key) or key
    text_only = takes_text_only(cls, target)
    untyped = f"{target}.".startswith(f"{UNTYPED}.")  # read as Hydra reads it (`_untyped_values`)
    value = parse_override_value(
        key, text, _cleared(cls, target), numbers_as_text=text_only, hydra_floats=untyped
    )
    if isinstance(value, bool) and text_only and target not in TEXT_VALUES:
        return text
    return value


def takes_text_only(cls: type, dotted: str) -> bool:
    """Whether the key `dotted` of `cls` takes text and no number or boolean: a string, a
    list of strings, or either (null aside)."""
    found = _field_of(cls, dotted)
    return found is not None and _is_text(found[2])


def _is_text(kind: Any) -> bool:
    """Whether every value of the annotation `kind` other than null is a string or a list
    of them (`str | None`, `list[LocalPath]`, `str | list[str]`)."""
    kind = unannotated(kind)
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return all(_is_text(arg) for arg in typing.get_args(kind) if arg is not type(None))
    if origin is list:
        return _is_text(typing.get_args(kind)[0])
    return kind is str


def parse_override_value(
    key: str,
    text: str,
    clear: str | None = "null",
    numbers_as_text: bool = False,
    hydra_floats: bool = False,
) -> Any:
    """The YAML value of one `key=value` override, under the same bounds as a config file (no
    python tags, no alias bombs). An empty value is refused rather than read as null: it is
    what `model.path=$MODEL` becomes when MODEL is unset, and it silently meant "no path"
    (a random model trained in place of the one meant); `key=null` clears a key, `key=[]` a
    list (`clear`: which, None where the key must hold a value). A value YAML would read as
    other than written (a ` #comment` dropped, a newline folded, edge spaces trimmed:
    `override_text`) is refused, saying how to quote it. `numbers_as_text`: for a key that
    takes only text, a number is the text typed; `hydra_floats`: `1e-5` is a float, as
    Hydra reads it (`config_yaml.parse_yaml`)."""
    if not text.strip():
        remedy = f", or {key}={clear} to clear it" if clear is not None else ""
        raise ConfigError(
            f"command-line override {key}=: empty value (an unset shell variable?); "
            f"give a value{remedy}"
        )
    changed = folded_or_trimmed(key, text, trims_text=numbers_as_text)
    if changed is not None:
        raise ConfigError(changed)
    try:
        value = parse_yaml(
            text, f"override {key}", numbers_as_text=numbers_as_text, hydra_floats=hydra_floats
        )
    except YAMLConfigError as err:
        raise ConfigError(str(err)) from None
    changed = dropped_markup(key, text)
    if changed is not None:
        raise ConfigError(changed)
    return value


def config_from_tree(cls: type[T], tree: dict[str, Any], source: str) -> T:
    """`cls` from an already nested mapping (a converted verl config), checked like a file."""
    return check_across_keys(_build_config(cls, tree, source))


MEGATRON_FSDP_NEEDS_CUDA = "strategy.name=megatron_fsdp needs CUDA; use strategy.name=fsdp2 on CPU"


def check_across_keys(config: T) -> T:
    """`config`, once no two of its keys contradict each other (each is checked alone by its
    field's range): checked on the whole config, file and overrides together, since an
    override may mend what the file says. One line names both keys."""
    model = getattr(config, "model", None)
    if isinstance(model, ModelConfig):  # LoRA's rank, alpha and targets, read together
        check_lora_fields(model)
    if isinstance(model, ModelConfig) and model.path is None and model.shape not in SHAPE_NAMES:
        raise ConfigError(shape_refusal(model.shape))  # the shape is read only without a path
    strategy, trainer = getattr(config, "strategy", None), getattr(config, "trainer", None)
    if (
        isinstance(strategy, StrategyConfig)
        and isinstance(trainer, TrainerConfig)
        and strategy.name == "megatron_fsdp"
        and trainer.device == "cpu"
    ):  # decided by the config alone: refused where it is checked, not on the machine
        raise ConfigError(MEGATRON_FSDP_NEEDS_CUDA)
    optim = getattr(config, "optim", None)
    if isinstance(optim, OptimConfig) and optim.scheduler != "constant" and optim.min_lr > optim.lr:
        raise ConfigError(
            f"optim.min_lr={_number('optim.min_lr', optim.min_lr)} is above"
            f" optim.lr={_number('optim.lr', optim.lr)}: the"
            f" {optim.scheduler} schedule goes from optim.lr to optim.min_lr, so it would raise"
            " the learning rate; set optim.min_lr <= optim.lr"
        )
    data = getattr(config, "data", None)
    if isinstance(data, DataConfig) and data.val_files and data.val_ratio > 0:
        raise ConfigError(
            f"data.val_ratio={_number('data.val_ratio', data.val_ratio)} with data.val_files:"
            " validation reads data.val_files, and val_ratio (which holds out training rows"
            " when there are no val_files) would be ignored; give one of them"
        )
    if (
        isinstance(data, DataConfig)
        and data.packing
        and data.max_tokens_per_micro_batch < data.max_length
    ):
        raise ConfigError(
            f"data.max_tokens_per_micro_batch="
            f"{_number('data.max_tokens_per_micro_batch', data.max_tokens_per_micro_batch)} <"
            f" data.max_length={_number('data.max_length', data.max_length)}: a full-length"
            " sequence would not fit in a packed micro-batch; raise"
            " data.max_tokens_per_micro_batch or lower data.max_length"
        )
    reward: Any = getattr(config, "reward", None)  # GRPO's
    if getattr(reward, "kwargs", None) and not getattr(reward, "path", None):
        names = ", ".join(str(name) for name in reward.kwargs)
        raise ConfigError(
            f"reward.kwargs ({cut_to(names, 80)}) without reward.path: they are keyword arguments"
            " of a custom reward function (verl's custom_reward_function.reward_kwargs), and the"
            " built-in rewards take none; set reward.path or leave reward.kwargs out"
        )
    return config


def _number(key: str, value: float) -> str:
    """How a check across keys quotes `key`'s number: as typed where an override gave it
    (`1e-5`, which `:g` wrote `1e-05`), else a float as `:g` writes it."""
    typed = typed_text(key, value)
    return typed if typed is not None else f"{value:g}" if isinstance(value, float) else str(value)


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict (for logs, checkpoint info, and writing the resolved config back out)."""
    return dataclasses.asdict(config)


def write_resolved_config(run_dir: str | os.PathLike, config: Any) -> Path:
    """Write the config a run really uses (defaults, file and overrides) into its run dir, so the
    run can be understood and repeated from its outputs alone. Replaced whole (`run_files`):
    a resume on a full disk left the previous run's config.yaml at 0 bytes. Written as it
    is read back (`dump_yaml`): `model.overrides` text such as `'1e5'` stays text."""
    path = Path(run_dir) / RESOLVED_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dump_yaml(config_to_dict(config))
    with replacing(path, "write it") as handle:
        handle.write(text.encode())
    return path


def set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, creating sections on the way (YAML files and overrides)."""
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted}: {part} is not a section")
    node[parts[-1]] = value


def _build_config(cls: type[T], tree: dict[str, Any], source: str) -> T:
    """`cls`, a command's whole config, from the nested `tree`. An unknown key anywhere in
    it is refused first, here, where its hint can be drawn from every key of `cls`: a key
    put in the wrong section (`trainer.lrr`) had nothing close in its own to offer."""
    command = verl_keys.command_of(cls)
    unknown = _first_unknown_key(cls, tree)
    if unknown is not None:
        section, prefix, key, value = unknown
        said = unknown_key_message(section, prefix, key, source, command, value, root=cls)
        raise ConfigError(said)
    return build_section(cls, _named_chat_columns(cls, tree), "", source, command)


def _named_chat_columns(cls: type, tree: dict[str, Any]) -> dict[str, Any]:
    """`tree` (the keys given: file and overrides) with `data.chat_columns: prompt_response`
    where it gives `data.prompt_key` or `data.response_key`, at any value, and no
    chat_columns: `prompt_key: prompt` written out is the default's value, and read by
    value a row's `messages` trained over the prompt the user named. A config.yaml a run
    writes gives chat_columns, so it reads back as that run read its rows."""
    data = tree.get("data")
    kind = typing.get_type_hints(cls).get("data")
    if not (isinstance(kind, type) and issubclass(kind, DataConfig) and isinstance(data, dict)):
        return tree
    if "chat_columns" in data or not {"prompt_key", "response_key"} & data.keys():
        return tree
    return {**tree, "data": {**data, "chat_columns": "prompt_response"}}


def _first_unknown_key(
    cls: type, values: dict[str, Any], prefix: str = ""
) -> tuple[type, str, str, Any] | None:
    """The first key of `values` (a section `cls` at `prefix`, and the sections in it) that
    is no field: its section, prefix, name and value; None where every key is known."""
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if key not in hints:
            return cls, prefix, str(key), value
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            found = _first_unknown_key(typing.cast(type, hints[key]), value, f"{prefix}{key}.")
            if found is not None:
                return found
    return None


def _field_of(cls: type, dotted: str) -> tuple[Any, str, Any] | None:
    """The field `dotted` names in `cls`: its section, name and type (annotations kept);
    None where it names none."""
    kind: Any = cls
    owner, part = cls, ""
    for part in dotted.strip().split("."):
        is_section = dataclasses.is_dataclass(kind)
        hints = verl_keys.field_types(cast(type, kind)) if is_section else {}
        if part not in hints:
            return None
        owner, kind = kind, hints[part]
    return owner, part, kind


def _cleared(cls: type, dotted: str) -> str | None:
    """What clears `dotted` on the command line: `null` where the key may be unset, `[]` for
    a list (null is refused there: `data.train_files=null` "expects a list of strings"); None
    where it must hold a value, or is no key of `cls` (its own error names it)."""
    found = _field_of(cls, dotted)
    if found is None:
        return None
    owner, part, kind = found
    if type(None) in typing.get_args(kind):
        return "null"
    return "[]" if typing.get_origin(kind) is list and _empty_by_default(owner, part) else None


def _empty_by_default(owner: Any, name: str) -> bool:
    """Whether field `name` of the dataclass `owner` is an empty list unless set, so that
    `[]` is a value it takes (`optim.betas=[]` is refused: two numbers are needed)."""
    field = next(f for f in dataclasses.fields(owner) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory() == []
    return field.default == []
