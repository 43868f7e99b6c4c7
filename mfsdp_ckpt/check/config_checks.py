"""Checks of a checkpoint's weights against the model config export would write them for.

The config is the checkpoint's own huggingface/ config.json, one given by --hf-config, or
the one its record implies (Megatron-LM's args, Megatron-Bridge's run_config.yaml); the
weights are mapped as export maps them, so a checkpoint validate passes is one export
can write (the files export copies beside the weights: `asset_checks`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check import value_head
from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.check.report import (
    ERROR,
    NO_HF_CONFIG,
    NOTE,
    SHAPES_UNCHECKED,
    WARNING,
    ValidationReport,
    error_location,
    without_location,
)
from mfsdp_ckpt.convert import tied_head
from mfsdp_ckpt.format import dir_entries, layout, state_keys
from mfsdp_ckpt.format.bridge_run_config import missing_run_config
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.confined_stat import LeadsOutError
from mfsdp_ckpt.storage.reader import (
    CheckpointFormatError,
    CheckpointReader,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from mfsdp_ckpt.convert.export_source import ExportSource, JsonConfig
    from mfsdp_ckpt.convert.megatron_lora import MegatronLora


def config_to_check(
    paths: layout.CheckpointPaths, hf_config: str | os.PathLike | None
) -> Path | None:
    """The config.json to check weights against, or None when there is none to check. One
    that exists but is no regular file (a directory, a FIFO, a link loop) is returned, so
    the check reports it: export refuses it, so validate must not call the step valid."""
    if hf_config is not None:
        given = Path(hf_config)
        return given / HF_CONFIG_FILE if given.is_dir() else given
    if paths.hf_assets is None:
        return None
    config_file = paths.hf_assets / HF_CONFIG_FILE
    try:
        found = dir_entries.stat_inside(config_file, paths.root, follow_symlinks=False)
    except LeadsOutError:  # huggingface/ linked out: the check refuses it by name
        return config_file
    return None if found is None else config_file


def check_against_config(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    roots: state_keys.StateRoots,
    report: ValidationReport,
    hf_config: str | os.PathLike | None = None,
) -> None:
    """Weights against the config export would use: names and shapes always; with `deep`
    (which reads values) also a tied config's stored head against the embedding."""
    config_file = config_to_check(paths, hf_config)
    if config_file is None:
        _check_against_recorded_config(paths, reader, report)
        return
    from mfsdp_ckpt.convert.hf_config import HFConfigError, expected_weights_for

    # huggingface/ stays inside the checkpoint; a --hf-config model dir inside itself (or
    # its Hugging Face cache folder), as export and import read one
    root: str | os.PathLike = paths.root
    within = "the checkpoint"
    if hf_config is not None:
        root = safe_files.model_dir_root(config_file.parent)
        within = f"the model dir {config_file.parent}"
    from mfsdp_ckpt.convert.mapping_errors import MappingError
    from mfsdp_ckpt.convert.name_maps import weight_paths

    try:  # virtual-pipeline chunks, or two stored keys for one weight: export's refusals
        weights = weight_paths(roots, reader.tensors)
    except MappingError as err:
        report.add(ERROR, paths.dist_ckpt, str(err))
        return
    _leave_out_buffers(report, weights, paths.dist_ckpt)
    try:
        safe_files.regular_file(config_file, root, within)
        _check_layer_count(report, config_file, root, weights)
        expected = expected_weights_for(config_file, root=root)
    except CheckpointFileError as err:
        report.add_error(config_file, err)
        return
    except HFConfigError as err:
        report.add_error(config_file, err)
        return
    _check_config_against_record(paths, reader, report, config_file, root, hf_config)
    if report.deep:  # imports transformers (seconds): not in the checks before each export
        _check_config_loads(report, config_file, root)
    from mfsdp_ckpt.convert.fused_experts import hub_expert_names

    # experts fused as transformers 5.x holds them in memory are checked as the per-expert
    # tensors of the hub's files, which the config's expectations name
    stored = hub_expert_names(
        {path: reader.tensors[key].shape for path, key in weights.items()}, expected.model_type
    )
    if stored and not set(stored) & set(expected.allowed):
        _check_mapped_against_config(paths, reader, report, config_file, root)
        return

    def where(name: str) -> str:  # the stored key (experts fused in it: the name it would have)
        return f"[{weights.get(name) or roots.stored_name(name)}]"

    model = expected.model_type
    if _unconverted_names(
        report, paths, roots, weights, sorted(set(stored) - set(expected.allowed)), model
    ):
        return
    missing = [where(name) for name in expected.required if name not in stored]
    _name_or_count(
        report,
        config_file,
        missing,
        f"missing; {config_file} ({model}) expects it",
        f"weights it expects ({model}) are missing",
    )
    for name, shape in expected.required.items():
        found = stored.get(name)
        if found is not None and found != shape:
            report.add(ERROR, where(name), f"shape {found}, {config_file} expects {shape}")
    _refuse_non_float(report, paths, reader, weights, expected.required, model)
    unexpected = [where(name) for name in sorted(set(stored) - set(expected.allowed))]
    _name_or_count(
        report,
        config_file,
        unexpected,
        f"unexpected for {model} per {config_file}",
        f"weights are unexpected for {model} per it",
    )
    if report.deep and expected.tie_word_embeddings:
        _check_tied_head(paths, reader, weights, report, config_file)


