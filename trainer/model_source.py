"""Where a run's starting model comes from: a Hugging Face model dir or any checkpoint.

`model.path` may name a Hugging Face dir (config.json + safetensors) or anything
`mfsdp ckpt export-hf` reads: our run and step dirs, a bare DCP dir as Megatron-LM and
verl write it, an `mfsdp ckpt import-hf` result. A checkpoint's weights stream straight
into the model being built, one tensor at a time, through export's own planning (the
same name tables, shape checks and conversions), so starting from a checkpoint and from
its export give the same model bit for bit, with no export in between.

A Megatron-LM or Megatron-Bridge checkpoint needs no `model.hf_config`: the config is
derived from its `args` / `run_config.yaml` exactly as `mfsdp ckpt export-hf` derives it
(mfsdp_ckpt/convert/megatron_record.py, megatron_config.py), and the tokenizer is the one
Megatron-Bridge saved in `iter_N/tokenizer/`; Megatron-LM keeps none, so then
`model.tokenizer` names it.

The path is checked here before transformers sees it: given a path that does not exist,
transformers takes it for a Hub repo id (and with network access would download it).
Nothing is ever fetched: every transformers call that reads these paths gets
`local_files_only=True`.

A checkpoint's `.metadata` is read once per process to derive its config (the tokenizer,
the config and the model each resolve `model.path`; the result is kept per checkpoint) and
once to load its weights (validate's checks and the load share one reader): one of
millions of chunks takes minutes to read (bench/dcp_metadata_read.py).
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.dir_entries import is_file
from mfsdp_ckpt.format.finding_runs import checkpoint_containing
from mfsdp_ckpt.format.layout import (
    BRIDGE_TRACKER_FILE,
    DCP_METADATA_FILE,
    TRACKER_FILE,
    CheckpointPathError,
    CheckpointPaths,
    ForeignFormatError,
    IncompleteCheckpointError,
    looks_like_hf_model,
)
from mfsdp_ckpt.format.left_step_names import LeftStepError
from mfsdp_ckpt.format.path_refusals import refuse_url
from mfsdp_ckpt.format.verl_contents import VerlHfModelOnlyError, VerlNoModelError
from trainer.config import ConfigError, ModelConfig
from trainer.env_ints import process_rank
from trainer.local_paths import HF_CONFIG_NEEDED, missing_path

if TYPE_CHECKING:  # the CLI imports this module without torch or transformers
    from transformers import PreTrainedModel

    from mfsdp_ckpt.convert.mtp import MtpLayers

log = logging.getLogger("mfsdp.model")

# How a run takes a config of the user's own: what derivation errors ask for (export-hf's
# --hf-config is no option of `mfsdp train`)
HF_CONFIG_KEY = "model.hf_config=DIR"
_DERIVED_KEPT = 4  # checkpoints whose derived source a process keeps (a run resolves one)
DEFAULT_SHAPE = ModelConfig.shape  # what model.shape is when the config does not set it
# The files AutoTokenizer builds a tokenizer from (fast, sentencepiece, BPE, WordPiece) or
# configures one with: a dir holding none of them has no tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
)


@dataclass(frozen=True)
class ModelSource:
    """`assets`: the dir with config.json (and tokenizer files); `checkpoint`: where weights
    come from when they are not in `assets` as a Hugging Face model. A Megatron checkpoint
    read without model.hf_config has no such dir: `derived` is the config.json its record
    implies, `tokenizer_dir` the tokenizer it saved (None for Megatron-LM), and
    `tokenizer_model` the tokenizer its run named (reported, never read). `assets_key` is
    the key that named `assets` (model.hf_config only where that dir is the one used):
    what an error about that dir's files names."""

    assets: Path | None
    checkpoint: CheckpointPaths | None = None
    derived: dict[str, Any] | None = None
    tokenizer_dir: Path | None = None
    tokenizer_model: str | None = None
    assets_key: str = "model.path"

    @property
    def tokenizer(self) -> Path | None:
        """Where the tokenizer files are: the assets dir, else the checkpoint's own."""
        return self.assets if self.assets is not None else self.tokenizer_dir

    @property
    def tokenizer_key(self) -> str:
        """The key that named `tokenizer`'s dir: a message about its files names that key."""
        return self.assets_key if self.assets is not None else "model.path"


