"""`model.liger=true` (or `model.loss=liger`, the same check) where the optional `liger`
extra is not installed: the run ends in one line naming the setting and
`pip install 'mfsdp[liger]'` (exit 2), which installs the liger-kernel version mfsdp declares."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import one_error
from tests.support.missing_package import mfsdp_without
from tests.support.sft import TINY_CONFIG, write_chat_jsonl


@pytest.mark.slow  # loads torch and builds the tiny model before the kernels are swapped in
def test_liger_setting_without_liger_kernel_names_the_extra(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    done = mfsdp_without(
        "liger_kernel",
        "train",
        "sft",
        "--config",
        str(TINY_CONFIG),
        f"data.train_files={data}",
        f"trainer.run_dir={tmp_path / 'run'}",
        "data.val_ratio=0",
        "model.liger=true",
    )
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, "model.liger=true", "pip install 'mfsdp[liger]'")
