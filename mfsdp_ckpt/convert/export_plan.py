"""The export plan: stored names mapped to HF names, checked against the config, dtypes chosen,
all before a byte of weight is read.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert import stored_buffers, tied_head, unexported_optimizer_state
from mfsdp_ckpt.convert.config_behaviour import sliding_window
from mfsdp_ckpt.convert.export_errors import (
    ExportError,
    ExportUsageError,
    StoredDtypeError,
    UnconvertedNames,
    UnsupportedAdapter,
    foreign_weights,
)
from mfsdp_ckpt.convert.export_source import (
    ExportSource,
    JsonConfig,
    config_json_location,
    expected_weights_of,
)
from mfsdp_ckpt.convert.fused_tensors import COPY, VOCAB, Geometry
from mfsdp_ckpt.convert.mapping_errors import (
    AdapterWeightsError,
    MappingError,
    ShapeError,
    StoredShapeError,
    UnsupportedModelError,
)
from mfsdp_ckpt.convert.megatron_config import HF_CONFIG_OPTION
from mfsdp_ckpt.convert.megatron_lora import (
    MegatronLora,
    adapter_kind,
    check_b_splits,
    describe_adapters,
    holds_adapters,
    split_adapters,
)
from mfsdp_ckpt.convert.megatron_lora_ranks import declared_rank_pattern
from mfsdp_ckpt.convert.mtp import DROP_MTP_FLAG, MtpLayers, split_mtp
from mfsdp_ckpt.convert.name_maps import (
    HF,
    LAYOUTS,
    MCORE,
    MappedTensor,
    detect_layout,
    map_names,
    model_tensors,
    refuse_attention_window,
)
from mfsdp_ckpt.convert.recorded_layout import with_recorded_layout
from mfsdp_ckpt.convert.weight_dtype import refuse_non_float_weights
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.dir_entries import stat_inside
from mfsdp_ckpt.format.dtypes import BFLOAT16, FLOAT16, FLOAT32, DType, short_dtype_name
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE
from mfsdp_ckpt.format.run_steps import natural_order
from mfsdp_ckpt.format.state_keys import AmbiguousStateError
from mfsdp_ckpt.storage.reader import TensorEntry
from mfsdp_ckpt.storage.tensorstore_store import is_url

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from mfsdp_ckpt.convert.hf_config import ExpectedWeights


# The command whose flags an adapter's remedy names: validate and `mfsdp train`, which plan
# an export too, take neither --adapter-only nor a base model's weights.
EXPORT_COMMAND = "mfsdp ckpt export-hf"

DTYPES = {"bf16": BFLOAT16, "fp16": FLOAT16, "fp32": FLOAT32}


_CONFIG_DTYPES = {
    dtype.name: dtype for dtype in DTYPES.values()
}  # what a config.json string may name


@dataclass
class ExportPlan:
    """Everything decided before a weight is read."""

    source: ExportSource
    layout: str
    model_type: str
    geometry: Geometry
    items: list[MappedTensor]
    dtype: DType  # floating tensors are written in this dtype
    dtypes: dict[str, DType]  # per target name (integer tensors keep theirs)
    allow_nonfinite: bool = False  # False: a NaN/Inf written out stops the export
    lora: MegatronLora | None = None  # a Megatron LoRA adapter merged into its weights
    mtp: MtpLayers | None = None  # multi-token prediction layers left out (--drop-mtp)
    cast_from_config: bool = False  # --dtype auto took config.json's dtype, not the stored
    buffers: list[str] = field(default_factory=list)  # stored keys of buffers left out
    # the lines `unexported_optimizer_state` writes: flat optimizer buffers left out, and
    # fp32 main weights not used for an fp32 export of half-precision weights
    flat_optimizer_note: str | None = None
    main_params_note: str | None = None

    def buffer_notes(self) -> list[str]:
        """The line saying stored buffers loading ignores (`stored_buffers`) were left out."""
        return [stored_buffers.left_out_note(self.buffers)] if self.buffers else []

    def optimizer_notes(self) -> list[str]:
        """The line saying Megatron's flat optimizer buffers filed among the model's
        tensors were left out, not exported as weights."""
        return [self.flat_optimizer_note] if self.flat_optimizer_note else []

    def merges(self, item: MappedTensor) -> bool:
        """Whether a LoRA delta is added to one of this item's weights."""
        return self.lora is not None and any(t in self.lora.targets for t in item.targets)

    def entry(self, item: MappedTensor) -> TensorEntry:
        return self.source.reader.tensors[item.source]

    def ordered_items(self) -> list[MappedTensor]:
        """Items in the order their bytes lie in the checkpoint files."""
        return sorted(self.items, key=lambda item: _read_order(self.entry(item)))

    def cast_notes(self) -> list[str]:
        """A line when `--dtype auto` wrote config.json's dtype over weights stored in
        another: an import followed by an export is then not bit-exact, and only the
        summary's dtype said so; and a line when fp32 was written from half-precision
        weights while the optimizer state holds fp32 main weights."""
        main = [self.main_params_note] if self.main_params_note else []
        if not self.cast_from_config:
            return main
        stored = sorted(
            {
                self.entry(item).dtype.name
                for item in self.items
                if self.entry(item).dtype.is_floating_point and self.entry(item).dtype != self.dtype
            }
        )
        if not stored:
            return main
        keep = short_dtype_name(stored[0])
        return main + [
            f"--dtype auto wrote {self.dtype.name}, config.json's dtype, over weights stored"
            f" as {', '.join(stored)}"
            + (
                f"; --dtype {keep} keeps their values bit for bit"
                if stored == [DTYPES.get(keep, self.dtype).name]
                else ""
            )
        ]

    def dropped_padding_notes(self) -> list[str]:
        """One line per vocabulary tensor whose Megatron padding rows the export drops."""
        notes = []
        for item in self.items:
            stored, kept = self.entry(item).shape, item.shapes[0]
            if item.transform is VOCAB and stored and stored[0] != kept[0]:
                notes.append(
                    f"[{item.source}]: dropped {stored[0] - kept[0]} rows of Megatron's"
                    f" vocabulary padding ({stored[0]} stored, vocab_size {kept[0]})"
                )
        return notes

    def specs(self) -> list[tuple[str, DType, tuple[int, ...]]]:
        """Output tensors in read order, so reads and writes both run front to back
        (safetensors readers do not care about the order inside a file)."""
        return [
            (target, self.dtypes[target], shape)
            for item in self.ordered_items()
            for target, shape in zip(item.targets, item.shapes)
        ]


