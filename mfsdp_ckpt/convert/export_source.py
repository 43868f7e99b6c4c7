"""Where an export reads from: the checkpoint (local or URL), its HF assets and its config."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.convert.asset_rewrites import rewrite_assets
from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError
from mfsdp_ckpt.convert.hf_config import (
    ExpectedWeights,
    HFConfigError,
    check_geometry,
    expected_weights,
    load_hf_config,
    read_config_json,
    weights_from_table,
)
from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes
from mfsdp_ckpt.convert.mapping_errors import MappingError
from mfsdp_ckpt.convert.name_maps import (
    HF,
    MCORE,
    detect_layout,
    mcore_rules,
    model_tensors,
)
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import checkpoint_resolution, file_walk, finding_runs, hf_trainer, layout
from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE, generation_config
from mfsdp_ckpt.format.hub_id import missing_hf_config
from mfsdp_ckpt.format.model_files import FILE_NAMES, HF_CONFIG_FILE, INDEX_FILE, is_model_file
from mfsdp_ckpt.format.state_keys import AmbiguousStateError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import ByteStore, CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader, TensorEntry
from mfsdp_ckpt.storage.tensorstore_store import is_url, join_location, open_store
from mfsdp_ckpt.storage.unique_json import (
    DuplicateKeyError,
    NestingError,
    first_nonfinite,
    json_problem,
    loads_unique,
    too_many_containers,
)

if TYPE_CHECKING:  # export reads known families' config.json without transformers
    from transformers import PretrainedConfig

WEIGHT_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".distcp")


WEIGHT_INDEX_FILES = (INDEX_FILE, "pytorch_model.bin.index.json")


@dataclass
class ExportSource:
    """A resolved checkpoint: its store, its reader and where its HF assets are (if any)."""

    location: str
    reader: CheckpointReader
    hf_assets: str | None
    protected: list[Path]  # local dirs the export must never replace
    hf_skip: tuple[str, ...] = ()  # entries of hf_assets that are no HF file (layout.hf_skip)
    paths: layout.CheckpointPaths | None = None  # a local checkpoint's: where its record is


def source_for(paths: layout.CheckpointPaths, reader: CheckpointReader) -> ExportSource:
    """The export source of a resolved local checkpoint (validate plans with it too)."""
    hf = str(paths.hf_assets) if paths.hf_assets and paths.hf_assets.is_dir() else None
    protected = [
        p.resolve() for p in (paths.dist_ckpt, paths.step_dir, paths.run_dir) if p is not None
    ]
    return ExportSource(str(paths.dist_ckpt), reader, hf, protected, paths.hf_skip, paths)


def refuse_critic(location: str | os.PathLike, role: str | None) -> None:
    if role == "critic":
        raise ExportUsageError(
            f"{location}: the critic's value head is not a language model (no lm_head);"
            " export the actor (--role actor)"
        )


def resolve_source(ckpt: str, io: str, role: str | None = None) -> ExportSource:
    """What export-hf reads for `ckpt` as given: a local path at any level any layout has
    (resolved as the loader and validate resolve it, so all three read the same step), or a
    URL, where no directory can be listed and the DCP is looked for at each layout's place
    (`resolve_url`). The bytes are read through `io`'s store. A verl critic is refused
    first: its value head has no lm_head to export."""
    if not is_url(ckpt):
        paths = checkpoint_resolution.resolve_checkpoint(ckpt, role=role)
        refuse_critic(paths.dist_ckpt, paths.role)
        store = open_store(str(paths.dist_ckpt), io)
        return source_for(paths, CheckpointReader(paths.dist_ckpt, store=store))
    refuse_critic(ckpt, role)
    dist_ckpt, hf = resolve_url(ckpt, open_store(ckpt, io))
    reader = CheckpointReader(dist_ckpt, store=open_store(dist_ckpt, io))
    return ExportSource(dist_ckpt, reader, hf, [])


# Where a DCP sits below a URL, and the HF assets dir that goes with it (None: the layout
# keeps none there), for each level a user may name: ours and verl SFT (step/dist_ckpt),
# verl RL v1 (step/actor/dist_ckpt) and v2 (step/actor/model/dist_ckpt, and the actor or
# model level of either), verl SFT v2 (step/model/dist_ckpt), the HF Trainer's checkpoint-N
# (pytorch_model_fsdp_0; current transformers saves no config beside it).
_URL_DCP_DIRS: tuple[tuple[str, str | None], ...] = (
    (layout.DIST_CKPT_DIR, layout.HF_ASSETS_DIR),
    (f"actor/{layout.DIST_CKPT_DIR}", f"actor/{layout.HF_ASSETS_DIR}"),
    (
        f"actor/{layout.VERL_MODEL_DIR}/{layout.DIST_CKPT_DIR}",
        f"actor/{layout.VERL_MODEL_DIR}/{layout.HF_ASSETS_DIR}",
    ),
    (
        f"{layout.VERL_MODEL_DIR}/{layout.DIST_CKPT_DIR}",
        f"{layout.VERL_MODEL_DIR}/{layout.HF_ASSETS_DIR}",
    ),
    (f"{hf_trainer.MODEL_DCP_PREFIX}0", None),
)
_MAX_TRACKER_BYTES = 64  # "100", "release": a few bytes


def resolve_url(url: str, root: ByteStore) -> tuple[str, str | None]:
    """The URL twin of `resolve_checkpoint`: (the DCP's URL, its HF assets' URL or None)
    for a DCP itself (a Megatron-LM iter dir, a bare dist_ckpt), a step or role level of the
    layouts in _URL_DCP_DIRS, or a run dir whose latest_checkpointed_iteration.txt names its
    step (global_step_N, Megatron-LM's iter_000000N or release)."""
    found = _dcp_below(url, root, "")
    if found is not None:
        return found
    tracker_size = root.size(layout.TRACKER_FILE)
    if tracker_size is None:
        raise layout.CheckpointPathError(
            f"{url}: not a checkpoint (no {layout.DCP_METADATA_FILE}, no {layout.DIST_CKPT_DIR}/"
            f" or other step layout, no {layout.TRACKER_FILE})"
        )
    where = f"{url}/{layout.TRACKER_FILE}"
    if tracker_size > _MAX_TRACKER_BYTES:
        raise layout.CheckpointPathError(f"{where}: {tracker_size} bytes, not a step number")
    text = root.read_range(layout.TRACKER_FILE, 0, tracker_size).decode(errors="replace").strip()
    if text == layout.MEGATRON_RELEASE_DIR:
        steps = [layout.MEGATRON_RELEASE_DIR]
    elif text.isascii() and text.isdigit():
        step = int(text)
        steps = [f"{layout.STEP_DIR_PREFIX}{step}", f"{layout.MEGATRON_ITER_PREFIX}{step:07d}"]
    else:
        raise layout.CheckpointPathError(f"{where}: expected a step number or 'release'")
    for step_dir in steps:
        found = _dcp_below(url, root, step_dir)
        if found is not None:
            return found
    raise layout.CheckpointPathError(
        f"{where} names step {text}, but no checkpoint is there ({' or '.join(steps)})"
    )


def _dcp_below(url: str, root: ByteStore, step_dir: str) -> tuple[str, str | None] | None:
    """The DCP at `step_dir` under `url` itself or at one of _URL_DCP_DIRS below it."""
    base = join_location(url, step_dir) if step_dir else url
    prefix = f"{step_dir}/" if step_dir else ""
    if root.size(f"{prefix}{layout.DCP_METADATA_FILE}") is not None:
        return base, None
    for dcp, hf in _URL_DCP_DIRS:
        if root.size(f"{prefix}{dcp}/{layout.DCP_METADATA_FILE}") is not None:
            return join_location(base, dcp), join_location(base, hf) if hf else None
    return None


MAX_ASSET_BYTES = 1 << 30  # a tokenizer.json is tens of MB; nothing that is not a weight is larger
# What one dir's assets may be in all. A checkpoint's own HF dir is copied whole (every file
# but weights), and nothing bounded how many files (20,000 empty ones were copied one by
# one) or bytes (six sparse 500 MB files became 3 GB written) that is. A real one holds
# tens of files and tens of MB.
MAX_ASSET_FILES = 1000
MAX_ASSETS_BYTES = MAX_ASSET_BYTES
# A JSON asset is parsed to be checked (`check_json_asset`), and parsed JSON takes many times
# its size in memory: bounded in bytes and in the objects and arrays it may hold, well past
# the largest real tokenizer.json (Qwen's, Llama's and Gemma's are at most tens of MB, with a
# few hundred thousand merges, each an array at most).
MAX_JSON_ASSET_BYTES = 64 << 20
MAX_JSON_ASSET_CONTAINERS = 2_000_000
# A chat template (chat_template.jinja, additional_chat_templates/*.jinja) is compiled whole
# into Python to render each row: real ones are a few KB and the largest about 100 KB, so
# 1 MiB is ten times that. At the generic asset bound a 900 MB one took 3 GB to compile.
MAX_TEMPLATE_BYTES = 1 << 20


class AssetFiles(dict[str, Callable[[], bytes]]):
    """The files an export copies, name -> loader; `left_out`: the other files (weights
    aside) of the model dir they were picked from, for the note that says so; `rewritten`:
    the notes on files not copied as they are (`asset_rewrites`)."""

    def __init__(
        self,
        loaders: Mapping[str, Callable[[], bytes]],
        left_out: Sequence[str] = (),
        rewritten: Sequence[str] = (),
    ):
        super().__init__(loaders)
        self.left_out = tuple(left_out)
        self.rewritten = tuple(rewritten)

    def left_out_note(self, location: str) -> list[str]:
        """The notes on what is not copied as it was: one counting the files left out,
        custom code (`*.py`) named first, then one for each file rewritten or left out
        (`asset_rewrites`: an auto_map naming that code is not written either)."""
        if not self.left_out:
            return list(self.rewritten)
        named = sorted(self.left_out, key=lambda name: (not name.endswith(".py"), name))
        return [
            f"{location}: {len(named)} other file(s) not copied (only config, tokenizer and"
            f" chat template files are): {first_of(named, 3)}",
            *self.rewritten,
        ]


def holds_tokenizer(names: Iterable[str]) -> bool:
    """Whether the files an export copies (`names`) give it a tokenizer."""
    return any(name.startswith("tokenizer") for name in names)


def no_tokenizer_in(location: str) -> str:
    """Why an export has no tokenizer files, for its note: none where its assets came from,
    or --hf-config named a config.json alone (its directory is then not read)."""
    if not is_url(location) and Path(location).is_file():
        return (
            f"no tokenizer files: --hf-config {location} is a file, the only one copied"
            " (give its directory to copy the tokenizer too)"
        )
    return f"no tokenizer files in {location}"


def no_config_json(
    location: str,
    hf_config: str | os.PathLike | None,
    exported: layout.CheckpointPaths | None = None,
) -> ExportUsageError:
    """The error (exit 2) for an assets location that holds no config.json. The
    checkpoint's own huggingface/ is mended by --hf-config; a --hf-config dir is the flag
    just given, so that line says instead what the dir is when it is a checkpoint (a step,
    a run, a dist_ckpt, a Megatron iteration: `RUN/global_step_80` for its huggingface/)
    and where that checkpoint keeps its config.json. `exported`: the checkpoint being
    exported, whose own config.json leaving --hf-config out reads. A --hf-config that is
    not there is said to be missing, as the full export says it."""
    if hf_config is None:
        return ExportUsageError(f"{location}: no config.json; pass --hf-config DIR|config.json")
    if not os.path.lexists(location):
        return ExportUsageError(missing_hf_config(hf_config))
    given = Path(location)
    try:
        paths = checkpoint_resolution.resolve_checkpoint(given)
    except (MfsdpError, OSError):
        inside = finding_runs.checkpoint_containing(given, run_itself=False)
        where = f"; it lies in the checkpoint {inside}" if inside is not None else ""
        return ExportUsageError(
            f"--hf-config {location}: no config.json; not a Hugging Face model dir{where}"
            f" ({_MODEL_DIR_WANTED})"
        )
    return ExportUsageError(
        f"--hf-config {location}: no config.json; it is {_checkpoint_words(given, paths)},"
        f" not a Hugging Face model dir; {_config_kept_by(paths, exported)}"
    )


_MODEL_DIR_WANTED = "give the Hugging Face model dir the run started from, or its config.json"


def _checkpoint_words(given: Path, paths: layout.CheckpointPaths) -> str:
    """What `given` is, as `paths` (what it resolves to) shows: the checkpoint itself, its
    DCP dir, its run, or a dir above it."""
    kind = paths.kind
    if _same_dir(given, paths.root):  # a Megatron iteration is its own DCP dir
        bare = paths.step_dir is None and paths.hf_dir is None
        return "a dist_ckpt (DCP weights alone)" if bare else f"the {kind} checkpoint {given}"
    if _same_dir(given, paths.dist_ckpt):
        return f"the dist_ckpt (DCP weights) of the {kind} checkpoint {paths.root}"
    if _same_dir(given, paths.run_dir):
        return f"the {kind} training run {given}, whose latest checkpoint is {paths.root}"
    return f"a dir holding the {kind} checkpoint {paths.root}"


def _config_kept_by(paths: layout.CheckpointPaths, exported: layout.CheckpointPaths | None) -> str:
    """Where the checkpoint `paths` keeps its config.json (give that dir; none is kept by
    a Megatron iteration or a bare dist_ckpt), and that leaving --hf-config out reads it
    when it is the checkpoint being exported."""
    hf_dir = paths.hf_dir
    if hf_dir is None or not (hf_dir / HF_CONFIG_FILE).is_file():
        return f"it keeps no config.json: {_MODEL_DIR_WANTED}"
    if exported is not None and _same_dir(paths.root, exported.root):
        return f"its config.json is in {hf_dir}, which export-hf reads when --hf-config is left out"
    return f"its config.json is in {hf_dir}: give that dir"


def _same_dir(path: Path, other: Path | None) -> bool:
    try:
        return other is not None and os.path.samefile(path, other)
    except OSError:
        return False


def asset_files(
    location: str,
    io: str,
    root: str | os.PathLike | None = None,
    skip: Collection[str] = (),
    whole: bool = False,
) -> AssetFiles:
    """Files of an HF assets dir (config, tokenizer, ...) without weights: name -> loader.

    Local files must be regular files, read bounded through `safe_files`, that resolve
    inside `root` (the checkpoint, for its own huggingface/ dir), else inside the model
    dir's `safe_files.model_dir_root` (a Hugging Face cache snapshot links into
    ../../blobs by design): a symlink that leads out (a user's ~/.ssh/id_rsa copied into
    the export) is refused in one line before anything is written. Hidden names are
    not assets: `.git/` (a cloned model repo) and `.cache/` (`huggingface-cli download
    --local-dir`) hold copies of the weights and download state, not config or tokenizer.
    `skip` names entries of a local `location` that are not assets (the HF Trainer keeps
    its own state and DCP dirs beside config and tokenizer). `whole`: the checkpoint's
    own HF dir, every file but weights, as its trainer saved them for this model; else a
    model dir (a download), of which only the model files (`is_model_file`). An auto_map
    and a generation_config.json that is not JSON are not copied (`asset_rewrites`), each
    said in a note (`AssetFiles.rewritten`)."""
    if not is_url(location):
        candidates, directory, left_out = _local_candidates(Path(location), skip, whole)
        root = _check_assets(candidates, directory, root)
        loaders: dict[str, Callable[[], bytes]] = {
            name: partial(safe_files.read_bytes, path, _asset_limit(name), root=root)
            for name, path in candidates
        }
        paths = dict(candidates)
        return AssetFiles(loaders, left_out, rewrite_assets(loaders, lambda n: str(paths[n])))
    store = open_store(location, io)
    try:
        names = store.list_files()
    except CheckpointFileError as err:
        raise ExportUsageError(f"{err}; pass --hf-config with a local model dir") from None
    picked, left_out = _model_files(names, whole)
    _check_count(location, len(picked))
    sizes = [store.size(name) or 0 for name in picked]
    for name, size in zip(picked, sizes, strict=True):
        safe_files.check_size(join_location(location, name), size, _asset_limit(name))
    _check_total(location, sum(sizes))
    loaders = {
        name: partial(_remote_asset, store, join_location(location, name), name) for name in picked
    }
    return AssetFiles(loaders, left_out, rewrite_assets(loaders, partial(join_location, location)))


def given_assets(hf_config: str, io: str) -> AssetFiles:
    """`asset_files` of `--hf-config DIR|config.json`, where a file refused (a FIFO or a
    directory as config.json, a link out of its model dir, a key given twice) is the
    argument's fault, exit 2 (ExportUsageError), as `read_config_json` says of a config
    that is no JSON: the same file in a checkpoint's own huggingface/ is damage, exit 1."""
    try:
        return asset_files(hf_config, io)
    except CheckpointFileError as err:
        raise ExportUsageError(str(err)) from None


def _local_candidates(
    base: Path, skip: Collection[str], whole: bool
) -> tuple[list[tuple[str, Path]], Path, list[str]]:
    """(name, path) of each file `asset_files` copies from the local `base` (a dir, or a
    config.json given alone), the dir they are in, and the files it leaves out."""
    if base.is_file():  # a config.json given alone, whatever its name
        return [(HF_CONFIG_FILE, base)], base.parent, []
    picked, left_out = _model_files(file_walk.list_files(base, True, skip), whole)
    return [(name, base / name) for name in picked], base, left_out


def check_copied_assets(
    location: Path,
    root: str | os.PathLike | None,
    skip: Collection[str] = (),
    whole: bool = False,
    parse_json: bool = True,
) -> list[str]:
    """Refuse, in one line naming the file, what `asset_files` would refuse to copy from
    the local `location` (same arguments): validate checks a checkpoint's assets with it,
    `parse_json` false for its cheap checks (each file stat-ed and opened, none read).
    Returns the names of the files checked."""
    candidates, directory, _left_out = _local_candidates(location, skip, whole)
    _check_assets(candidates, directory, root, parse_json)
    return [name for name, _path in candidates]


def bridge_tokenizer_dir(path: Path) -> Path:
    """`path` (Megatron-Bridge's iteration `tokenizer/`) when it is a directory itself: a
    symlink there (whose files the walk would list from wherever it points) or a file is
    refused in one line."""
    if path.is_symlink() or not path.is_dir():
        what = "a symlink" if path.is_symlink() else "not a directory"
        raise CheckpointFileError(
            f"{path}: {what}; Megatron-Bridge saves its tokenizer files in a directory here"
        )
    return path


def _model_files(names: Sequence[str], whole: bool) -> tuple[list[str], list[str]]:
    """(the assets among `names`, the others), weights in neither: every file but weights
    when `whole`, else the model files (`is_model_file`)."""
    kept = [name for name in names if not _is_weight_file(name)]
    if whole:
        return kept, []
    return [n for n in kept if is_model_file(n)], [n for n in kept if not is_model_file(n)]


def check_local_assets(directory: Path, root: str | os.PathLike | None = None) -> None:
    """Refuse, in one line naming the file, what export would refuse to copy from the assets
    dir `directory` (config, tokenizer, chat template, ...): an entry that is no regular file
    (a FIFO, a device, a directory where a file belongs), a link out of `root` (else of the
    model dir) or a file over MAX_ASSET_BYTES. Training checks its tokenizer dir with it
    before transformers reads one: transformers skips a FIFO as a file that is not there
    (a FIFO chat_template.jinja read as "no chat template") and reads any file whole. The HF
    Trainer's own records (trainer_state.json, whose log_history holds NaN for a step that
    overflowed) are no asset: nothing reads them here, so nothing refuses them; nor, in a
    model dir (no checkpoint `root`), are files that are no model files (`asset_files`
    copies neither)."""
    _check_assets(_local_assets(directory, root is not None), directory, root)


def _local_assets(
    directory: Path, whole: bool, skip: Collection[str] = ()
) -> list[tuple[str, Path]]:
    """(name, path) of each asset of a local dir (`_model_files`) but the HF Trainer's own
    records: transformers reads none, and trainer_state.json holds NaN for a step whose
    loss overflowed."""
    picked, _left_out = _model_files(file_walk.list_files(directory, True, skip), whole)
    return [
        (relative, directory / relative)
        for relative in picked
        if relative not in hf_trainer.TRAINER_FILES
    ]


def _check_assets(
    candidates: list[tuple[str, Path]],
    directory: Path,
    root: str | os.PathLike | None,
    parse_json: bool = True,
) -> str | os.PathLike:
    """Each candidate a regular file inside `root` (the checkpoint; None: the model dir
    `directory`) of at most `_asset_limit` bytes that this user may open (a tokenizer.json
    of mode 000 is named before anything is written, not after the weights are), at most
    MAX_ASSET_FILES of them and MAX_ASSETS_BYTES in all, each JSON one as
    `check_json_asset` reads it (with `parse_json`); the root the files were checked
    against."""
    within = "the checkpoint"
    if root is None:
        root, within = safe_files.model_dir_root(directory), f"the model dir {directory}"
    named = [directory / name for name in FILE_NAMES if os.path.lexists(directory / name)]
    _check_count(directory, len(candidates))
    sizes = []
    for path in [path for _name, path in candidates] + named:  # named: a directory there too
        real = safe_files.regular_file(path, root=root, within=within)
        sizes.append(os.stat(real).st_size)
        safe_files.check_size(path, sizes[-1], _asset_limit(path.name))
    _check_total(directory, sum(sizes[: len(candidates)]))
    for name, path in candidates:
        os.close(safe_files.open_regular(path, root, within))
        if parse_json and _is_json_asset(name):
            check_json_asset(name, path, safe_files.read_bytes(path, _asset_limit(name), root=root))
    return root


def _asset_limit(name: str) -> int:
    """The most bytes the asset `name` may have: a JSON one is parsed, and a chat template
    compiled, so they have less."""
    if name.endswith(".jinja"):
        return MAX_TEMPLATE_BYTES
    return MAX_JSON_ASSET_BYTES if _is_json_asset(name) else MAX_ASSET_BYTES


def _check_count(where: str | os.PathLike, count: int) -> None:
    """Refuse, naming the dir `where`, assets of more than MAX_ASSET_FILES files, before
    any of them is read or copied."""
    if count > MAX_ASSET_FILES:
        raise CheckpointFileError(
            f"{where}: {count} files besides the weights, more than the {MAX_ASSET_FILES} a"
            " model's config and tokenizer files may be; remove what is not the model's"
        )


def _check_total(where: str | os.PathLike, total: int) -> None:
    """Refuse, naming the dir `where`, assets of more than MAX_ASSETS_BYTES in all, before
    any of them is read or copied."""
    if total > MAX_ASSETS_BYTES:
        raise CheckpointFileError(
            f"{where}: its files besides the weights hold {total} bytes, more than the"
            f" {MAX_ASSETS_BYTES} a model's config and tokenizer files may in all; remove"
            " what is not the model's"
        )


def _is_json_asset(name: str) -> bool:
    """Every JSON file of the assets (tokenizer, generation, processor configs, added tokens,
    a vocabulary): transformers reads each with Python's json, which keeps the last of a key
    given twice and reads NaN and Infinity (no JSON has them) without a word."""
    return name.endswith(".json")


def check_json_asset(name: str, where: str | os.PathLike, data: bytes) -> None:
    """Refuse, naming `where` (the file or URL) and the key, a JSON asset that its reader
    would not read as the file it is, before anything is written: larger than
    MAX_JSON_ASSET_BYTES or that may hold more than MAX_JSON_ASSET_CONTAINERS objects and
    arrays (parsing it would take gigabytes; both found before it is parsed); not valid
    JSON, nested deeper than MAX_JSON_DEPTH (a tokenizer.json 200,000 brackets deep was
    copied and exported, and then no tokenizer loaded it); giving a key twice (a
    tokenizer_config.json with two `eos_token`s: which one was meant?); holding NaN or
    Infinity. A file transformers reads by name (`is_model_file`: tokenizer_config.json,
    generation_config.json, ...) must hold an object, as each of them does.
    generation_config.json's values are checked where transformers' classes check
    config.json's (`check_generation_config`). config.json's
    numbers and syntax are left to `read_config_json`, which reads every config export,
    import and training use and refuses them as the config they are (exit 2 for
    `--hf-config`'s). The one check import, export
    (local or URL), training and `validate --deep` apply to the assets they copy or read."""
    safe_files.check_size(where, len(data), MAX_JSON_ASSET_BYTES)
    crowded = too_many_containers(data, MAX_JSON_ASSET_CONTAINERS)
    if crowded is not None:
        raise CheckpointFileError(f"{where}: {crowded}")
    try:
        parsed = loads_unique(data)
    except ValueError as err:  # a key twice, bad syntax, nesting past MAX_JSON_DEPTH, not UTF-8
        if name == HF_CONFIG_FILE:  # refused by `read_config_json`, with the config's exit code
            return
        if isinstance(err, DuplicateKeyError):
            raise CheckpointFileError(f"{where}: {err} in one object") from None
        if name == GENERATION_CONFIG_FILE and not isinstance(err, NestingError):
            return  # transformers skips one it cannot parse: left out of copies (`asset_rewrites`)
        raise CheckpointFileError(f"{where}: not valid JSON ({json_problem(err)})") from None
    if name != HF_CONFIG_FILE and is_model_file(name) and not isinstance(parsed, dict):
        raise CheckpointFileError(
            f"{where}: holds a JSON {type(parsed).__name__}, not the object transformers"
            f" reads from a {Path(name).name}"
        )
    found = None if name == HF_CONFIG_FILE else first_nonfinite(parsed)
    if found is not None:
        raise CheckpointFileError(
            f"{where}: {found[0] or 'the value'} is {found[1]}, not a finite number (NaN and"
            " Infinity are not JSON)"
        )


def check_generation_config(
    where: str | os.PathLike, data: bytes, error: type[Exception] = CheckpointFileError
) -> None:
    """generation_config.json's `data` (read and checked by `check_json_asset`) built as
    `from_pretrained` builds it (`generation_config`: `max_new_tokens: -5` stops the load),
    `error` naming `where` if transformers refuses it. Run where transformers' config class
    checks config.json too (import-hf, export-hf --verify, validate, training): a plain
    export loads no transformers, and copies the file as it is."""
    try:
        parsed = loads_unique(data)
    except ValueError:  # not JSON: transformers skips it (`check_json_asset`)
        return
    if isinstance(parsed, dict):
        generation_config(parsed, str(where), error)


def check_generation_config_beside(
    directory: Path, root: str | os.PathLike | None, error: type[Exception] = CheckpointFileError
) -> None:
    """`check_generation_config` of `directory`'s generation_config.json, when it has one,
    read bounded inside `root` (the checkpoint; None: the model dir's own
    `safe_files.model_dir_root`): import-hf's model dir, validate's config dir."""
    path = directory / GENERATION_CONFIG_FILE
    if os.path.lexists(path):
        inside = safe_files.model_dir_root(directory) if root is None else root
        data = safe_files.read_bytes(path, MAX_JSON_ASSET_BYTES, root=inside)
        check_generation_config(path, data, error)


def _remote_asset(store: ByteStore, where: str, name: str) -> bytes:
    """An asset file read from a URL source, bounded and checked as a local one is."""
    size = store.size(name) or 0
    safe_files.check_size(where, size, _asset_limit(name))
    data = store.read_range(name, 0, size)
    if _is_json_asset(name):
        check_json_asset(name, where, data)
    return data


def _is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_FILE_SUFFIXES) or Path(name).name in WEIGHT_INDEX_FILES


