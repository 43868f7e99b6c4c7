"""tensorstore is an optional extra (`mfsdp[tensorstore]`): export from a URL, or with
`--io tensorstore`, where it is not installed ends in one line naming what asked for it and
the extra to install (exit 2), not a ModuleNotFoundError traceback. Absence is made with a
None entry in sys.modules, which makes Python's own import machinery refuse the import."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import one_error
from tests.support.export import save_single_process_checkpoint
from tests.support.missing_package import mfsdp_without


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("no_tensorstore")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return root / "run"


def test_export_from_a_url_names_the_extra(tmp_path):
    done = mfsdp_without(
        "tensorstore", "ckpt", "export-hf", "gs://bucket/run", "--out", str(tmp_path / "hf")
    )
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, "gs://bucket/run", "pip install 'mfsdp[tensorstore]'")
    assert not (tmp_path / "hf").exists()


def test_export_with_io_tensorstore_names_the_flag_and_the_extra(run_dir, tmp_path):
    out = tmp_path / "hf"
    done = mfsdp_without(
        "tensorstore", "ckpt", "export-hf", str(run_dir), "--io", "tensorstore", "--out", str(out)
    )
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, "--io tensorstore", "pip install 'mfsdp[tensorstore]'")
    assert not out.exists()
