"""Two weights whose storage entries name the same bytes: only a tied output layer stored
once as its embedding's alias (import-hf's) is honest; torch's DCP never writes two keys
to one blob. Any other alias is refused as the metadata is read, by validate and export
alike, with one line naming both tensors, with or without a manifest.

Was: layers 1..511 naming layer 0's blobs validated as 2 GB of weights from 5 MB and
exported 2.15 GB, exit 0; layer 1 naming layer 0's bytes passed validate --deep and
exported two identical layers.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from tests.support.ckpt_edits import edit_metadata
from tests.support.hf_model_files import saved_hf_model

REFUSED = "but only a tied output layer may name its embedding's bytes"


def _alias_layer_1(metadata) -> None:
    """Every layer-1 storage entry names the blob of its layer-0 twin (same file, offset,
    length): an exact alias, same dtype, shape and chunks."""
    storage = metadata.storage_data
    for index in [i for i in storage if ".layers.1." in i.fqn]:
        twin = next(
            j
            for j in storage
            if j.fqn == index.fqn.replace(".layers.1.", ".layers.0.") and j.offset == index.offset
        )
        storage[index] = storage[twin]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return saved_hf_model(tmp_path_factory.mktemp("aliased"), "qwen2", tied=True)


def _one_line(output: str, *needles: str) -> None:
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(n in errors[0] for n in needles), output
    assert "Traceback" not in output


def test_another_weight_naming_a_layers_bytes_is_refused(source, tmp_path):
    """An mfsdp run (manifest and all): validate and export-hf name both layers."""
    run = tmp_path / "run"
    import_hf(source, run, layout_name="hf")
    assert validate_checkpoint(run).ok(strict=True)  # the tied head's own alias is fine
    edit_metadata(run / "global_step_0", _alias_layer_1)
    names = ("[model.model.layers.1.", "of [model.model.layers.0.", REFUSED)
    errors = [str(f) for f in validate_checkpoint(run, deep=True).findings]
    assert any(all(n in e for n in names) for e in errors), errors
    validated = CliRunner().invoke(app, ["ckpt", "validate", str(run)])
    assert validated.exit_code == 1
    _one_line(validated.output, *names)
    exported = CliRunner().invoke(
        app, ["ckpt", "export-hf", str(run), "--out", str(tmp_path / "x")]
    )
    assert exported.exit_code == 1
    _one_line(exported.output, *names)
    assert not (tmp_path / "x").exists()


def test_aliased_layers_in_a_bare_dcp_are_refused(source, tmp_path):
    """No manifest (export then skips validate): export-hf still refuses."""
    dist = tmp_path / "mcore"
    import_hf(source, dist, layout_name="mcore")
    metadata = load_metadata(dist / ".metadata")
    _alias_layer_1(metadata)
    (dist / ".metadata").write_bytes(pickle.dumps(metadata))
    names = ("[model.module.decoder.layers.1.", "of [model.module.decoder.layers.0.", REFUSED)
    exported = CliRunner().invoke(
        app,
        ["ckpt", "export-hf", str(dist), "--hf-config", str(source), "--out", str(tmp_path / "x")],
    )
    assert exported.exit_code == 1
    _one_line(exported.output, *names)
    assert not (tmp_path / "x").exists()
    inspected = CliRunner().invoke(app, ["ckpt", "inspect", str(dist)])
    assert inspected.exit_code == 1
    _one_line(inspected.output, *names)


def test_a_second_head_on_the_embeddings_bytes_is_refused(source, tmp_path):
    """The tied head's alias is honest once: another head-named key on the same bytes
    (an export would write the embedding twice) is refused."""
    run = tmp_path / "run"
    import_hf(source, run, layout_name="hf")

    def second_head(metadata) -> None:
        head = "model.lm_head.weight"
        metadata.state_dict_metadata["model.model.lm_head.weight"] = metadata.state_dict_metadata[
            head
        ]
        for index in [i for i in metadata.storage_data if i.fqn == head]:
            copy = type(index)("model.model.lm_head.weight", index.offset, index.index)
            metadata.storage_data[copy] = metadata.storage_data[index]

    edit_metadata(run / "global_step_0", second_head)
    errors = [str(f) for f in validate_checkpoint(run).findings if f.severity == "error"]
    assert any("[model.model.lm_head.weight] names the" in e and REFUSED in e for e in errors), (
        errors
    )
