"""Refusals of checkpoints in formats mfsdp does not read, naming what reads them.

Megatron's torch_dist and legacy formats, DeepSpeed's ZeRO checkpoints, verl's FSDP
backend and LoRA saves, Accelerate's per-rank shards, torchtitan's DCP, Hugging Face
weights without a config and the HF Trainer's checkpoint without its weights
look enough like our layouts to be misread or called "not a checkpoint". Resolution asks
here before it reads a dir as one of ours, so each is one line saying what it is instead.
verl's default Megatron save (mbridge) keeps no model in its torch_dist dist_ckpt/ (v2:
optimizer/dist_ckpt/): its line names the Hugging Face weights (or LoRA adapter) saved beside it.
A PEFT adapter dir (verl's `actor/lora_adapter/`, `export-hf --adapter-only`) is no
checkpoint either, but one a LoRA run starts from: it is named as such, with the key that
takes it (`peft_adapter_line`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import deepspeed, hf_trainer, megatron_flat_optimizer, verl_fsdp
from mfsdp_ckpt.format.dir_entries import children, is_dir, is_file
from mfsdp_ckpt.format.layout import (
    DCP_METADATA_FILE,
    DIST_CKPT_DIR,
    HF_ASSETS_DIR,
    VERL_CONTENTS_FILE,
    VERL_MODEL_DIR,
    VERL_PEFT_ADAPTER_DIR,
    CheckpointPathError,
    ForeignFormatError,
    IncompleteCheckpointError,
    looks_like_hf_model,
)
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE, HF_CONFIG_FILE, INDEX_FILE
from mfsdp_ckpt.format.unfinished_torch_dist import (
    LEGACY_COMMON_FILE,
    TORCH_DIST_MARKER,
    UNFINISHED_TORCH_DIST,
    is_unfinished_torch_dist,
)
from mfsdp_ckpt.format.verl_contents import read_verl_contents
from mfsdp_ckpt.storage.unique_json import read_json_file

# Formats of the same tools that mfsdp does not read, by the file that marks them:
# (what it is, what reads it). Megatron-LM tells them apart the same way
# (checkpointing.py: metadata.json -> torch_dist, mp_rank_0* -> torch). Its legacy marker
# is a directory, mp_rank_<tp>[_<pp>[_<ep>]]/; DeepSpeed's mp_rank_00_model_states.pt is a
# file (`deepspeed`). torch_dist's marker is written last: a save stopped before it is
# named as one that did not finish (`unfinished_torch_dist`).
_MEGATRON_LEGACY_RE = re.compile(r"^mp_rank_[0-9]{2}(_[0-9]{3}){0,2}\Z")
# verl's Megatron save with mbridge and use_dist_checkpointing=False (its default) writes the
# model through mbridge as Hugging Face safetensors into huggingface/, or a LoRA run's adapter
# into adapter_checkpoint/ (torch.save per tensor-parallel rank), and only the optimizer and
# extra state into dist_ckpt/ (megatron_checkpoint_manager.py: generate_model=False); saved
# without optimizer (save_contents [model, extra] or [model]) that DCP holds no tensor at all.
# verl's v2 layout puts them in model/huggingface/ and optimizer/dist_ckpt/ (extra/dist_ckpt/:
# the RNG state). A model's tensors are keyed under verl's `model` (`model0.`... with virtual
# pipeline stages) or, saved bare, GPTModel's own modules (or a wrapper's `module.`); the
# optimizer's are under `optimizer.`, or `chained_N.optimizer.` for an MoE model's
# ChainedOptimizer (dense and expert-parallel parameters).
_VERL_MBRIDGE_ADAPTER_DIR = "adapter_checkpoint"
_VERL_V2_STATE_DIRS = ("optimizer", "extra")
_MODEL_KEY_RE = re.compile(r"(model[0-9]*|decoder|embedding|output_layer|module)\.")
# An adapter_config.json is about 1 KB; a larger file is no adapter's to describe
_MAX_ADAPTER_CONFIG_BYTES = 1 << 20


def refuse_foreign_format(directory: Path, names: list[str]) -> None:
    """ForeignFormatError (one line: what the dir is and what reads it) for a checkpoint
    of a format mfsdp does not read: never 'not a checkpoint', never a misread. A torch_dist
    save stopped before its marker is an IncompleteCheckpointError (exit 1, as any save
    that did not finish): Megatron does not load it either."""
    if is_unfinished_torch_dist(directory, names):
        raise IncompleteCheckpointError(
            f"{directory}: {UNFINISHED_TORCH_DIST}; Megatron's load refuses it too"
        )
    if TORCH_DIST_MARKER in names and is_file(directory / TORCH_DIST_MARKER):
        peft = _verl_peft_reader(directory)
        if peft is not None:
            raise ForeignFormatError(
                f"{directory}: a verl LoRA checkpoint: the adapter's shards only, in Megatron"
                f" dist_checkpointing (torch_dist) format, which mfsdp does not read; {peft}"
            )
        model_elsewhere = _verl_model_beside(directory)
        if model_elsewhere is not None:
            raise ForeignFormatError(f"{directory}: {model_elsewhere}")
        raise ForeignFormatError(
            f"{directory}: a Megatron dist_checkpointing (torch_dist) checkpoint"
            f" ({TORCH_DIST_MARKER}; {LEGACY_COMMON_FILE} in older saves), which mfsdp does not"
            " read; Megatron-LM and Megatron-Bridge read it, and"
            f" {_torch_dist_converter(directory)}"
        )
    rank_shards = sorted(n for n in names if hf_trainer.RANK_SHARD_RE.match(n))
    if rank_shards:
        raise ForeignFormatError(
            f"{directory}: Accelerate's per-rank FSDP shards ({rank_shards[0]}: LOCAL_STATE_DICT,"
            " or SHARDED_STATE_DICT saved with use_dcp=False), which mfsdp does not read; load"
            " them with Accelerate and save with SHARDED_STATE_DICT through DCP (its default),"
            " or save_pretrained the model as a Hugging Face model dir"
        )
    full = hf_trainer.full_state_dict_file(names)
    if full is not None:
        raise ForeignFormatError(f"{directory}: {full}")
    zero = deepspeed.described(directory, names)
    if zero is not None:
        raise ForeignFormatError(f"{directory}: {zero}")
    if any(_MEGATRON_LEGACY_RE.match(n) and is_dir(directory / n) for n in names):
        raise ForeignFormatError(
            f"{directory}: a Megatron-LM legacy checkpoint (mp_rank_NN/model_optim_rng.pt,"
            " --ckpt-format torch), which mfsdp does not read; load it in Megatron-LM and"
            " save it with --ckpt-format fsdp_dtensor"
        )
    verl_fsdp.refuse_model_shards(directory, names)
    verl_fsdp.refuse_without_model(directory, names)


def foreign_format_line(directory: Path) -> str | None:
    """What `refuse_foreign_format` says of `directory` (less the path), for a note about a
    dir the command does not read; None when it holds no such format or cannot be listed
    (reading it says why)."""
    try:
        refuse_foreign_format(directory, children(directory))
    except ForeignFormatError as err:
        return str(err).removeprefix(f"{directory}: ")
    except MfsdpError:  # cannot be listed
        return None
    return None


def _torch_dist_converter(dcp: Path) -> str:
    """What converts the torch_dist save `dcp` into something mfsdp reads, in words. verl's
    model merger takes a verl role dir (or SFT step, or v2 model/ dir) as --local_dir: it
    reads `dist_ckpt/` and the Hugging Face config verl saved beside it, and drops the
    output layer only when told the embeddings are tied. Megatron-LM's own iter_N/ has no
    such config, so the merger cannot read it: Megatron-LM's checkpoint inspector rewrites
    it in the fsdp_dtensor format (`--swiglu` for a SwiGLU MLP, whose fc1 it splits). The
    inspector reads the save's common state from `common.pt`, which megatron-core 0.19 and
    later keep in the DCP's `common_state` entry instead; for such a save the line says to
    write that file first from the entry (megatron-core's `load_common_state_dict`). Either
    way the inspector is run letting torch load `common.pt` whole: it holds the run's args
    (a `functools.partial` among them), which torch's weights-only load refuses, so the same
    command is given before and after that file is written. The inspector converts only
    per-parameter optimizer state (`fully_reshardable`): a save whose `.metadata` names
    Megatron-LM's default dp_reshardable buffers (or dp_zero_gather_scatter's object) gets
    a clause saying that state stays unconverted and how to keep it per parameter
    (`megatron_flat_optimizer.refusal_note`)."""
    local_dir = dcp.parent
    if dcp.name == DIST_CKPT_DIR and is_dir(local_dir / HF_ASSETS_DIR):
        return (
            "verl's `python -m verl.model_merger merge --backend megatron --local_dir"
            f" {local_dir} --target_dir OUT` converts it to Hugging Face (add"
            " --tie-word-embedding for a model whose embeddings are tied)"
        )
    convert = (
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 torchrun tools/checkpoint/checkpoint_inspector.py"
        f" convert-torch-dist-to-fsdp-dtensor {dcp} OUT"
    )
    kept = megatron_flat_optimizer.refusal_note(dcp)
    if is_file(dcp / LEGACY_COMMON_FILE):
        return (
            f"Megatron-LM's `{convert}` (with --swiglu for a SwiGLU MLP) rewrites it as"
            f" --ckpt-format fsdp_dtensor, which mfsdp reads{kept}"
        )
    return (
        f"Megatron-LM's checkpoint_inspector.py converts it once it holds {LEGACY_COMMON_FILE}"
        " (megatron-core 0.19 keeps that state in the DCP): write it with `python -c"
        ' "import torch; from megatron.core.dist_checkpointing import load_common_state_dict'
        f" as c; torch.save(c('{dcp}'), '{dcp / LEGACY_COMMON_FILE}')\"`, then"
        f" `{convert}` (with --swiglu for a SwiGLU MLP)"
        f" rewrites it as --ckpt-format fsdp_dtensor, which mfsdp reads{kept}"
    )


def _verl_model_beside(dcp: Path) -> str | None:
    """The line for verl's default Megatron save (mbridge, use_dist_checkpointing=False),
    whose torch_dist `dist_ckpt/` holds no model: optimizer state only, or (saved without
    optimizer) no tensor at all. The model is the Hugging Face weights in the role dir's
    `huggingface/` (v2: `model/huggingface/`, beside `optimizer/` and `extra/`), already the
    export, or a LoRA run's adapter in `adapter_checkpoint/`. verl's model merger reads the
    model from `dist_ckpt/` and finds none there, so it is never offered for such a save.
    None where `dist_ckpt/` holds a model tensor (a model the merger converts) or neither
    sits beside it."""
    if dcp.name != DIST_CKPT_DIR:
        return None
    v2_part = dcp.parent.name in _VERL_V2_STATE_DIRS
    hf = (dcp.parent.parent / VERL_MODEL_DIR if v2_part else dcp.parent) / HF_ASSETS_DIR
    adapter = dcp.parent / _VERL_MBRIDGE_ADAPTER_DIR
    holds_weights = is_dir(hf) and looks_like_hf_model(children(hf))
    if not (holds_weights or is_dir(adapter)):
        return None
    held = _state_without_model(dcp)
    if held is None:
        return None
    what = (
        f"a Megatron dist_checkpointing (torch_dist) checkpoint holding {held.tensors} (no"
        f" model entry in its .metadata){held.alone}, as verl's Megatron save with mbridge"
        " and use_dist_checkpointing=False (its default) writes"
    )
    if holds_weights:
        return (
            f"{what}: that save keeps its model as Hugging Face files in {hf} (weights"
            f" present there), which is already the export (give model.path={hf}, or load it"
            f" with transformers){held.unread}"
        )
    return (
        f"{what} for a LoRA run: its adapter is in {adapter} (verl's Megatron LoRA adapter,"
        " torch.save per tensor-parallel rank), which mfsdp does not read, and no model is"
        " here for verl's model merger to convert"
    )


def verl_v2_mbridge_save(holder: Path) -> tuple[Path, str] | None:
    """(its `optimizer/dist_ckpt`, else `extra/dist_ckpt` when saved without optimizer; the
    line naming the save) for a verl v2 role dir (or SFT step) `holder` that verl's default
    Megatron save (mbridge) wrote: the model in `model/huggingface/`, the optimizer and RNG
    state in torch_dist saves holding no model, `model/dist_ckpt/` absent or empty. Called
    "saved only its Hugging Face model", it told the user the resume state was lost. None
    for any other dir."""
    for part in _VERL_V2_STATE_DIRS:
        dcp = holder / part / DIST_CKPT_DIR
        if is_file(dcp / TORCH_DIST_MARKER) and is_file(dcp / DCP_METADATA_FILE):
            line = _verl_model_beside(dcp)
            return None if line is None else (dcp, line)
    return None


_RNG_STATE_ENTRY = "rng_state"  # megatron-core's ShardedObject of each rank's RNG states


@dataclass(frozen=True)
class _HeldState:
    """What a torch_dist save holding no model holds, in words: `tensors` ("optimizer state
    only", or "no tensor"), `alone` (where it holds no tensor: its RNG state, verl's extra
    state, if saved) and `unread`, the state mfsdp does not read, as the line's tail."""

    tensors: str
    alone: str
    unread: str


