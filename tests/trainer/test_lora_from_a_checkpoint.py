"""A LoRA run whose `model.path` is a checkpoint (an SFT step, a run dir, an import-hf result,
a bare DCP dir with model.hf_config) recorded no file of its base: its steps could not be
resumed, validated or merged, and its resume compared an empty record with an empty one.
Its steps now record the checkpoint's DCP files, as GRPO's KL reference records them, and
the merged export reads that checkpoint as training read it. The route users take is
followed whole: SFT, then GRPO LoRA from its step (starting from an adapter SFT trained, so
that the adapter changes the model), resumed, validated, exported merged and adapter-only;
the merged model's logits are PEFT's over the SFT step's export. Steps saved before the
record recorded nothing: each command says so, naming --adapter-only."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format.layout import TRACKER_FILE
from mfsdp_ckpt.format.manifest import read_manifest
from tests.support.ckpt_edits import edit_manifest
from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.grpo.runner import run_grpo
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir

LORA = ("model.lora_rank=4", "optim.lr=1e-2", "data.global_batch_size=4")


@pytest.fixture(scope="module")
def sft(tmp_path_factory) -> Path:
    """A full-parameter SFT run of 2 steps, both saved, beside its base dir (`base`), its data
    (`train.jsonl`) and its last step's Hugging Face export (`step_hf`)."""
    root = tmp_path_factory.mktemp("lora_from_checkpoint")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    chat = write_chat_jsonl(root / "train.jsonl", rows=8)
    settings = (f"model.path={base}", "data.global_batch_size=4", "checkpoint.save_every=1")
    run_sft(tiny_config(chat, root / "sft", *settings, "trainer.total_steps=2"))
    code, stdout, err = run_cli("ckpt", "export-hf", root / "sft", "--out", root / "step_hf")
    assert code == 0, stdout + err
    return root


def _lora_sft(sft: Path, run: Path, *overrides: str, steps: int = 1):
    return run_sft(
        tiny_config(sft / "train.jsonl", run, *LORA, f"trainer.total_steps={steps}", *overrides)
    )


def _cli(*args) -> tuple[int, str]:
    code, stdout, err = run_cli(*args)
    return code, (one_error_line(err) if code else stdout + err)


def _peft_logits(base_dir: Path, adapter: Path, inputs: torch.Tensor) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    with torch.no_grad():
        return model(input_ids=inputs).logits


def _exports_agree(run: Path, base_dir: Path, out: Path) -> None:
    """The merged export and the adapter-only one, both written; the merged model's logits
    PEFT's over `base_dir` with that adapter, and not the base's own."""
    assert _cli("ckpt", "export-hf", run, "--out", out / "merged", "--verify")[0] == 0
    assert _cli("ckpt", "export-hf", run, "--out", out / "adapter", "--adapter-only")[0] == 0
    assert load_report(out / "merged") == {}  # no key missing, unexpected or mismatched
    inputs = fixed_inputs(json.loads((base_dir / "config.json").read_text())["vocab_size"])
    merged = logits_of(out / "merged", inputs, torch.float32)
    torch.testing.assert_close(
        merged, _peft_logits(base_dir, out / "adapter", inputs), atol=1e-5, rtol=0
    )
    assert (merged - logits_of(base_dir, inputs, torch.float32)).abs().max() > 1e-2


def test_grpo_lora_from_an_sft_step_resumes_validates_and_merges(sft, tmp_path):
    step = sft / "sft" / "global_step_2"
    _lora_sft(sft, tmp_path / "lora_sft", f"model.path={step}")
    adapter = tmp_path / "sft_adapter"
    code, said = _cli(
        "ckpt", "export-hf", tmp_path / "lora_sft", "--adapter-only", "--out", adapter
    )
    assert code == 0, said

    rows, grpo = write_rl_rows(tmp_path / "rl.jsonl"), tmp_path / "grpo"
    settings = (f"model.path={step}", f"model.lora_adapter_path={adapter}")
    first = grpo_config(rows, grpo, *settings)
    first.trainer.total_steps = 1  # then resumed to grpo_config's 2
    run_grpo(first)
    resumed = run_grpo(grpo_config(rows, grpo, *settings))
    assert (resumed.resumed_from, resumed.final_step) == (1, 2)

    record = read_manifest(grpo / "global_step_2" / "manifest.json").base_model
    assert record is not None and record["path"] == str((step / "dist_ckpt").resolve())
    sft_files = read_manifest(step / "manifest.json").files
    assert record["files"] == {
        name.removeprefix("dist_ckpt/"): entry.to_json()
        for name, entry in sft_files.items()
        if name.startswith("dist_ckpt/")
    }
    code, said = _cli("ckpt", "validate", grpo, "--deep")
    assert code == 0 and said.startswith("valid: ") and "warning" not in said, said
    _exports_agree(grpo, sft / "step_hf", tmp_path)


def _import(sft: Path, into: Path, layout: str) -> Path:
    code, said = _cli("ckpt", "import-hf", sft / "base", "--out", into, "--layout", layout)
    assert code == 0, said
    return into


def _bare_copy(sft: Path, into: Path) -> Path:
    """The SFT step's DCP dir alone, as Megatron-LM or verl leave one: no manifest."""
    return Path(shutil.copytree(sft / "sft" / "global_step_2" / "dist_ckpt", into / "dist_ckpt"))