def _unconverted_names(
    report: ValidationReport,
    paths: layout.CheckpointPaths,
    roots: state_keys.StateRoots,
    weights: dict[str, str],
    unexpected: list[str],
    model: str,
) -> bool:
    """Whether the weights the config does not have (`unexpected`, module paths) are a kind
    of save export does not convert (a live PEFT model's base_layer names, FSDP1's
    flattened parameter): then UNSUPPORTED with export's line (`unknown_tensors_line`),
    not "missing" weights that are there under other names."""
    from mfsdp_ckpt.convert.export_plan import unknown_tensors_line
    from mfsdp_ckpt.convert.name_maps import HF

    sources = [weights.get(name) or roots.stored_name(name) for name in unexpected]
    line, kind = unknown_tensors_line(model, HF, unexpected, sources)
    if kind:
        report.add_unsupported(paths.dist_ckpt, line)
    return kind


def _refuse_non_float(
    report: ValidationReport,
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    weights: dict[str, str],
    required: Iterable[str],
    model: str,
) -> None:
    """A weight the config requires stored as no float (int8 without its scale) is
    refused by export (`refuse_non_float_weights`, the rule it reads by): an error here,
    in its line."""
    from mfsdp_ckpt.convert.export_errors import StoredDtypeError
    from mfsdp_ckpt.convert.weight_dtype import refuse_non_float_weights

    keys = {name: weights[name] for name in required if name in weights}
    dtypes = {key: reader.tensors[key].dtype for key in keys.values()}
    try:
        refuse_non_float_weights(keys, dtypes, model, paths.dist_ckpt)
    except StoredDtypeError as err:
        report.add(ERROR, paths.dist_ckpt, without_location(err, paths.dist_ckpt))


def _leave_out_buffers(report: ValidationReport, weights: dict[str, str], where: Path) -> None:
    """Buffers loading ignores (`stored_buffers`) taken out of `weights` (module path:
    stored key) with a note, as export-hf and import-hf leave them out: "unexpected for"
    the config called a checkpoint whose every weight is sound INVALID."""
    from mfsdp_ckpt.convert.stored_buffers import ignored_buffers, left_out_note

    buffers = [weights.pop(path) for path in ignored_buffers(list(weights))]
    if buffers:
        report.add(NOTE, where, left_out_note(buffers))