def _state_without_model(dcp: Path) -> _HeldState | None:
    """What the DCP in `dcp` holds (`_HeldState`), where none of its tensors is a model's
    (`_MODEL_KEY_RE`): tensors are the optimizer's state, a `rng_state` entry the RNG state
    (all verl's extra/dist_ckpt holds: said to hold optimizer state, it sent users looking
    for a state never saved there); None where a tensor is a model's, or where it cannot
    be read (its reader says why). Told from its `.metadata` alone, read bounded and
    through the restricted unpickler as every DCP is (no data file is opened)."""
    from mfsdp_ckpt.storage.reader import CheckpointReader

    try:
        reader = CheckpointReader(dcp)
        tensors, objects = list(reader.tensors), list(reader.objects)
    except MfsdpError:
        return None
    if any(_MODEL_KEY_RE.match(name) for name in tensors):
        return None
    rng = any(re.split(r"[./]", name, maxsplit=1)[0] == _RNG_STATE_ENTRY for name in objects)
    unread = [*(["optimizer state"] if tensors else []), *(["RNG state"] if rng else [])]
    tail = f"; mfsdp does not read the {' or the '.join(unread)}" if unread else ""
    if tensors:
        return _HeldState("optimizer state only", "", tail)
    return _HeldState("no tensor", ", only RNG state (verl's extra state)" if rng else "", tail)


