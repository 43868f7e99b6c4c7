"""`.metadata` bytes do not depend on how the running Python reduces Enum members."""

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.torch_save_format import dump_metadata, tensor_metadata


def _metadata() -> dcp_metadata.Metadata:
    entry = tensor_metadata(BY_NAME["float32"], (2, 3))
    return dcp_metadata.Metadata(state_dict_metadata={"model.w": entry})


def test_enum_members_pickle_alike_under_a_getattr_reducer(monkeypatch):
    """CPython 3.11.2 reduces an Enum member to `getattr(cls, name)` (3.11.7: `cls(value)`);
    import-hf failed there with "getattr has no DCP name". Forced here, the bytes stay."""
    expected = dump_metadata(_metadata())
    encoding = dcp_metadata.MemFormatEncoding
    monkeypatch.setattr(
        encoding, "__reduce_ex__", lambda self, protocol: (getattr, (type(self), self.name))
    )
    assert dump_metadata(_metadata()) == expected
    assert b"getattr" not in expected and b"_MEM_FORMAT_ENCODING\n" in expected
