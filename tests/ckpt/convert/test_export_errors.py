"""export-hf error cases: one line naming the file, exit 1 (bad checkpoint) or 2 (bad usage),
and nothing left at --out (nor a temporary directory beside it)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.storage.out_dir import replaceable_problem
from tests.support.cli_errors import one_error, without_phase_lines
from tests.support.export import save_single_process_checkpoint
from tests.support.export_marks import marked_weights


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("errors")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return root / "run"


def _export(*args: str):
    return CliRunner().invoke(app, ["ckpt", "export-hf", *args])


def _assert_clean_failure(result, code: int, *needles: str, out_parent=None) -> None:
    assert result.exit_code == code, result.output
    one_error(result.output, *needles)  # after --verify's config check line, if it came
    if out_parent is not None:
        assert [p.name for p in out_parent.iterdir()] == [], list(out_parent.iterdir())


def test_missing_checkpoint_path_is_usage(tmp_path):
    result = _export(str(tmp_path / "nope"), "--out", str(tmp_path / "o" / "x"))
    _assert_clean_failure(result, 2, "nope", "no such file")


def test_existing_out_needs_overwrite_then_is_replaced(run_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("keep me: not an export")
    _assert_clean_failure(_export(str(run_dir), "--out", str(out)), 2, str(out), "--overwrite")
    refused = _export(str(run_dir), "--out", str(out), "--overwrite")
    _assert_clean_failure(refused, 2, str(out), "not a model export")
    assert (out / "old.txt").read_text() == "keep me: not an export"
    (out / "old.txt").unlink()
    assert _export(str(run_dir), "--out", str(out)).exit_code == 2  # empty: still needs --overwrite
    assert _export(str(run_dir), "--out", str(out), "--overwrite").exit_code == 0
    # an earlier export's other shards: what an export writes, replaced
    marked_weights(out, name="model-00001-of-00002.safetensors")
    result = _export(str(run_dir), "--out", str(out), "--overwrite")
    assert result.exit_code == 0, result.output
    assert not (out / "model-00001-of-00002.safetensors").exists()
    assert (out / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("foreign", [".git/HEAD", "README.md", "evals/gsm8k.csv"])
def test_overwrite_never_replaces_an_export_holding_what_no_export_writes(
    foreign, run_dir, tmp_path
):
    """A model repo cloned with its .git/, README and eval results (the base model, given
    as --out by a slip) looks like an export at its top: --overwrite deleted all of them."""
    out = tmp_path / "out"
    assert _export(str(run_dir), "--out", str(out)).exit_code == 0
    (out / foreign).parent.mkdir(parents=True, exist_ok=True)
    (out / foreign).write_text("the user's")
    refused = _export(str(run_dir), "--out", str(out), "--overwrite")
    _assert_clean_failure(
        refused, 2, str(out), "holds what no export writes", foreign.split("/")[0]
    )
    assert (out / foreign).read_text() == "the user's"


def test_out_that_holds_the_checkpoint_is_refused(run_dir, tmp_path):
    result = _export(str(run_dir), "--out", str(run_dir.parent), "--overwrite")
    _assert_clean_failure(result, 2, "holds the checkpoint")
    assert (run_dir / "global_step_1" / "dist_ckpt" / ".metadata").exists()


def test_checkpoint_without_model_exits_1(tmp_path):
    ckpt = tmp_path / "ckpt"
    dcp.save(
        {"extra": {"step": torch.tensor(3)}, "optimizer": {"lr": torch.tensor(0.1)}},
        checkpoint_id=str(ckpt),
        no_dist=True,
    )
    (tmp_path / "out").mkdir()
    result = _export(str(ckpt), "--out", str(tmp_path / "out" / "x"), "--hf-config", str(tmp_path))
    assert result.exit_code == 2 and "config.json" in result.output  # the config is checked first
    from trainer.tiny import build_tiny_model_dir

    assets = build_tiny_model_dir(tmp_path / "assets")
    result = _export(str(ckpt), "--out", str(tmp_path / "out" / "x"), "--hf-config", str(assets))
    _assert_clean_failure(result, 1, "no model weights", out_parent=tmp_path / "out")


def _copy_run(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    return copy, copy / "global_step_1" / "dist_ckpt"


def test_missing_data_file_exits_1_naming_it(run_dir, tmp_path):
    copy, dist_ckpt = _copy_run(run_dir, tmp_path)
    victim = sorted(dist_ckpt.glob("*.distcp"))[0]
    victim.unlink()
    (tmp_path / "out").mkdir()
    result = _export(str(copy), "--out", str(tmp_path / "out" / "x"))
    _assert_clean_failure(result, 1, victim.name, "missing", out_parent=tmp_path / "out")


def test_truncated_data_file_fails_mid_export_and_leaves_nothing(run_dir, tmp_path):
    copy, dist_ckpt = _copy_run(run_dir, tmp_path)
    victim = sorted(dist_ckpt.glob("*.distcp"))[0]
    os.truncate(victim, victim.stat().st_size // 2)
    (tmp_path / "out").mkdir()
    result = _export(str(copy), "--out", str(tmp_path / "out" / "x"), "--workers", "2")
    _assert_clean_failure(result, 1, victim.name, "truncated", out_parent=tmp_path / "out")


def test_unreadable_metadata_exits_1(run_dir, tmp_path):
    copy, dist_ckpt = _copy_run(run_dir, tmp_path)
    (dist_ckpt / ".metadata").write_bytes(b"\x80\x04garbage")
    (tmp_path / "out").mkdir()
    result = _export(str(copy), "--out", str(tmp_path / "out" / "x"))
    _assert_clean_failure(result, 1, ".metadata", out_parent=tmp_path / "out")


def test_shapes_contradicting_a_given_config_exit_2(run_dir, tmp_path):
    """Was: exit 1 for the shape a given config contradicts, 2 for a name it has no place
    for; both are --hf-config's fault."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(run_dir / "global_step_1" / "huggingface")
    config.intermediate_size = 384
    config.save_pretrained(tmp_path / "other")
    (tmp_path / "out").mkdir()
    bare = shutil.copytree(run_dir / "global_step_1" / "dist_ckpt", tmp_path / "dist_ckpt")
    result = _export(
        str(bare), "--out", str(tmp_path / "out" / "x"), "--hf-config", str(tmp_path / "other")
    )
    _assert_clean_failure(result, 2, "mlp", "384", out_parent=tmp_path / "out")
    # against the run's own config.json the given one is named before any shape is read
    result = _export(
        str(run_dir), "--out", str(tmp_path / "out" / "x"), "--hf-config", str(tmp_path / "other")
    )
    _assert_clean_failure(
        result, 2, "intermediate_size=384 (own: 256)", out_parent=tmp_path / "out"
    )