def _config_dtype(config: JsonConfig | PretrainedConfig | None) -> DType | None:
    """The dtype a config names, if it is one an export writes (bfloat16, float16 or
    float32): in config.json a string; in a transformers config a torch.dtype. Any other
    (int8, bool, float8, complex: a damaged or crafted config) names none, so `auto` keeps
    the checkpoint's own dtype instead of casting the weights to it."""
    # transformers 5 calls it dtype (its torch_dtype alias warns); older configs torch_dtype
    value = getattr(config, "dtype" if hasattr(config, "dtype") else "torch_dtype", None)
    if not value:
        return None
    return _CONFIG_DTYPES.get(str(value).removeprefix("torch."))


def choose_dtype(
    requested: str, config: JsonConfig | PretrainedConfig | None, stored: list[TensorEntry]
) -> DType:
    """`auto` is the config's dtype (bf16 for Qwen/Llama releases), as verl/HF users expect;
    without one in the config, the checkpoint's own floating dtype."""
    if requested != "auto":
        if requested not in DTYPES:
            raise ExportUsageError(f"--dtype {requested!r}: choose auto, {', '.join(DTYPES)}")
        return DTYPES[requested]
    chosen = _config_dtype(config)
    if chosen is not None:
        return chosen
    floating = Counter(e.dtype for e in stored if e.dtype.is_floating_point)
    return floating.most_common(1)[0][0] if floating else FLOAT32


def model_weights(
    source: ExportSource, drop_mtp: bool, adapter_only: bool = False
) -> tuple[dict[str, str], MtpLayers | None]:
    """{module path: stored key} of the weights an export converts, and the multi-token
    prediction layers left out (`drop_mtp`). Without `drop_mtp` MTP layers are refused
    (exit 1), but where only the adapter is written (`adapter_only`) and none of them holds
    one: no base weight is written there, so nothing of theirs would be lost."""
    try:
        stored = model_tensors(source.reader.tensors)
    except AmbiguousStateError as err:  # two model entries: exit 2, naming the checkpoint
        raise AmbiguousStateError(f"{source.location}: {err}") from None
    except MappingError as err:  # ambiguous names, or a model kind export does not convert
        raise ExportError(f"{source.location}: {err}") from None
    rest, mtp = split_mtp(stored)
    if mtp is None or drop_mtp:
        return rest, mtp
    if adapter_only and not holds_adapters(mtp.tensors):
        return rest, None
    raise ExportError(f"{source.location} {mtp.refusal()}")


