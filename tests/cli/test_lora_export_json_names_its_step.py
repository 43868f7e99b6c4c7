"""export-hf --json of an mfsdp LoRA run names the checkpoint it read and its step, as every
other export does (they were null, for the runs exported most), and its `convert_seconds`
leaves out loading torch (seconds of it, of a 65 kB adapter: `convert_gb_per_s` was the
import's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.fresh_python import mfsdp
from tests.support.hf_model_files import saved_hf_model
from tests.support.paths import repo_env
from tests.support.sft import TINY_CONFIG, write_chat_jsonl
from trainer.tiny import build_tiny_model_dir

_ENV = {**repo_env(), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lora_json")
    base = build_tiny_model_dir(root / "base", with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    done = mfsdp(
        "train", "sft", "--config", str(TINY_CONFIG), f"data.train_files=[{data}]",
        f"model.path={base}", "model.lora_rank=4", "trainer.run_dir=runs/r",
        "trainer.total_steps=2", "data.val_ratio=0", "trainer.eval_every=0",
        "trainer.progress_bar=false", cwd=root, env=_ENV, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import_hf(saved_hf_model(root / "model", "qwen2", tied=True), root / "full", layout_name="hf")
    return root


@pytest.mark.parametrize("adapter_only", [False, True])
def test_a_lora_export_names_the_step_it_read(lora_run, adapter_only):
    out = f"out_{adapter_only}"
    flags = ["--adapter-only"] if adapter_only else []
    done = mfsdp(
        "ckpt", "export-hf", "runs/r", "--out", out, "--json", *flags, cwd=lora_run, env=_ENV
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert (said["checkpoint"], said["step"]) == ("runs/r/global_step_2/dist_ckpt", 2)
    # the import of torch (seconds) is in `seconds`, not in `convert_seconds`
    assert said["convert_seconds"] < said["seconds"] / 2, said