def check_lora_against_config(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    roots: state_keys.StateRoots,
    report: ValidationReport,
    hf_config: str | os.PathLike | None = None,
) -> None:
    """An mfsdp LoRA step holds adapters, not the config's weights: each A and B against the
    weight the config gives the module it adapts (B @ A has its shape), and the config
    against the model the checkpoint records, as the merged export checks both before it
    writes (a --hf-config of another hidden size passed here and was refused there). Each
    A and B stored as no float is damage whatever the config (`refuse_non_float_adapter`,
    the rule export reads it by)."""
    from mfsdp_ckpt.convert.export_errors import StoredDtypeError
    from mfsdp_ckpt.convert.hf_config import HFConfigError, expected_weights_for
    from mfsdp_ckpt.convert.weight_dtype import MFSDP_LORA, refuse_non_float_adapter
    from mfsdp_ckpt.lora import parse_adapter_key

    adapter = {  # stored key -> dtype
        key: reader.tensors[key].dtype
        for key in roots.weight_keys(reader.tensors)
        if parse_adapter_key(roots.module_path(key)) is not None
    }
    try:
        refuse_non_float_adapter(adapter, adapter, MFSDP_LORA)
    except StoredDtypeError as err:
        report.add(ERROR, paths.dist_ckpt, str(err))
    config_file = config_to_check(paths, hf_config)
    if config_file is None:
        return
    given = hf_config is not None
    root = safe_files.model_dir_root(config_file.parent) if given else paths.root
    within = f"the model dir {config_file.parent}" if given else "the checkpoint"
    try:
        safe_files.regular_file(config_file, root, within)
        expected = expected_weights_for(config_file, root=root)
    except (CheckpointFileError, HFConfigError) as err:
        report.add_error(config_file, err)
        return
    _check_config_against_record(paths, reader, report, config_file, root, hf_config)
    pairs: dict[str, dict[str, str]] = {}
    for key in roots.weight_keys(reader.tensors):
        parsed = parse_adapter_key(roots.module_path(key))
        if parsed is not None:
            pairs.setdefault(parsed.module, {})[parsed.which] = key
    unfit: list[tuple[str, str]] = []  # (the adapter's B, why B @ A fits no weight)
    for module, pair in sorted(pairs.items()):
        if set(pair) != {"A", "B"}:  # the checks of the adapter's own tensors say so
            continue
        weight = f"{module}.weight"
        needs = (reader.tensors[pair["B"]].shape[0], reader.tensors[pair["A"]].shape[-1])
        found = expected.allowed.get(weight)
        if found is None or tuple(found) != needs:
            gives = f"gives it {tuple(found)}" if found is not None else "has no such weight"
            unfit.append(
                (f"[{pair['B']}]", f"B @ A adds {needs} to {weight}; {config_file} {gives}")
            )
    if len(unfit) <= _SHOWN_NAMES:
        for where, what in unfit:
            report.add(ERROR, where, what)
        return
    where, what = unfit[0]
    report.add(
        ERROR,
        config_file,
        f"{len(unfit)} adapters do not fit it ({expected.model_type}), e.g. {where}: {what}",
    )


# Weights a config finds missing or unexpected: named one a line up to this many, else
# counted on one line naming this many (a config of another size misses thousands)
_SHOWN_NAMES = 3


def _name_or_count(
    report: ValidationReport, config_file: Path, names: list[str], each: str, counted: str
) -> None:
    """One error per name in `names` (each `[stored key]`) saying `each`, or, past
    _SHOWN_NAMES, one error at `config_file`: `N <counted>: ` and the first few names."""
    if len(names) <= _SHOWN_NAMES:
        for name in names:
            report.add(ERROR, name, each)
        return
    report.add(ERROR, config_file, f"{len(names)} {counted}: {first_of(names, _SHOWN_NAMES)}")


def _check_layer_count(
    report: ValidationReport, config_file: Path, root: str | os.PathLike, weights: dict[str, str]
) -> None:
    """A config naming more layers than the checkpoint holds weights for is said as that one
    fact, first, as export-hf refuses it (`layers_beyond_checkpoint`): the weights it
    finds missing follow from it."""
    from mfsdp_ckpt.convert.hf_config import layers_beyond_checkpoint, read_config_json

    layers = read_config_json(config_file, root)[1].get("num_hidden_layers")
    found = layers_beyond_checkpoint(layers, weights)
    if found is not None:
        report.add(ERROR, config_file, found)


