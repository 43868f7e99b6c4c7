"""torchtitan's checkpoints, recognised so that they are named, not misread.

torchtitan (`torchtitan/components/checkpoint.py`) saves with DCP into
`<dump_folder>/<checkpoint.folder, default "checkpoint">/step-N/`, flattening the model's
state dict to TOP-LEVEL keys in its own module names (`tok_embeddings.weight`,
`layers.0.attention.wq.weight`, `layers.0.feed_forward.w1.weight`, `norm.weight`,
`output.weight`) beside `optimizer`, `lr_scheduler`, `dataloader` and `train_state`.
mfsdp reads Megatron-core and Hugging Face names under `model.`, so such a DCP would
otherwise be reported as one without model weights, and its `checkpoint/` dir as no
checkpoint at all. torchtitan converts its own checkpoints to Hugging Face with
`scripts/checkpoint_conversion/convert_to_hf.py` (its model state-dict adapters know
each family's names); the error names that script. Its early releases (2024) saved
`{"model": ModelWrapper(model), "optimizer": ...}`, so the same names sit under `model.`
(`model.tok_embeddings.weight`), where mfsdp looks for Hugging Face and Megatron-core names:
those steps are told apart by the names under the prefix, not by the prefix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.dir_entries import children, is_dcp, is_dir

STEP_DIR_RE = re.compile(r"^step-([0-9]{1,18})\Z")
CONVERT_SCRIPT = "scripts/checkpoint_conversion/convert_to_hf.py"
# Module names of torchtitan's decoder models (llama3, qwen3, ...) found in no other layout
_MODEL_KEY_RE = re.compile(
    r"^(tok_embeddings\.weight$|layers\.[0-9]+\.(attention\.w[qkvo]|feed_forward\.w[123])\.)"
)
# Names under the same prefix that make it another layout's: Hugging Face's (`embed_tokens`,
# `layers.N.self_attn`; ours and verl's nest them as `model.model.`) and Megatron-core's
_OTHER_LAYOUT_RE = re.compile(
    r"^(model\.|module\.|decoder\.|embedding\.|output_layer\.|embed_tokens\.|lm_head\."
    r"|layers\.[0-9]+\.(self_attn|self_attention|mlp)\.)"
)
# Where torchtitan's saves put the model: flattened to the top level (current releases) or
# under `model.` (early ones, `ModelWrapper`)
NESTED_PREFIX = "model."
_MODEL_PREFIXES = ("", NESTED_PREFIX)
CHECKPOINT_FOLDER = "checkpoint"  # torchtitan's `checkpoint.folder` default, in the dump folder
# A head beside the prefix (`output.weight` at the top, a model's under `model.`) is a Hugging
# Face base model's save, whose names some families share with torchtitan's
_TOP_LEVEL_HEADS = ("output.weight", "lm_head.weight")


def is_torchtitan_dcp(dcp: Path) -> bool:
    """Whether the DCP in `dcp` holds torchtitan's model names (`torchtitan_names`)."""
    return _model_prefix_in(dcp) is not None


def torchtitan_names(names: list[str]) -> bool:
    """Whether `names` (a DCP's keys) hold torchtitan's model at the top level or under
    `model.`: one of its own names there (`tok_embeddings.weight`,
    `layers.N.attention.wq.`, `layers.N.feed_forward.w1.`) and none of another layout's."""
    return _model_prefix(names) is not None


def _model_prefix(names: list[str]) -> str | None:
    """Where `names` hold torchtitan's model (`torchtitan_names`): "" at the top level (its
    current saves), `model.` (its early releases'), None for neither."""
    for prefix in _MODEL_PREFIXES:
        under = [name[len(prefix) :] for name in names if name.startswith(prefix)]
        if prefix and any(name in _TOP_LEVEL_HEADS for name in names):
            continue
        if any(_MODEL_KEY_RE.match(name) for name in under) and not any(
            _OTHER_LAYOUT_RE.match(name) or name == "model" for name in under
        ):
            return prefix
    return None


def dump_folder_steps(dump: Path, names: list[str]) -> list[Path]:
    """The DCP step dirs in the `checkpoint/` folder of a torchtitan dump folder `dump`
    (whose entries are `names`), however their model is named: a dump folder whose steps
    hold Hugging Face names is a parent of those steps, as its `checkpoint/` is."""
    folder = dump / CHECKPOINT_FOLDER
    if CHECKPOINT_FOLDER not in names or not is_dir(folder):
        return []
    steps = [folder / name for name in children(folder) if STEP_DIR_RE.match(name)]
    return sorted((step for step in steps if is_dcp(step)), key=step_of)


