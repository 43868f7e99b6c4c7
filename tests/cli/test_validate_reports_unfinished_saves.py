"""`mfsdp ckpt validate` of a save that did not finish, in any layout, is an invalid
checkpoint: validate's object with `valid` false under --json, the `error:` finding and an
INVALID verdict line in text, exit 1.

Was: the damage was met while the path was resolved (verl's, Megatron's and the Hugging
Face Trainer's layouts, and a run dir of mfsdp's holding only an unfinished `.tmp` step),
and its error escaped validate: the generic `{error, exit_code}` object, where a script
reads `valid` (docs/json.md: a checkpoint validate fails prints validate's object), and no
verdict line. A step of mfsdp's with the same damage got the report. `inspect` and
`export-hf` keep their failure object, as docs/json.md says. A run whose tracker names the
save is a tracker that failed (tests/ckpt/test_tracked_unfinished_save_offers_complete_steps.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format import layout
from tests.ckpt.test_unfinished_torch_dist_named import _torch_dist_save
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"
STEP = "global_step_2"
# validate's fields (docs/json.md); every one is printed
FIELDS = {
    "path", "checkpoint", "step", "step_from", "findings", "tensors", "tensor_bytes", "files",
    "deep", "layout", "role", "has_manifest", "has_optimizer_state", "optimizer_kind",
    "hash_algorithms", "note", "adapter", "valid", "verdict",
}  # fmt: skip


def _verl_sft(root: Path) -> tuple[Path, Path]:
    """verl's SFT run (no manifest) whose tracked step's save stopped before `.metadata`."""
    run = shutil.copytree(RUN, root / "verl_sft")
    (run / STEP / layout.MANIFEST_FILE).unlink()
    (run / STEP / "dist_ckpt" / layout.DCP_METADATA_FILE).unlink()
    return run, run / layout.TRACKER_FILE


def _verl_rl(root: Path) -> tuple[Path, Path]:
    """verl's RL step whose actor/dist_ckpt is empty."""
    run = shutil.copytree(RUN, root / "verl_rl")
    step = run / STEP
    (step / layout.MANIFEST_FILE).unlink()
    (step / "actor").mkdir()
    shutil.move(step / "huggingface", step / "actor" / "huggingface")
    shutil.rmtree(step / "dist_ckpt")
    (step / "actor" / "dist_ckpt").mkdir()
    return step, step / "actor" / "dist_ckpt"


def _hf_trainer(root: Path) -> tuple[Path, Path]:
    """The Hugging Face Trainer's output dir whose newest checkpoint-N is empty."""
    (root / "hf" / "checkpoint-10").mkdir(parents=True)
    return root / "hf", root / "hf" / "checkpoint-10"


def _tmp_only(root: Path) -> tuple[Path, Path]:
    """A run dir of mfsdp's holding only a step whose save did not finish."""
    run = root / "tmp_only"
    shutil.copytree(RUN / STEP, run / "global_step_4.tmp")
    return run, run


def _torch_dist(root: Path) -> tuple[Path, Path]:
    """A Megatron torch_dist save stopped before its metadata.json."""
    step = _torch_dist_save(root / "td" / "iter_0000200")
    return step, step


# each: (the path given, where its one error finding is)
LAYOUTS = {
    "verl SFT": _verl_sft,
    "verl RL": _verl_rl,
    "HF Trainer": _hf_trainer,
    "mfsdp .tmp only": _tmp_only,
    "Megatron torch_dist": _torch_dist,
}


@pytest.mark.parametrize("build", LAYOUTS.values(), ids=list(LAYOUTS))
def test_validate_json_is_its_own_object_with_valid_false(build, tmp_path):
    given, where = build(tmp_path)
    code, out, err = run_cli("ckpt", "validate", given, "--json")
    found = json.loads(out)
    assert code == 1 and set(found) == FIELDS, (out, err)
    assert found["valid"] is False and found["verdict"] == "invalid", found
    assert found["path"] == found["checkpoint"] == str(given), found
    assert [(f["severity"], f["where"]) for f in found["findings"]] == [("error", str(where))]
    assert "did not finish" in found["findings"][0]["message"], found
    assert "error:" not in err, err


@pytest.mark.parametrize("build", LAYOUTS.values(), ids=list(LAYOUTS))
def test_validate_text_says_the_error_and_invalid(build, tmp_path):
    given, where = build(tmp_path)
    code, out, err = run_cli("ckpt", "validate", given)
    lines = out.splitlines()
    assert code == 1 and len(lines) == 2, (out, err)
    assert lines[0].startswith(f"error: {where}: ") and "did not finish" in lines[0], out
    verdict = (  # a tracker naming the save failed: the complete steps are offered
        f"{where.name} failed, see above; no complete step dir here"
        if where.name == layout.TRACKER_FILE
        else "not read as a checkpoint: see the error above"
    )
    assert lines[1] == f"INVALID: {given} ({verdict})"
    assert "error:" not in err, err


@pytest.mark.parametrize("build", LAYOUTS.values(), ids=list(LAYOUTS))
def test_inspect_and_export_keep_the_failure_object(build, tmp_path):
    given, _where = build(tmp_path)
    for command in (["inspect"], ["export-hf", "--out", tmp_path / "out"]):
        code, out, err = run_cli("ckpt", *command, given, "--json")
        found = json.loads(out)
        assert code == 1 and set(found) == {"error", "exit_code"}, (command, out, err)
        assert found["exit_code"] == 1 and "did not finish" in found["error"], found
        assert f"error: {found['error']}" in err, err