def _check_tied_head(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    weights: dict[str, str],
    report: ValidationReport,
    config_file: Path,
) -> None:
    """A tied config's export writes the embedding alone: a stored `lm_head.weight` that
    differs from it (trained untied, or damaged: `tied_head.unequal_verdict`) is refused
    there, so it fails here. Two tensors' values, compared a bounded piece at a time
    (nothing read when the head is stored as the embedding's own bytes): a `deep` check,
    as NaN is, which export also refuses."""
    head, embedding = weights.get(tied_head.HEAD), weights.get(tied_head.EMBEDDING)
    if head is None or embedding is None:
        return
    remedy = "use a config with tie_word_embeddings false"
    try:
        verdict = tied_head.dcp_verdict(reader, paths, (head, embedding), str(config_file), remedy)
    except (CheckpointFormatError, CheckpointFileError) as err:
        report.add(ERROR, f"[{head}]", f"not compared with [{embedding}]: {err}")
        return
    if verdict is not None:
        report.add(ERROR, f"[{head}]", verdict.what)


def _check_config_against_record(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    report: ValidationReport,
    config_file: Path,
    root: str | os.PathLike,
    hf_config: str | os.PathLike | None,
) -> None:
    """A config.json that contradicts the model the checkpoint's own record describes
    (Bridge's run_config.yaml, Megatron-LM's args, verl's transformer_config.json) gives
    tensors of the same shapes a wrong q/k/v split or cut vocabulary: export refuses it, so
    validate must not pass it. The record is held to it by the calls export makes, in their
    order (`refuse_uncomputable`, then `contradiction`), so the error is export's line: a
    setting no config.json computes names the record first and the config (`--hf-config
    FILE` when given) after. A record that derives no config leaves it uncompared, and so
    does a checkpoint of Megatron-core weights that records nothing (given `--hf-config`):
    a warning says so, in export's words (`unchecked_note`). A record that cannot be read,
    or states a damaged value, is an error naming it (export refuses it), said once where
    another check already named the same place (an `args` pickle)."""
    from mfsdp_ckpt.convert.hf_config import read_config_json
    from mfsdp_ckpt.convert.megatron_config import MegatronConfigError
    from mfsdp_ckpt.convert.record_agreement import (
        OWN_CONFIG_REMEDY,
        contradiction,
        refuse_uncomputable,
        unchecked_note,
    )

    named = f"--hf-config {config_file}" if hf_config is not None else str(config_file)
    try:
        given = read_config_json(config_file, root)[1]
        refuse_uncomputable(given, paths, reader, named)
        found = contradiction(given, paths, reader)
    except MegatronConfigError as err:  # the record's setting, in export's line
        _record_refused(paths, reader, report, err)
        return
    except (CheckpointFormatError, CheckpointFileError) as err:
        where = error_location(err, paths.root)
        if not _already_wrong(report, where):
            report.add_error(where, err)
        return
    if found is not None:
        # the checkpoint's own config.json: export's line, its remedy included
        remedy = f"; {OWN_CONFIG_REMEDY}" if hf_config is None else ""
        report.add(ERROR, config_file, f"{found}{remedy}")
    elif (unchecked := unchecked_note(paths, reader, hf_config is not None)) is not None:
        report.add(WARNING, config_file, unchecked)


def _check_config_loads(
    report: ValidationReport, config_file: Path, root: str | os.PathLike
) -> None:
    """A config.json transformers' config class refuses (`rms_norm_eps: "1e-6"`, a
    `layer_types` not one per layer) is an error: every shape in it may be right, but
    `from_pretrained` refuses the model, and export-hf --verify refuses to write it; so is
    a generation_config.json beside it that GenerationConfig refuses."""
    from mfsdp_ckpt.convert.export_source import check_generation_config_beside
    from mfsdp_ckpt.convert.hf_config import HFConfigError, read_config_json, refuse_unloadable
    from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
    from mfsdp_ckpt.storage.byte_store import CheckpointFileError

    try:
        refuse_unloadable(read_config_json(config_file, root)[1], config_file)
    except HFConfigError as err:
        report.add_error(config_file, err)
    if config_file.name == HF_CONFIG_FILE:  # and GenerationConfig's of the file beside it
        try:
            check_generation_config_beside(config_file.parent, root)
        except CheckpointFileError as err:
            where = config_file.parent / GENERATION_CONFIG_FILE
            report.add_error(where, err)


