"""The torch-free writers of `torch.save` blobs and DCP `.metadata` against torch itself."""

import io
import pickle
import zipfile

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.format.dcp_metadata import load_plain_metadata_bytes
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.torch_save_format import BlobLayout, object_blob, tensor_pickle
from mfsdp_ckpt.storage.dcp_stream_writer import StreamingDcpWriter
from mfsdp_ckpt.storage.reader import CheckpointReader


@pytest.mark.parametrize(
    "dtype",
    # the last three have no typed storage class: torch.save writes _rebuild_tensor_v3
    [torch.bfloat16, torch.float16, torch.float32, torch.int64]
    + [torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16],
)
@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 4), (0, 4), ()])
def test_blob_loads_as_the_tensor(dtype, shape):
    tensor = (torch.arange(max(1, torch.Size(shape).numel())) * 3 - 7).to(dtype)[
        : torch.Size(shape).numel()
    ]
    tensor = tensor.reshape(shape)
    layout = BlobLayout(tensor_pickle(BY_NAME[str(dtype)[6:]], shape), tensor.nbytes)
    blob = layout.head + tensor.reshape(-1).view(torch.uint8).numpy().tobytes() + layout.tail
    assert len(blob) == layout.length and layout.payload_offset % 64 == 0
    loaded = torch.load(io.BytesIO(blob), weights_only=True)
    assert loaded.dtype == dtype and loaded.shape == tensor.shape and torch.equal(loaded, tensor)
    names = [
        info.filename.split("/", 1)[1] for info in zipfile.ZipFile(io.BytesIO(blob)).infolist()
    ]
    reference = io.BytesIO()
    torch.save(tensor, reference)
    assert names == [
        info.filename.split("/", 1)[1] for info in zipfile.ZipFile(reference).infolist()
    ]


@pytest.mark.parametrize("value", [3.0, 0, 12345678901234])
def test_object_blob_loads_as_the_value(value):
    assert torch.load(io.BytesIO(object_blob(value)), weights_only=True) == value


def test_metadata_equals_what_dcp_save_writes(tmp_path):
    """Same state dict through dcp.save and through the streaming writer: the unpickled
    `.metadata` agree on every entry, and each loads the other's way."""
    state = {"model": {"a.weight": torch.randn(6, 4), "b": torch.arange(5)}, "iteration": 7}
    dcp.save(state, checkpoint_id=tmp_path / "torch")
    writer = StreamingDcpWriter(tmp_path / "ours", threads=1)  # dcp.save: thread_count=1
    writer.add_tensor(("model", "a.weight"), state["model"]["a.weight"])
    writer.add_tensor(("model", "b"), state["model"]["b"])
    writer.add_object(("iteration",), 7)
    writer.finish()
    theirs = pickle.loads((tmp_path / "torch" / ".metadata").read_bytes())
    ours = pickle.loads((tmp_path / "ours" / ".metadata").read_bytes())
    assert type(ours) is type(theirs)
    assert ours.state_dict_metadata == theirs.state_dict_metadata
    assert ours.planner_data == theirs.planner_data
    assert set(ours.storage_data) == set(theirs.storage_data)
    for index, info in ours.storage_data.items():
        assert (
            type(info) is type(theirs.storage_data[index]) and info.relative_path == "__0_0.distcp"
        )
        assert isinstance(index.offset, (torch.Size, type(None)))
    assert ours.version == theirs.version
    loaded = {
        "model": {"a.weight": torch.zeros(6, 4), "b": torch.zeros(5, dtype=torch.int64)},
        "iteration": 0,
    }
    dcp.load(loaded, checkpoint_id=tmp_path / "ours")
    assert (
        torch.equal(loaded["model"]["a.weight"], state["model"]["a.weight"])
        and loaded["iteration"] == 7
    )
    load_plain_metadata_bytes(
        (tmp_path / "ours" / ".metadata").read_bytes(), source="ours"
    )  # the safe reader too
    reader = CheckpointReader(tmp_path / "ours")
    entry = reader.tensors["model.a.weight"]
    assert (
        reader.raw_payload_offset(entry, entry.chunks[0]) is not None
    )  # export can copy it file to file