def _checked_dir(key: str, value: str, needed: str) -> Path:
    try:  # a URL read as a path was "does not exist"; `file:///x` names the local /x
        refuse_url(value)
    except CheckpointPathError as err:
        raise ConfigError(f"{key}: {err}") from None
    path = Path(value)
    if not path.exists():
        raise missing_path(key, value, needed)
    return path


def _refuse_unreadable_config(model_dir: Path) -> None:
    """A config.json in `model_dir` that is not a readable config is named as import-hf and
    validate --hf-config name it (a regular file inside the model dir, then JSON with a
    model_type): the hint to train from it (model.random_init) only led to this error next,
    and one that is no regular file (a FIFO, a /dev/zero link, a directory) was called "no
    config.json" beside the advice to import-hf it, which then refused that file."""
    from mfsdp_ckpt.convert.hf_config import HFConfigError, read_config_json
    from mfsdp_ckpt.storage import safe_files
    from mfsdp_ckpt.storage.byte_store import CheckpointFileError

    config_file = model_dir / "config.json"
    root = safe_files.model_dir_root(model_dir)
    try:
        safe_files.regular_file(config_file, root, f"the model dir {model_dir}")
        read_config_json(config_file, root)
    except (CheckpointFileError, HFConfigError) as err:
        raise ConfigError(f"model.path: {err}") from None


def resolve_model_source(cfg: ModelConfig) -> ModelSource | None:
    """The model's source for `cfg.path`, or None when the run builds a named shape."""
    if cfg.path is None:
        _refuse_unread_hf_config(cfg, f"without model.path the run builds model.shape {cfg.shape}")
        return None
    path = _checked_dir("model.path", cfg.path, "a local Hugging Face model dir or checkpoint")
    if not path.is_dir():
        raise ConfigError(
            f"model.path: {cfg.path} is not a directory (give a Hugging Face model dir or a"
            " checkpoint)"
        )
    config_file = path / "config.json"
    has_config = os.path.isfile(config_file)  # False, not PermissionError, where it cannot tell
    # the .bin records beside config.json in the HF Trainer's checkpoint-N (training_args.bin,
    # always there) are no weights: the dir is a checkpoint, which resolve_checkpoint reads
    if has_config and (cfg.random_init or looks_like_hf_model(_entries(path))):
        _refuse_unread_hf_config(
            cfg, f"model.path {cfg.path} is a Hugging Face model dir, whose own config.json is used"
        )
        return ModelSource(assets=path)
    try:  # config.json without weights may still be a checkpoint: the HF Trainer's checkpoint-N
        checkpoint = resolve_checkpoint(path)
    except VerlNoModelError as err:  # as a checkpoint of no model tensors is, when read
        raise ConfigError(f"model.path: {err}") from None
    except IncompleteCheckpointError as err:  # a save that did not finish: exit 1 still
        raise _named(err) from None
    except CheckpointPathError as err:
        if isinstance(err, (LeftStepError, VerlHfModelOnlyError)):  # a step of a run
            raise ConfigError(f"model.path: {err}") from None
        if os.path.lexists(config_file):  # before a hint to train from it or to import it
            _refuse_unreadable_config(path)
        if isinstance(err, ForeignFormatError) and not has_config:
            raise ConfigError(f"model.path: {err}") from None
        _refuse_trainer_output_dir(cfg.path, path)
        if has_config:
            _refuse_checkpoint_assets_dir(path)
            raise ConfigError(_no_weights_message(cfg.path, path)) from None
        raise ConfigError(
            f"model.path: {cfg.path} is neither a Hugging Face model dir (no config.json) nor a"
            f" checkpoint ({err})"
        ) from None
    _refuse_lora_checkpoint(cfg.path, checkpoint)
    _read_from[cfg.path] = checkpoint
    if cfg.hf_config is None and checkpoint.hf_assets is None:
        derived = _derived_source(checkpoint)
        if derived is not None:
            if derived.tokenizer is None and cfg.tokenizer is None:
                raise ConfigError(_no_tokenizer_message(cfg, derived))
            return derived
    assets_key = "model.hf_config" if cfg.hf_config is not None else "model.path"
    return ModelSource(
        assets=_checkpoint_assets(cfg, checkpoint), checkpoint=checkpoint, assets_key=assets_key
    )