def _check_mapped_against_config(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    report: ValidationReport,
    config_file: Path,
    root: str | os.PathLike,
) -> None:
    """Weights not named as in transformers (Megatron-core's GPTModel): map them as export
    would and check every resulting shape against the config, before anyone exports: with
    the vocab_size export writes where the record proves fewer rows than the config names
    (`recorded_vocab`), whose tokenizer (read inside `root`) must then fit them."""
    from mfsdp_ckpt.convert.export_source import load_config

    def config() -> JsonConfig | PretrainedConfig:
        loaded = load_config(config_file)
        return _vocab_fitted(paths, reader, report, loaded, config_file.parent, root)

    _check_plan(paths, reader, report, config_file, config)


def _vocab_fitted(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    report: ValidationReport,
    loaded: JsonConfig | PretrainedConfig,
    tokenizer_dir: Path | None,
    root: str | os.PathLike,
) -> JsonConfig | PretrainedConfig:
    """`loaded` with the vocab_size export writes where the record proves fewer rows than
    it names (`recorded_vocab`, as `fit_config_file` fits the config export writes, given or
    derived); the tokenizer.json export copies from `tokenizer_dir` (read inside `root`)
    must then name no token past the rows, else an error naming it."""
    from mfsdp_ckpt.convert.recorded_vocab import (
        TOKENIZER_FILE,
        fitted_config,
        too_many_tokens,
        vocab_fit,
    )

    fit = vocab_fit(paths, reader, getattr(loaded, "vocab_size", None))
    if fit is not None and tokenizer_dir is not None:
        try:
            problem = too_many_tokens(tokenizer_dir, root, fit.rows)
        except CheckpointFileError:  # named by the checks of the files export copies
            problem = None
        if problem is not None:
            where = tokenizer_dir / TOKENIZER_FILE  # the file it counted
            report.add(ERROR, where, problem.removeprefix(f"{where}: "))
    return fitted_config(loaded, fit)


def _check_against_recorded_config(
    paths: layout.CheckpointPaths, reader: CheckpointReader, report: ValidationReport
) -> None:
    """Without a Hugging Face config, the one the checkpoint's own record implies
    (Megatron-LM's args, Megatron-Bridge's run_config.yaml, verl's transformer_config.json),
    derived by the call export makes (`recorded_config`), so what export refuses fails here
    in export's own line: a record of a model no family here computes (LayerNorm, a sigmoid
    MoE router) or stating a value of the wrong kind is an error naming the record and the
    key, as is one that cannot be read (a pickle naming os.system, bad YAML). A record that
    lacks the sizes, or no record, leaves the check out: export asks for --hf-config there
    (exit 2, input it lacks, not a fault of the checkpoint), and the verdict must not read
    as if the shapes were checked (a warning says so). The weights are held to the derived
    config as export holds them: more layers than stored said as that one fact, the
    vocab_size fitted to rows the record proves (`_vocab_fitted`), then the plan."""
    from mfsdp_ckpt.convert.export_source import config_json_location, json_config
    from mfsdp_ckpt.convert.hf_config import HFConfigError, layers_beyond_checkpoint
    from mfsdp_ckpt.convert.megatron_config import MegatronConfigError, MegatronSettingsMissing
    from mfsdp_ckpt.convert.megatron_record import recorded_config

    try:
        derived = recorded_config(paths, reader)
    except MegatronSettingsMissing as err:
        report.add(WARNING, paths.dist_ckpt, f"{NO_HF_CONFIG}; {err.lacking()}")
        return
    except MegatronConfigError as err:
        _record_refused(paths, reader, report, err)
        return
    except (CheckpointFormatError, CheckpointFileError) as err:
        where = error_location(err, paths.root)
        if not _already_wrong(report, where):
            report.add_error(where, err)
        return
    if derived is None:
        missing = missing_run_config(paths)  # export-hf's line for it, where it is the cause
        if missing is not None and paths.step_dir is not None:
            report.add(WARNING, paths.step_dir, f"{missing}; {SHAPES_UNCHECKED}")
        else:
            report.add(WARNING, paths.dist_ckpt, NO_HF_CONFIG)
        return
    record = derived
    # more layers than stored: said first as that one fact, as export says it
    beyond = layers_beyond_checkpoint(record.config["num_hidden_layers"], reader.tensors)
    if beyond is not None:
        report.add(ERROR, config_json_location(record.source), beyond)

    def config() -> JsonConfig | PretrainedConfig:
        made = json_config(record.config, record.source)
        if made is None:  # every family a record maps to has a name_maps table
            raise HFConfigError(f"{record.source}: no name table for {record.config['model_type']}")
        # Megatron-Bridge's tokenizer/ is what export copies beside the derived config
        return _vocab_fitted(paths, reader, report, made, paths.tokenizer_dir, paths.root)

    _check_plan(paths, reader, report, derived.source, config)