def _model_prefix_in(dcp: Path) -> str | None:
    """`_model_prefix` of the DCP in `dcp`. Only its `.metadata` is read (bounded,
    restricted unpickler), and what was read is handed on to the command's own reader of
    it (read once, not twice); a metadata that cannot be read is left to the reader to
    report, as for any DCP."""
    from mfsdp_ckpt.storage.reader import CheckpointReader

    try:
        reader = CheckpointReader(dcp, hand_on=True)
    except MfsdpError:
        return None
    return _model_prefix([*reader.tensors, *reader.objects])


def unclaimed_dcp(dcp: Path) -> bool:
    """Whether the DCP dir `dcp` has none of the names the layouts mfsdp reads give theirs
    (`dist_ckpt/`, Megatron's `iter_N/` and `release/`, Accelerate's `pytorch_model_fsdp_K/`
    and `optimizer_K/`): a torchtitan step copied or renamed (`best/`, `final/`) is one."""
    from mfsdp_ckpt.format import hf_trainer
    from mfsdp_ckpt.format.layout import DIST_CKPT_DIR, ITER_DIR_RE, MEGATRON_RELEASE_DIR

    name = dcp.name
    claimed = (hf_trainer.MODEL_DCP_RE, hf_trainer.OPTIMIZER_DCP_RE, ITER_DIR_RE)
    return name not in (DIST_CKPT_DIR, MEGATRON_RELEASE_DIR) and not any(
        pattern.match(name) for pattern in claimed
    )


def step_of(step_dir: Path) -> int:
    """N of a `step-N/` dir (-1 for another name)."""
    match = STEP_DIR_RE.match(step_dir.name)
    return int(match.group(1)) if match else -1


def newest_step_dir(directory: Path, names: list[str], marker: str = ".metadata") -> Path | None:
    """The highest `step-N/` in `directory` that holds `marker` (a DCP's `.metadata`, or
    the safetensors index of a step saved in Hugging Face format), if any."""
    steps = sorted(
        (int(match.group(1)), name)
        for name in names
        if (match := STEP_DIR_RE.match(name))
        and os.path.isfile(os.path.join(directory, name, marker))
    )
    return directory / steps[-1][1] if steps else None


def message(given: Path, step_dir: Path) -> str:
    """One line: what `given` is and what converts it. convert_to_hf.py loads the model's
    names at the top level (current saves); a step of an early release, with the model
    under `model.`, fails there with "Missing key", so its line gives the steps that
    flatten it first."""
    where = "" if given == step_dir else f" (its newest complete step: {step_dir.name})"
    nested = _model_prefix_in(step_dir) == NESTED_PREFIX
    source = "FLAT" if nested else str(step_dir)
    convert = (
        f"`python {CONVERT_SCRIPT} {source} OUT --model_name NAME --model_flavor FLAVOR"
        " --hf_assets_path HF_DIR` (copy config.json and the tokenizer from HF_DIR into OUT)"
    )
    if not nested:
        return (
            f"{given}: a torchtitan checkpoint{where} (model weights under torchtitan's names:"
            " tok_embeddings.weight, layers.N.attention.wq.weight, ...),"
            f" which mfsdp does not read; convert it with torchtitan's {convert}"
        )
    formats = "python -m torch.distributed.checkpoint.format_utils"
    return (
        f"{given}: a torchtitan checkpoint{where} of an early release (model weights under"
        " `model.` in torchtitan's names: model.tok_embeddings.weight, ...), which mfsdp does"
        f" not read and torchtitan's {CONVERT_SCRIPT} does not load as is (it wants the names"
        f" at the top level); flatten it first: `{formats} dcp_to_torch {step_dir} full.pt`,"
        ' `python -c \'import torch; torch.save(torch.load("full.pt")["model"], "model.pt")\'`,'
        f" `{formats} torch_to_dcp model.pt FLAT`, then convert with torchtitan's {convert}"
    )


__all__ = [
    "CHECKPOINT_FOLDER",
    "CONVERT_SCRIPT",
    "NESTED_PREFIX",
    "STEP_DIR_RE",
    "dump_folder_steps",
    "is_torchtitan_dcp",
    "message",
    "newest_step_dir",
    "step_of",
    "torchtitan_names",
    "unclaimed_dcp",
]