def no_model_weights(source: ExportSource) -> ExportError:
    """The error (exit 1) for a checkpoint that holds no model weights at all (verl's
    `save_contents=[extra]` or `[optimizer, extra]`)."""
    return ExportError(f"{source.location}: checkpoint holds no model weights (no model tensors)")


def refuse_no_model_weights(source: ExportSource) -> None:
    """`no_model_weights` where the checkpoint holds none, said before a config.json is
    asked for: such a save has none either (verl writes its Hugging Face config with the
    model only), and the --hf-config it was asked for led to this error next. Any other
    trouble with its weights is said where the export plans them."""
    try:
        stored, _mtp = model_weights(source, drop_mtp=True)
    except MfsdpError:
        return
    if not stored:
        raise no_model_weights(source)


def plan_export(
    source: ExportSource,
    config: JsonConfig | PretrainedConfig,
    *,
    layout_name: str = "auto",
    dtype: str = "auto",
    drop_mtp: bool = False,
    compare_tied_head: bool = True,
    hf_config: str | os.PathLike | None = None,
    config_option: str = HF_CONFIG_OPTION,
) -> ExportPlan:
    """Map names, check them against the config, choose output dtypes. Raises before any
    weight is written; the one read is of a tied config's stored `lm_head.weight` (or
    Megatron-core's `output_layer.weight`) and the embedding, compared before the head is
    dropped (`_refuse_untied_head`; not with `compare_tied_head` false: validate reads
    values only when asked to go deep). `hf_config`: where `config` came from when the
    user gave it (--hf-config), None for the checkpoint's own; `config_option` how the
    command at hand takes a config of the user's own (the trainer: model.hf_config=DIR),
    which its errors name. `drop_mtp`: multi-token prediction layers are left out (never
    read), else refused."""
    if layout_name not in ("auto", *LAYOUTS):
        raise ExportUsageError(f"--layout {layout_name!r}: choose auto, {', '.join(LAYOUTS)}")
    reader = source.reader
    stored, mtp = model_weights(source, drop_mtp)
    buffers = [stored.pop(path) for path in stored_buffers.ignored_buffers(list(stored))]
    if not stored:
        raise no_model_weights(source)
    paths = {path: reader.tensors[key].shape for path, key in stored.items()}
    unknown_error = _unmapped_error(paths, layout_name, hf_config)
    lora = None
    try:
        chosen_layout = detect_layout(paths) if layout_name == "auto" else layout_name
        geometry = recorded_geometry(source, config)
        if chosen_layout == MCORE:
            lora, paths, stored = _megatron_lora(config, paths, stored, geometry, source)
        items = map_names(paths, stored, chosen_layout, config.model_type, geometry)
    except StoredDtypeError as err:  # said without where by `split_adapters`
        raise StoredDtypeError(f"{source.location} {err}") from None
    except StoredShapeError as err:
        raise ExportError(f"{source.location} {err}") from None
    except ShapeError as err:  # the config's numbers: exit 2 when the user gave it
        raise unknown_error(f"{source.location} {err}") from None
    except UnsupportedModelError as err:
        raise ExportError(f"{source.location} {err}") from None
    except AdapterWeightsError as err:
        raise foreign_weights(
            err, f"{source.location} {err}{_saved_peft_adapter(source.location)}"
        ) from None
    except MappingError as err:
        raise unknown_error(f"{source.location}: {err}") from None
    if chosen_layout == MCORE:
        try:
            refuse_attention_window(config)
        except UnsupportedModelError as err:
            raise _window_error(source, config, hf_config, err) from None
    _check_against_config(source, config, items, chosen_layout, unknown_error)
    if compare_tied_head and geometry.tie_word_embeddings:
        pair = _TIED_PAIRS[chosen_layout]
        _refuse_untied_head(source, stored, pair, hf_config, config_option)
    out_dtype = choose_dtype(dtype, config, [reader.tensors[k] for k in stored.values()])
    cast_from_config = dtype == "auto" and _config_dtype(config) is not None
    dtypes = {}
    for item in items:
        src_dtype = reader.tensors[item.source].dtype
        for target in item.targets:
            dtypes[target] = out_dtype if src_dtype.is_floating_point else src_dtype
    return ExportPlan(
        source,
        chosen_layout,
        config.model_type,
        geometry,
        items,
        out_dtype,
        dtypes,
        lora=lora,
        mtp=mtp,
        cast_from_config=cast_from_config,
        buffers=buffers,
        flat_optimizer_note=unexported_optimizer_state.flat_buffers_note(list(reader.tensors)),
        main_params_note=unexported_optimizer_state.main_params_note(
            {key: entry.dtype for key, entry in reader.tensors.items()},
            out_dtype,
            [reader.tensors[key].dtype for key in stored.values()],
        ),
    )