def _check_plan(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    report: ValidationReport,
    where: str | Path,
    config_of: Callable[[], JsonConfig | PretrainedConfig],
) -> None:
    """Check the weights against the config by planning their export, not by a list of
    shapes of its own: a checkpoint validate passes must be one export-hf writes, and two
    lists of expected shapes drift apart. An adapter saved alone is planned as an adapter.
    The config is made (`config_of`) inside the check, so one that cannot be made is
    reported at `where` (the config file or record), not raised. An adapter export-hf
    refuses under any config (a variant, a module it does not map) is an error
    (`_refused_adapter`): validate passes what export writes."""
    from mfsdp_ckpt.convert.export_errors import (
        ExportError,
        ExportUsageError,
        ForeignWeightsError,
        RefusedKind,
        StoredDtypeError,
    )
    from mfsdp_ckpt.convert.export_plan import plan_export
    from mfsdp_ckpt.convert.export_source import source_for
    from mfsdp_ckpt.convert.hf_config import HFConfigError
    from mfsdp_ckpt.convert.megatron_lora_export import adapter_only_checkpoint
    from mfsdp_ckpt.convert.mtp import DROP_MTP_FLAG

    source = source_for(paths, reader)
    if adapter_only_checkpoint(source):  # a LoRA adapter saved alone: its shapes are checked
        _check_adapter(source, report, where, config_of)
        return
    try:
        config = config_of()
        if paths.role == value_head.CRITIC:  # the value head apart, the backbone as an actor's
            source, config = _critic_backbone(paths, reader, report, config)
        plan = plan_export(source, config, drop_mtp=True, compare_tied_head=report.deep)
    except ForeignWeightsError as err:  # an adapter export-hf refuses under any config
        _refused_adapter(report, source, err)
    except StoredDtypeError as err:  # damage whatever the config
        report.add(ERROR, source.location, without_location(err, source.location))
    except (ExportError, ExportUsageError, HFConfigError) as err:
        if isinstance(err, RefusedKind):  # intact, a kind of save export does not convert
            report.add_unsupported(source.location, without_location(err, source.location))
            return
        report.add(
            ERROR,
            where,
            f"the weights do not fit this config: {without_location(err, source.location)}",
        )
    else:  # the main model fits; MTP layers have no counterpart in the config to check
        if plan.lora is not None:
            _check_adapter_records(report, source, plan.lora)
        for note in plan.buffer_notes():
            report.add(NOTE, paths.dist_ckpt, note)
        if plan.mtp is not None:
            report.add(
                WARNING,
                f"[{plan.mtp.first_key}]",
                f"{plan.mtp.summary()} not checked against {where}: the transformers model"
                " export writes from it has no MTP module; export-hf refuses them unless"
                f" {DROP_MTP_FLAG} leaves them out",
            )


