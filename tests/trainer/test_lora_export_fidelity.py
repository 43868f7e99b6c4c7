"""What a LoRA run's exports hold is the model that trained: the base weights training
loaded (not a stray safetensors file beside them), under a config.json that agrees with the
checkpoint's own, with adapters exactly on the trained modules (a target_modules regex that
picked some layers), and never from an adapter whose init rewrote the base in place."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.file_hash import hash_file
from mfsdp_ckpt.format.manifest import read_manifest
from tests.support.ckpt_edits import resealed
from tests.support.export import fixed_inputs, logits_of
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

TARGETS = r".*layers\.0\.self_attn\.(q|o)_proj"  # layer 0 of 2 only
TRAINED = ["model.layers.0.self_attn.o_proj", "model.layers.0.self_attn.q_proj"]
STRAY = "model_old.safetensors"


def _settings(base: Path) -> tuple[str, ...]:
    return (
        f"model.path={base}",
        "model.lora_rank=4",
        "model.lora_alpha=8",
        f"model.target_modules={TARGETS}",
        "data.global_batch_size=4",
        "optim.lr=1e-2",
    )


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    """One LoRA step on layer 0's q_proj and o_proj, its base dir holding beside
    model.safetensors a stray model_old.safetensors: other weights under the same names,
    which transformers (and so training) does not load."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_fidelity")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    other = build_tiny_model_dir(root / "other", seed=1, with_weights=True)
    shutil.copy(other / "model.safetensors", base / STRAY)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    run_sft(tiny_config(data, root / "run", *_settings(base), "trainer.total_steps=1"))
    return root


def _edited(lora_run: Path, copy: Path, edit: Callable[[dict], object]) -> Path:
    """A copy of the run at `copy` whose manifest (its JSON) `edit` changed in place."""
    run = shutil.copytree(lora_run / "run", copy)
    manifest = resolve_checkpoint(run).manifest
    recorded = json.loads(manifest.read_text())
    edit(recorded)
    manifest.write_text(json.dumps(resealed(recorded)))
    return run


def _export(*args) -> tuple[int, str, str]:
    return run_cli("ckpt", "export-hf", *args)


# --------------------------------------------------------------------------- base files
def test_a_stray_safetensors_beside_the_base_is_neither_recorded_nor_merged(lora_run, tmp_path):
    base = lora_run / "base"
    manifest = read_manifest(resolve_checkpoint(lora_run / "run").manifest)
    assert sorted(manifest.base_model["files"]) == ["model.safetensors"]
    export_hf(lora_run / "run", tmp_path / "merged", verify=True)
    merged = load_file(tmp_path / "merged" / "model.safetensors")
    loaded = load_file(base / "model.safetensors")  # what training started from
    assert torch.equal(merged["model.embed_tokens.weight"], loaded["model.embed_tokens.weight"])
    assert sorted(merged) == sorted(loaded)


def _every_weight_file(lora_run: Path) -> Callable[[dict], object]:
    """An edit giving the manifest the base record mfsdp wrote before it picked the model's
    files: every weight file in the base dir, the stray one too."""
    stray = hash_file(lora_run / "base" / STRAY).to_json()
    return lambda recorded: recorded["base_model"]["files"].update({STRAY: stray})


def test_an_older_record_of_every_weight_file_still_verifies_and_resumes(lora_run, tmp_path):
    base, data = lora_run / "base", lora_run / "train.jsonl"
    run = _edited(lora_run, tmp_path / "run", _every_weight_file(lora_run))
    assert validate_checkpoint(run, deep=True).ok(strict=True)
    export_hf(run, tmp_path / "merged")  # read every recorded file: the stray one's tensors won
    merged = load_file(tmp_path / "merged" / "model.safetensors")
    loaded = load_file(base / "model.safetensors")
    assert torch.equal(merged["model.embed_tokens.weight"], loaded["model.embed_tokens.weight"])
    resumed = run_sft(tiny_config(data, run, *_settings(base), "trainer.total_steps=2"))
    assert resumed.resumed_from == 1 and resumed.final_step == 2

    changed = shutil.copytree(base, tmp_path / "changed_base")  # the stray file recorded: checked
    (changed / STRAY).write_bytes(bytes(reversed((changed / STRAY).read_bytes())))
    again = _edited(lora_run, tmp_path / "again", _every_weight_file(lora_run))
    with pytest.raises(ResumeMismatchError, match=STRAY):
        run_sft(tiny_config(data, again, *_settings(changed), "trainer.total_steps=2"))