_LAYER_RE = re.compile(r"^(?:decoder|model)\.layers\.([0-9]+)\.")
_EMBEDDINGS = ("embedding.word_embeddings.weight", "model.embed_tokens.weight")


def weights_summary(tensors: Mapping[str, TensorEntry]) -> str:
    """`; its weights: 24 layers, hidden 896, vocab 151936` from the stored shapes, so a
    user without the run's config can tell which Hugging Face config fits; "" when the
    names say nothing (an unknown layout)."""
    try:
        paths = model_tensors(tensors)
    except (MappingError, AmbiguousStateError):  # reported where the weights are read
        return ""
    layers = {int(m.group(1)) for path in paths if (m := _LAYER_RE.match(path))}
    parts = [f"{len(layers)} layers"] if layers else []
    embedding = next((tensors[paths[e]].shape for e in _EMBEDDINGS if e in paths), None)
    if embedding is not None and len(embedding) == 2:
        parts += [f"hidden {embedding[1]}", f"vocab {embedding[0]}"]
    return f"; its weights: {', '.join(parts)}" if parts else ""


class JsonConfig(SimpleNamespace):
    """config.json of a family whose weight shapes `hf_shapes` knows, kept as plain JSON.

    Export needs only model_type, a few numbers and the dtype; reading them without
    transformers saves its import and a meta-device model (seconds, more than exporting
    a 0.5B model). Any other config goes through transformers as before."""

    hf_shapes: dict[str, tuple[int, ...]]