# The checkpoint each model.path last resolved to in this process: the one the model's
# weights were read from (the model is built after its tokenizer and config), which the
# run's start lines name (`weights_lines`)
_read_from: dict[str, CheckpointPaths] = {}


def weights_lines(cfg: ModelConfig) -> list[str]:
    """The lines a run starting from a checkpoint says first: which step's weights it read,
    and why that one where `model.path` named a run (its tracker's step, the newest
    complete), then the note inspect, validate and export-hf print for the same path (a
    newer step that did not finish, a dir holding one run). verl says "Load from checkpoint
    folder"; a run from a run dir said nothing of the step it chose. No lines for a Hugging
    Face model dir, a named shape or model.random_init (no checkpoint weights are read)."""
    if cfg.path is None or cfg.random_init:
        return []
    read = _read_from.get(cfg.path)
    if read is None:
        return []
    where = read.step_dir or read.dist_ckpt
    if read.role is not None and read.step_dir is not None:
        where = where / read.role
    why = _chosen_because(Path(cfg.path), read)
    lines = [f"weights from {where}" + (f" ({why})" if why else "")]
    return lines + ([f"note: {read.note}"] if read.note else [])


def _chosen_because(given: Path, read: CheckpointPaths) -> str | None:
    """Why `read`'s step was read where `given` names the run (or a dir holding it) rather
    than the step: the step the run's tracker names, as verl and Megatron-LM resume, else
    the newest complete step (mfsdp's run without a tracker). None where the step was given
    or the run holds no other."""
    step = read.step_dir
    if step is None or read.run_dir is None:
        return None
    if Path(os.path.abspath(given)) not in Path(os.path.abspath(step)).parents:
        return None
    if any(is_file(read.run_dir / name) for name in (TRACKER_FILE, BRIDGE_TRACKER_FILE)):
        return "the tracker's step"
    return "the newest complete step" if read.has_manifest else None


def _named(err: IncompleteCheckpointError) -> IncompleteCheckpointError:
    """`err` after `model.path: `, its class (so its exit status, 1) kept, as
    `checkpoint.resume=PATH` says of the same dir: a step given directly whose save did not
    finish is a run's damage, not a mistyped key, yet the line named no key."""
    named = copy.copy(err)
    named.args = (f"model.path: {err}",)
    return named


def _no_weights_message(given: str, path: Path) -> str:
    """What a model dir with config.json and no safetensors is told: the weights it holds in
    another format (`model.pt`, GGUF) named with how to convert them, where it holds any;
    else that model.random_init trains from its config alone. Told "no weights" and to
    train from random weights, a dir of `model.pt` did not say why its weights were not
    read."""
    from mfsdp_ckpt.storage.safetensors_source import other_weights_hint

    hint = other_weights_hint(path)
    advice = hint or "; set model.random_init=true to train from its config alone"
    return f"model.path: {given} has config.json but no weights (*.safetensors){advice}"


def _refuse_unread_hf_config(cfg: ModelConfig, why_unread: str) -> None:
    """`model.hf_config` gives the config and tokenizer of a checkpoint without huggingface/.
    Beside a Hugging Face model dir (whose own config.json the run trains) or without
    model.path (a named shape) nothing read it: the run trained another model than the
    config given, with exit 0. Refused before launch, once the path itself is checked (a
    missing one or a weights file is named as that)."""
    if cfg.hf_config is None:
        return
    _checked_hf_config(cfg.hf_config)
    raise ConfigError(
        f"model.hf_config: {cfg.hf_config} would not be read: {why_unread} (model.hf_config is"
        " the config and tokenizer of a checkpoint without huggingface/); set config fields"
        " with model.overrides, or drop model.hf_config"
    )


def note_unread_shape(cfg: ModelConfig) -> None:
    """With model.path set, the model's config is model.path's: a named model.shape beside
    it is not read, and the user is told so in one note (the launching process's config
    check calls this once; its ranks quiet the config notes). Not refused: a named-shape
    run's saved config.yaml names its shape, and `--config RUN/config.yaml
    model.path=RUN/global_step_N` goes on from that run's own checkpoint; model.shape
    cannot be cleared from the command line."""
    if cfg.path is None or cfg.shape == DEFAULT_SHAPE:  # the default is not told apart
        return
    logging.getLogger("mfsdp.config").warning(
        "note: model.shape %s is not read: the model's config comes from model.path %s"
        " (config fields are set with model.overrides)",
        cfg.shape,
        cfg.path,
    )


