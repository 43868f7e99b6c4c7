"""Read a Hugging Face model's safetensors weights one tensor at a time, from headers alone.

A safetensors file is an 8-byte little-endian header length, a JSON header (name ->
dtype, shape, [begin, end) byte offsets into the data section that follows) and raw
little-endian bytes. Parsing the headers ourselves (instead of `safe_open`, which maps
whole files) lets import plan every output before a weight is read, check every offset
against the file size up front, and `pread` exactly one tensor's bytes into memory it
owns: peak memory is the largest tensor, whatever the model size.

A sharded model names its files in `model.safetensors.index.json`; the index's file
names must be plain names inside the model dir (a hostile index must not make import
read `/etc/...`). Every file is opened through `safe_files`: a FIFO or device named as a
shard or index is refused naming it, never read or skipped, and a symlink may lead only
where `safe_files.model_dir_root` allows (a Hugging Face cache snapshot's blobs/), as for
config and tokenizer files. Each header must describe its file as safetensors
does: tensors that tile the data section exactly, no name twice. Nothing here executes
anything from the files.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.check.removed_while_read import shrank_while_read
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format import dcp_hf_shards, deepspeed, hf_trainer
from mfsdp_ckpt.format.dtypes import BY_NAME, DType
from mfsdp_ckpt.format.finding_runs import checkpoint_as_given
from mfsdp_ckpt.format.finite import count_nonfinite_in_file
from mfsdp_ckpt.format.layout import HF_ASSETS_DIR, ForeignFormatError
from mfsdp_ckpt.format.lora_fields import adapter_only_advice
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.safetensors_writer import INDEX_FILE, SINGLE_FILE
from mfsdp_ckpt.storage.unique_json import loads_object

if TYPE_CHECKING:
    import torch

# A header is names, shapes and offsets: 100 MB would describe ~1M tensors. Anything larger
# is not a model header, and reading it whole would be the unbounded allocation we avoid.
MAX_HEADER_BYTES = 100 << 20
MAX_INDEX_BYTES = 100 << 20
# Bytes do not bound what parsing takes (`unique_json.too_many_containers`): 30 MB of `[],`
# are 10M lists, gigabytes once parsed. A real header holds three objects and arrays per
# tensor (its entry, shape and data_offsets) in ~100 bytes, so MAX_HEADER_BYTES describes at
# most ~1M tensors: their containers, the header's own object and __metadata__.
MAX_HEADER_CONTAINERS = 3 * (MAX_HEADER_BYTES // 100) + 2
# An index is the top object, its metadata and its weight_map, whatever the model's size
# (names map to file names, strings); room for any metadata an exporter adds.
MAX_INDEX_CONTAINERS = 10_000
_BY_CODE = {d.safetensors: d for d in BY_NAME.values() if d.safetensors}


class SafetensorsError(MfsdpFailedError, ValueError):
    """A model dir or safetensors file that cannot be read as claimed; names the file."""


class CheckpointDirError(MfsdpUsageError, ValueError):
    """A dir of a training checkpoint (its huggingface/: config and tokenizer) given where a
    model's weights are read: the wrong dir (exit 2), not a damaged model."""


@dataclass(frozen=True)
class StoredTensor:
    """One tensor of a safetensors file: where its raw bytes are."""

    name: str
    file: str  # relative to the model dir
    dtype: DType
    shape: tuple[int, ...]
    offset: int  # absolute byte offset in `file`

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def _within(model_dir: Path) -> str:
    return f"the model dir {model_dir}"


