"""The base an exported PEFT adapter names (`base_model_name_or_path`), as a PEFT user loads it.

`AutoPeftModelForCausalLM.from_pretrained(ADAPTER_DIR)` loads the model dir that field
names, with transformers. A LoRA step records its base as training read it: a model dir, or,
on the SFT -> GRPO route (`model.path=RUN/global_step_N`), a checkpoint's `dist_ckpt` dir,
which transformers cannot load ("Unrecognized model ... Should have a `model_type` key"). So
a checkpoint base is named by the Hugging Face dir it holds the weights of, where its record
knows one (an import-hf result: the dir it was imported from), else null, with a note saying
which checkpoint to export first (`mfsdp ckpt export-hf`) and load the adapter onto.

A model dir is named only where it is the model the adapter was trained on: a run trained
with `model.overrides` built its model from that dir's config.json changed, which the step
keeps, and PEFT would build the base from the dir's own (`lora_base_config`). Then the field
is null too, with a note naming the keys and how to build the base the adapter was trained
on. A base dir that is not here, or whose config.json cannot be read, is named as recorded
with a note saying it could not be checked.
"""

from __future__ import annotations

import os
from pathlib import Path

from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.convert.lora_base_config import compare_base_config, differing_words
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE, DIST_CKPT_DIR, CheckpointPaths
from mfsdp_ckpt.format.lora_fields import BaseModelRecord, base_weights_dir
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE


def peft_base(
    base: BaseModelRecord | None, paths: CheckpointPaths
) -> tuple[str | None, str | None]:
    """`base_model_name_or_path` for an adapter trained on `base` (the step at `paths`), and
    a note for stderr where that is null because the base is a checkpoint or a model dir
    whose config is not the one trained (`_trained_on`), or where the base dir could not be
    checked (None: nothing to say). A random init (no weights anywhere) is null without a
    note, as before: nothing can be loaded."""
    weights = base_weights_dir(base)
    if weights is None:
        return None, None
    if not _is_checkpoint(base, weights):
        return _trained_on(weights, paths)
    imported = _imported_from(weights)
    if imported is not None:
        return _trained_on(imported, paths)
    step, config = _step_of(weights)
    export = mfsdp_command("ckpt export-hf", step, f"--out BASE_DIR{config}")
    return None, (
        f"the base model is the checkpoint {step}, which PEFT cannot load, so"
        " adapter_config.json's base_model_name_or_path is null: export the base first with"
        f" {export} and load the adapter onto it"
        " (PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE_DIR), ADAPTER_DIR))"
    )


def _trained_on(model_dir: str, paths: CheckpointPaths) -> tuple[str | None, str | None]:
    """The model dir `model_dir` as the adapter's base where its config.json is the step's
    own (a step that keeps none: as recorded); null with a note where they differ; named
    with a note where the dir cannot be read to tell."""
    if paths.hf_dir is None:
        return model_dir, None
    check = compare_base_config(paths.hf_dir, paths.root, model_dir)
    step = paths.step_dir or paths.root
    if check.unreadable is not None:
        return model_dir, (
            f"adapter_config.json's base_model_name_or_path names the base dir as recorded,"
            f" {model_dir}, but {check.unreadable}, so it was not checked to be the model the"
            f" adapter was trained on (whose config is {paths.hf_dir}): load the adapter onto a"
            " base built with that config"
        )
    if not check.differing:
        return model_dir, None
    return None, (
        f"the adapter was trained on {model_dir} under another config than the dir's"
        f" config.json ({differing_words(check)}), and PEFT builds the base from the"
        " dir's own, so adapter_config.json's base_model_name_or_path is null:"
        " load the adapter onto the base built with the step's config"
        f" (PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({model_dir},"
        f" config=AutoConfig.from_pretrained({paths.hf_dir})), ADAPTER_DIR); vLLM:"
        " --hf-overrides with those keys), or export the merged model, which carries it"
        f" ({mfsdp_command('ckpt export-hf', step, '--out DIR')})"
    )


def _is_checkpoint(base: BaseModelRecord | None, weights: str) -> bool:
    """Whether the base's weights are a checkpoint's DCP files: its record lists them, or
    (a record that lists no file) the dir holds DCP metadata."""
    assert base is not None  # base_weights_dir names a dir from a record only
    return DCP_METADATA_FILE in base.files or os.path.isfile(Path(weights, DCP_METADATA_FILE))


def _step_of(dist_ckpt: str) -> tuple[str, str]:
    """The checkpoint `mfsdp ckpt export-hf` takes for the base `dist_ckpt` dir (its step
    dir, else the dir itself), and the `--hf-config` it needs beside it: a DCP dir that
    keeps no config.json (verl's or Megatron-LM's, left bare) is exported with one, as
    training read it with `model.hf_config`."""
    path = Path(dist_ckpt)
    step = str(path.parent) if path.name == DIST_CKPT_DIR else str(path)
    try:
        keeps_config = resolve_checkpoint(step).hf_dir is not None
    except (MfsdpError, OSError):
        keeps_config = True  # not here to look at: the step as recorded
    return step, "" if keeps_config else " --hf-config CONFIG_DIR"


def _imported_from(dist_ckpt: str) -> str | None:
    """The Hugging Face dir an import-hf checkpoint's weights came from, where its manifest
    records one that still holds a config.json; None for a trained step, a checkpoint not
    here, or one without a readable manifest."""
    from mfsdp_ckpt.convert.import_hf import IMPORT_STRATEGY

    try:
        paths = resolve_checkpoint(dist_ckpt)
        manifest = read_manifest(paths.manifest) if paths.manifest is not None else None
    except (MfsdpError, OSError):
        return None
    if manifest is None or manifest.strategy != IMPORT_STRATEGY:
        return None
    source = manifest.info.get("imported_from")
    if isinstance(source, str) and os.path.isfile(Path(source, HF_CONFIG_FILE)):
        return source
    return None