def _window_error(
    source: ExportSource,
    config: JsonConfig | PretrainedConfig,
    hf_config: str | os.PathLike | None,
    err: UnsupportedModelError,
) -> MfsdpError:
    """A window export cannot convert is the checkpoint's (exit 1, naming it); but layer
    counts transformers itself refuses (layer_types not one per layer: no window can be
    read) are --hf-config's fault: exit 2 naming its config.json, as --verify's
    transformers check, which meets the same file first, says it."""
    keys = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    if hf_config is not None and sliding_window(keys) is None:
        return ExportUsageError(f"{config_json_location(os.fspath(hf_config))}: {err}")
    return ExportError(f"{source.location}: {err}")


def _unmapped_error(
    paths: dict[str, tuple[int, ...]], layout_name: str, hf_config: str | os.PathLike | None
) -> type[ExportUsageError] | type[ExportError]:
    """What weights the config and layout contradict are (a q/k norm or an extra layer or
    expert it has no place for, a shape or a weight it says otherwise or needs): a usage
    error (exit 2) when the user chose what they were mapped by, a config of their own
    (`hf_config`) or a layout other than the one the names show (`layout_name`); else the
    checkpoint contradicts its own config (its record, its huggingface/) and layout, and
    is what is wrong (exit 1), as validate reports it."""
    if hf_config is not None:
        return ExportUsageError
    if layout_name != "auto":
        try:
            shown = detect_layout(paths)
        except MappingError:
            shown = None
        if shown != layout_name:
            return ExportUsageError
    return ExportError


def recorded_geometry(source: ExportSource, config: JsonConfig | PretrainedConfig) -> Geometry:
    """The numbers the fused tensors of `source` split by: `config`'s, and how the
    checkpoint's record says they were saved (`recorded_layout`)."""
    return with_recorded_layout(Geometry.from_config(config), source.paths, source.reader)


def plan_adapter(
    source: ExportSource, config: JsonConfig | PretrainedConfig, drop_mtp: bool = False
) -> tuple[MegatronLora | None, MtpLayers | None, Geometry]:
    """The LoRA adapter (Megatron's or PEFT's) a checkpoint holds, checked against the
    config's shapes (base weights, when saved beside it, are not read): None when it holds
    none; the multi-token prediction layers left out (`model_weights`); and the geometry its
    B rows split by (`recorded_geometry`). Adapters on MTP layers alone leave nothing to
    write once those are left out: a usage error saying so."""
    stored, mtp = model_weights(source, drop_mtp, adapter_only=True)
    paths = {path: source.reader.tensors[key].shape for path, key in stored.items()}
    try:
        geometry = recorded_geometry(source, config)
        lora = _megatron_lora(config, paths, stored, geometry, source, base_needed=False)[0]
    except StoredDtypeError as err:  # said without where by `split_adapters`
        raise StoredDtypeError(f"{source.location} {err}") from None
    except ShapeError as err:
        raise ExportError(f"{source.location} {err}") from None
    except AdapterWeightsError as err:
        raise foreign_weights(err, f"{source.location} {err}") from None
    if lora is None and mtp is not None and holds_adapters(mtp.tensors):
        raise UnsupportedAdapter(
            f"{source.location}: its Megatron PEFT adapter tensors all lie in the {mtp.summary()}"
            f" that {DROP_MTP_FLAG} leaves out; there is no adapter of the main model to export"
        )
    return lora, mtp, geometry