def chosen_files(model_dir: Path, notes: list[str]) -> tuple[list[str], dict[str, str] | None]:
    """The weight files of a model dir, and the index's weight map when they come from one.

    The choice is transformers' (`from_pretrained` on a local dir): model.safetensors when
    present, even beside an index (which is then ignored, with a note), else the index,
    else the one .safetensors file there is. Presence is `lexists`, so a FIFO, a directory
    or a link out of the dir under one of these names is refused naming it when opened,
    never skipped for another file."""
    single, index = model_dir / SINGLE_FILE, model_dir / INDEX_FILE
    if os.path.lexists(single):
        if os.path.lexists(index):
            notes.append(
                f"{index} ignored: {SINGLE_FILE} is there too, and transformers loads that"
            )
        return [SINGLE_FILE], None
    weight_map = index_weight_map(model_dir)
    if weight_map is not None:
        return sorted(set(weight_map.values())), weight_map
    singles = sorted(p.name for p in model_dir.glob("*.safetensors"))
    shards = dcp_hf_shards.unconsolidated_shards(singles)
    if shards:
        raise SafetensorsError(dcp_hf_shards.message(model_dir, shards))
    if len(singles) == 1:
        return singles, None
    found = "several .safetensors files and no index" if singles else "no .safetensors weights"
    also = "" if singles else other_weights_hint(model_dir)
    if not also:
        _refuse_checkpoint_dir(model_dir, found)
    raise SafetensorsError(f"{model_dir}: {found} (expected {SINGLE_FILE} or {INDEX_FILE}){also}")


# Weights in formats mfsdp never reads, as transformers and others save them: pickles (an
# older save_pretrained's pytorch_model.bin, torch.save's .pt/.pth), which unpickling could
# make run code, and GGUF (llama.cpp's), which transformers converts
PICKLED_WEIGHTS = (".bin", ".pt", ".pth")
GGUF_WEIGHTS = ".gguf"
_CONVERTED = "then save_pretrained writes safetensors"


def other_weights_hint(model_dir: Path) -> str:
    """`; NAME is ...: convert it ...` for the weights a dir without safetensors holds in
    another format, named (a model dir of `model.pt` was told only "no .safetensors
    weights"), "" when it holds none. The HF Trainer's state files (optimizer.pt,
    rng_state.pth, ...) are no weights: its checkpoint-N holding only those is named as
    that, and one of DeepSpeed's with what converts it."""
    names = sorted(path.name for path in model_dir.glob("*"))
    whole = deepspeed.described(model_dir, names) or hf_trainer.without_weights(names)
    if whole is not None:
        return f"; it is {whole}"
    full = hf_trainer.full_state_dict_file(names)  # from_pretrained does not load it
    pickled = [
        n for n in names if n.endswith(PICKLED_WEIGHTS) and not hf_trainer.not_model_weights(n)
    ]
    gguf = [name for name in names if name.endswith(GGUF_WEIGHTS)]
    hint = "" if full is None else f"; {full}"
    if pickled:
        hint += (
            f"; {first_of(pickled, 2)} is a pickle, which mfsdp never loads (it can run"
            " code): if you trust it, convert it with transformers (from_pretrained,"
            f" {_CONVERTED})"
        )
    if gguf:
        hint += (
            f"; {first_of(gguf, 2)} is GGUF (llama.cpp's format), which mfsdp does not read:"
            f" convert it with transformers (from_pretrained with gguf_file={gguf[0]},"
            f" {_CONVERTED})"
        )
    return hint


def _refuse_checkpoint_dir(model_dir: Path, found: str) -> None:
    """CheckpointDirError when the dir without weights is, or lies in, a training
    checkpoint: its huggingface/ holds a config and tokenizer like a model dir's, and "no
    .safetensors weights" (exit 1) read as a damaged model, not the wrong dir."""
    inside = checkpoint_as_given(model_dir)
    if inside is None:
        return
    what = "the config and tokenizer dir of" if model_dir.name == HF_ASSETS_DIR else "in"
    unread = unread_checkpoint_refusal(inside)
    held = (
        f"the checkpoint {inside}; {unread}"
        if unread is not None
        else f"the training checkpoint {inside}, whose weights are in its DCP files;"
        f" {_export_advice(inside)}"
    )
    raise CheckpointDirError(f"{model_dir}: {found}; it is {what} {held}")