def test_unknown_layout_exits_2_naming_tensors(tmp_path):
    ckpt = tmp_path / "ckpt"
    dcp.save(
        {
            "model": {
                "encoder.block.0.weight": torch.ones(2, 2),
                "embedding.word_embeddings.weight": torch.ones(2, 2),
            }
        },
        checkpoint_id=str(ckpt),
        no_dist=True,
    )
    from trainer.tiny import build_tiny_model_dir

    (tmp_path / "out").mkdir()
    result = _export(
        str(ckpt),
        "--out",
        str(tmp_path / "out" / "x"),
        "--hf-config",
        str(build_tiny_model_dir(tmp_path / "a")),
    )
    _assert_clean_failure(
        result, 2, "encoder.block.0.weight", "neither", out_parent=tmp_path / "out"
    )


def test_bad_max_shard_size_is_usage(run_dir, tmp_path):
    _assert_clean_failure(
        _export(str(run_dir), "--out", str(tmp_path / "x"), "--max-shard-size", "lots"),
        2,
        "--max-shard-size",
    )


def test_disk_full_exits_1_and_leaves_nothing(run_dir, tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    (tmp_path / "out").mkdir()
    result = _export(str(run_dir), "--out", str(tmp_path / "out" / "x"))
    _assert_clean_failure(
        result, 1, "model.safetensors", "No space left", out_parent=tmp_path / "out"
    )


def test_verify_catches_bytes_flipped_after_save(run_dir, tmp_path):
    """A flipped byte in tensor data reads back as itself: the CRC torch.save wrote for its
    record tells, as the export reads it (before --verify's hash of the files would), and
    the export refuses, leaving nothing behind."""
    copy, dist_ckpt = _copy_run(run_dir, tmp_path)
    victim = max(dist_ckpt.glob("*.distcp"), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    (tmp_path / "out").mkdir()
    result = _export(str(copy), "--out", str(tmp_path / "out" / "x"), "--verify")
    _assert_clean_failure(result, 1, victim.name, "fails its CRC", out_parent=tmp_path / "out")


def _with_config(step: Path, edit: Callable[[dict], str]) -> Path:
    """The step's own huggingface/config.json rewritten by `edit` (its text from the parsed
    config), the manifest agreeing: only the planted config is wrong."""
    from tests.support.ckpt_edits import rehash

    config = step / "huggingface" / "config.json"
    config.write_text(edit(json.loads(config.read_text())))
    rehash(step, "huggingface/config.json")
    return config


DEEP = '{"a":' * 5000 + "1" + "}" * 5000  # past the recursion limit: RecursionError, no ValueError


def test_a_config_json_nested_5000_deep_is_one_line(run_dir, tmp_path):
    """Was a RecursionError traceback, and no --json object: its own config.json exit 1,
    as validate says of it, --hf-config's exit 2."""
    copy, _ = _copy_run(run_dir, tmp_path)
    own = _with_config(
        copy / "global_step_1", lambda c: json.dumps({**c, "x": "@"}).replace('"@"', DEEP)
    )
    (tmp_path / "out").mkdir()
    result = CliRunner().invoke(
        app, ["ckpt", "export-hf", str(copy), "--out", str(tmp_path / "out" / "x"), "--json"]
    )
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout) == {
        "error": f"{own}: not valid JSON (nested too deeply)",
        "exit_code": 1,
    }
    given = tmp_path / "given"
    given.mkdir()
    (given / "config.json").write_text(own.read_text())
    result = _export(str(run_dir), "--out", str(tmp_path / "out" / "x"), "--hf-config", str(given))
    _assert_clean_failure(result, 2, out_parent=tmp_path / "out")
    assert result.output == f"error: {given / 'config.json'}: not valid JSON (nested too deeply)\n"


# what transformers' Qwen2Config says of each (from_pretrained refuses the model with it)
UNLOADABLE = {
    "eps_text": (
        {"rms_norm_eps": "1e-6"},
        "Field 'rms_norm_eps' expected float, got str (value: '1e-6')",
    ),
    "act_list": (
        {"hidden_act": ["silu"]},
        "Field 'hidden_act' expected str, got list (value: ['silu'])",
    ),
    "rope_list": (
        {"rope_parameters": [1, 2]},
        "Field 'rope_parameters' with value [1, 2] doesn't match any type in",
    ),
    "layer_types_short": (
        {"layer_types": ["full_attention"]},
        "`num_hidden_layers` (2) must be equal to the number of `layer_types` (1)",
    ),
    "layer_types_unknown": (
        {"layer_types": ["full_attention", "nope"]},
        "The `layer_types` entries must be in (",
    ),
}


@pytest.mark.parametrize("case", list(UNLOADABLE))
def test_a_config_transformers_refuses_is_refused_by_verify_and_validate_deep(
    run_dir, tmp_path, case
):
    """Every number export reads from these is right, so export wrote them and --verify said
    "verified", validate --deep --strict "valid"; transformers then refused the export."""
    fields, says = UNLOADABLE[case]
    given = tmp_path / "given"
    shutil.copytree(run_dir / "global_step_1" / "huggingface", given)
    config = json.loads((given / "config.json").read_text())
    (given / "config.json").write_text(json.dumps({**config, **fields}))
    (tmp_path / "out").mkdir()
    args = ["--out", str(tmp_path / "out" / "x"), "--hf-config", str(given), "--verify"]
    result = _export(str(run_dir), *args)
    _assert_clean_failure(result, 2, out_parent=tmp_path / "out")
    assert without_phase_lines(result.output).startswith(
        f"error: {given / 'config.json'}: transformers cannot load it ({says}"
    ), result.output
    report = validate_checkpoint(run_dir, deep=True, hf_config=given)
    found = [str(f) for f in report.findings if f.severity == "error"]
    said = without_phase_lines(result.output).rstrip("\n")
    assert found == [said]  # the same line, as an error finding
    assert validate_checkpoint(run_dir, hf_config=given).ok()  # the cheap checks: no transformers


def test_the_checkpoints_own_config_transformers_refuses_exits_1(run_dir, tmp_path):
    copy, _ = _copy_run(run_dir, tmp_path)
    own = _with_config(copy / "global_step_1", lambda c: json.dumps({**c, "rms_norm_eps": "1e-6"}))
    (tmp_path / "out").mkdir()
    result = _export(str(copy), "--out", str(tmp_path / "out" / "x"), "--verify")
    _assert_clean_failure(result, 1, out_parent=tmp_path / "out")
    assert without_phase_lines(result.output) == (
        f"error: {own}: transformers cannot load it"
        " (Field 'rms_norm_eps' expected float, got str (value: '1e-6'))\n"
    )


def test_out_named_as_a_step_the_run_has_not_saved_says_so(run_dir, tmp_path):
    """`--out RUN/global_step_999`: "lies inside the checkpoint RUN/global_step_999" named
    a checkpoint that is not there; the name is the run's, for its saves."""
    for out, where in (
        (run_dir / "global_step_999", "is"),
        (run_dir / "global_step_999" / "hf", f"lies in {run_dir / 'global_step_999'}, which is"),
    ):
        result = _export(str(run_dir), "--out", str(out))
        _assert_clean_failure(result, 2)
        assert result.output == (
            f"error: {out}: {where} the name of a checkpoint step of the run {run_dir} (its saves"
            " write there; none is saved there now); choose an --out outside it (--overwrite"
            " replaces only an empty directory or an earlier export)\n"
        )
    assert not (run_dir / "global_step_999").exists()


def test_overwrite_replaces_an_earlier_adapter_only_export(tmp_path):
    """A PEFT adapter dir (adapter_config.json, adapter_model.safetensors) was "not a model
    export": exporting the adapter again with --overwrite was refused."""
    out = tmp_path / "adapter"
    out.mkdir()
    (out / "adapter_config.json").write_text("{}")
    marked_weights(out, name="adapter_model.safetensors")
    assert replaceable_problem(out) is None
    (out / "notes.txt").write_text("the user's")
    assert replaceable_problem(out) == "holds what no export writes (notes.txt)"


def test_overwrite_replaces_what_an_export_copied_from_its_checkpoints_own_hf_dir(
    run_dir, tmp_path
):
    """An export copies every file of its checkpoint's own HF dir but weights (a README,
    custom code, verl's adapter/): the same export run again with --overwrite was refused
    as "holds what no export writes"."""
    copy, _ = _copy_run(run_dir, tmp_path)
    hf = copy / "global_step_1" / "huggingface"
    (hf / "README.md").write_text("model card")
    (hf / "adapter").mkdir()
    (hf / "adapter" / "adapter_config.json").write_text("{}")
    out = tmp_path / "out"
    assert _export(str(copy), "--out", str(out)).exit_code == 0
    assert (out / "README.md").read_text() == "model card"
    result = _export(str(copy), "--out", str(out), "--overwrite")
    assert result.exit_code == 0, result.output
    (out / "evals.csv").write_text("the user's")  # still never replaced
    _assert_clean_failure(
        _export(str(copy), "--out", str(out), "--overwrite"), 2, "holds what no export writes"
    )