def _megatron_lora(
    config: JsonConfig | PretrainedConfig,
    paths: dict[str, tuple[int, ...]],
    stored: dict[str, str],
    geometry: Geometry,
    source: ExportSource,
    base_needed: bool = True,
) -> tuple[MegatronLora | None, dict[str, tuple[int, ...]], dict[str, str]]:
    """(adapter, base paths, base keys): Megatron LoRA tensors taken out of the model's
    names (`source`: the checkpoint, whose dtypes are checked, and whose saved PEFT
    adapter config may declare several ranks: `declared_rank_pattern`) and checked against
    the config and, each B's rows, against how `geometry` splits them (`check_b_splits`); a
    checkpoint holding the adapter alone is refused when `base_needed`, naming what
    supplies the base."""
    reader = source.reader
    dtypes = {key: reader.tensors[key].dtype for key in stored.values()}
    root = source.paths.root if source.paths is not None else None
    rank_pattern = declared_rank_pattern(saved_peft_adapter(source.location), root)
    base_paths, base_keys, adapters = split_adapters(paths, stored, dtypes, rank_pattern)
    if not adapters:
        return None, paths, stored
    if base_needed and not base_paths:
        raise AdapterWeightsError(
            f"[{min(adapters.values())}]: {len(adapters)} {adapter_kind(adapters)} adapter"
            f" tensor(s) and no base weights: a {adapter_kind(adapters)} (LoRA) checkpoint,"
            " which holds the adapter only;"
            f" export it with `{EXPORT_COMMAND} --adapter-only` (a Hugging Face PEFT adapter),"
            f" or merge it with `{EXPORT_COMMAND} --hf-config BASE_DIR` naming the base model's"
            " dir (config.json and *.safetensors)"
        )
    shapes = {path: paths[path] for path in adapters}
    try:
        lora = describe_adapters(
            adapters, shapes, dict(expected_weights_of(config).allowed), rank_pattern
        )
    except ValueError as err:
        if isinstance(err, AdapterWeightsError):
            raise
        raise ShapeError(str(err)) from None
    check_b_splits(lora, {adapters[path]: paths[path] for path in adapters}, geometry)
    return lora, base_paths, base_keys


# Where Megatron-Bridge (also_save_hf_checkpoint: iter_N/hf/) and verl (mbridge:
# model/huggingface/adapter/) put the Hugging Face PEFT adapter they export beside a PEFT
# checkpoint, relative to its DCP dir.
_PEFT_ADAPTER_DIRS = (("hf",), ("..", "huggingface", "adapter"))  # Bridge's, verl's


def saved_peft_adapter(location: str) -> Path | None:
    """The dir of the Hugging Face PEFT adapter saved beside the checkpoint at `location`,
    if one of those dirs holds an adapter_config.json (a regular file, not followed through
    a link), else None. Nothing is read; nothing beside a URL is looked for (its parts
    joined as a local path, `file:/abs/dist_ckpt/hf` with a slash lost, named a folder of
    the current directory)."""
    if is_url(location):
        return None
    # the HF Trainer's checkpoint-N/, beside its pytorch_model_fsdp_0/
    trainer = ((os.pardir,),) if hf_trainer.MODEL_DCP_RE.match(Path(location).name) else ()
    for parts in (*_PEFT_ADAPTER_DIRS, *trainer):
        folder = Path(os.path.normpath(os.path.join(location, *parts)))
        if _holds_adapter_config(folder):
            return folder
    return _named_adapter_dir(Path(location).parent) if trainer else None


def _named_adapter_dir(checkpoint: Path) -> Path | None:
    """peft saves an adapter not named "default" in checkpoint-N/<its name>/: that dir, when
    exactly one holds an adapter_config.json (of several, which one the DCP holds is not
    known)."""
    try:
        with os.scandir(checkpoint) as entries:
            folders = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:  # not a local dir (a URL): nothing saved beside it here
        return None
    named = [folder for folder in folders if _holds_adapter_config(folder)]
    return named[0] if len(named) == 1 else None


def _holds_adapter_config(folder: Path) -> bool:
    """An adapter_config.json there, a regular file and not a link (reads stay inside)."""
    found = stat_inside(folder / ADAPTER_CONFIG_FILE, folder, follow_symlinks=False)
    return found is not None and stat.S_ISREG(found.st_mode)


def _saved_peft_adapter(location: str) -> str:
    """`; a Hugging Face PEFT adapter saved with it: DIR` when there is one, else nothing:
    the ready answer for a user who asked to export."""
    folder = saved_peft_adapter(location)
    return f"; a Hugging Face PEFT adapter saved with it: {folder}" if folder else ""


