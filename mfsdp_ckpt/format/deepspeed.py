"""DeepSpeed's checkpoints, recognised so that they are named with what converts them.

`DeepSpeedEngine.save_checkpoint(OUT)` writes a tag dir (`global_step<N>` by default)
and a `latest` file naming it, and copies `zero_to_fp32.py` into OUT; the HF Trainer with
DeepSpeed does the same inside its `checkpoint-N/`. The tag dir holds torch.save pickles
named by `deepspeed/checkpoint/utils.py`::

    OUT/latest                                          # "global_step5"
    OUT/zero_to_fp32.py
    OUT/global_step5/mp_rank_00_model_states.pt         # module (ZeRO-1/2), client state
    OUT/global_step5/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt   # one per rank
    OUT/global_step5/zero_pp_rank_R_mp_rank_00_model_states.pt          # ZeRO-3
    OUT/global_step5/layer_NN-model_00-model_states.pt  # pipeline parallel

The `mp_rank_00_...` files look like Megatron-LM's legacy marker, but that is a
*directory* `mp_rank_NN[_PPP]/` holding `model_optim_rng.pt`; a DeepSpeed user told to
load the checkpoint in Megatron-LM got nowhere. DeepSpeed's own `zero_to_fp32.py`
gathers the ZeRO partitions into one fp32 state dict (`--safe_serialization` writes
safetensors). Nothing here is ever unpickled: only names are looked at.
"""

from __future__ import annotations

import re
from pathlib import Path

from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.dir_entries import children, is_dir, is_file
from mfsdp_ckpt.format.layout import looks_like_hf_model

LATEST_FILE = "latest"
CONVERTER = "zero_to_fp32.py"
# deepspeed/checkpoint/utils.py: get_model_ckpt_name_for_rank, get_zero_ckpt_name_for_rank,
# get_layer_ckpt_name_for_rank
_STATE_FILE_RE = re.compile(
    r"^((bf16_)?zero_pp_rank_[0-9]+_)?mp_rank_[0-9]{2}_(model|optim)_states\.pt\Z"
    r"|^layer_[0-9]{2}-model_[0-9]{2}-model_states\.pt\Z"
)
_OPTIM = "_optim_states"
_DEFAULT_TAG_RE = re.compile(r"^global_step([0-9]{1,18})\Z")


def _state_files(names: list[str]) -> list[str]:
    """The names among `names` that DeepSpeed gives a tag dir's state files, the model's
    first (what a line names), each sorted."""
    return sorted((n for n in names if _STATE_FILE_RE.match(n)), key=lambda n: (_OPTIM in n, n))


def _tag_dirs(directory: Path, names: list[str]) -> list[str]:
    """The subdirs of `directory` (a save's OUT dir) holding DeepSpeed state files, the
    newest `global_stepN` first, then any other tag by name."""
    tags = [n for n in names if is_dir(directory / n) and _holds_state(directory / n)]

    def order(name: str) -> tuple[int, int, str]:
        match = _DEFAULT_TAG_RE.match(name)
        return (0, -int(match.group(1)), name) if match else (1, 0, name)

    return sorted(tags, key=order)


def _holds_state(tag: Path) -> bool:
    """Whether the dir `tag` holds DeepSpeed state files (one that cannot be listed: no)."""
    try:
        return bool(_state_files(children(tag)))
    except MfsdpError:
        return False


def described(directory: Path, names: list[str]) -> str | None:
    """What `directory` is, a DeepSpeed checkpoint (a tag dir, or the dir a save wrote
    `latest` and the tag dirs into), with the command that converts it, in words that
    follow `DIR: `; None for any other dir, and for a save dir that holds a Hugging Face
    model too (ZeRO-3 with stage3_gather_16bit_weights_on_model_save: the HF Trainer then
    writes config.json and model.safetensors into checkpoint-N), which is read as one."""
    held = _state_files(names)
    if held:
        out = directory.parent
        return _line(
            f"a DeepSpeed checkpoint's tag dir ({held[0]}, ...)",
            _converter(out),
            f"{out} OUT -t {directory.name}",
        )
    if LATEST_FILE not in names or not is_file(directory / LATEST_FILE):
        return None
    if looks_like_hf_model(names):
        return None
    tags = _tag_dirs(directory, names)
    if not tags:
        return None
    return _line(
        f"a DeepSpeed checkpoint ({LATEST_FILE} and {tags[0]}/ with its state files)",
        _converter(directory),
        f"{directory} OUT",
    )


def _converter(out: Path) -> str:
    """How to run zero_to_fp32: the copy DeepSpeed saved in `out`, else the installed one."""
    if is_file(out / CONVERTER):
        return f"python {out / CONVERTER}"
    return "python -m deepspeed.utils.zero_to_fp32"


def _line(what: str, converter: str, arguments: str) -> str:
    return (
        f"{what}, which mfsdp does not read (its files are pickles, never"
        f" loaded); convert it with DeepSpeed's `{converter} {arguments} --safe_serialization`"
        " (deepspeed.utils.zero_to_fp32), then copy the model's config.json and tokenizer"
        " files into OUT: a Hugging Face model dir, which model.path and"
        f" {mfsdp_command('ckpt import-hf OUT --out DIR')} take"
    )
