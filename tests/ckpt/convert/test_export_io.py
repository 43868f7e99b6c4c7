"""The tensorstore ByteStore reads exactly what the local store reads, and export through a
`file://` URL (run dir resolved via the tracker, assets read through the store) produces
the same bytes as export from the local path."""

from __future__ import annotations

import shutil

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.format.layout import CheckpointPathError
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, LocalByteStore
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.tensorstore_store import TensorstoreByteStore, open_store
from tests.support.export import save_single_process_checkpoint
from tests.support.interop_layouts import BUILDERS


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


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_every_layout_and_level_exports_from_a_url_as_from_its_path(kind, made_optim, tmp_path):
    """verl RL v1 / v2, verl SFT (v2), Megatron-LM (its tracker names iter_000000N) and a bare
    DCP at every level a user may name, read through `file://` as through gs:// or s3://.
    Was: a URL resolved only our own layout (a Megatron run's tracker led to global_step_N)."""
    laid = BUILDERS[kind](made_optim, tmp_path / "laid")
    config = made_optim / "config.json"
    local = export_hf(laid.run, tmp_path / "local", hf_config=config)
    for level, path in laid.levels.items():
        out = tmp_path / f"url_{level}"
        remote = export_hf(f"file://{path}", out, hf_config=config)
        assert remote.files == local.files, level
        for name in local.files:
            assert (out / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), level


def test_a_trainer_checkpoint_exports_from_a_url(made_optim, tmp_path):
    """The HF Trainer's checkpoint-N through a URL: its pytorch_model_fsdp_0 is found."""
    from tests.support.interop_layouts import dcp_of

    checkpoint = tmp_path / "out" / "checkpoint-3"
    shutil.copytree(dcp_of(made_optim), checkpoint / "pytorch_model_fsdp_0")
    config = made_optim / "config.json"
    local = export_hf(checkpoint, tmp_path / "local", hf_config=config)
    remote = export_hf(f"file://{checkpoint}", tmp_path / "url", hf_config=config)
    assert remote.files == local.files
    for name in local.files:
        assert (tmp_path / "url" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


@pytest.mark.parametrize(
    "text, says",
    [("x" * 65, "65 bytes, not a step number"), ("-1", "expected a step number or 'release'")],
)
def test_a_url_runs_tracker_is_read_bounded_and_checked(tmp_path, text, says):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(text)
    with pytest.raises(CheckpointPathError, match=says):
        export_hf(f"file://{tmp_path}", tmp_path / "out")


def test_a_url_trackers_step_that_is_not_there_is_named(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    with pytest.raises(CheckpointPathError, match=r"names step 7, but no checkpoint is there"):
        export_hf(f"file://{tmp_path}", tmp_path / "out")


@pytest.mark.parametrize("command", ["validate", "inspect"])
@pytest.mark.parametrize("url", ["gs://bucket/run", "s3://bucket/run/global_step_4"])
def test_commands_that_read_local_paths_name_a_url_as_one(command, url):
    """Was: `gs:/bucket/run: no such file or directory` (the URL taken for a local path)."""
    from tests.support.interop_layouts import one_error_line, run_cli

    code, _, err = run_cli("ckpt", command, url)
    line = one_error_line(err)
    assert code == 2 and line.startswith(f"error: {url}: a URL; only `mfsdp ckpt export-hf`"), err


def test_a_megatron_lm_run_at_a_url_derives_its_config_from_args(tmp_path):
    """Megatron-LM keeps no HF config; its `args` entry is in the DCP, so a URL derives the
    same config.json as the local path (was: --hf-config asked for through a URL)."""
    from tests.support.hf_to_mcore import tiny_causal_lm
    from tests.support.megatron_checkpoints import megatron_args, megatron_run

    model = tiny_causal_lm("qwen2", vocab=500)
    run = megatron_run(tmp_path, model, megatron_args(model))
    local = export_hf(run, tmp_path / "local")
    remote = export_hf(f"file://{run}", tmp_path / "url")
    assert remote.files == local.files
    for name in (*local.files, "config.json"):
        assert (tmp_path / "url" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
