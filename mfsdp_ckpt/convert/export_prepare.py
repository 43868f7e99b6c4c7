"""Everything an export checks before it claims its output: --out, --hf-config, config.json.

An export must fail before it writes a byte when --out would replace what it reads, or
when no config.json (given, kept in the checkpoint, or derived from a Megatron record)
describes the checkpoint's model. These checks are shared by the full export, the LoRA
exports and import-hf, so they live apart from any one of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mfsdp_ckpt.check.validate import require_valid
from mfsdp_ckpt.convert.export_errors import ExportUsageError
from mfsdp_ckpt.convert.export_options import refuse_hf_config_dir_without_config
from mfsdp_ckpt.convert.export_plan import refuse_no_model_weights
from mfsdp_ckpt.convert.export_source import (
    AssetFiles,
    ExportSource,
    asset_files,
    bridge_tokenizer_dir,
    config_json_location,
    given_assets,
    holds_tokenizer,
    no_config_json,
    resolve_source,
    weights_summary,
)
from mfsdp_ckpt.convert.hf_config import parse_config_json, weights_file_problem
from mfsdp_ckpt.convert.megatron_config import (
    DerivedConfig,
    MegatronConfigError,
    MegatronSettingsMissing,
)
from mfsdp_ckpt.convert.megatron_record import recorded_config
from mfsdp_ckpt.convert.name_maps import model_tensors
from mfsdp_ckpt.convert.record_agreement import (
    OWN_CONFIG_REMEDY,
    contradiction,
    refuse_uncomputable,
)
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout, state_keys
from mfsdp_ckpt.format.bridge_run_config import missing_run_config
from mfsdp_ckpt.format.hub_id import missing_hf_config
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.format.output_inside import inside_checkpoint
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.tensorstore_store import is_url
from mfsdp_ckpt.storage.writable import require_writable_dir

# what an export's --overwrite replaces, said where an --out is refused
EXPORT_REPLACES = "an empty directory or an earlier export"


def check_out_dir(
    out: Path,
    protected: list[Path],
    model_dirs: Sequence[Path] = (),
    replaces: str = EXPORT_REPLACES,
) -> None:
    """Refuse an --out that would replace or write into what the command reads: the
    checkpoint (`protected`: out may not be it or above it, nor lie inside a checkpoint)
    and the Hugging Face model dirs it reads (`model_dirs`: --hf-config, a LoRA base,
    import's source). Those are a user's downloads, and a model dir looks like an earlier
    export: out may not be one or above one, or --overwrite would replace it. Also refuse
    one whose parent cannot be written, where the work dir and lock file go, before any work.
    `replaces`: what the command's --overwrite replaces (import-hf's differs)."""
    require_writable_dir("--out", out, beside=True, error=ExportUsageError)
    resolved = out.resolve()
    for keep in protected:
        if resolved == keep or resolved in keep.parents:
            raise ExportUsageError(
                f"{out}: holds the checkpoint being exported; choose another --out"
            )
    for model_dir in model_dirs:
        if resolved == model_dir or resolved in model_dir.parents:
            raise ExportUsageError(
                f"{out}: is or holds the model dir {model_dir} this command reads;"
                " choose another --out"
            )
    inside = inside_checkpoint(resolved, out)
    if inside is not None:
        raise ExportUsageError(
            f"{out}: {inside}; choose an --out outside it (--overwrite replaces only {replaces})"
        )


def model_dirs_of(*locations: str | os.PathLike | None) -> list[Path]:
    """The local directories of the HF model locations given (a dir, or its config.json),
    resolved, for `check_out_dir`; URLs and missing paths name none. A config.json's dir
    is the one it sits in, not where a link leads (a Hugging Face cache snapshot links
    config.json into ../../blobs/)."""
    dirs = []
    for location in locations:
        if location is None or is_url(str(location)) or not os.path.exists(location):
            continue
        path = Path(os.path.abspath(location))
        dirs.append((path if path.is_dir() else path.parent).resolve())
    return dirs


def _no_config_message(source: ExportSource, lacking: str = "") -> str:
    paths = source.paths
    missing = None if lacking or paths is None else missing_run_config(paths)
    if missing is not None and paths is not None:
        return f"{paths.step_dir}: {missing}{weights_summary(source.reader.tensors)}"
    return (
        f"{source.location}: the checkpoint holds no Hugging Face config (Megatron-LM saves"
        " none, nor does the HF Trainer with SHARDED_STATE_DICT; verl keeps it in"
        f" {layout.HF_ASSETS_DIR}/){lacking}; pass --hf-config with the"
        " Hugging Face model dir the run started from (config.json, and tokenizer files for"
        f" AutoTokenizer){weights_summary(source.reader.tensors)}"
    )


def _derived_config(
    source: ExportSource, paths: layout.CheckpointPaths | None
) -> DerivedConfig | None:
    """The config a Megatron checkpoint's own record (Bridge's run_config.yaml, Megatron-LM's
    args) implies; None when it records none. A record without the model's sizes asks for
    --hf-config (exit 2), naming what it lacks; a model no family here computes is exit 1."""
    try:
        return recorded_config(paths, source.reader)
    except MegatronSettingsMissing as err:
        lacking = f"; its {err.record} lacks {', '.join(err.missing)}"
        raise ExportUsageError(_no_config_message(source, lacking)) from None


def _derived_assets(
    derived: DerivedConfig, paths: layout.CheckpointPaths | None, io: str
) -> AssetFiles:
    """config.json from the record, and the tokenizer files Megatron-Bridge saved into the
    iteration dir (`_bridge_tokenizer`)."""
    text = json.dumps(derived.config, indent=2, sort_keys=True) + "\n"
    tokenizer = _bridge_tokenizer(paths, io) or AssetFiles({})
    return AssetFiles({HF_CONFIG_FILE: text.encode, **tokenizer}, rewritten=tokenizer.rewritten)


def _bridge_tokenizer(paths: layout.CheckpointPaths | None, io: str) -> AssetFiles | None:
    """The tokenizer files Megatron-Bridge saved into the iteration dir, config.json aside
    (read inside the checkpoint, as its huggingface/ files are; none through a URL); None
    where the step holds no `tokenizer/`."""
    if paths is None or paths.tokenizer_dir is None:
        return None
    tokenizer_dir = str(bridge_tokenizer_dir(paths.tokenizer_dir))
    found = asset_files(tokenizer_dir, io, paths.root, whole=True)
    loaders = {n: load for n, load in found.items() if n != HF_CONFIG_FILE}
    return AssetFiles(loaders, rewritten=found.rewritten)


def _with_step_tokenizer(
    given: AssetFiles, hf_config: str | os.PathLike, paths: layout.CheckpointPaths | None, io: str
) -> tuple[AssetFiles, str | None]:
    """`--hf-config`'s files, with the step's own tokenizer (Bridge's `tokenizer/`) where
    they hold none, and the note naming where it came from (None when nothing was added):
    a config-only dir is the remedy export gives for a config it cannot derive (a mixed
    dense/MoE run), and following it dropped the tokenizer the step holds."""
    if holds_tokenizer(given):
        return given, None
    tokenizer = _bridge_tokenizer(paths, io)
    if not tokenizer or paths is None:
        return given, None
    merged = AssetFiles(
        {**tokenizer, **given}, given.left_out, (*given.rewritten, *tokenizer.rewritten)
    )
    return (
        merged,
        f"tokenizer files from {paths.tokenizer_dir} (--hf-config {hf_config} holds none)",
    )


def refuse_config_against_record(
    source: ExportSource,
    paths: layout.CheckpointPaths | None,
    asset_location: str,
    assets: dict[str, Callable[[], bytes]],
    hf_config: str | os.PathLike | None,
) -> None:
    """A config.json (--hf-config's, or the checkpoint's own HF dir's) that contradicts the
    model the checkpoint records is refused before anything is written (record_agreement):
    exit 2 for --hf-config, exit 1 for the checkpoint's own files; so is one that is no
    config (not JSON, nested 5000 deep, no model_type, NaN), in one line naming it."""
    config_file = config_json_location(asset_location)
    error = ExportUsageError if hf_config is not None else CheckpointFormatError
    data = parse_config_json(assets[HF_CONFIG_FILE](), config_file, error)
    named = f"--hf-config {config_file}" if hf_config is not None else str(config_file)
    refuse_uncomputable(data, paths, source.reader, named)
    found = contradiction(data, paths, source.reader)
    if found is None:
        return
    if hf_config is not None:
        left_out = (
            ", or leave --hf-config out to use the model the checkpoint records"
            if _records_its_model(source, paths)
            else ""
        )
        raise ExportUsageError(
            f"--hf-config {config_file}: {found}; pass the model dir the run started from{left_out}"
        )
    raise CheckpointFormatError(f"{config_file}: {found}; {OWN_CONFIG_REMEDY}")


def _records_its_model(source: ExportSource, paths: layout.CheckpointPaths | None) -> bool:
    """Whether the checkpoint's own record of its model can be read: a config.json beside
    its weights, or a Megatron record a config derives from. `contradiction` also compares
    a record that derives none (sizes or family missing) on the numbers it holds, and
    without --hf-config such a checkpoint has no config to export with."""
    if paths is not None and paths.hf_dir is not None and (paths.hf_dir / HF_CONFIG_FILE).is_file():
        return True
    try:
        return recorded_config(paths, source.reader) is not None
    except (
        MegatronSettingsMissing,
        MegatronConfigError,
        CheckpointFormatError,
        CheckpointFileError,
    ):
        return False


@dataclass
class PreparedSource:
    """A checkpoint to export and the Hugging Face files that describe it, all checked
    before the output is claimed."""

    source: ExportSource
    local_paths: layout.CheckpointPaths | None
    asset_location: str
    derived: DerivedConfig | None
    assets: AssetFiles
    tokenizer_note: str | None = None  # where the tokenizer came from, when not with config.json

    @property
    def config_json(self) -> str:
        """Its config.json as messages name it (`config_json_location`)."""
        return config_json_location(self.asset_location, self.derived is not None)


def prepare_source(
    ckpt: str | os.PathLike,
    out: Path,
    hf_config: str | os.PathLike | None,
    io: str,
    role: str | None,
    source: ExportSource | None = None,
) -> PreparedSource:
    """Resolve `ckpt`, refuse an --out that would touch what is read, find config.json
    (--hf-config, the checkpoint's own HF dir, or derived from its Megatron record) and run
    validate's cheap checks (`source`: `ckpt` already resolved). ExportUsageError when no
    config can be found.

    `ckpt` is resolved once, and every check reads the step that resolution found
    (`source.paths`): a run dir resolved again could name a newer step, committed by a run
    still saving meanwhile, and that step's files were then checked against the other's
    ("resolves outside the checkpoint") or validated with the other's reader."""
    refuse_hf_config_dir_without_config(hf_config, ckpt, role)  # before any dir is walked
    source = source if source is not None else resolve_source(str(ckpt), io, role)
    check_out_dir(out, source.protected, model_dirs_of(hf_config))
    local_paths = source.paths
    asset_location = str(hf_config) if hf_config is not None else source.hf_assets
    derived: DerivedConfig | None = None
    if asset_location is None:
        derived = _derived_config(source, local_paths)
        asset_location = derived.source if derived is not None else None
    if asset_location is None:
        refuse_no_model_weights(source)  # a save without weights has no config either
        raise ExportUsageError(_no_config_message(source))
    if hf_config is not None and not Path(hf_config).exists():
        raise ExportUsageError(missing_hf_config(hf_config))
    if hf_config is not None and weights_file_problem(hf_config):
        raise ExportUsageError(f"--hf-config {weights_file_problem(hf_config)}")
    asset_root = local_paths.root if local_paths is not None and hf_config is None else None
    tokenizer_note = None
    if derived is not None:
        assets = _derived_assets(derived, local_paths, io)
    elif hf_config is not None:  # what it refuses is the argument's fault: exit 2
        given = given_assets(str(hf_config), io)
        assets, tokenizer_note = _with_step_tokenizer(given, hf_config, local_paths, io)
    else:
        assets = asset_files(asset_location, io, asset_root, source.hf_skip, whole=True)
    if HF_CONFIG_FILE not in assets:
        if hf_config is None:  # an --hf-config given without one is the flag's fault first
            refuse_no_model_weights(source)
        raise no_config_json(asset_location, hf_config, local_paths)
    if derived is None:
        refuse_config_against_record(source, local_paths, asset_location, assets, hf_config)
    if local_paths is not None:
        # damaged or hostile: refused with validate's first error, before planning
        require_valid(local_paths, manifest_only=True, reader=source.reader)
    refuse_model_chunks(source)
    return PreparedSource(source, local_paths, asset_location, derived, assets, tokenizer_note)


def refuse_model_chunks(source: ExportSource) -> None:
    """A model saved in virtual-pipeline chunks (`model0`, `model1`) is refused with the
    line that names them (`name_maps.model_tensors`, validate's), before any check of a
    config against the weights: each chunk numbers its layers from 0, so those checks
    would report layers missing that are in the other chunk."""
    keys = list(source.reader.tensors)
    try:
        chunks = len(state_keys.state_roots(keys).models) > 1
    except state_keys.AmbiguousStateError:  # named where the plan reads the model entry
        return
    if chunks:
        model_tensors(keys)


def refuse_hf_config_of_no_kind(hf_config: str | os.PathLike) -> None:
    """ExportUsageError (exit 2) for an --hf-config that is there but neither a model dir
    nor a regular file (a FIFO, /dev/zero, a link to one), said as `validate --hf-config`
    says it. Taken for a model dir to list, it was "cannot list (Not a directory)", which
    named no option and called a FIFO a directory that could not be read; checked before
    any export path (full, LoRA merge, adapter) reads it."""
    try:
        os.stat(hf_config)
    except FileNotFoundError:  # missing, or a link to nothing: said (with the path's
        return  # directory) where the export reads it
    except OSError:
        pass  # a link loop and the like: `regular_file` names it
    if os.path.isdir(hf_config):
        return
    try:
        safe_files.regular_file(hf_config)
    except CheckpointFileError as err:
        raise ExportUsageError(f"--hf-config {err}") from None