def _verl_peft_reader(dcp: Path) -> str | None:
    """What reads verl's LoRA save, when `dcp` is one: verl's v2 manager (mbridge + PEFT)
    puts only the adapter's shards in model/dist_ckpt, writes the adapter in Hugging Face
    PEFT format into model/huggingface/adapter/ and says `backend.peft` in
    ckpt_contents.json. None for any other dir."""
    if dcp.name != DIST_CKPT_DIR or dcp.parent.name != VERL_MODEL_DIR:
        return None
    adapter = dcp.parent / HF_ASSETS_DIR / VERL_PEFT_ADAPTER_DIR
    if is_file(adapter / ADAPTER_CONFIG_FILE):
        return (
            f"verl saved the adapter in Hugging Face PEFT format in {adapter}"
            " (peft.PeftModel.from_pretrained(base_model, DIR) loads it)"
        )
    role_dir = dcp.parent.parent
    if not is_file(role_dir / VERL_CONTENTS_FILE):
        return None
    contents = read_verl_contents(role_dir)
    backend = contents.get("backend")
    listed = contents.get("contents")
    if (isinstance(backend, dict) and backend.get("peft") is True) or (
        isinstance(listed, dict) and "peft_adapters" in listed
    ):
        return "verl's scripts/megatron_merge_lora.py merges it into the base model"
    return None


