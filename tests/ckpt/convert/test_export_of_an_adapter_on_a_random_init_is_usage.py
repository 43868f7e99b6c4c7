"""`mfsdp ckpt export-hf` of a LoRA run whose base was a random init (the tiny shape, no
base weights on disk) without --adapter-only: the checkpoint is sound, and exports as asked
with that flag, so the refusal is bad usage (exit 2) naming the flag, in text and --json;
`validate` passes the same checkpoint (exit 0), and the flag named exports it.

Was: exit 1, as a checkpoint that cannot be converted, while validate called it valid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

LORA = ("model.lora_rank=4", "model.lora_alpha=8", "data.global_batch_size=4")
LINE = (
    "the base model was a random init: there is nothing to merge onto; give --adapter-only"
    " to export the adapter alone"
)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("random_base")
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    run_sft(tiny_config(data, root / "run", *LORA, "trainer.total_steps=1"))
    return root / "run"


def test_the_merged_export_is_refused_as_usage_naming_the_flag(run, tmp_path):
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 2, stdout + err
    assert one_error(err) == f"error: {run}: {LINE}"  # the checkpoint named, as errors do
    assert not out.exists()
    code, stdout, _err = run_cli("ckpt", "export-hf", run, "--out", out, "--json")
    assert code == 2 and json.loads(stdout) == {"error": f"{run}: {LINE}", "exit_code": 2}, stdout


def test_validate_passes_it_and_the_flag_named_exports_it(run, tmp_path):
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0, stdout + err
    assert stdout.splitlines()[-1].startswith("valid: "), stdout
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "hf", "--adapter-only"
    )
    assert code == 0, stdout + err
    assert (tmp_path / "hf" / "adapter_config.json").is_file()