def config_json_location(asset_location: str, derived: bool = False) -> str:
    """The config.json an export's assets come from, as messages name it: the location
    itself when it names a JSON file (`--hf-config FILE`), the file in it for a directory or
    URL, else the record it was `derived` from (`RUN/iter_0000100 [args] config.json`, a
    record at a URL too, which no file joined onto it names)."""
    if asset_location.endswith(".json"):
        return asset_location
    if not derived and (is_url(asset_location) or os.path.isdir(asset_location)):
        return join_location(asset_location, HF_CONFIG_FILE)
    return f"{asset_location} config.json"


def load_copied_config(
    copy: Path, asset_location: str, derived: bool = False
) -> JsonConfig | PretrainedConfig:
    """`load_config` of the config.json copied to `copy` from `asset_location` (`derived`:
    a record's, `config_json_location`); an error, and the line said as transformers reads
    it, name where it came from, not the copy (exit 2)."""
    where = config_json_location(asset_location, derived)
    try:
        return load_config(copy, shown_as=where)
    except HFConfigError as err:
        raise ExportUsageError(str(err).replace(str(copy), where)) from None


def refuse_family_without_table(
    source: ExportSource, copy: Path, layout_name: str, hf_config: str | os.PathLike | None
) -> None:
    """Refuse a checkpoint of Megatron-core names (as `layout_name` or, for auto, its names
    say) whose config.json at `copy` is of a family with no mcore name table, from that
    model_type read as JSON. `plan_export` refuses it too, but only after `load_config`
    built the config through transformers, as it must for a family hf_shapes does not
    know: 10-30 s on 2 cores, longer than a whole export of a tiny model. Exit 2 when the
    config is the user's (`hf_config`), else 1, as `plan_export` says it; anything this
    cannot tell (no model_type, names of neither layout) is left for the plan to say, and so
    is a config with an `auto_map`: its family may be one only the model's shipped code
    builds, which the config's own check names."""
    try:
        config = read_config_json(copy)[1]
    except (OSError, ValueError):
        return
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or layout_name == HF or "auto_map" in config:
        return
    try:
        shown = detect_layout(model_tensors(list(source.reader.tensors)))
    except (MappingError, AmbiguousStateError):
        return
    if shown != MCORE:
        return
    try:
        mcore_rules(model_type)
    except MappingError as err:
        error = ExportUsageError if hf_config is not None else ExportError
        raise error(f"{source.location}: {err}") from None


