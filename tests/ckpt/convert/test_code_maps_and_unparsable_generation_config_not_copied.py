"""What import-hf and export-hf copy of a model dir is what their next readers read.

Was: a config.json or tokenizer_config.json whose `auto_map` names code shipped with the
model (model_type qwen2: transformers has it built in) was copied as it was, without the
code (never copied): the export passed --verify, then `mfsdp train` refused it and
`AutoConfig.from_pretrained(..., trust_remote_code=True)` failed on the missing file, and
import-hf's mcore note sent training to `model.hf_config=DIR`, which training refuses. Now
the auto_map is left out of what is written, in one note naming the file, and the mcore
note sends training to the hf layout. A generation_config.json that is not JSON was copied
into every import and export without a word (transformers' model loader skips it, its
GenerationConfig and verl's and vLLM's readers fail on it): now left out, with one note."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.reliability.hf_model import EXPORT_MCORE_QWEN2, hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES
from trainer.model_code import check_model_config, check_tokenizer_files

CONFIG_MAP = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "m.EvilLM"}
TOKENIZER_MAP = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
NOT_JSON = '{"max_new_tokens": '


def _model_with_code_maps(root: Path) -> Path:
    """A qwen2 model dir whose config.json and tokenizer_config.json name shipped code."""
    model = hf_model(root)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "auto_map": CONFIG_MAP}))
    tokenizer_config = {"tokenizer_class": "Qwen2Tokenizer", "auto_map": TOKENIZER_MAP}
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    for name in ("configuration_evil.py", "m.py", "tokenization_evil.py"):
        (model / name).write_text("raise SystemExit('never run')\n")
    return model


def _notes_naming(err: str, path: str | Path, words: str) -> list[str]:
    return [
        line for line in err.splitlines() if line.startswith(f"note: {path}: ") and words in line
    ]


def test_import_hf_writes_no_auto_map_and_training_takes_what_it_wrote(tmp_path):
    model = _model_with_code_maps(tmp_path)
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", "hf")
    assert code == 0, stdout + err
    copied = out / "global_step_0" / "huggingface"
    config = json.loads((copied / "config.json").read_text())
    assert "auto_map" not in config and config["model_type"] == "qwen2", config
    tokenizer_config = json.loads((copied / "tokenizer_config.json").read_text())
    assert tokenizer_config == {"tokenizer_class": "Qwen2Tokenizer"}
    for name, code_file in (
        ("config.json", "configuration_evil.py"),
        ("tokenizer_config.json", "tokenization_evil.py"),
    ):
        assert len(_notes_naming(err, model / name, "auto_map")) == 1, err
        assert code_file in _notes_naming(err, model / name, "auto_map")[0], err
    check_model_config(copied)  # what `mfsdp train model.path=OUT` refused
    check_tokenizer_files(copied)
    validated, stdout, err = run_cli("ckpt", "validate", out, "--deep")
    assert validated == 0, stdout + err


def test_the_mcore_note_names_a_next_command_that_works(tmp_path):
    model = _model_with_code_maps(tmp_path)
    code, stdout, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "mcore")
    assert code == 0, stdout + err
    stays = [line for line in err.splitlines() if "config and tokenizer stay in" in line]
    assert len(stays) == 1 and "model.hf_config=" not in stays[0], err
    assert f"{model / 'config.json'}'s auto_map" in stays[0] and "--layout hf" in stays[0]
    (tmp_path / "plain").mkdir()
    plain = hf_model(tmp_path / "plain")
    code, stdout, err = run_cli("ckpt", "import-hf", plain, "--out", tmp_path / "plain_mcore")
    assert code == 0 and f"model.hf_config={plain} to mfsdp train" in err, stdout + err


def test_export_hf_config_writes_no_auto_map_and_loads_with_remote_code_allowed(tmp_path):
    from transformers import AutoConfig

    model = _model_with_code_maps(tmp_path)
    out = tmp_path / "hf"
    code, stdout, err = run_cli(*EXPORT_MCORE_QWEN2, "--out", out, "--hf-config", model, "--verify")
    assert code == 0, stdout + err
    assert "auto_map" not in json.loads((out / "config.json").read_text())
    assert "auto_map" not in json.loads((out / "tokenizer_config.json").read_text())
    assert len(_notes_naming(err, model / "config.json", "auto_map")) == 1, err
    # was: OSError, the export "does not appear to have a file named configuration_evil.py"
    assert AutoConfig.from_pretrained(out, trust_remote_code=True).model_type == "qwen2"
    check_model_config(out)


def test_a_family_only_the_shipped_code_builds_is_refused_naming_the_auto_map(tmp_path):
    """model_type `evil` with an auto_map: no family transformers has, so only the code
    builds it; refused in one line naming config.json and its auto_map (exit 2)."""
    model = _model_with_code_maps(tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "evil"}))
    words = ("its auto_map names code shipped with the model (configuration_evil.py, m.py)",)
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 2, err
    one_error(err, f"{model / 'config.json'}: model family 'evil'", *words)
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--out", tmp_path / "hf", "--hf-config", model)
    assert code == 2, err
    one_error(err, f"{model / 'config.json'}: ", *words)
    assert not (tmp_path / "out").exists() and not (tmp_path / "hf").exists()


def test_import_hf_leaves_out_a_generation_config_that_is_not_json(tmp_path):
    model = hf_model(tmp_path)
    (model / "generation_config.json").write_text(NOT_JSON)
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", "hf")
    assert code == 0, stdout + err
    assert not (out / "global_step_0" / "huggingface" / "generation_config.json").exists()
    notes = _notes_naming(err, model / "generation_config.json", "not valid JSON")
    assert len(notes) == 1 and "left out" in notes[0], err


def test_export_hf_leaves_out_a_generation_config_that_is_not_json(tmp_path):
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run")
    assets = run / "global_step_2" / "huggingface"
    (assets / "generation_config.json").write_text(NOT_JSON)
    for index, (source, named) in enumerate([(run, assets), (f"file://{run}", f"file://{assets}")]):
        out = tmp_path / f"hf{index}"
        code, stdout, err = run_cli("ckpt", "export-hf", source, "--out", out, "--verify")
        assert code == 0, stdout + err
        assert (out / "config.json").is_file() and not (out / "generation_config.json").exists()
        notes = _notes_naming(err, f"{named}/generation_config.json", "not valid JSON")
        assert len(notes) == 1, err