def test_a_base_dir_transformers_cannot_pick_weights_from_is_named(lora_run, tmp_path):
    """Two *.safetensors and neither model.safetensors nor an index: no model to check."""
    base = tmp_path / "base"
    base.mkdir()
    for name in ("a.safetensors", "b.safetensors"):
        shutil.copy(lora_run / "base" / "model.safetensors", base / name)
    run = _edited(lora_run, tmp_path / "run", lambda m: m["base_model"].update(path=str(base)))
    errors = [f for f in validate_checkpoint(run).findings if f.severity == "error"]
    assert [(f.where, f.message) for f in errors] == [
        (str(base), "several .safetensors files and no index (expected model.safetensors or"
         " model.safetensors.index.json)")
    ]  # fmt: skip


# --------------------------------------------------------------------------- --hf-config
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False (own: True)"),
        ({"num_attention_heads": 8, "num_key_value_heads": 4}, "num_attention_heads=8 (own: 4)"),
    ],
    ids=["untied-head", "other-head-split"],
)
def test_an_hf_config_the_checkpoints_own_contradicts_is_refused(lora_run, tmp_path, change, says):
    """Same shapes, another model: an untied head over a tied base wrote no lm_head (a
    random head on load), another head split gave logits off by 2; both exited 0."""
    given = tmp_path / "config_dir"
    given.mkdir()
    config = json.loads((lora_run / "base" / "config.json").read_text())
    (given / "config.json").write_text(json.dumps({**config, **change}))
    code, _, err = _export(lora_run / "run", "--out", tmp_path / "x", "--hf-config", given)
    line = one_error_line(err)
    assert code == 2 and line.startswith(f"error: --hf-config {given / 'config.json'}: "), err
    assert says in line and not (tmp_path / "x").exists()


def test_an_hf_config_of_another_dir_says_the_weights_are_the_recorded_bases(lora_run, tmp_path):
    other = lora_run / "other"  # the same config, other weights
    code, stdout, err = _export(lora_run / "run", "--out", tmp_path / "o", "--hf-config", other)
    assert code == 0, stdout + err
    assert f"--hf-config {other}: its config and tokenizer files only" in err
    assert str((lora_run / "base").resolve()) in err
    code, stdout, err = _export(lora_run / "run", "--out", tmp_path / "own")
    assert code == 0 and "config and tokenizer files only" not in err, stdout + err
    merged, own = (load_file(tmp_path / d / "model.safetensors") for d in ("o", "own"))
    assert all(torch.equal(merged[name], own[name]) for name in own)


# --------------------------------------------------------------------------- target_modules
def _adapted(model: torch.nn.Module) -> list[str]:
    from peft.tuners.lora import LoraLayer

    return sorted(name for name, m in model.named_modules() if isinstance(m, LoraLayer))


def test_the_adapter_export_targets_exactly_the_trained_modules(lora_run, tmp_path):
    """By own name (q_proj, o_proj) peft added untrained adapters to every layer, and
    `model.lora_adapter_path` refused the export: it "does not fit this model"."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.model import build_hf_config, build_model, load_tokenizer

    manifest = read_manifest(resolve_checkpoint(lora_run / "run").manifest)
    assert manifest.lora["target_modules"] == TRAINED
    short = ["o_proj", "q_proj"]  # what such a run recorded
    older = _edited(lora_run, tmp_path / "run", lambda m: m["lora"].update(target_modules=short))
    for run, name in ((lora_run / "run", "adapter"), (older, "older")):
        export_hf(run, tmp_path / name, adapter_only=True)
        config = json.loads((tmp_path / name / "adapter_config.json").read_text())
        assert config["target_modules"] == TRAINED, name

    base = AutoModelForCausalLM.from_pretrained(lora_run / "base", dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    assert _adapted(peft_model.base_model.model) == TRAINED
    export_hf(lora_run / "run", tmp_path / "merged")
    inputs = fixed_inputs(base.config.vocab_size)
    with torch.no_grad():
        peft_logits = peft_model(input_ids=inputs).logits
    merged = logits_of(tmp_path / "merged", inputs, torch.float32)
    torch.testing.assert_close(merged, peft_logits, rtol=0, atol=1e-5)

    cfg = ModelConfig(path=str(lora_run / "base"), lora_adapter_path=str(tmp_path / "adapter"))
    model = build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), seed=0)
    assert _adapted(model) == TRAINED


# --------------------------------------------------------------------------- init_lora_weights
@pytest.fixture(scope="module")
def peft_adapter(lora_run) -> Path:
    """A PEFT adapter on q_proj, saved by peft itself."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(lora_run / "base", dtype=torch.float32)
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(lora_run / "peft_adapter")
    return lora_run / "peft_adapter"


