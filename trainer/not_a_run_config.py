"""Whether a `--config` file is a file of another kind altogether: a Hugging Face model's
config.json (or its tokenizer, generation or PEFT adapter config), a checkpoint's
manifest.json, a data file, a weights file, a file another trainer saved in its checkpoint
(Megatron-Bridge's run_config.yaml).

`--config FILE` read as "the model's config" sends the one file called config.json, which
then failed on its first key ("unknown config key 'architectures'"), a manifest on a
did-you-mean that led nowhere (`base_model`: "did you mean data.pad_mode (verl's)?"), a
.jsonl on a YAML syntax error. What the file is, and the key or command that takes it,
says what to do. Told from the name and suffix first (a tokenizer.json or a parquet file
may be far larger than a config, and is never read here), then from the keys of a file
read within the config size bound, then from the checkpoint it lies in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.format.finding_runs import checkpoint_as_given
from mfsdp_ckpt.format.layout import MANIFEST_FILE, TRACKER_FILE
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE

# suffixes of the tables data.train_files reads (trainer/data/files.py), .json aside: a
# .json may be a config written as JSON, so that one is told by what it holds
DATA_FILE_SUFFIXES = (".parquet", ".jsonl")
WEIGHT_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".distcp")
# files of a Hugging Face model dir besides config.json, by name
HF_MODEL_DIR_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "special_tokens_map.json",
    "generation_config.json",
)
# keys of a Hugging Face model config no mfsdp run config has at its top level
_HF_CONFIG_KEYS = ("architectures", "model_type")
# keys every manifest mfsdp writes has (mfsdp_ckpt/format/manifest.py), none a run config has
_MANIFEST_KEYS = ("format_version", "files", "step")


def other_file_by_name(path: str, command: str) -> str | None:
    """The refusal for a file its name or suffix tells is no run config (data, weights, a
    model dir's tokenizer or generation config, a PEFT adapter's config); None otherwise.
    Decided without reading the file."""
    name = os.path.basename(path).lower()
    folder = _folder(path)
    if name.endswith(DATA_FILE_SUFFIXES):
        what = f"a data file, not an mfsdp run config; give it as data.train_files={path}"
    elif name.endswith(WEIGHT_FILE_SUFFIXES):
        what = f"a weights file, not an mfsdp run config; give its dir as model.path={folder}"
    elif name in HF_MODEL_DIR_FILES:
        what = (
            f"a Hugging Face model dir's {name}, not an mfsdp run config; give the dir as"
            f" model.path={folder}"
        )
    elif name == ADAPTER_CONFIG_FILE:
        what = (
            "a PEFT adapter's config, not an mfsdp run config; give its dir as"
            f" model.lora_adapter_path={folder}"
        )
    else:
        return None
    return f"{path}: {what}{_start(command)}"


def other_file_by_keys(path: str, tree: Any, command: str) -> str | None:
    """The refusal for a parsed file its keys tell is a Hugging Face model config, a
    checkpoint's manifest or a .json table of rows, or that lies in a checkpoint (a run
    config saved there by another trainer); None otherwise."""
    if isinstance(tree, list) and tree and all(isinstance(row, dict) for row in tree):
        what = (
            "a data file (a list of rows), not an mfsdp run config; give it as"
            f" data.train_files={path}"
        )
    elif not isinstance(tree, dict):
        return None
    elif any(key in tree for key in _HF_CONFIG_KEYS) and "model" not in tree:
        what = f"a Hugging Face model config, not an mfsdp run config; {_model_dir_of(path)}"
    elif all(key in tree for key in _MANIFEST_KEYS):
        what = f"a checkpoint's {MANIFEST_FILE}, not an mfsdp run config; {_checkpoint_ways(path)}"
    elif (checkpoint := _checkpoint_holding(path)) is not None:
        # another trainer's record of its run (Megatron-Bridge's run_config.yaml)
        what = (
            f"a file of the checkpoint {checkpoint}, not an mfsdp run config; to start from"
            f" that checkpoint give model.path={checkpoint}"
        )
    else:
        return None
    return f"{path}: {what}{_start(command)}"


def _checkpoint_holding(path: str) -> Path | None:
    """The checkpoint whose own dir holds the file `path` (a step's run_config.yaml), as
    given; None where its dir only lies somewhere below one: a project's configs/sft.yaml
    under a dir holding an unrelated manifest.json is a run config."""
    folder = _folder(path)
    checkpoint = checkpoint_as_given(folder, run_itself=False)
    if checkpoint is None or os.path.abspath(checkpoint) != os.path.abspath(folder):
        return None
    return checkpoint


def _model_dir_of(config: str) -> str:
    """What model.path to give for the model whose config.json is `config`: its dir, or the
    checkpoint it lies in (a checkpoint's huggingface/ holds no weights; model.path takes
    the checkpoint)."""
    checkpoint = checkpoint_as_given(_folder(config))
    if checkpoint is not None:
        return f"it is the config of the checkpoint {checkpoint}: give model.path={checkpoint}"
    return f"give its dir as model.path={_folder(config)}"


def _checkpoint_ways(path: str) -> str:
    """How a run goes on from the checkpoint whose manifest is `path`: resume its run (where
    the step lies in one) or start a new run from its weights."""
    step = _folder(path)
    run = os.path.dirname(step) or "."
    start = f"start a new run from its weights with model.path={step}"
    if os.path.isfile(os.path.join(run, TRACKER_FILE)):
        return f"resume its run with trainer.run_dir={run}, or {start}"
    return start


def _folder(path: str) -> str:
    """The directory `path` lies in, as the user named it (`.` for a bare file name)."""
    return os.path.dirname(path) or "."


def _start(command: str) -> str:
    """Where a run config comes from."""
    return (
        f"; start a run config with {mfsdp_command(f'config defaults {command} > {command}.yaml')}"
    )


__all__ = ["other_file_by_keys", "other_file_by_name"]