def _checked_hf_config(value: str) -> Path:
    """model.hf_config's dir (or config.json), named by its key where it is missing, a URL
    or a weights file rather than the dir holding it."""
    from mfsdp_ckpt.convert.hf_config import weights_file_problem

    path = _checked_dir("model.hf_config", value, HF_CONFIG_NEEDED)
    problem = weights_file_problem(value)
    if problem:
        raise ConfigError(f"model.hf_config: {problem}")
    return path


def check_tokenizer_present(cfg: ModelConfig, source: ModelSource | None) -> None:
    """ConfigError (exit 2) when the tokenizer would come from the model's dir (no
    `model.tokenizer`) and that dir holds no tokenizer file: transformers then built a
    tokenizer that encodes every row to nothing, refused only once torch and the model had
    loaded (exit 1), with no word of model.tokenizer."""
    if cfg.tokenizer is not None or source is None or source.tokenizer is None:
        return
    directory = source.tokenizer
    if not directory.is_dir() or any(os.path.lexists(directory / n) for n in TOKENIZER_FILES):
        return
    named = ", ".join(TOKENIZER_FILES[:3])
    raise ConfigError(
        f"{source.tokenizer_key}: {directory} holds no tokenizer files ({named}, ...);"
        " set model.tokenizer=DIR, a local dir with the model's tokenizer files"
    )


def _refuse_checkpoint_assets_dir(path: Path) -> None:
    """A checkpoint's huggingface/ dir (config and tokenizer; its weights are in the
    checkpoint's dist_ckpt/) given as model.path was told to set model.random_init=true,
    which trains from random weights: the checkpoint it lies in is what to give. One in a
    format mfsdp does not read (verl's FSDP backend, Megatron's torch_dist) is told that
    checkpoint's own refusal, which names what converts it: model.path=<that checkpoint>
    was only refused next."""
    from mfsdp_ckpt.storage.safetensors_source import unread_checkpoint_refusal

    inside = checkpoint_containing(path)
    if inside is None or inside == Path(os.path.abspath(path)):  # itself: unreadable
        return
    held = f"model.path: {path} holds the config and tokenizer of the checkpoint {inside}"
    unread = unread_checkpoint_refusal(inside)
    if unread is not None:
        raise ConfigError(f"{held}, not its weights; {unread}")
    raise ConfigError(f"{held}, not its weights: give model.path={inside}")


def _refuse_lora_checkpoint(given: str, checkpoint: CheckpointPaths) -> None:
    """An mfsdp LoRA checkpoint holds the adapter alone: training from it failed after the
    model had loaded, with advice meant for other tools' PEFT saves. Its ways on, named
    before anything loads. On a random-init base there is no merged model to start from
    (the merged export refuses it), so that advice is left out: it only led to that
    export's refusal. Resuming goes on only with the trainer that wrote it (`train sft`
    refuses to resume a GRPO run's step, and the reverse), so that trainer is named, and
    the same adapter goes on in any other run as a PEFT adapter dir over its base model."""
    from mfsdp_ckpt.format.lora_fields import RESUME_ADVICE, adapter_only_advice, base_weights_dir
    from mfsdp_ckpt.format.manifest import ManifestError, read_manifest
    from mfsdp_ckpt.lora import read_base_model
    from trainer.resume import run_kind_of

    try:
        manifest = read_manifest(checkpoint.manifest) if checkpoint.manifest else None
    except (ManifestError, OSError):
        return  # the checkpoint's own checks say what is wrong with it
    if manifest is None or manifest.lora is None:
        return
    base = base_weights_dir(read_base_model(manifest))  # read_manifest has checked it
    if base is None:
        raise ConfigError(
            f"model.path: {given} is an mfsdp LoRA checkpoint (the adapter alone) whose"
            " base model was a random init: there are no weights to start from; "
            f"{adapter_only_advice(given)}"
        )
    written = run_kind_of(manifest.info)
    resume = (
        f"to go on training it with `mfsdp train {written}`, which wrote it, give its run dir"
        " as trainer.run_dir (it resumes)"
        if written is not None
        else RESUME_ADVICE
    )
    raise ConfigError(
        f"model.path: {given} is an mfsdp LoRA checkpoint (the adapter alone, on its base"
        f" model {base}): {resume}; to train the same adapter on in a new run (of either"
        f" trainer), `mfsdp ckpt export-hf {given} --adapter-only --out DIR`, then"
        f" model.path={base} model.lora_adapter_path=DIR; to train from the merged model,"
        f" `mfsdp ckpt export-hf {given} --out DIR`, then model.path=DIR"
    )