def load_config(
    path: str | os.PathLike, shown_as: str | os.PathLike | None = None
) -> JsonConfig | PretrainedConfig:
    """A `JsonConfig` when hf_shapes knows the family and every number it needs is in
    the file; otherwise (or for any problem with the file) transformers' config, its
    wait said naming `shown_as` (where the file came from; default `path`). Sizes
    that are not positive, do not divide, or claim more than `hf_config.MAX_LAYERS` layers are
    refused (HFConfigError) before any name is generated from them."""
    try:
        data = read_config_json(path)[1]  # a regular file, bounded: never a FIFO or /dev/zero
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        return load_hf_config(path, shown_as=shown_as)
    return json_config(data, path) or load_hf_config(path, shown_as=shown_as)


def json_config(data: dict, where: str | os.PathLike) -> JsonConfig | None:
    """config.json data as a `JsonConfig` (its sizes checked first), or None when
    hf_shapes does not know the family or a number it needs is missing."""
    check_geometry(data, where)
    shapes = hf_state_dict_shapes(data)
    return None if shapes is None else JsonConfig(**data, hf_shapes=shapes)


def expected_weights_of(config: JsonConfig | PretrainedConfig) -> ExpectedWeights:
    """The weights an export must write for `config`, either way it was loaded: from the
    shape table of a `JsonConfig` (no transformers import), else from the model
    transformers builds on the meta device. Export and validate plan against one answer."""
    if not isinstance(config, JsonConfig):
        return expected_weights(config)
    return weights_from_table(config.model_type, config.hf_shapes, bool(config.tie_word_embeddings))
