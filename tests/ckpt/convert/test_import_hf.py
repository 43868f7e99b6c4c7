"""`mfsdp ckpt import-hf`: Hugging Face safetensors -> DCP (mcore or our layout).

The strongest check: the fixtures under tests/fixtures/mcore are checkpoints Megatron-core
itself wrote; export one, import the export with --layout mcore, and the result must hold
the same keys, shapes and bytes. Round trips import -> export-hf are bit-exact for every
family, tied and untied, both layouts; `dcp.load` reads the result into plain tensors.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.cli_errors import one_error
from tests.support.hf_model_files import (
    assert_same_tensors,
    hidden_leftovers,
    safetensors_tensors,
    saved_hf_model,
    tensor_bits,
)
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES

MCORE_FIXTURES = FIXTURES / "mcore"
FAMILIES = ("qwen2", "qwen3", "llama")


@pytest.mark.parametrize("family", FAMILIES)
def test_import_of_export_equals_what_megatron_wrote(family, tmp_path):
    fixture = MCORE_FIXTURES / family
    export_hf(fixture / "dist_ckpt", tmp_path / "hf", hf_config=fixture / "config.json")
    result = import_hf(tmp_path / "hf", tmp_path / "mcore", layout_name="mcore")
    original, imported = (
        CheckpointReader(fixture / "dist_ckpt"),
        CheckpointReader(tmp_path / "mcore"),
    )
    assert sorted(imported.tensors) == sorted(original.tensors)
    assert_same_tensors(
        {k: original.read_tensor(k) for k in original.tensors},
        {k: imported.read_tensor(k) for k in imported.tensors},
    )
    assert sorted(imported.objects) == ["args", "checkpoint_version", "iteration"]
    assert [imported.read_object(k) for k in ("args", "checkpoint_version", "iteration")] == [
        None,
        3.0,
        0,
    ]
    assert result.tensors == len(original.tensors) and result.layout == "mcore"
    assert validate_checkpoint(tmp_path / "mcore", deep=True).ok()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_round_trip_is_bit_exact(family, tied, layout_name, tmp_path):
    source = saved_hf_model(tmp_path, family, tied)
    import_hf(source, tmp_path / "ckpt", layout_name=layout_name)
    hf_config = {"hf_config": source} if layout_name == "mcore" else {}
    export_hf(tmp_path / "ckpt", tmp_path / "back", **hf_config)
    assert_same_tensors(safetensors_tensors(source), safetensors_tensors(tmp_path / "back"))


def test_sharded_input_and_te_norm_names(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=False, shard=True)
    assert (source / "model.safetensors.index.json").is_file()
    import_hf(source, tmp_path / "te", layout_name="mcore", norms="te")
    names = CheckpointReader(tmp_path / "te").tensors
    assert "model.module.decoder.layers.1.self_attention.linear_qkv.layer_norm_weight" in names
    assert "model.module.decoder.layers.1.mlp.linear_fc1.layer_norm_weight" in names
    assert not any("input_layernorm" in n or "pre_mlp_layernorm" in n for n in names)
    export_hf(tmp_path / "te", tmp_path / "back", hf_config=source)
    assert_same_tensors(safetensors_tensors(source), safetensors_tensors(tmp_path / "back"))


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_dcp_load_reads_the_result_into_plain_tensors(layout_name, tmp_path):
    import torch.distributed.checkpoint as dcp

    source = saved_hf_model(tmp_path, "qwen3", tied=True)
    result = import_hf(source, tmp_path / "ckpt", layout_name=layout_name)
    reader = CheckpointReader(result.checkpoint)
    state = {
        "model": {
            k[len("model.") :]: torch.zeros(e.shape, dtype=e.dtype.torch)
            for k, e in reader.tensors.items()
        }
    }
    dcp.load(state, checkpoint_id=result.checkpoint)
    hf = safetensors_tensors(source)
    loaded = state["model"]
    if layout_name == "hf":  # names kept; the tied lm_head is written from the embedding
        assert torch.equal(loaded["lm_head.weight"], hf["model.embed_tokens.weight"])
        assert all(torch.equal(loaded[name], hf[name]) for name in hf)
    else:
        assert torch.equal(
            loaded["module.embedding.word_embeddings.weight"], hf["model.embed_tokens.weight"]
        )
        assert "module.output_layer.weight" not in loaded  # tied: Megatron shares the embedding
        assert torch.equal(
            loaded["module.decoder.layers.1.mlp.linear_fc1.weight_v"],
            hf["model.layers.1.mlp.up_proj.weight"],
        )


def test_our_layout_validates_deep_and_strict_and_inspects(tmp_path):
    source = saved_hf_model(tmp_path, "llama", tied=True)
    (source / "tokenizer_config.json").write_text("{}")
    import_hf(source, tmp_path / "run", layout_name="hf")
    assert (tmp_path / "run" / "latest_checkpointed_iteration.txt").read_text().strip() == "0"
    step = tmp_path / "run" / "global_step_0"
    assert sorted(p.name for p in (step / "huggingface").iterdir()) == [
        "config.json",
        "generation_config.json",
        "tokenizer_config.json",
    ]
    manifest = json.loads((step / "manifest.json").read_text())
    assert (
        manifest["contents"] == ["model"]
        and manifest["strategy"] == "import"
        and manifest["step"] == 0
    )
    report = validate_checkpoint(tmp_path / "run", deep=True)
    assert report.ok(strict=True), [str(f) for f in report.findings]
    (step / "dist_ckpt" / "__0_0.distcp").open("r+b").write(b"\x00" * 64)  # the hashes are real
    assert not validate_checkpoint(tmp_path / "run", deep=True).ok()
    inspected = CliRunner().invoke(app, ["ckpt", "inspect", str(tmp_path / "run")])
    assert inspected.exit_code == 0, inspected.output


def test_dtype_cast(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    import_hf(source, tmp_path / "ckpt", layout_name="hf", dtype="fp32")
    reader = CheckpointReader(tmp_path / "ckpt" / "global_step_0" / "dist_ckpt")
    weight = reader.read_tensor("model.model.layers.0.mlp.up_proj.weight")
    assert weight.dtype == torch.float32
    stored = safetensors_tensors(source)["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(weight, stored.float())


def _cli(*args: str):
    return CliRunner().invoke(app, ["ckpt", "import-hf", *args])


def test_cli_ok_json_and_existing_output(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    out = tmp_path / "out"
    first = _cli(str(source), "--out", str(out), "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.output[first.output.index("{") :])["model_type"] == "qwen2"
    (out / "marker").write_text("")  # now not only what an import writes: not replaced
    kept_import = _cli(str(source), "--out", str(out), "--overwrite")
    assert kept_import.exit_code == 2 and "--overwrite replaces only" in kept_import.output
    (out / "marker").unlink()  # an earlier import of the same layout is replaced
    again = _cli(str(source), "--out", str(out), "--overwrite")
    assert again.exit_code == 0, again.output
    assert CheckpointReader(out).tensors
    plain = tmp_path / "plain"
    (plain / "notes").mkdir(parents=True)
    assert _cli(str(source), "--out", str(plain)).exit_code == 2  # exists
    kept = _cli(str(source), "--out", str(plain), "--overwrite")  # not ours to replace
    assert kept.exit_code == 2 and "--overwrite replaces only" in kept.output, kept.output
    assert (plain / "notes").is_dir()
    (plain / "notes").rmdir()  # an empty directory is replaced
    replaced = _cli(str(source), "--out", str(plain), "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert (plain / ".metadata").is_file()


@pytest.mark.parametrize(
    "damage, code, message",
    [
        ("truncate", 1, "truncated?"),
        ("index_escape", 1, "is not a plain file name"),
        ("shape", 1, "but config.json says"),
        ("no_config", 2, "no config.json"),
        ("family", 2, "'gpt2' is not one import-hf reads"),
        ("missing", 2, "no such file or directory"),
        # transformers' Qwen2Config refuses it: the import would not load (was: imported)
        (
            "eps_text",
            1,
            "config.json: transformers cannot load it"
            " (Field 'rms_norm_eps' expected float, got str (value: '1e-6'))",
        ),
    ],
)
def test_cli_errors_are_one_line_and_leave_nothing(tmp_path, damage, code, message):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    weights = source / "model.safetensors"
    config = json.loads((source / "config.json").read_text())
    if damage == "truncate":
        os.truncate(weights, weights.stat().st_size - 10)
    elif damage == "index_escape":  # an index beside model.safetensors is ignored
        weights.rename(tmp_path / "model.safetensors")
        (source / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"x": "../model.safetensors"}})
        )
    elif damage == "shape":
        (source / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    elif damage == "no_config":
        (source / "config.json").unlink()
    elif damage == "family":
        (source / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    elif damage == "missing":
        shutil.rmtree(source)
    elif damage == "eps_text":
        (source / "config.json").write_text(json.dumps({**config, "rms_norm_eps": "1e-6"}))
    out = tmp_path / "out"
    result = _cli(str(source), "--out", str(out))
    assert result.exit_code == code, result.output
    one_error(result.output, message)  # after the config check's phase line, if it came
    assert not out.exists() and hidden_leftovers(tmp_path) == []


def test_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    from mfsdp_ckpt.storage import dcp_stream_writer

    source = saved_hf_model(tmp_path, "qwen3", tied=False)
    calls = {"count": 0}
    original = dcp_stream_writer.StreamingDcpWriter.add_raw

    def fail_on_third(self, *args):
        calls["count"] += 1
        if calls["count"] == 3:
            raise OSError(28, "No space left on device")
        original(self, *args)

    monkeypatch.setattr(dcp_stream_writer.StreamingDcpWriter, "add_raw", fail_on_third)
    with pytest.raises(OSError):
        import_hf(source, tmp_path / "out", layout_name="hf")
    assert not (tmp_path / "out").exists() and hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("heads, kv_heads, head_dim", [(4, 2, 16), (6, 2, 8), (8, 8, 4), (4, 1, 8)])
@pytest.mark.parametrize("bias", [False, True])
def test_qkv_merge_as_tensors_and_as_byte_ranges_inverts_the_split(heads, kv_heads, head_dim, bias):
    from mfsdp_ckpt.convert.fused_tensors import Geometry, merge_qkv, qkv_merge_ranges, split_qkv

    geometry = Geometry(heads, kv_heads, head_dim, False)
    rows = (heads + 2 * kv_heads) * head_dim
    fused = torch.randn(rows) if bias else torch.randn(rows, 24)
    q, k, v = split_qkv(fused, geometry)
    assert torch.equal(merge_qkv(q, k, v, geometry), fused)
    sources = [tensor_bits(t).numpy().tobytes() for t in (q, k, v)]
    ranges = qkv_merge_ranges([len(s) for s in sources], geometry)
    copied = b"".join(sources[index][offset : offset + length] for index, offset, length in ranges)
    assert copied == tensor_bits(fused).numpy().tobytes()


def test_tensors_too_large_for_a_plain_zip_go_through_torch_save(tmp_path, monkeypatch):
    """A blob of 4 GiB or more needs ZIP64, which torch.save writes; shrink the limit so
    every tensor takes that path, and the result must read back the same everywhere."""
    from mfsdp_ckpt.storage import dcp_stream_writer

    monkeypatch.setattr(dcp_stream_writer, "MAX_BLOB_BYTES", 2048)
    source = saved_hf_model(tmp_path, "qwen2", tied=False)
    result = import_hf(source, tmp_path / "run", layout_name="hf")
    assert validate_checkpoint(tmp_path / "run", deep=True).ok(strict=True)
    reader = CheckpointReader(result.checkpoint)
    hf = safetensors_tensors(source)
    assert all(torch.equal(reader.read_tensor(f"model.{name}"), hf[name]) for name in hf)
    export_hf(tmp_path / "run", tmp_path / "back")
    assert_same_tensors(hf, safetensors_tensors(tmp_path / "back"))


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_several_data_files_each_hashed(tmp_path, monkeypatch, layout_name):
    """One data file per writer thread, each written (and hashed) by its own thread."""
    from mfsdp_ckpt.storage import dcp_stream_writer

    monkeypatch.setattr(dcp_stream_writer, "WRITE_THREADS", 5)
    source = saved_hf_model(tmp_path, "llama", tied=False)
    result = import_hf(source, tmp_path / "ckpt", layout_name=layout_name)
    files = sorted(p.name for p in Path(result.checkpoint).glob("*.distcp"))
    assert files == [f"__0_{index}.distcp" for index in range(5)]
    if layout_name == "hf":
        manifest = json.loads((tmp_path / "ckpt" / "global_step_0" / "manifest.json").read_text())
        assert {f"dist_ckpt/{name}" for name in files} <= set(manifest["files"])
        assert validate_checkpoint(tmp_path / "ckpt", deep=True).ok(strict=True)
    hf_config = {"hf_config": source} if layout_name == "mcore" else {}
    export_hf(tmp_path / "ckpt", tmp_path / "back", **hf_config)
    assert_same_tensors(safetensors_tensors(source), safetensors_tensors(tmp_path / "back"))


def test_a_training_checkpoint_given_to_import_hf_points_to_export_hf(tmp_path):
    """Was only "no config.json; not a Hugging Face model dir"."""
    run = FIXTURES / "megatron_fsdp_qwen2" / "run"
    code, _out, err = run_cli("ckpt", "import-hf", run, "--out", tmp_path / "o")
    line = one_error_line(err)
    assert code == 2 and f"the training checkpoint {run}" in line, err
    assert f"mfsdp ckpt export-hf {run} --out DIR" in line
