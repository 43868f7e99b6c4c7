"""manifest.json's own fields: covered by a digest of themselves, and each read strictly in one
place, so that validate fails exactly where export (and inspect) would.

Was: one flipped bit in a LoRA run's manifest (`"lora_alpha": 16` -> 36) changed the merged
export while `validate --deep --strict` said valid; `"use_rslora": "no"` was read as true;
`"r": 0`, -4 or "4" validated as valid while export refused them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.manifest import ManifestError, read_manifest
from tests.support.cli_errors import lines_besides_starting
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

FIXTURE_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # its manifest predates the digest
LORA = {
    "peft_type": "LORA",
    "r": 4,
    "lora_alpha": 16,
    "use_rslora": False,
    "use_dora": False,
    "init_lora_weights": True,
    "target_modules": ["q_proj", "v_proj"],
}
DIGEST_FIELD = "manifest_digest"  # the field on disk
RANDOM_BASE = {"path": None, "random_init": True, "seed": 0, "files": {}}


def _run(tmp_path: Path, lora: dict | None = None) -> tuple[Path, Path]:
    """A copy of the fixture run whose manifest mfsdp writes anew (with its digest), with
    `lora` as its PEFT config when given; (the run, its manifest)."""
    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    path = layout.step_dir(run, 2) / layout.MANIFEST_FILE
    manifest = read_manifest(path)
    if lora is not None:
        manifest.lora, manifest.base_model = lora, RANDOM_BASE
    path.write_text(manifest.to_json())
    return run, path


def _flip_a_bit(path: Path, after: str, mask: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[raw.index(after.encode()) + len(after)] ^= mask
    path.write_bytes(bytes(raw))


def _one_error(*args) -> str:
    """The one error line `mfsdp ckpt ARGS` ends with, exit 1."""
    code, stdout, stderr = run_cli("ckpt", *args)
    lines = lines_besides_starting(stderr)
    assert code == 1 and len(lines) == 1, stdout + stderr
    return lines[0]


def test_a_new_manifest_records_a_digest_of_its_fields(tmp_path):
    run, path = _run(tmp_path)
    assert set(json.loads(path.read_text())[DIGEST_FIELD]) == {"size", "xxh3_128"}
    code, out, err = run_cli("ckpt", "validate", run, "--deep", "--strict")
    assert code == 0, out + err


@pytest.mark.parametrize(
    ("lora", "after", "mask"),
    [
        (None, '"world_size": ', 0x01),  # 2 -> 3: nothing else records it
        (LORA, '"lora_alpha": ', 0x02),  # 16 -> 36: the merge scale, 9/4 of the trained one
    ],
)
@pytest.mark.parametrize("deep", [[], ["--deep"]])
def test_one_flipped_bit_in_a_field_is_an_error_naming_the_manifest(
    tmp_path, lora, after, mask, deep
):
    run, path = _run(tmp_path, lora)
    _flip_a_bit(path, after, mask)
    code, out, err = run_cli("ckpt", "validate", run, *deep)
    assert code == 1, out + err
    assert f"error: {path}: its fields differ from its {DIGEST_FIELD}" in out
    assert f"{path}: its fields differ" in _one_error("inspect", run)
    assert f"{path}: its fields differ" in _one_error("export-hf", run, "--out", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_manifest_written_before_the_digest_validates_as_before(tmp_path):
    run, path = _run(tmp_path)
    data = json.loads(path.read_text())
    data.pop(DIGEST_FIELD, None)
    path.write_text(json.dumps(data, indent=2))
    code, out, err = run_cli("ckpt", "validate", run, "--deep", "--strict")
    assert code == 0, out + err


def test_a_damaged_digest_field_is_named(tmp_path):
    _run_dir, path = _run(tmp_path)
    data = json.loads(path.read_text())
    data[DIGEST_FIELD] = {"size": 1, "xxh3_128": "0" * 12}
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=f"field '{DIGEST_FIELD}' field 'xxh3_128' is not 32"):
        read_manifest(path)


BAD_LORA = {
    "use_rslora 'no'": ({"use_rslora": "no"}, "'use_rslora' is 'no', not true or false"),
    "use_rslora 1": ({"use_rslora": 1}, "'use_rslora' is 1, not true or false"),
    "r 0": ({"r": 0}, "'r' is 0, not a positive integer"),
    "r -4": ({"r": -4}, "'r' is -4, not a positive integer"),
    "r '4'": ({"r": "4"}, "'r' is '4', not a positive integer"),
    "r true": ({"r": True}, "'r' is True, not a positive integer"),
    "alpha '16'": ({"lora_alpha": "16"}, "'lora_alpha' is '16', not a positive number"),
    "alpha 0": ({"lora_alpha": 0}, "'lora_alpha' is 0, not a positive number"),
    "use_dora 'no'": ({"use_dora": "no"}, "'use_dora' is 'no', not true or false"),
    "dora": ({"use_dora": True}, "'use_dora' is True: not plain LoRA"),
    "rank_pattern": ({"rank_pattern": {"q_proj": 8}}, "'rank_pattern' is {'q_proj': 8}"),
    "targets 7": ({"target_modules": 7}, "'target_modules' is 7, not a module name or a list"),
    "peft_type": ({"peft_type": "IA3"}, "not a PEFT LoRA config"),
}


@pytest.mark.parametrize("case", list(BAD_LORA))
def test_every_lora_field_is_read_strictly_and_alike_by_validate_inspect_and_export(tmp_path, case):
    """Each written through mfsdp's own writer (its digest agrees): only the type is wrong."""
    edit, words = BAD_LORA[case]
    run, path = _run(tmp_path, {**LORA, **edit})
    found = [f for f in validate_checkpoint(run).findings if f.severity == "error"]
    assert [f.where for f in found] == [str(path)], found
    assert found[0].message.startswith("field 'lora': ") and words in found[0].message
    for line in (
        _one_error("inspect", run),
        _one_error("export-hf", run, "--out", tmp_path / "hf"),
    ):
        assert f"{path}: field 'lora': " in line and words in line, line


def test_base_model_fields_are_read_strictly_by_every_reader(tmp_path):
    run, path = _run(tmp_path, LORA)
    manifest = read_manifest(path)
    manifest.base_model = {**RANDOM_BASE, "random_init": "yes"}
    path.write_text(manifest.to_json())
    found = [f for f in validate_checkpoint(run).findings if f.severity == "error"]
    assert [(f.where, f.message) for f in found] == [
        (str(path), "field 'base_model': 'random_init' is not true or false")
    ]


def test_a_bool_is_no_number_in_any_field(tmp_path):
    _run_dir, path = _run(tmp_path)
    data = json.loads(path.read_text())
    data["save_seconds"] = True
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="field 'save_seconds' is not int or float"):
        read_manifest(path)