def _with_init(adapter: Path, tmp_path: Path, init) -> Path:
    copy = shutil.copytree(adapter, tmp_path / "adapter")
    config = json.loads((copy / "adapter_config.json").read_text())
    (copy / "adapter_config.json").write_text(json.dumps({**config, "init_lora_weights": init}))
    return copy


@pytest.mark.parametrize("init", ["pissa", "olora", "eva", "orthogonal"])
def test_an_adapter_whose_init_rewrites_the_base_is_refused_before_peft_runs(
    lora_run, peft_adapter, tmp_path, init
):
    """PiSSA and OLoRA subtract their initial B @ A from the frozen base as peft injects them:
    the merged export added the trained adapter to the base on disk (logits off by 0.4)
    and GRPO's reference (adapters off) was PiSSA's residual, not the base."""
    from transformers import AutoModelForCausalLM

    from trainer.lora import apply_lora

    adapter = _with_init(peft_adapter, tmp_path, init)
    model = AutoModelForCausalLM.from_pretrained(lora_run / "base", dtype=torch.float32)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    cfg = ModelConfig(path=str(lora_run / "base"), lora_adapter_path=str(adapter))
    with pytest.raises(ConfigError) as refused:
        apply_lora(model, cfg, seed=0)
    assert str(refused.value).startswith(
        f"model.lora_adapter_path ({adapter}): init_lora_weights={init!r} is not plain LoRA's"
    )
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


@pytest.mark.parametrize("init", [True, False, "gaussian"])
def test_plain_lora_inits_are_accepted(lora_run, peft_adapter, tmp_path, init):
    from transformers import AutoModelForCausalLM

    from trainer.lora import apply_lora

    adapter = _with_init(peft_adapter, tmp_path, init)
    model = AutoModelForCausalLM.from_pretrained(lora_run / "base", dtype=torch.float32)
    apply_lora(model, ModelConfig(path=str(lora_run / "base"), lora_adapter_path=str(adapter)), 0)
    assert _adapted(model) == [f"model.layers.{i}.self_attn.q_proj" for i in range(2)]


def test_a_run_trained_from_such_an_adapter_exports_its_adapter_only(lora_run, tmp_path):
    """A run from before training refused them trained on the rewritten base: merged onto
    the base on disk it is another model; its PEFT adapter makes peft redo the rewrite."""
    run = _edited(lora_run, tmp_path / "run", lambda m: m["lora"].update(init_lora_weights="pissa"))
    code, _, err = _export(run, "--out", tmp_path / "merged")
    line = one_error_line(err)
    assert code == 1 and "init_lora_weights 'pissa' rewrote the base weights" in line, err
    assert "--adapter-only" in line and not (tmp_path / "merged").exists()
    code, stdout, err = _export(run, "--out", tmp_path / "adapter", "--adapter-only")
    assert code == 0, stdout + err


def _cache_snapshot(model_dir: Path, cache: Path) -> Path:
    """`model_dir` laid out as the Hugging Face cache keeps a download: its files in
    models--org--tiny/blobs/, linked from snapshots/rev/."""
    snapshot = cache / "models--org--tiny" / "snapshots" / "rev"
    blobs = cache / "models--org--tiny" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for file in model_dir.iterdir():
        shutil.copy(file, blobs / file.name)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", file.name))
    return snapshot


def test_a_base_in_the_hugging_face_cache_trains_saves_and_exports(lora_run, tmp_path):
    """Its weights are links into the cache's blobs/: the base's digest read them only
    inside the snapshot dir, and the first save failed ("resolves outside the checkpoint")
    after the step had trained."""
    from trainer.tiny import build_tiny_model_dir

    base = build_tiny_model_dir(tmp_path / "base", seed=0, with_weights=True)
    snapshot = _cache_snapshot(base, tmp_path / "cache")
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    run_sft(tiny_config(data, tmp_path / "run", *_settings(snapshot), "trainer.total_steps=1"))
    assert validate_checkpoint(tmp_path / "run", deep=True).ok()
    code, stdout, err = _export(tmp_path / "run", "--out", tmp_path / "hf", "--verify")
    assert code == 0, stdout + err


