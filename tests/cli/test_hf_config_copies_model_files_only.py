"""From a model dir (export-hf's --hf-config, import-hf's source) only its Hugging Face
config, tokenizer and chat template files are copied; a note counts the others. A base model
downloaded whole (other formats' weights, custom code, a README) was copied entire."""

import json
import os
from pathlib import Path

from tests.reliability.hf_model import EXPORT_MCORE_QWEN2, MCORE_QWEN2, hf_model
from tests.support.interop_layouts import run_cli

MODEL_FILES = {
    "config.json",
    "tokenizer.json",
    "chat_template.jinja",
    "additional_chat_templates/tool_use.jinja",
    "spiece.model",
}
OTHERS = ["README.md", "ggml-model-f16.gguf", "modeling_qwen2.py", "onnx/model.onnx", "tf_model.h5"]


def _add_files(model: Path) -> None:
    """Model files beside what a whole download holds too; tf_model.h5 sparse, over the
    1 GiB an asset may have (it was refused as one)."""
    for name in MODEL_FILES - {"config.json"} | set(OTHERS):
        (model / name).parent.mkdir(exist_ok=True)
        (model / name).write_text("{}" if name.endswith(".json") else "")  # JSON ones parse
    os.truncate(model / "tf_model.h5", 1200 << 20)


def _files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def _note(notes: list[str]) -> str:
    return next(note for note in notes if "not copied" in note)


def test_export_copies_only_the_model_files_of_its_hf_config(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text((MCORE_QWEN2 / "config.json").read_text())
    _add_files(base)
    out = tmp_path / "out"
    code, stdout, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", base, "--out", out, "--json")
    assert code == 0, err
    assert _files(out) == MODEL_FILES | {"model.safetensors"}
    assert _note(json.loads(stdout)["notes"]) == (
        f"{base}: 5 other file(s) not copied (only config, tokenizer and chat template files"
        " are): modeling_qwen2.py, README.md, ggml-model-f16.gguf (+2 more)"
    )


def test_import_copies_only_the_model_files_of_its_source(tmp_path):
    model = hf_model(tmp_path)
    _add_files(model)
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        "ckpt", "import-hf", model, "--out", out, "--layout", "hf", "--json"
    )
    assert code == 0, err
    assert _files(out / "global_step_0" / "huggingface") == MODEL_FILES
    assert _note(json.loads(stdout)["notes"]).startswith(f"{model}: 5 other file(s) not copied")
