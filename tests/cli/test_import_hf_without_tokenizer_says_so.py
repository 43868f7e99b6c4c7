"""`mfsdp ckpt import-hf` of a model dir without tokenizer files says so, as export-hf does
of its output ("no tokenizer files in DIR"), and what training from the result needs: the
import exited 0 in silence, and a run from it was then refused for the tokenizer it lacked."""

from __future__ import annotations

import pytest

from tests.support.hf_model_files import saved_hf_model
from tests.support.interop_layouts import run_cli


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return saved_hf_model(tmp_path_factory.mktemp("no_tokenizer"), "qwen2", tied=True)


@pytest.mark.parametrize("layout", ["hf", "mcore"])
def test_the_note_names_the_dir_and_model_tokenizer(model, tmp_path, layout):
    out = tmp_path / "imported"
    code, _, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", layout)
    assert code == 0, err
    assert (
        f"note: no tokenizer files in {model}: training from {out} needs model.tokenizer=DIR,"
        " a local dir with the model's tokenizer files"
    ) in err.splitlines(), err


def test_a_model_dir_with_a_tokenizer_has_no_such_note(model, tmp_path):
    import shutil

    from trainer.tiny import build_tokenizer

    given = tmp_path / "model_dir"
    shutil.copytree(model, given)
    build_tokenizer().save_pretrained(given)
    code, _, err = run_cli("ckpt", "import-hf", given, "--out", tmp_path / "out", "--layout", "hf")
    assert code == 0, err
    assert "model.tokenizer" not in err, err