def unread_checkpoint_refusal(checkpoint: Path) -> str | None:
    """The one-line refusal every command gives `checkpoint` when it is in a format mfsdp
    does not read (verl's FSDP backend, Megatron's torch_dist or legacy format: what it is
    and what converts it, `foreign_formats`), else None. Its huggingface/ given where a
    model dir is read was sent to export-hf or model.path on that checkpoint, which only
    refused it next."""
    from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint

    try:
        resolve_checkpoint(checkpoint)
    except ForeignFormatError as err:
        return str(err)
    except (MfsdpError, OSError):
        return None  # one mfsdp reads, damaged: reading it names what is wrong
    return None


def export_hf_advice(checkpoint: Path) -> str:
    """How a Hugging Face model dir is made of the training checkpoint `checkpoint`, told to
    a command given the checkpoint (or a dir in it) where it reads a model dir:
    `mfsdp ckpt export-hf`. A checkpoint in a format mfsdp does not read is told what
    converts it instead (`unread_checkpoint_refusal`): export-hf refuses it. A LoRA step
    whose base has no weights on disk (a random init) has no merged model, and that export
    refused it: such a step is told what goes on from it instead
    (`lora_fields.adapter_only_advice`)."""
    unread = unread_checkpoint_refusal(checkpoint)
    return unread if unread is not None else _export_advice(checkpoint)


def _export_advice(checkpoint: Path) -> str:
    """`export_hf_advice` for a checkpoint mfsdp reads."""
    from mfsdp_ckpt.lora import adapter_without_base_weights  # lora reads safetensors here

    if adapter_without_base_weights(checkpoint):
        return (
            "that checkpoint is a LoRA adapter on a random-init base, of which no merged model"
            f" can be exported: {adapter_only_advice(checkpoint)}"
        )
    export = mfsdp_command("ckpt export-hf", checkpoint, "--out DIR")
    return f"{export} writes it as a Hugging Face model dir"


def index_weight_map(model_dir: Path) -> dict[str, str] | None:
    """The index's tensor name -> file name map (None without an index); every file name
    is a plain name inside the model dir."""
    index = model_dir / INDEX_FILE
    if not os.path.lexists(index):
        return None
    try:
        safe_files.regular_file(index, safe_files.model_dir_root(model_dir), _within(model_dir))
        text = safe_files.read_text(index, MAX_INDEX_BYTES)
    except CheckpointFileError as err:
        raise SafetensorsError(str(err)) from None
    data = loads_object(text, str(index), SafetensorsError, MAX_INDEX_CONTAINERS)
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
        raise SafetensorsError(f"{index}: weight_map must map names to file names")
    for name in sorted(set(weight_map.values())):
        if Path(name).name != name or name in ("", ".", ".."):
            raise SafetensorsError(
                f"{index}: file {name!r} is not a plain file name inside {model_dir}"
            )
    return weight_map


def _check_index(model_dir: Path, weight_map: dict[str, str], tensors: dict) -> None:
    """The index must say where every tensor is, as the shards' headers do: transformers
    loads a tensor from the file the index names and leaves one it does not list randomly
    initialised, so an index that disagrees would make import and transformers see two
    different models."""
    index = model_dir / INDEX_FILE
    for name, entry in tensors.items():
        listed = weight_map.get(name)
        if listed != entry.file:
            where = f"lists it in {listed}" if listed is not None else "does not list it"
            raise SafetensorsError(
                f"{index} [{name}]: stored in {entry.file}, but the index {where}"
            )
    unstored = sorted(set(weight_map) - set(tensors))
    if unstored:
        raise SafetensorsError(
            f"{index} [{unstored[0]}]: listed in {weight_map[unstored[0]]}, which does not hold"
            f" it ({len(unstored)} such tensor(s))"
        )