# (how model.path is made, what its config needs, the model dir its weights equal)
SOURCES = {
    "run-dir": (lambda sft, _tmp: sft / "sft", False, "step_hf"),
    "import-hf": (lambda sft, tmp: _import(sft, tmp / "imported", "hf"), False, "base"),
    "import-mcore": (lambda sft, tmp: _import(sft, tmp / "imported", "mcore"), True, "base"),
    "bare-dcp": (lambda sft, tmp: _bare_copy(sft, tmp / "bare"), True, "step_hf"),
}


@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_lora_step_on_any_checkpoint_records_and_merges_onto_it(sft, tmp_path, kind):
    make, needs_config, equals = SOURCES[kind]
    source = make(sft, tmp_path)
    config = (f"model.hf_config={sft / 'base'}",) if needs_config else ()
    _lora_sft(sft, tmp_path / "lora", f"model.path={source}", *config)
    record = read_manifest(tmp_path / "lora" / "global_step_1" / "manifest.json").base_model
    assert record is not None and record["files"], record
    dcp = Path(record["path"])
    on_disk = {n for n in os.listdir(dcp) if n == ".metadata" or n.endswith(".distcp")}
    assert set(record["files"]) == on_disk and ".metadata" in on_disk
    code, said = _cli("ckpt", "validate", tmp_path / "lora", "--deep")
    assert code == 0 and "warning" not in said, said
    _exports_agree(tmp_path / "lora", sft / equals, tmp_path / "out")


def test_a_base_checkpoint_moved_away_is_named_by_the_merge(sft, tmp_path):
    """A checkpoint base is no model dir `--hf-config` could name where it is now: the merge
    says it needs that checkpoint, or the adapter alone."""
    bare = _bare_copy(sft, tmp_path / "bare")
    _lora_sft(sft, tmp_path / "lora", f"model.path={bare}", f"model.hf_config={sft / 'base'}")
    recorded = bare.resolve()
    bare.rename(tmp_path / "moved")
    code, line = _cli("ckpt", "export-hf", tmp_path / "lora", "--out", tmp_path / "m")
    assert code == 1, line
    assert line == (
        f"error: {recorded}: base model dir {recorded} is not present here; cannot"
        " check it; a merged export needs that exact base checkpoint, or use --adapter-only"
    )
    assert (
        _cli("ckpt", "export-hf", tmp_path / "lora", "--out", tmp_path / "a", "--adapter-only")[0]
        == 0
    )


def test_a_run_given_as_model_path_that_moved_on_is_refused_naming_the_step(sft, tmp_path):
    """Resumed on `model.path=RUN` after RUN saved a newer step, the adapter went on over
    other weights without a word (both records were empty)."""
    run = Path(shutil.copytree(sft / "sft", tmp_path / "sft"))
    shutil.rmtree(run / "global_step_2")  # the run as it stood when the adapter started
    (run / TRACKER_FILE).write_text("1")
    lora = tmp_path / "lora"
    _lora_sft(sft, lora, f"model.path={run}")
    chat, base = sft / "train.jsonl", sft / "base"
    settings = (f"model.path={base}", "data.global_batch_size=4", "checkpoint.save_every=1")
    run_sft(tiny_config(chat, run, *settings, "trainer.total_steps=2"))  # RUN moves on

    with pytest.raises(ResumeMismatchError) as refused:
        _lora_sft(sft, lora, f"model.path={run}", steps=2)
    trained_on = (run / "global_step_1" / "dist_ckpt").resolve()
    message = str(refused.value)
    assert f"adapter was trained on the weights in {trained_on}; in this run's base" in message
    assert f"set model.path={trained_on} (the base it was trained on)" in message, message
    resumed = _lora_sft(sft, lora, f"model.path={trained_on}", steps=2)
    assert (resumed.resumed_from, resumed.final_step) == (1, 2)


def test_a_step_saved_before_its_base_was_recorded_says_so_everywhere(sft, tmp_path):
    step = sft / "sft" / "global_step_2"
    lora = tmp_path / "lora"
    _lora_sft(sft, lora, f"model.path={step}")

    def unrecord(manifest: dict) -> None:  # what such a run wrote: the path, no file
        manifest["base_model"].update(files={}, path=str(step.resolve()))

    edit_manifest(lora / "global_step_1", unrecord)
    said = f"no weight files are recorded for the base model {step.resolve()} (a LoRA run whose"
    code, out = _cli("ckpt", "validate", lora)
    assert code == 0 and f"warning: {lora / 'global_step_1' / 'manifest.json'}: {said}" in out, out
    assert run_cli("ckpt", "validate", lora, "--strict")[0] == 1  # a warning fails it
    code, line = _cli("ckpt", "export-hf", lora, "--out", tmp_path / "merged")
    assert code == 1 and said in line, line
    assert line.endswith("export the adapter with --adapter-only, which needs no base"), line
    assert _cli("ckpt", "export-hf", lora, "--out", tmp_path / "a", "--adapter-only")[0] == 0
    with pytest.raises(ResumeMismatchError) as refused:
        _lora_sft(sft, lora, f"model.path={step}", steps=2)
    assert said in str(refused.value)
    assert str(refused.value).endswith(
        f"then a new trainer.run_dir with model.path={step.resolve()} model.lora_adapter_path=DIR"
    )
