"""An mfsdp LoRA checkpoint given to `export-hf` as a `file://` URL is refused naming its
local path, which exports: read through the URL as any checkpoint, it was taken for a live
PEFT model's save (its manifest's record of the adapter unread), with advice for that."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES
from tests.trainer.test_lora_export_flags import lora_run  # noqa: F401 (a fixture)


@pytest.mark.parametrize("flags", [[], ["--adapter-only"]])
def test_a_lora_step_as_a_file_url_names_its_local_path_which_exports(
    lora_run: Path,  # noqa: F811
    tmp_path: Path,
    flags: list[str],
):
    step = sorted(lora_run.glob("global_step_*"))[-1]
    out = tmp_path / "out"
    code, _out, err = run_cli("ckpt", "export-hf", f"file://{step}", "--out", out, *flags)
    assert code == 2 and one_error_line(err) == (
        f"error: file://{step}: an mfsdp LoRA checkpoint, exported from its local files;"
        f" give the local path itself, {step}"
    ), err
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "export-hf", step, "--out", out, *flags)
    assert code == 0, stdout + err


def test_a_checkpoint_that_is_not_lora_still_exports_from_a_file_url(tmp_path: Path):
    step = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2"
    code, stdout, err = run_cli("ckpt", "export-hf", f"file://{step}", "--out", tmp_path / "o")
    assert code == 0, stdout + err
