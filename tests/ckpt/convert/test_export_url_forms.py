"""A checkpoint URL written in no form its scheme takes is bad usage (exit 2), said in one
line naming the form. Was: `file://verl_run` (a relative path) exit 1 with tensorstore's
parser's words ("file: URIs do not support authority"), `gs://` without a bucket the same,
and `s3:/x` read as a local path ("no such file or directory")."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.storage.tensorstore_store import open_store
from mfsdp_ckpt.storage.url_form import URLFormError, check_url_form
from tests.support.cli_errors import one_error
from tests.support.export import save_single_process_checkpoint
from tests.support.interop_layouts import run_cli


@pytest.mark.parametrize(
    "url, said",
    [
        (
            "file://verl_run",
            "not a URL of the form file:///abs/path ('verl_run' there reads as a host);"
            " a relative path is given as it is, without file://",
        ),
        ("file:/abs/run", "not a URL of the form file:///abs/path"),
        ("gs://", "not a URL of the form gs://BUCKET/path (no bucket after gs://)"),
        ("gs:///run", "not a URL of the form gs://BUCKET/path (no bucket after gs://)"),
        ("s3:/bucket/run", "not a URL of the form s3://BUCKET/path"),
        ("S3://bucket/run", "not a URL of the form s3://BUCKET/path"),
        ("https:///run", "not a URL of the form https://HOST/path (no host after https://)"),
        (
            "gs://Bad_Bucket!/run",
            'not a URL of the form gs://BUCKET/path (Invalid GCS bucket name: "Bad_Bucket!")',
        ),
    ],
)
def test_a_malformed_url_is_bad_usage_naming_the_form(tmp_path, monkeypatch, url, said):
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_cli("ckpt", "export-hf", url, "--out", "hf")
    assert code == 2, stdout + stderr
    assert one_error(stderr) == f"error: {url}: {said}"
    assert list(tmp_path.iterdir()) == []


def test_a_local_folder_named_like_a_url_is_read_as_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s3:run").mkdir()
    check_url_form("s3:run")
    with pytest.raises(URLFormError):
        check_url_form("s3:other")


def test_a_local_path_needing_escapes_is_read_through_tensorstore(tmp_path):
    """`--io tensorstore` on a local path: its URL was `file://` + the path as it is, which
    tensorstore's parser refuses for a `%` in it."""
    from trainer.tiny import build_tiny_model_dir

    run = tmp_path / "run 100%"
    save_single_process_checkpoint(run, build_tiny_model_dir(tmp_path / "assets"), seed=3)
    store = open_store(str(run / "global_step_1" / "dist_ckpt"), io="tensorstore")
    assert ".metadata" in store.list_files()
    assert export_hf(run, tmp_path / "hf", io="tensorstore").files == ["model.safetensors"]