_LIVE_PEFT = re.compile(r"\.base_layer\.|\.lora_[AB]\.[^.]+\.weight$")
# FSDP1's FlatParameter: `_flat_param` (under `_fsdp_wrapped_module.`, which loses the
# wrapper segment) holds a wrapped module's weights flattened into one tensor
_FSDP1_FLAT = re.compile(r"(^|\.)_flat_param$")


def live_peft_hint(unknown: list[str]) -> str:
    """What a live PeftModel's state dict is (`q_proj.base_layer.weight`, `lora_A.default.
    weight`: `model.state_dict()` of a PEFT model) and the saves export reads instead; what
    FSDP1's flattened parameter is and how to save the model instead; "" for other names."""
    if any(_FSDP1_FLAT.search(name) for name in unknown):
        return (
            "; this is FSDP1's flattened parameter (_flat_param: use_orig_params=False keeps a"
            " module's weights as one tensor and records no per-weight names or shapes):"
            " save the model again with use_orig_params=True and state_dict_type"
            " SHARDED_STATE_DICT through DCP (or get_model_state_dict), or FULL_STATE_DICT"
        )
    if not any(_LIVE_PEFT.search(name) for name in unknown):
        return ""
    return (
        "; these are a live PEFT model's names (base_layer, lora_A.<adapter>): export-hf reads"
        " the adapter saved alone (get_peft_model_state_dict, Accelerate's adapter_only) with"
        " --hf-config BASE_DIR, or the model after merge_and_unload()"
    )


def unknown_tensors_line(
    model_type: str, chosen_layout: str, unknown: list[str], sources: list[str]
) -> tuple[str, bool]:
    """(line, whether a kind export does not convert) for tensors whose names (`unknown`,
    stored as `sources`) the config's model does not have: `N tensor(s) unknown to MODEL
    (LAYOUT layout), e.g. ...` with what a recognised kind of save is (`live_peft_hint`).
    Export's refusal and validate's finding, in one line."""
    hint = live_peft_hint(unknown)
    line = (
        f"{len(unknown)} tensor(s) unknown to {model_type} ({chosen_layout} layout), e.g."
        f" {', '.join(map(repr, sources[:3]))}{hint}"
    )
    return line, bool(hint)


def _check_against_config(
    source: ExportSource,
    config: JsonConfig | PretrainedConfig,
    items: list[MappedTensor],
    chosen_layout: str,
    unknown_error: type[ExportUsageError] | type[ExportError],
) -> None:
    """Refuse a plan whose tensors the config's model would not load as written, before a
    byte is written: `from_pretrained` drops an unknown name and randomly initializes a
    missing one with a warning only, so such an export loads and is another model. Unknown
    names, a wrong shape and a missing weight raise `unknown_error` (`_unmapped_error`: the
    user's config or layout, or the checkpoint's own); a weight stored as integers is the
    checkpoint's whatever the config (a tied head is no weight of its own)."""
    expected = expected_weights_of(config)
    produced = {
        t: (shape, item.source) for item in items for t, shape in zip(item.targets, item.shapes)
    }
    unknown = sorted(t for t in produced if t not in expected.allowed)
    if unknown:
        sources = [produced[t][1] for t in unknown]
        line, kind = unknown_tensors_line(config.model_type, chosen_layout, unknown, sources)
        raise (UnconvertedNames if kind else unknown_error)(f"{source.location}: {line}")
    wrong = wrong_shape(items, expected)
    if wrong is not None:
        raise unknown_error(f"{source.location} {wrong}")
    required = set(expected.required)
    keys = {target: produced[target][1] for target in required.intersection(produced)}
    dtypes = {key: source.reader.tensors[key].dtype for key in keys.values()}
    refuse_non_float_weights(keys, dtypes, config.model_type, source.location)
    if expected.tie_word_embeddings:
        required.discard("lm_head.weight")
    missing = sorted(required - set(produced), key=natural_order)
    if missing:
        raise unknown_error(
            f"{source.location}: checkpoint lacks {len(missing)} weight(s) the config needs, e.g. "
            f"{missing[0]}"
        )


