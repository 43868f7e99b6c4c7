"""validate checks the files export copies beside the weights, cheaply, without --deep.

A tokenizer.json of mode 000 in the step's huggingface/ dir: validate said valid (only
`--deep`, which hashes every file, met it), and export-hf then failed on it. An unreadable
.distcp was caught without --deep. Now every file export would copy from where it copies
them (the checkpoint's HF dir, or --hf-config's) is stat-ed and opened, none read, as
export checks it: unreadable, a FIFO or a link out of the checkpoint is an error naming it,
told once even where `--deep`'s digests meet it too.
"""

from __future__ import annotations

import json
import os
import shutil

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES
from tests.support.permissions import run_cli_denied

MFSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout, with a manifest
STEP = "global_step_2"


def _run_with_tokenizer(tmp_path):
    run = shutil.copytree(MFSDP_RUN, tmp_path / "run")
    tokenizer = run / STEP / "huggingface" / "tokenizer.json"
    tokenizer.write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    return run, tokenizer


def test_an_unreadable_tokenizer_file_fails_validate_without_deep(tmp_path):
    """Was: `valid`, exit 0; export-hf then failed on it."""
    run, tokenizer = _run_with_tokenizer(tmp_path)
    out = tmp_path / "out"
    cases = [
        ["ckpt", "validate", str(run)],
        ["ckpt", "validate", str(run), "--deep"],
        ["ckpt", "export-hf", str(run), "--out", str(out)],
    ]
    records = run_cli_denied(cases, unreadable=tokenizer)
    for args, record in zip(cases, records, strict=True):
        assert record["escaped"] is None and record["exit"] == 1, (args, record)
    for record in records[:2]:
        errors = [line for line in record["stdout"].splitlines() if line.startswith("error:")]
        assert errors == [f"error: {tokenizer}: unreadable (Permission denied)"], record
    one_error(records[2]["stderr"], str(tokenizer), "Permission denied")
    assert not out.exists()


def test_the_hf_config_dirs_files_are_checked_too(tmp_path):
    """--hf-config DIR: export copies its model files, so validate opens those."""
    run = shutil.copytree(MFSDP_RUN, tmp_path / "run")
    given = shutil.copytree(run / STEP / "huggingface", tmp_path / "given")
    tokenizer = given / "tokenizer_config.json"
    tokenizer.write_text("{}")
    args = ["ckpt", "validate", str(run), "--hf-config", str(given)]
    (record,) = run_cli_denied([args], unreadable=tokenizer)
    assert record["exit"] == 1, record
    assert f"error: {tokenizer}: unreadable (Permission denied)" in record["stdout"], record
    code, stdout, err = run_cli(*args)  # readable again
    assert code == 0, stdout + err


def test_a_fifo_export_would_refuse_fails_validate_without_deep(tmp_path):
    run = shutil.copytree(MFSDP_RUN, tmp_path / "run")
    fifo = run / STEP / "huggingface" / "chat_template.jinja"
    os.mkfifo(fifo)
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and f"error: {fifo}: a FIFO, not a regular file" in stdout, stdout + err
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    one_error(err, str(fifo), "a FIFO")
    assert code == 1 and not (tmp_path / "out").exists()
