"""A Megatron-Bridge step without its run_config.yaml: why, and which step beside it has one.

Bridge's save writes the DCP, the step's train_state.pt and its two trackers, and only then
run_config.yaml and tokenizer/ (training/checkpointing.py). A run stopped in between leaves
a tracked step that Bridge's own load reads (it falls back when the file is absent) but
from which no Hugging Face config can be derived. Said in Megatron-LM's or the HF Trainer's
words, the user was not told which file is missing nor that a step beside it holds one.
Every save of a run writes the same model settings, so a sibling step's file fits; only the
newest few siblings are looked at, so a run of thousands of steps costs one listing.
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.dir_entries import children, is_file
from mfsdp_ckpt.format.layout import (
    BRIDGE_RUN_CONFIG_FILE,
    MEGATRON_BRIDGE,
    CheckpointPaths,
    iter_step,
)
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE

SIBLINGS_LOOKED_AT = 8


def sibling_run_config(step_dir: Path) -> Path | None:
    """The run_config.yaml of the newest `iter_N/` beside `step_dir` that holds one as a
    regular file, among the newest SIBLINGS_LOOKED_AT others; None when none does or the
    run dir cannot be listed."""
    run = step_dir.parent
    try:
        names = children(run)
    except MfsdpError:
        return None
    steps = [(step, name) for name in names if (step := iter_step(name)) is not None]
    others = sorted((s for s in steps if s[1] != step_dir.name), reverse=True)
    for _, name in others[:SIBLINGS_LOOKED_AT]:
        config = run / name / BRIDGE_RUN_CONFIG_FILE
        if is_file(config):
            return config
    return None


def missing_run_config_line(step_dir: Path) -> str:
    """Why a Bridge step holds no run_config.yaml and the ways on, less the path: a
    sibling step's file copied into it, or --hf-config."""
    sibling = sibling_run_config(step_dir)
    copy = (
        f"copy {sibling} (a save of the same run, with the same model settings) into"
        f" {step_dir}, or "
        if sibling is not None
        else ""
    )
    return (
        f"a Megatron-Bridge step without {BRIDGE_RUN_CONFIG_FILE}, from which the Hugging"
        " Face config is derived (Bridge writes it after its trackers: this save stopped"
        f" before it); {copy}pass --hf-config with the Hugging Face model dir the run started"
        " from (config.json, and tokenizer files for AutoTokenizer)"
    )


def missing_run_config(paths: CheckpointPaths) -> str | None:
    """`a Megatron-Bridge step without run_config.yaml ...` (`missing_run_config_line` of
    `paths.step_dir`) where `paths` is a Bridge step holding no run_config.yaml and no
    Hugging Face config of its own (`iter_N/hf/`, which export reads instead), else None:
    the one line export-hf refuses with and validate and inspect say, so that no command
    calls it "no config" in another layout's words."""
    if paths.kind != MEGATRON_BRIDGE or paths.step_dir is None or paths.run_config is not None:
        return None
    if paths.hf_assets is not None and is_file(paths.hf_assets / HF_CONFIG_FILE):
        return None
    return missing_run_config_line(paths.step_dir)
