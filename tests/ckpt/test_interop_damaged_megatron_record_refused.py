"""A Megatron record the checkpoint keeps that cannot be read, or that states a compared value
as no finite number, is a damaged checkpoint: one error line naming the file (and the key),
exit 1, for validate and export-hf alike, whichever config.json the record is held to.

verl's transformer_config.json is looked up as Bridge's run_config.yaml is: a link inside the
checkpoint is followed, and a link out of it, a FIFO or a directory is refused by name (they
were taken for "no record": validate `valid`, export exit 0 with another rope_theta than the
weights trained with). Not JSON, a duplicate key, no JSON object, over the size bound were a
warning (validate exit 0) and a note (export exit 0). A NaN, Infinity, list or string where
the record states rotary_base or the norm epsilon left the comparison with config.json out in
silence, in verl's record and in Megatron-LM's args given --hf-config.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.verl_record import MAX_TRANSFORMER_CONFIG_BYTES
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run, verl_bridge_run

RECORD = "transformer_config.json"


def _record(run: Path) -> Path:
    return next(run.rglob(RECORD))


def _link_out(file: Path, tmp_path: Path) -> str:
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({**json.loads(file.read_text()), "rotary_base": 5000.0}))
    file.unlink()
    file.symlink_to(outside)
    return "resolves outside the checkpoint"


def _fifo(file: Path, _tmp_path: Path) -> str:
    file.unlink()
    os.mkfifo(file)
    return "a FIFO, not a regular file"


def _directory(file: Path, _tmp_path: Path) -> str:
    file.unlink()
    file.mkdir()
    return "a directory, not a regular file"


def _duplicate_key(file: Path, _tmp_path: Path) -> str:
    file.write_text(file.read_text()[:-1] + ', "rotary_base": 5000.0}')
    return "not valid JSON (key 'rotary_base' appears twice)"


def _not_an_object(file: Path, _tmp_path: Path) -> str:
    file.write_text("[1]")
    return "holds a list, not a JSON object"


def _too_big(file: Path, _tmp_path: Path) -> str:
    fields = json.loads(file.read_text())
    file.write_text(json.dumps({**fields, "pad": "x" * MAX_TRANSFORMER_CONFIG_BYTES}))
    return f"more than the {MAX_TRANSFORMER_CONFIG_BYTES} this file may have"


def _field(key: str, value, words: str):
    def damage(file: Path, _tmp_path: Path) -> str:
        file.write_text(json.dumps({**json.loads(file.read_text()), key: value}))
        return words

    return damage


DAMAGE = {
    "link out": _link_out,
    "fifo": _fifo,
    "directory": _directory,
    "duplicate key": _duplicate_key,
    "not an object": _not_an_object,
    "too big": _too_big,
    "nan rotary_base": _field("rotary_base", float("nan"), "rotary_base=nan is not a finite"),
    "inf epsilon": _field("layernorm_epsilon", float("inf"), "layernorm_epsilon=inf is not a"),
    "list rotary_base": _field("rotary_base", [10000.0], "rotary_base=a list is not a finite"),
    "string epsilon": _field("layernorm_epsilon", "1e-6", "layernorm_epsilon='1e-6' is not a"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_verl_record_is_one_error_naming_it(case, tmp_path):
    run = verl_bridge_run(tmp_path, tiny_causal_lm("qwen3"))
    record = _record(run)
    words = DAMAGE[case](record, tmp_path)
    code, stdout, err = run_cli("ckpt", "validate", run)
    (error,) = [line for line in stdout.splitlines() if line.startswith("error:")]
    assert code == 1 and error.startswith(f"error: {record}: ") and words in error, stdout
    assert "warning" not in stdout + err, stdout + err
    out = tmp_path / "hf"
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    assert code == 1 and line.startswith(f"error: {record}: ") and words in line, err
    assert not out.exists()


def test_a_link_to_a_record_inside_the_checkpoint_is_followed(tmp_path):
    """The record it leads to is held to the export: its rotary_base 5000 refuses
    huggingface/config.json's rope_theta 10000."""
    run = verl_bridge_run(tmp_path, tiny_causal_lm("qwen3"), rotary_base=5000.0)
    record = _record(run)
    record.rename(record.with_name("tc_real.json"))
    record.symlink_to("tc_real.json")
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and "rope_theta=10000.0 (record: rotary_base 5000.0)" in stdout, stdout + err
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1 and "rotary_base 5000.0" in one_error_line(err), err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"rotary_base": float("nan")}, "rotary_base=nan is not a finite number"),
        ({"norm_epsilon": "1e-6"}, "norm_epsilon='1e-6' is not a finite number"),
    ],
    ids=["nan rotary_base", "string epsilon"],
)
def test_megatron_args_with_a_damaged_value_are_refused_with_hf_config_too(args, words, tmp_path):
    """Without --hf-config the derivation refused them; with it they were left uncompared."""
    model = tiny_causal_lm("qwen3")
    run = megatron_run(tmp_path, model, megatron_args(model, **args))
    given = tmp_path / "given"
    model.config.save_pretrained(given)
    out = tmp_path / "hf"
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    line = one_error_line(err)
    assert code == 1 and "[args]: " in line and words in line, err
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 1 and words in stdout, stdout + err


def test_only_values_compared_with_config_json_are_held_to_be_numbers():
    """A rotary setting of a record without rotary position embeddings is never compared
    (Megatron-LM records rotary_base whatever the position embedding): not damage."""
    from mfsdp_ckpt.convert.record_values import damaged_values

    rope = {"position_embedding_type": "rope", "rotary_base": 1e4, "norm_epsilon": 1e-6}
    factor = {**rope, "rotary_seq_len_interpolation_factor": float("nan")}
    assert damaged_values(factor, {}) == ["rotary_seq_len_interpolation_factor=nan"]
    llama3 = {**rope, "use_rope_scaling": True, "rope_scaling_factor": [8.0]}
    assert damaged_values(llama3, {}) == ["rope_scaling_factor=a list"]
    assert damaged_values({**llama3, "use_rope_scaling": False}, {}) == []
    learned = {**rope, "position_embedding_type": "learned_absolute", "rotary_base": None}
    assert damaged_values({**learned, "rotary_base": float("nan")}, {}) == []
    renamed = {**rope, "norm_epsilon": "1e-6"}
    assert damaged_values(renamed, {"norm_epsilon": "layernorm_epsilon"}) == [
        "layernorm_epsilon='1e-6'"
    ]