def test_a_base_whose_weights_link_out_of_its_folder_trains_saves_and_exports(lora_run, tmp_path):
    """A `--local-dir` download of older huggingface_hub links its weights into the cache,
    outside the model dir; training loads them there, so the base's digest must read them
    there too: the first save failed ("resolves outside the model's folder") after the
    step had trained."""
    from trainer.tiny import build_tiny_model_dir

    base = build_tiny_model_dir(tmp_path / "base", seed=0, with_weights=True)
    outside = tmp_path / "blobs" / "model.safetensors"
    outside.parent.mkdir()
    shutil.move(base / "model.safetensors", outside)
    (base / "model.safetensors").symlink_to(outside)
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    run_sft(tiny_config(data, tmp_path / "run", *_settings(base), "trainer.total_steps=1"))
    assert validate_checkpoint(tmp_path / "run", deep=True).ok()
    code, stdout, err = _export(tmp_path / "run", "--out", tmp_path / "hf", "--verify")
    assert code == 0, stdout + err
    exported = load_file(tmp_path / "hf" / "model.safetensors")["model.embed_tokens.weight"]
    linked = load_file(outside)["model.embed_tokens.weight"]
    assert torch.equal(exported, linked.to(exported.dtype))  # merged from the linked base


def test_a_base_moved_since_training_is_merged_from_where_hf_config_says(lora_run, tmp_path):
    """A checkpoint copied to another machine finds its base there under another path: the
    merge stopped at "base model dir ... is not present here" with no way to say where it
    is. --hf-config names it now; it must hold the recorded weights byte for byte."""
    from trainer.tiny import build_tiny_model_dir

    base = build_tiny_model_dir(tmp_path / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    run_sft(tiny_config(data, tmp_path / "run", *_settings(base), "trainer.total_steps=1"))
    moved = shutil.move(base, tmp_path / "moved")
    code, _out, err = _export(tmp_path / "run", "--out", tmp_path / "nowhere")
    assert code == 1 and "(--hf-config DIR names where it is now)" in one_error_line(err), err
    code, _out, err = _export(tmp_path / "run", "--out", tmp_path / "hf", "--hf-config", moved)
    assert code == 0, err
    assert f"merged onto --hf-config {moved}, which holds its weight files byte for byte" in err
    exported = load_file(tmp_path / "hf" / "model.safetensors")["model.embed_tokens.weight"]
    trained_on = load_file(Path(moved) / "model.safetensors")["model.embed_tokens.weight"]
    assert torch.equal(exported, trained_on.to(exported.dtype))
    other = build_tiny_model_dir(tmp_path / "other", seed=1, with_weights=True)
    code, _out, err = _export(tmp_path / "run", "--out", tmp_path / "wrong", "--hf-config", other)
    line = one_error_line(err)
    assert code == 1 and "differs from the base the adapter was trained on" in line, err
    assert not (tmp_path / "wrong").exists()


def test_a_lora_checkpoint_given_as_model_path_names_its_ways_on(lora_run):
    """It failed after the model had loaded, advising an export of "a live PEFT model's
    names" with --hf-config, meant for other tools' saves."""
    from trainer.model_source import resolve_model_source

    run = lora_run / "run"
    with pytest.raises(ConfigError) as raised:
        resolve_model_source(ModelConfig(path=str(run)))
    base = lora_run / "base"
    assert str(raised.value) == (
        f"model.path: {run} is an mfsdp LoRA checkpoint (the adapter alone, on its base model"
        f" {base}): to go on training it with `mfsdp train sft`, which wrote it, give its run"
        " dir as trainer.run_dir (it resumes); to train the same adapter on in a new run (of"
        f" either trainer), `mfsdp ckpt export-hf {run} --adapter-only --out DIR`, then"
        f" model.path={base} model.lora_adapter_path=DIR; to train from the merged model,"
        f" `mfsdp ckpt export-hf {run} --out DIR`, then model.path=DIR"
    )