def refuse_torchtitan(given: Path, dcp: Path) -> None:
    """ForeignFormatError for a DCP torchtitan wrote (its model keys at the top level): it
    would read as a checkpoint without model weights. A `step-N` dir, torchtitan's name
    for its saves, has its metadata read here, and so has a DCP no layout's names claim
    (`torchtitan.unclaimed_dcp`: a step copied or renamed), whose metadata every command
    reads next anyway; a `dist_ckpt/`, `iter_N/` or Accelerate's DCP is left unread."""
    from mfsdp_ckpt.format import torchtitan

    named = torchtitan.STEP_DIR_RE.match(dcp.name) or torchtitan.unclaimed_dcp(dcp)
    if named and torchtitan.is_torchtitan_dcp(dcp):
        raise ForeignFormatError(torchtitan.message(given, dcp))


def refuse_torchtitan_folder(given: Path, names: list[str]) -> None:
    """torchtitan's `checkpoint/` folder (step-N dirs), or the dump folder holding it: its
    newest step, a DCP or (with last_save_in_hf, the run's last) Hugging Face safetensors,
    is the one named."""
    from mfsdp_ckpt.format import torchtitan

    for folder, entries in ((given, names), (given / "checkpoint", None)):
        if entries is None:
            if "checkpoint" not in names or not is_dir(folder):
                continue
            entries = children(folder)
        dcp = torchtitan.newest_step_dir(folder, entries)
        hf = torchtitan.newest_step_dir(folder, entries, marker=INDEX_FILE)
        if hf is not None and (dcp is None or torchtitan.step_of(hf) > torchtitan.step_of(dcp)):
            refuse_weights_without_config(hf, children(hf))
            raise CheckpointPathError(
                f"{given}: a torchtitan checkpoint folder whose newest step, {hf}, is a"
                f" Hugging Face model dir; give that (`mfsdp ckpt import-hf {hf} --out DIR`"
                " makes a checkpoint of it)"
            )
        if dcp is not None and torchtitan.is_torchtitan_dcp(dcp):
            steps = _torchtitan_steps_line(folder, entries, dcp)
            raise ForeignFormatError(f"{torchtitan.message(given, dcp)}{steps}")