def _open_weights(path: Path, root: str | None = None) -> int:
    """A read-only descriptor of a weight file that is a regular file resolving inside
    `root` (`safe_files.model_dir_root`: a symlink into a Hugging Face cache's blobs/ is
    fine, one to a file elsewhere is not, as for config and tokenizer files; a FIFO or a
    device would block or never end)."""
    if not os.path.lexists(path):
        raise SafetensorsError(f"{path}: no such file (named by {INDEX_FILE})")
    try:
        return safe_files.open_regular(path, root, _within(path.parent))
    except CheckpointFileError as err:
        raise SafetensorsError(str(err)) from None


def read_header(path: Path, relative: str, root: str | None = None) -> dict[str, StoredTensor]:
    """The tensors one file holds, every range checked against the file's size; the file
    must resolve inside `root` when given."""
    with os.fdopen(_open_weights(path, root), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise SafetensorsError(f"{path}: shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > size - 8:
            raise SafetensorsError(
                f"{path}: header length {length} does not fit the file ({size} bytes)"
            )
        if length > MAX_HEADER_BYTES:
            raise SafetensorsError(
                f"{path}: header of {length} bytes, more than the {MAX_HEADER_BYTES} a model's "
                "names, shapes and offsets need"
            )
        raw = handle.read(length)
    header = _parse_header(path, raw)
    data_start = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _entry(path, relative, name, info, data_start, size)
    _check_tiling(path, tensors, data_start, size)
    return tensors


def _parse_header(path: Path, raw: bytes) -> dict:
    """The header as the safetensors library reads it: UTF-8 JSON (json.loads given bytes
    would also take UTF-16 or UTF-32, and a BOM, which that library refuses), an object,
    with `__metadata__`, when there, mapping strings to strings."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SafetensorsError(f"{path}: header is not UTF-8 (byte {err.start})") from None
    header = loads_object(text, f"{path}: header", SafetensorsError, MAX_HEADER_CONTAINERS)
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{path}: __metadata__ must map names to strings")
    return header


def _check_tiling(path: Path, tensors: dict[str, StoredTensor], data_start: int, size: int) -> None:
    """The tensors' byte ranges must tile the data section exactly, as the safetensors
    library requires of every file it loads: an overlap makes two weights share bytes and
    a hole or a tail hides bytes no tensor accounts for (a polyglot file)."""
    end = data_start
    for entry in sorted(tensors.values(), key=lambda e: (e.offset, e.nbytes)):
        if entry.offset != end:
            what = "overlaps the tensor before it" if entry.offset < end else "leaves a gap"
            raise SafetensorsError(
                f"{path} [{entry.name}]: data at {entry.offset - data_start} {what}"
                f" (expected {end - data_start})"
            )
        end += entry.nbytes
    if end != size:
        raise SafetensorsError(
            f"{path}: tensors end at byte {end} but the file has {size} (bytes no tensor holds)"
        )


def _entry(path: Path, relative: str, name: str, info, data_start: int, size: int) -> StoredTensor:
    where = f"{path} [{name}]"
    if not isinstance(info, dict):
        raise SafetensorsError(f"{where}: entry is not an object")
    code = info.get("dtype")
    dtype = _BY_CODE.get(code) if isinstance(code, str) else None
    if dtype is None:
        raise SafetensorsError(f"{where}: dtype {cut_to(repr(code), 80)} is not one import reads")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise SafetensorsError(
            f"{where}: shape {cut_to(repr(shape), 80)} is not a list of non-negative ints"
        )
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        raise SafetensorsError(
            f"{where}: data_offsets {cut_to(repr(offsets), 80)} is not [begin, end]"
        )
    begin, end = offsets
    entry = StoredTensor(name, relative, dtype, tuple(shape), data_start + begin)
    if end - begin != entry.nbytes:
        raise SafetensorsError(
            f"{where}: {end - begin} bytes stored for shape {tuple(shape)} {dtype}"
        )
    if data_start + end > size:
        raise SafetensorsError(
            f"{where}: bytes end at {data_start + end} but the file has {size} (truncated?)"
        )
    return entry


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


class SafetensorsSource:
    """All weight tensors of a Hugging Face model dir, by name, read on demand.

    >>> source = SafetensorsSource("Qwen2.5-0.5B")
    >>> tensor = source.read("model.embed_tokens.weight")
    """

    def __init__(
        self, model_dir: str | os.PathLike, links_anywhere: bool = False, only: str | None = None
    ):
        """`links_anywhere`: weight files may be symlinks to anywhere (a user's own model
        dir to train), not only within `safe_files.model_dir_root` (a model handed over
        for import). `only`: read this one file of the dir, not the ones transformers
        picks (a PEFT adapter dir's adapter_model.safetensors)."""
        self.root = Path(model_dir)
        # where weight files may lead (None: anywhere)
        self.inside = None if links_anywhere else safe_files.model_dir_root(self.root)
        self.tensors: dict[str, StoredTensor] = {}
        self.notes: list[str] = []  # what a user should know about the files chosen
        # weight file -> its real path and (device, inode) when first checked (`_open`)
        self._checked: dict[str, tuple[str, tuple[int, int]]] = {}
        files, weight_map = ([only], None) if only else chosen_files(self.root, self.notes)
        for relative in files:
            for name, entry in read_header(self.root / relative, relative, self.inside).items():
                if name in self.tensors:
                    raise SafetensorsError(
                        f"{self.root}: {name} is stored in both {self.tensors[name].file}"
                        f" and {relative}"
                    )
                self.tensors[name] = entry
        if weight_map is not None:
            _check_index(self.root, weight_map, self.tensors)

    def read(self, name: str) -> torch.Tensor:
        """The tensor's bytes, read into a fresh tensor of its dtype and shape (one pread)."""
        import torch

        entry = self.tensors[name]
        out = torch.empty(entry.shape, dtype=entry.dtype.torch)
        if entry.nbytes:
            view = out.reshape(-1).view(torch.uint8).numpy().data
            self.read_into(entry, view)
        return out

    def read_into(self, entry: StoredTensor, buffer: memoryview, start: int = 0) -> None:
        """Fill `buffer` with the entry's bytes from byte `start` on."""
        path = self.root / entry.file
        fd = self._open(entry.file)
        try:
            done = 0
            while done < len(buffer):
                count = os.preadv(fd, [buffer[done:]], entry.offset + start + done)
                if count <= 0:  # `_entry` checked that the file holds the bytes
                    raise shrank_while_read(fd, entry.offset + start + len(buffer), path)
                done += count
        finally:
            os.close(fd)

    def _open(self, relative: str) -> int:
        """A read-only descriptor of weight file `relative` (the caller closes it): checked
        in full (`_open_weights`) the first time, and later opened by the real path found
        then, kept only while it is the very file checked (device and inode), else checked
        in full again. The full check walks every folder of the path with lstat, twice
        (about 15 calls): once per tensor, it was most of the time import-hf took for a MoE
        checkpoint of tens of thousands of small tensors."""
        known = self._checked.get(relative)
        if known is not None:
            real, identity = known
            try:
                fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:  # moved or removed since: the full check says what it is now
                pass
            else:
                found = os.fstat(fd)
                if (found.st_dev, found.st_ino) == identity:
                    return fd
                os.close(fd)
        path = self.root / relative
        fd = _open_weights(path, self.inside)
        checked = os.fstat(fd)
        self._checked[relative] = (os.path.realpath(path), (checked.st_dev, checked.st_ino))
        return fd

    def count_nonfinite(self, entry: StoredTensor) -> int:
        """NaN/Inf among the entry's values, counted on its bytes read a piece at a time
        (no tensor is made: import copies most weights file to file)."""
        fd = self._open(entry.file)
        try:
            return count_nonfinite_in_file(fd, entry.offset, entry.numel, entry.dtype)
        finally:
            os.close(fd)