def _critic_backbone(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    report: ValidationReport,
    config: JsonConfig | PretrainedConfig,
) -> tuple[ExportSource, JsonConfig | PretrainedConfig]:
    """A verl critic's value head checked apart (`value_head`); the export source and
    config its backbone is then planned with."""
    from mfsdp_ckpt.convert.export_source import source_for

    head = value_head.value_head(reader, state_keys.state_roots(reader.tensors))
    for where, problem in value_head.head_problems(head, getattr(config, "hidden_size", None)):
        report.add(ERROR, where or paths.dist_ckpt, problem)
    backbone = value_head.backbone(reader, head)
    return source_for(paths, backbone), value_head.backbone_config(config)


def _check_adapter(
    source: ExportSource,
    report: ValidationReport,
    where: str | Path,
    config_of: Callable[[], JsonConfig | PretrainedConfig],
) -> None:
    """A LoRA adapter saved without its base (Megatron-Bridge's PEFT save, the HF Trainer's
    adapter-only one): each A and B against the shape of the weight the config gives the
    module it adapts, as export checks them before merging."""
    from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError, StoredDtypeError
    from mfsdp_ckpt.convert.export_plan import plan_adapter
    from mfsdp_ckpt.convert.hf_config import HFConfigError

    try:
        lora = plan_adapter(source, config_of(), drop_mtp=True)[0]
    except ExportUsageError as err:  # a variant, an unmapped module, adapters on MTP only
        _refused_adapter(report, source, err)
    except StoredDtypeError as err:  # damage whatever the config
        report.add(ERROR, source.location, without_location(err, source.location))
    except (ExportError, HFConfigError) as err:  # its tensor named, the checkpoint is said
        what = str(err).removeprefix(f"{source.location} ")
        report.add(ERROR, where, f"the adapter does not fit this config: {what}")
    else:
        if lora is not None:
            _check_adapter_records(report, source, lora)


def _check_adapter_records(
    report: ValidationReport, source: ExportSource, lora: MegatronLora
) -> None:
    """What the checkpoint records about its adapter (run_config.yaml's peft section, the
    adapter_config.json saved beside it), refused as export-hf refuses it whatever
    --lora-alpha is given (`refuse_recorded_variant`, the reading export itself does); a
    recorded alpha that is no positive number is a warning naming --lora-alpha."""
    from mfsdp_ckpt.convert.export_errors import ForeignWeightsError
    from mfsdp_ckpt.convert.megatron_lora_alpha import refuse_recorded_variant

    try:
        warnings = refuse_recorded_variant(lora, source.location, source.paths)
    except (ForeignWeightsError, CheckpointFormatError, CheckpointFileError) as err:
        _refused_adapter(report, source, err)
    else:
        for warning in warnings:  # an alpha export takes only with --lora-alpha
            report.add(WARNING, source.location, warning)


def _refused_adapter(report: ValidationReport, source: ExportSource, err: Exception) -> None:
    """An error (exit 1) for an adapter export-hf refuses under any config or flag
    (`split_adapters`, `describe_adapters`, `plan_adapter`: the rules export applies, not a
    list of validate's own): what validate passes, export writes. Said at the checkpoint,
    with the stored key or the record file that export names. `unsupported` only where
    export refuses a kind of adapter (`RefusedKind`: DoRA, rslora, a module it does not
    map, a bias, a second adapter); any other refusal is damage (half of an A/B pair gone,
    mixed ranks, a record that cannot be read or whose rank contradicts the tensors)."""
    from mfsdp_ckpt.convert.export_errors import RefusedKind

    text, location = str(err), source.location
    # a record file inside the checkpoint (its run_config.yaml) is named whole
    located = text.startswith((f"{location} ", f"{location}:"))
    what = without_location(err, location) if located else text
    message = f"export-hf refuses this adapter: {what}"
    if isinstance(err, RefusedKind):
        report.add_unsupported(source.location, message)
    else:
        report.add(ERROR, source.location, message)