def _torchtitan_steps_line(folder: Path, names: list[str], newest: Path) -> str:
    """`; its complete steps: ...` for a torchtitan folder holding more steps than the
    newest one named: newest first, another by a path that works when pasted, and the
    step-N dirs without a .metadata (a save that did not finish, which nothing reads)."""
    from mfsdp_ckpt.format import torchtitan

    steps = [n for n in names if torchtitan.STEP_DIR_RE.match(n)]
    steps.sort(key=lambda name: torchtitan.step_of(Path(name)), reverse=True)
    complete = [n for n in steps if is_file(folder / n / ".metadata")]
    done = set(complete)  # looked up once per step: a list made 100k steps take minutes
    unfinished = [n for n in steps if n not in done and not is_file(folder / n / INDEX_FILE)]
    line = ""
    if len(complete) > 1:
        earlier = folder / next(n for n in complete if n != newest.name)
        line += (
            f"; its complete steps: {first_of(complete, 8)}; to convert another, give its"
            f" path in place of {newest} (e.g. {earlier})"
        )
    if unfinished:
        line += f"; {first_of(unfinished, 4)}: no .metadata (a save that did not finish)"
    return line


def refuse_weights_without_config(given: Path, names: list[str]) -> None:
    """Hugging Face safetensors without a config.json: torchtitan's `last_save_in_hf` step
    (`model-0000X-of-0000N.safetensors` + index, no config), or a model dir whose config
    was not copied; or the reverse, the HF Trainer's checkpoint-N holding its training
    state and config but no model weights (`hf_trainer.without_weights`). Neither is a
    training checkpoint, and "not a checkpoint (looked for .metadata, ...)" did not say
    what it is or what makes it usable."""
    from mfsdp_ckpt.format import dcp_hf_shards

    state_only = hf_trainer.without_weights(names)
    if state_only is not None:
        raise CheckpointPathError(f"{given}: {state_only}")
    weights = [n for n in names if n.endswith(".safetensors") and is_file(given / n)]
    shards = dcp_hf_shards.unconsolidated_shards(weights)
    if shards:
        raise CheckpointPathError(dcp_hf_shards.message(given, shards))
    if HF_CONFIG_FILE in names or ADAPTER_CONFIG_FILE in names or not weights:
        return  # a model dir, or a PEFT adapter (its base's config is elsewhere)
    raise CheckpointPathError(
        f"{given}: Hugging Face safetensors ({len(weights)} file(s), e.g. {weights[0]}) without"
        " a config.json, as torchtitan saves a step with last_save_in_hf; copy the model's"
        " config.json (and tokenizer files) into it to use it as a Hugging Face model dir,"
        f" which `mfsdp ckpt import-hf {given} --out DIR` makes a checkpoint of"
    )


def peft_adapter_line(given: Path) -> str | None:
    """`DIR: a PEFT LoRA adapter dir (r 8, lora_alpha 16, target_modules ...), ...` for a
    dir holding a PEFT adapter_config.json, with how a run takes it (`inspect` and
    `validate` called it "not a checkpoint (looked for ...)", saying neither what it is nor
    where it goes); None for any other dir. Only that small file is read, bounded and as a
    regular file inside the dir, never the weights."""
    config = given / ADAPTER_CONFIG_FILE
    if not is_file(config):
        return None
    try:
        data = read_json_file(config, _MAX_ADAPTER_CONFIG_BYTES, ValueError, given)
    except ValueError:
        return None
    if not isinstance(data, dict) or "peft_type" not in data:
        return None
    kind = data["peft_type"]
    if kind != "LORA":
        return (
            f"{given}: a PEFT adapter dir of peft_type {cut_to(repr(kind), 40)}, not LoRA, which is"
            " the one kind of adapter mfsdp trains and exports"
        )
    settings = ", ".join(
        f"{name} {_said(data.get(name))}" for name in ("r", "lora_alpha", "target_modules")
    )
    return (
        f"{given}: a PEFT LoRA adapter dir ({settings}), not a training checkpoint; a LoRA run"
        f" starts from it with model.lora_adapter_path={given} (model.path: its base model)"
    )


def _said(value: Any) -> str:
    """A field of an adapter_config.json as a line shows it (repr: a control character in
    it is escaped): of a list of names, the first few."""
    if isinstance(value, list):
        return f"[{first_of([cut_to(repr(name), 60) for name in value], 4)}]"
    return cut_to(repr(value), 60) if value is not None else "(none)"
