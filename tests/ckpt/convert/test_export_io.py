"""The tensorstore ByteStore reads exactly what the local store reads, and export through a
`file://` URL (run dir resolved via the tracker, assets read through the store) produces
the same bytes as export from the local path."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, LocalByteStore
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.tensorstore_store import TensorstoreByteStore, open_store
from tests.support.export import save_single_process_checkpoint


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("io")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"), seed=3)
    return root / "run"


def test_tensorstore_store_matches_local(run_dir):
    dist_ckpt = run_dir / "global_step_1" / "dist_ckpt"
    local, remote = LocalByteStore(dist_ckpt), TensorstoreByteStore(f"file://{dist_ckpt}")
    assert remote.list_files() == local.list_files()
    name = local.list_files()[-1]
    assert remote.size(name) == local.size(name) and remote.size("absent") is None
    assert remote.read_range(name, 100, 333) == local.read_range(name, 100, 333)
    with pytest.raises(CheckpointFileError, match=r"truncated|not valid"):
        remote.read_range(name, local.size(name) - 10, 20)
    with pytest.raises(CheckpointFileError, match="escapes"):
        remote.read_range("../x", 0, 1)
    a, b = CheckpointReader(dist_ckpt), CheckpointReader(dist_ckpt, store=remote)
    for key in list(a.tensors)[:5]:
        assert a.read_tensor(key).equal(b.read_tensor(key))


def test_export_from_url_equals_local_export(run_dir, tmp_path):
    local = export_hf(run_dir, tmp_path / "local")
    remote = export_hf(f"file://{run_dir}", tmp_path / "url", workers=3)
    assert remote.files == local.files == ["model.safetensors"]
    assert (tmp_path / "url" / "model.safetensors").read_bytes() == (
        tmp_path / "local" / "model.safetensors"
    ).read_bytes()
    assert (tmp_path / "url" / "tokenizer.json").read_bytes() == (
        tmp_path / "local" / "tokenizer.json"
    ).read_bytes()
    forced = export_hf(run_dir, tmp_path / "forced", io="tensorstore")
    assert forced.bytes == local.bytes


def test_open_store_picks_by_scheme(tmp_path):
    assert isinstance(open_store(str(tmp_path)), LocalByteStore)
    assert isinstance(open_store(f"file://{tmp_path}"), TensorstoreByteStore)
    assert isinstance(open_store(str(tmp_path), io="tensorstore"), TensorstoreByteStore)