def wrong_shape(items: list[MappedTensor], expected: ExpectedWeights) -> str | None:
    """`[stored key]: shape ... as TARGET, but the config says ...` for the first mapped
    tensor whose shape is not the one the config gives its target, None where all fit;
    targets the config has no place for are left to the caller. The one shape check of
    export's plan and of validate's check of a record refused for its kind
    (`record_shapes`): the config the record derives is held to the tensors alike."""
    for item in items:
        for target, shape in zip(item.targets, item.shapes):
            wanted = expected.allowed.get(target)
            if wanted is not None and tuple(wanted) != tuple(shape):
                return (
                    f"[{item.source}]: shape {shape} as {target}, but the config"
                    f" ({expected.model_type}) says {tuple(wanted)}"
                )
    return None


# (head, embedding) of a tied model as each layout names them
_TIED_PAIRS = {
    HF: (tied_head.HEAD, tied_head.EMBEDDING),
    MCORE: (tied_head.MCORE_HEAD, tied_head.MCORE_EMBEDDING),
}


def _refuse_untied_head(
    source: ExportSource,
    stored: dict[str, str],
    pair: tuple[str, str],
    hf_config: str | os.PathLike | None,
    config_option: str,
) -> None:
    """Under tie_word_embeddings=true the export writes the embedding alone; a stored head
    (`pair`: head and embedding as the layout names them) equal to it is its copy and
    dropped, one that differs in nearly every element was trained untied and dropping it
    would change the model. That is the config's fault: exit 2 when it is the user's
    (`hf_config`), exit 1 when it is the checkpoint's own (its record, its huggingface/),
    which the user can only override with a config of their own (`config_option`, as the
    command at hand takes it). One that differs in a few elements, or whose files no
    longer match the manifest, is damaged instead (exit 1: `tied_head.unequal_verdict`)."""
    head, embedding = stored.get(pair[0]), stored.get(pair[1])
    if head is None or embedding is None:
        return
    if hf_config is not None:
        config = _given_config(config_option, hf_config)
        remedy = "give a config with tie_word_embeddings false"
    else:
        config = "the checkpoint's own config"
        remedy = f"pass {_config_argument(config_option)} with tie_word_embeddings false"
    verdict = tied_head.dcp_verdict(source.reader, source.paths, (head, embedding), config, remedy)
    if verdict is not None:
        error = ExportUsageError if hf_config is not None and not verdict.damaged else ExportError
        raise error(f"{source.location}: [{head}]: {verdict.what}")


def _config_argument(config_option: str) -> str:
    """How to give a config with `config_option`: a flag (`--hf-config`) with what it takes
    spelled out; a key (`model.hf_config=DIR`) already shows its value."""
    return f"{config_option} DIR|config.json" if config_option.startswith("-") else config_option


def _given_config(config_option: str, hf_config: str | os.PathLike) -> str:
    """The config the user gave, as they gave it: `--hf-config X` or `model.hf_config=X`."""
    if config_option.startswith("-"):
        return f"{config_option} {hf_config}"
    return f"{config_option.split('=', 1)[0]}={hf_config}"


def convert(plan: ExportPlan, item: MappedTensor) -> list[tuple[str, torch.Tensor]]:
    """Read one stored tensor and return its HF tensors, cast to the export dtype."""
    tensor = plan.source.reader.read_tensor(item.source)
    outputs = item.transform.apply(tensor, plan.geometry)
    del tensor
    converted = []
    for name, value in zip(item.targets, outputs):
        if plan.lora is not None and name in plan.lora.targets:  # merged in fp32, then cast
            value = value.float() + plan.lora.delta(plan.source.reader, name, plan.geometry)
        converted.append((name, value.to(plan.dtypes[name].torch)))
    return converted


def task_cost(plan: ExportPlan, item: MappedTensor) -> int:
    """Bytes one task holds at its peak: the stored tensor plus any copies made from it."""
    source = plan.entry(item).nbytes
    copies = (
        item.transform is not COPY
        or plan.merges(item)
        or any(plan.dtypes[t] != plan.entry(item).dtype for t in item.targets)
    )
    out = sum(
        math.prod(shape) * plan.dtypes[t].itemsize for t, shape in zip(item.targets, item.shapes)
    )
    merged = sum(  # the fp32 weight and its delta, made before the cast
        2 * math.prod(shape) * 4
        for t, shape in zip(item.targets, item.shapes)
        if plan.lora is not None and t in plan.lora.targets
    )
    return source + (out if copies else 0) + merged


def _read_order(entry: TensorEntry) -> tuple:
    first = min(
        (c for c in entry.chunks if c.file), key=lambda c: (c.file, c.file_offset), default=None
    )
    return (first.file, first.file_offset) if first else ("", 0)