def _refuse_trainer_output_dir(given: str, path: Path) -> None:
    """The HF Trainer's output dir whose newest checkpoint-N is a Hugging Face model dir
    (saved without FSDP) is told to give that dir: it was called "neither a Hugging Face
    model dir nor a checkpoint (...: a Hugging Face model dir ...)", and sent to import-hf."""
    numbered = [
        (number, name)
        for name in _entries(path)
        if (number := hf_trainer.checkpoint_number(name)) is not None
    ]
    if not numbered:
        return
    newest = path / max(numbered)[1]
    if looks_like_hf_model(_entries(newest)):
        raise ConfigError(
            f"model.path: {given} is an HF Trainer output dir, whose newest checkpoint"
            f" {newest.name} is a Hugging Face model dir: give model.path={newest}"
        )


def _entries(directory: Path) -> list[str]:
    """The names in `directory`; none where it cannot be listed (then it is read as a
    checkpoint, whose reader names what it cannot open)."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _no_tokenizer_message(cfg: ModelConfig, source: ModelSource) -> str:
    """Megatron-LM keeps no tokenizer: say which key names one, and what the run used; a
    tokenizer dir copied into the iteration dir is not read for this layout
    (`unread_tokenizer`), and is named as the one to give rather than said to be absent."""
    from mfsdp_ckpt.convert.export_hf import unread_tokenizer

    named = (
        f" (the run named tokenizer_model {source.tokenizer_model!r})"
        if source.tokenizer_model
        else ""
    )
    unread = unread_tokenizer(source.checkpoint)
    if unread is not None:
        return (
            f"model.path: {cfg.path}: {unread.said}{named}; set"
            f" model.tokenizer={unread.directory} to use it"
        )
    return (
        f"model.path: {cfg.path} holds no tokenizer (Megatron-LM keeps none in its"
        f" checkpoint){named}; set model.tokenizer=DIR, a local dir with the run's tokenizer"
        " files"
    )


_derived: dict[tuple, ModelSource | None] = {}


def _metadata_identity(checkpoint: CheckpointPaths) -> tuple | None:
    """Which `.metadata` file, as it is now: its path, device, inode, size and mtime (a
    checkpoint saved again in place is another); None where it cannot be statted."""
    where = checkpoint.dist_ckpt / DCP_METADATA_FILE
    try:
        st = os.stat(where)
    except OSError:
        return None
    return (str(where), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _derived_source(checkpoint: CheckpointPaths) -> ModelSource | None:
    """`_derive_source`, kept per checkpoint for the process: resolving `model.path` again
    (for the tokenizer, the config, the model, the saved generation config) reads no
    `.metadata` again."""
    key = _metadata_identity(checkpoint)
    if key is None:
        return _derive_source(checkpoint)  # which names what is wrong with it
    if key not in _derived:
        while len(_derived) >= _DERIVED_KEPT:
            del _derived[next(iter(_derived))]
        _derived[key] = _derive_source(checkpoint)
    return _derived[key]


def recorded_vocab_rows(cfg: ModelConfig, source: ModelSource | None, vocab_size: int) -> Any:
    """Where `model.hf_config` names more tokens than a Megatron-LM checkpoint's record
    proves the run built rows for (Qwen2.5's config says 151936; Megatron-LM padded its
    tokenizer's 151665 tokens to 151680 rows and recorded that as padded_vocab_size), the
    `recorded_vocab.VocabFit`: the model is built with the stored rows, as export-hf writes
    them, where it was refused with the vocab_size to set. None otherwise, and always
    without `model.hf_config` (a derived config states the rows itself) or where
    `model.overrides` sets vocab_size (the user's choice is checked as given)."""
    if source is None or source.checkpoint is None or source.derived is not None:
        return None
    if cfg.hf_config is None or "vocab_size" in cfg.overrides:
        return None
    from mfsdp_ckpt.convert.recorded_vocab import vocab_fit
    from mfsdp_ckpt.errors import MfsdpError
    from mfsdp_ckpt.storage.reader import CheckpointReader

    try:
        return vocab_fit(
            source.checkpoint, CheckpointReader(source.checkpoint.dist_ckpt), vocab_size
        )
    except MfsdpError as err:
        raise ConfigError(f"model.path: {err}") from None


def _derive_source(checkpoint: CheckpointPaths) -> ModelSource | None:
    """The config a Megatron checkpoint's own record implies, as export derives it, and the
    tokenizer files Megatron-Bridge saved; None when it records no model. The tokenizer
    files are checked as export checks them, and refused with export's error and exit
    code (a link out of the checkpoint, a FIFO, a file over MAX_ASSET_BYTES)."""
    from mfsdp_ckpt.convert.megatron_record import has_recorded_config, recorded_config
    from mfsdp_ckpt.errors import MfsdpError
    from mfsdp_ckpt.storage.reader import CheckpointReader

    try:
        reader = CheckpointReader(checkpoint.dist_ckpt)
        if not has_recorded_config(checkpoint, reader):
            return None
        derived = recorded_config(checkpoint, reader, HF_CONFIG_KEY)
    except MfsdpError as err:
        raise ConfigError(f"model.path: {err}") from None
    if derived is None:
        return None
    tokenizer = _checked_tokenizer_dir(checkpoint)
    return ModelSource(
        assets=None,
        checkpoint=checkpoint,
        derived=derived.config,
        tokenizer_dir=tokenizer,
        tokenizer_model=derived.tokenizer_model,
    )


def _checked_tokenizer_dir(checkpoint: CheckpointPaths) -> Path | None:
    from mfsdp_ckpt.convert.export_source import check_local_assets
    from mfsdp_ckpt.storage.byte_store import CheckpointFileError

    directory = checkpoint.tokenizer_dir
    if directory is None:
        return None
    if directory.is_symlink() or not directory.is_dir():
        raise CheckpointFileError(f"{directory}: not a directory of the checkpoint")
    check_local_assets(directory, root=checkpoint.root)
    return directory


def _checkpoint_assets(cfg: ModelConfig, checkpoint: CheckpointPaths) -> Path:
    if cfg.hf_config is not None:
        assets = _checked_hf_config(cfg.hf_config)
        assets = assets.parent if assets.is_file() else assets
        if not (assets / "config.json").is_file():
            raise ConfigError(f"model.hf_config: {cfg.hf_config} has no config.json")
        return assets
    hf = checkpoint.hf_assets
    if hf is None or not (hf / "config.json").is_file():
        raise ConfigError(
            f"model.path: checkpoint {checkpoint.dist_ckpt} has no huggingface/config.json beside"
            " it; set model.hf_config=DIR (the Hugging Face dir with its config and tokenizer)"
        )
    return hf


def _target_of(name: str, model_type: str, targets: dict) -> tuple[Any, str | None]:
    """The tensor of the in-memory model an exported (hub-named) tensor fills, and the fused
    parameter it is a part of (None when it is a parameter of its own): transformers 5.x
    holds a layer's experts fused, while checkpoints name each expert's tensor."""
    from mfsdp_ckpt.convert.fused_experts import in_memory_slot

    if name in targets:
        return targets[name], None
    slot = in_memory_slot(name, model_type)
    if slot is None or slot[0] not in targets:
        return None, None
    param, expert, part, parts = slot
    tensor = targets[param]
    if expert < 0:
        return tensor, param
    if expert >= tensor.shape[0]:
        return None, None
    rows = tensor.shape[1] // parts
    return tensor[expert, part * rows : (part + 1) * rows], param


def _parts_of(fused: str, targets: dict) -> int:
    """How many exported tensors make up a fused in-memory parameter."""
    tensor = targets[fused]
    if tensor.dim() != 3:
        return 1
    return tensor.shape[0] * (2 if fused.endswith("gate_up_proj") else 1)


def _refuse_uncomputable_record(source: ModelSource, config: Any, reader: Any) -> None:
    """A checkpoint whose record holds a setting no family here computes (pre-softmax
    routing, layernorm 1p, a windowed attention: `record_agreement.refuse_uncomputable`)
    trained under `model.hf_config` as another model: its weights mean something the built
    model does not compute, and export refuses it under any --hf-config. What a config may
    choose (another rope_theta, yarn scaling to extend the context, an epsilon) is the
    user's choice of the model to train, as from a model dir: not compared here. A derived
    config is the record's own: nothing to check."""
    from mfsdp_ckpt.convert.record_agreement import refuse_uncomputable

    if source.assets is None or source.checkpoint is None:
        return
    refuse_uncomputable(
        config.to_dict(), source.checkpoint, reader, f"{source.assets_key} {source.assets}"
    )


_told_mtp_left_out: set[str] = set()  # checkpoints whose MTP layers this process named


def _warn_mtp_left_out(mtp: MtpLayers | None, checkpoint: CheckpointPaths) -> None:
    """One warning line per process and checkpoint that its multi-token prediction layers
    were left out: every rank loads the checkpoint, and GRPO builds its reference model
    from it too, but the user is told once."""
    where = str(checkpoint.dist_ckpt)
    if mtp is None or where in _told_mtp_left_out or process_rank() != 0:
        return
    _told_mtp_left_out.add(where)
    log.warning("%s", mtp.left_out_of_training(where))


def load_checkpoint_weights(model: PreTrainedModel, source: ModelSource) -> None:
    """Copy the checkpoint's model weights into `model` (built from the same config), one
    tensor at a time; every parameter must be covered. Refuses a damaged checkpoint with
    validate's first error before a byte is read, as a resume of it does: the digests of
    the manifest's files included, split over the ranks (a data file of another step
    passes every per-record CRC this read checks).

    Multi-token prediction layers (Megatron's `--mtp-num-layers`) are left out unread, as
    `export-hf --drop-mtp` leaves them out, with a warning (`_warn_mtp_left_out`): the
    transformers model built here has no MTP module, so they can never be trained here,
    and the main model is complete without them. Refusing them asked for a flag of export,
    where the user asked to train this model; the checkpoint itself keeps them."""
    import torch

    from mfsdp_ckpt.checkpointer import verify_before_load
    from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError
    from mfsdp_ckpt.convert.export_plan import convert, plan_export
    from mfsdp_ckpt.convert.export_source import refuse_critic, source_for
    from mfsdp_ckpt.convert.megatron_config import MegatronConfigError
    from mfsdp_ckpt.storage.reader import CheckpointReader

    assert source.checkpoint is not None
    reader = CheckpointReader(source.checkpoint.dist_ckpt)
    verify_before_load(source.checkpoint, reader=reader)  # as a resume of it checks it
    try:
        refuse_critic(source.checkpoint.dist_ckpt, source.checkpoint.role)
        _refuse_uncomputable_record(source, model.config, reader)
        plan = plan_export(
            source_for(source.checkpoint, reader),
            model.config,
            dtype="fp32",
            hf_config=source.assets if source.assets_key == "model.hf_config" else None,
            config_option=HF_CONFIG_KEY,
            drop_mtp=True,
        )
    except (ExportUsageError, ExportError, MegatronConfigError) as err:  # config does not fit
        raise ConfigError(f"model.path: {err}") from None
    _warn_mtp_left_out(plan.mtp, source.checkpoint)
    targets = dict(model.named_parameters()) | dict(model.named_buffers())
    loaded: set[str] = set()
    pieces: dict[str, int] = {}  # fused MoE parameters: how many expert parts were copied
    with torch.no_grad():
        for item in plan.ordered_items():
            for name, tensor in convert(plan, item):
                target, fused = _target_of(name, model.config.model_type, targets)
                if target is None:
                    raise ConfigError(
                        f"model.path: {source.checkpoint.dist_ckpt} holds {name}, which the model"
                        " built from its config does not have"
                    )
                target.copy_(tensor)
                if fused is None:
                    loaded.add(name)
                else:
                    pieces[fused] = pieces.get(fused, 0) + 1
    for fused, count in pieces.items():  # every part of every expert, as the export writes
        if count == _parts_of(fused, targets):
            loaded.add(fused)
    missing = sorted(set(dict(model.named_parameters())) - loaded)
    if missing:
        raise ConfigError(
            f"model.path: {source.checkpoint.dist_ckpt} lacks {len(missing)} weight(s), e.g."
            f" {missing[0]}"
        )
