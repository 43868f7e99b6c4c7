"""Every option naming a directory to create or write refuses a dangling symlink on its path,
itself or a parent, early (exit 2), naming the link and where it leads.

Was: `trainer.run_dir=dang` (dang -> nowhere) failed late with exit 1 `dang: File exists`,
after the model and data were loaded, and `--out lpl/hf` (lpl -> ../nonexistent) of
export-hf, import-hf and train said `lpl is a file, not a directory`.
"""

from __future__ import annotations

import pytest

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.storage.out_dir import OutputDirError, checked_target, make_parents
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run
from trainer.config import ConfigError
from trainer.local_paths import check_writable_dir


@pytest.fixture
def links(tmp_path, monkeypatch):
    """`dang -> nowhere` and `lpl -> ../nonexistent` in the current directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dang").symlink_to("nowhere")
    (tmp_path / "lpl").symlink_to("../nonexistent")
    return tmp_path


def _said(line: str, given: str, link: str, target: str) -> bool:
    own = f"{given}: a symlink to a missing target ({target})"
    parent = f"{given}: {link} is a symlink to a missing target ({target})"
    return line.startswith(f"error: {own};") or line.startswith(f"error: {parent};")


@pytest.mark.parametrize(
    ("out", "target"), [("dang", "nowhere"), ("lpl/hf", "../nonexistent")], ids=["self", "parent"]
)
def test_export_import_and_data_refuse_a_dangling_link_on_their_out(links, out, target):
    model = tiny_causal_lm("qwen2", vocab=64)
    run = megatron_run(links / "src", model, megatron_args(model))
    model.save_pretrained(links / "hf_src")
    link = str(links / out.split("/")[0])
    for command in (
        ("ckpt", "export-hf", str(run)),
        ("ckpt", "import-hf", str(links / "hf_src")),
        ("data", "synthetic"),
    ):
        code, stdout, err = run_cli(*command, "--out", out)
        line = one_error_line(err)
        assert code == 2 and _said(line, f"--out {out}", link, target), (command, stdout + err)
    assert not (links / "nonexistent").exists() and not (links / "nowhere").exists()


def test_trainer_run_dir_is_refused_by_the_config_check(links):
    with pytest.raises(ConfigError, match=r"^trainer.run_dir: dang: a symlink to a missing"):
        check_writable_dir("trainer.run_dir", "dang")
    with pytest.raises(ConfigError, match="lpl is a symlink to a missing target"):
        check_writable_dir("trainer.run_dir", "lpl/run")


def test_library_callers_get_the_same_words(links):
    with pytest.raises(MfsdpUsageError, match=r"run_dir: dang: a symlink to a missing target"):
        Checkpointer("dang", strategy="none")
    with pytest.raises(OutputDirError, match=r"lpl is a symlink to a missing target"):
        checked_target(links / "lpl" / "hf")
    with pytest.raises(OutputDirError, match=r"dang is a symlink to a missing target"):
        checked_target(links / "dang")
    with pytest.raises(OutputDirError, match=r"lpl is a symlink to a missing target"):
        make_parents(links / "lpl" / "a" / "b")