def _record_refused(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    report: ValidationReport,
    err: Exception,
) -> None:
    """Export's refusal of what the record states (`err`: MegatronConfigError), in export's
    line. `unsupported` only for a kind of model export does not convert (`RefusedKind`:
    LayerNorm, GELU, a sigmoid router) stated by a record otherwise sound; any other
    refusal (a size of -1 or "2", heads not in their groups, a bound passed) is damage, and
    so is a kind refusal beside damage the record shows (`_record_damage`): damage wins."""
    from mfsdp_ckpt.convert.export_errors import RefusedKind

    where = error_location(err, paths.root)
    if not isinstance(err, RefusedKind):
        report.add_error(where, err)
        return
    damage = _record_damage(paths, reader)
    if damage is None:
        report.add_unsupported(where, without_location(err, where))
        return
    report.add_error(where, err)
    report.add(ERROR, *damage)


def _record_damage(
    paths: layout.CheckpointPaths, reader: CheckpointReader
) -> tuple[str, str] | None:
    """(where, what) of damage in a record export refuses for its kind, None where it is
    sound: the derivation's own checks of every value (`recorded_config`: a value that is
    no valid value, values that contradict each other, a bound passed), a value compared
    with a config stated as no finite number (`damaged_values`), more layers recorded than
    stored, sizes the tensors contradict (`kind_refused_shapes`: the supported path's shape
    check over the tensors the kind leaves alone, said at the first such tensor). A record
    that cannot be read again is damage too."""
    from mfsdp_ckpt.convert.export_source import source_for
    from mfsdp_ckpt.convert.hf_config import layers_beyond_checkpoint
    from mfsdp_ckpt.convert.megatron_config import (
        MegatronConfigError,
        MegatronKindRefused,
        MegatronSettingsMissing,
    )
    from mfsdp_ckpt.convert.megatron_record import recorded_config, recorded_settings
    from mfsdp_ckpt.convert.record_shapes import kind_refused_shapes
    from mfsdp_ckpt.convert.record_values import damaged_values

    recorded, keeps_shapes = None, False
    try:
        recorded = recorded_settings(paths, reader)
        recorded_config(paths, reader)
    except MegatronKindRefused as kind:
        config, keeps_shapes = kind.config, kind.keeps_shapes
    except MegatronSettingsMissing:  # no sizes to hold to the weights (a hand-made record)
        config = None
    except (MegatronConfigError, CheckpointFormatError, CheckpointFileError) as err:
        where = error_location(err, paths.root)
        return where, without_location(err, where)
    else:
        config = None
    if recorded is not None and (found := damaged_values(recorded.settings, recorded.names)):
        return recorded.where, f"{', '.join(found)}: not a finite number (a damaged record)"
    where = recorded.where if recorded else str(paths.dist_ckpt)
    beyond = config and layers_beyond_checkpoint(config["num_hidden_layers"], reader.tensors)
    if beyond:
        return where, beyond
    if not config:
        return None
    # the record's sizes held to the tensors the kind leaves alone, as the supported
    # path's plan holds them; said at the tensor, naming the record
    wrong = kind_refused_shapes(source_for(paths, reader), config, where, keeps_shapes)
    if wrong is None:
        return None
    tensor, what = wrong
    return tensor, f"does not fit the sizes {where} records: {what}"


def _already_wrong(report: ValidationReport, where: str) -> bool:
    """Whether an error about `where` is already reported: a record read out of a data file
    the storage checks found missing, cut short or linked out fails on that one fault,
    which is said once (`check_data_files`), not again as the record's; so is a stored
    object (`root [args]`) whose pickle the pickle check named in its data file
    (`file [args]`)."""
    entry = where[where.rfind(" [") :] if where.endswith("]") and " [" in where else None
    return any(
        f.severity == ERROR
        and (f.where == where or (entry is not None and str(f.where).endswith(entry)))
        for f in report.findings
    )
