"""A blob of plain data (a step, a learning rate, a tuple of betas) decoded without torch.

Importing torch costs ~1.5-2 CPU seconds, more than the rest of an inspect of a checkpoint
of thousands of parameters, whose non-tensor entries are small plain values (Megatron's
`param_to_group_meta` settings, `iteration`, `extra.*`). Such a blob's pickle names no
global and no storage, so the restricted unpickler (data only) builds the same value
torch's weights-only load does. It is taken only where the two agree by construction: no
transforms, torch.save's protocol 2, and only the opcodes both unpicklers run alike;
anything else (a tensor, an OrderedDict, a Namespace, damaged bytes) is left to torch's
load, whose value or error stays what it was. A pickle of protocol 3 to 5 of plain values
(Megatron-LM's converter saves its settings with protocol 4) is read here too, its framing,
memo, bytes and set opcodes besides: torch's weights-only load cannot read one at all
("Unsupported operand 149", its FRAME; 67, protocol 3's bytes), and a stock load,
Megatron-LM's, builds the value read here.
"""

from __future__ import annotations

import io
import pickletools
from typing import Any

from mfsdp_ckpt.format.blob_guard import PICKLE_BUDGET, blob_pickle, open_blob
from mfsdp_ckpt.format.restricted_pickle import restricted_loads
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

TORCH_SAVE_PROTOCOL = 2  # torch.save's pickle protocol; torch warns when loading any other
# Opcodes of a protocol-2 pickle of plain values that torch's weights-only unpickler and the
# restricted one both run, with the same meaning (no GLOBAL, REDUCE or BINPERSID: a class,
# a call or a storage is torch's to load).
_SHARED_OPCODES = frozenset(
    (
        "PROTO",
        "STOP",
        "MARK",
        "NONE",
        "NEWTRUE",
        "NEWFALSE",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG1",
        "BINFLOAT",
        "BINUNICODE",
        "EMPTY_TUPLE",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "EMPTY_LIST",
        "APPEND",
        "APPENDS",
        "EMPTY_DICT",
        "SETITEM",
        "SETITEMS",
        "BINPUT",
        "LONG_BINPUT",
        "BINGET",
        "LONG_BINGET",
    )
)


# Opcodes protocols 3-5 add for plain values: framing, the implicit memo, short and long
# strings, bytes (protocol 3's), sets and frozensets (protocol 4's). torch's weights-only
# load reads none of bytes, ADDITEMS or FROZENSET; the restricted unpickler builds what a
# stock load does (classes stay torch's to load or refuse).
_FRAMED_OPCODES = _SHARED_OPCODES | {
    "FRAME",
    "MEMOIZE",
    "SHORT_BINUNICODE",
    "BINUNICODE8",
    "SHORT_BINBYTES",
    "BINBYTES",
    "BINBYTES8",
    "EMPTY_SET",
    "ADDITEMS",
    "FROZENSET",
}
_NEWER_PROTOCOLS = range(3, 6)


def plain_value(raw: bytes, transforms: tuple[str, ...]) -> tuple[Any] | None:
    """(value,) of a blob of plain data, read without torch; None when it is not one (or
    cannot be read so), for torch's load to decode or refuse."""
    if transforms:
        return None
    try:
        data = blob_pickle(open_blob(io.BytesIO(raw), len(raw), "blob"), "blob")
        if not _plain_pickle(data):
            return None
        return (restricted_loads(data, {}, budget=PICKLE_BUDGET),)
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
        return None


def _plain_pickle(data: bytes) -> bool:
    """Whether `data` is a protocol-2 pickle of _SHARED_OPCODES only, or a protocol 3-5 one
    of _FRAMED_OPCODES only."""
    allowed = _SHARED_OPCODES
    for index, (opcode, arg, _pos) in enumerate(pickletools.genops(data)):
        if index == 0:
            if opcode.name != "PROTO" or arg not in (TORCH_SAVE_PROTOCOL, *_NEWER_PROTOCOLS):
                return False
            allowed = _SHARED_OPCODES if arg == TORCH_SAVE_PROTOCOL else _FRAMED_OPCODES
        if opcode.name not in allowed:
            return False
    return True
