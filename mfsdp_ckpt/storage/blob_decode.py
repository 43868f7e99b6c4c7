"""A DCP blob's bytes back to what was saved: its transforms (compression, ...) undone
within a limit, then loaded with torch.load's weights_only after blob_guard's structure
checks. torch is imported only here, when a blob that is not plain data is decoded
(`plain_blob`), so the metadata tables, raw byte copies and small plain values never pay
for it.
"""

from __future__ import annotations

import functools
import io
import warnings
from typing import Any

from mfsdp_ckpt.check.printable import error_line, torch_load_reason
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.blob_guard import check_blob
from mfsdp_ckpt.format.restricted_pickle import DETAIL_CHARS
from mfsdp_ckpt.storage.plain_blob import plain_value
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

BLOB_OVERHEAD = 1 << 20  # zip directory and pickle around a tensor's bytes, generously
MAX_OBJECT_BYTES = (
    1 << 30
)  # a non-tensor value (RNG states, loader state) decoded from its transforms


def _stream_extensions(transforms: tuple[str, ...]) -> list[Any]:
    """DCP's decoders for `transforms`, in the order they were applied. Raises for a name
    DCP does not know, a version it cannot read, or a codec whose module is not installed
    (zstd without `zstandard` or `pyzstd`)."""
    from torch.distributed.checkpoint._extension import (
        ExtensionRegistry,
        StreamTransformExtension,
    )

    extensions = list(ExtensionRegistry().from_descriptor_list(list(transforms)))
    for extension in extensions:
        if not isinstance(extension, StreamTransformExtension):
            raise TypeError(f"{type(extension).__name__} does not transform a stream")
    return extensions


@functools.lru_cache(maxsize=256)  # a checkpoint names one or two lists for all its chunks
def undecodable_transforms(transforms: tuple[str, ...]) -> str | None:
    """Why the blobs stored with `transforms` cannot be decoded here, else None: checked
    from their names before any blob is read (torch is imported only when there are any).
    Memory running out is raised, not returned: it is the machine's, and a reason returned
    is cached, so every later check of those transforms would have said it too."""
    try:
        _stream_extensions(transforms)
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not the transforms' fault
        return (
            f"cannot decode transforms {transforms}: {error_line(err, with_type=False, limit=200)}"
        )
    return None


def decode_blob(
    raw: bytes, transforms: tuple[str, ...], where: str, limit: int = MAX_OBJECT_BYTES
) -> io.BytesIO:
    """The blob with its transforms (compression, ...) undone, refusing output past `limit`
    bytes: a compressed blob may expand without bound."""
    if not transforms:
        return io.BytesIO(raw)
    try:
        stream: Any = io.BytesIO(raw)
        for extension in reversed(_stream_extensions(transforms)):
            stream = extension.transform_from(stream)
        data = stream.read(limit + 1)
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
        raise CheckpointFormatError(
            f"{where}: cannot decode transforms {transforms}: {err}"
        ) from None
    if len(data) > limit:
        raise CheckpointFormatError(f"{where}: blob expands past {limit} bytes when decoded")
    return io.BytesIO(data)


def load_blob(
    raw: bytes, transforms: tuple[str, ...], where: str, limit: int = MAX_OBJECT_BYTES
) -> Any:
    """torch.load with weights_only (tensors and plain containers only, never code), after
    blob_guard's structure checks; a blob of plain data without torch (`plain_value`).
    torch's warning of a pickle protocol other than 2, which it prints before reading (or
    failing to read) one, is silenced: the value, or the error raised, says what matters."""
    plain = plain_value(raw, transforms)
    if plain is not None:
        return plain[0]
    import torch

    try:
        decoded = decode_blob(raw, transforms, where, limit)
        check_blob(decoded, len(decoded.getbuffer()), where)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            return torch.load(decoded, map_location="cpu", weights_only=True)
    except CheckpointFormatError:
        raise
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
        raise CheckpointFormatError(f"{where}: {torch_load_reason(err, DETAIL_CHARS)}") from None
