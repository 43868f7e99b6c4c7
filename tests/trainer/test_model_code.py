"""Model files are data (trainer/model_code.py): a config or tokenizer that names shipped code
(`auto_map`), a model_type or tokenizer_class transformers does not have, and weights held
only as pickles are refused in one line naming the file and key, before a run launches and
in the loaders; transformers is never asked to run code (it prompted "Do you wish to run
the custom code? [y/N]" and ran it on `y`) nor to unpickle weights."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
import torch

from tests.support.cli_errors import one_error
from tests.support.fresh_python import MAIN_CATCHING_EXIT, modules_after
from tests.support.model_dirs import config_edit, tokenizer_config_edit, train_from
from tests.support.paths import REPO
from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source

SHIPPED = "import pathlib; pathlib.Path({marker!r}).write_text('shipped code ran')\n"


def _model_copy(trainable, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trainable[0], tmp_path / "model"))


def _ship_code(model: Path, marker: Path, **edits) -> None:
    """Give `model` a module that leaves `marker` when imported, named by `edits`."""
    (model / "configuration_evil.py").write_text(SHIPPED.format(marker=str(marker)))
    (model / "tokenization_evil.py").write_text(SHIPPED.format(marker=str(marker)))
    for edit in edits.values():
        edit(model)


HOSTILE = {
    "config-auto-map": (
        config_edit(model_type="evilmodel", auto_map={"AutoConfig": "configuration_evil.C"}),
        "config.json: auto_map names code shipped with the model ('configuration_evil.C')",
    ),
    "config-auto-map-known-family": (
        config_edit(auto_map={"AutoModelForCausalLM": "configuration_evil.M"}),
        "config.json: auto_map names code shipped with the model ('configuration_evil.M')",
    ),
    "tokenizer-auto-map": (
        tokenizer_config_edit(auto_map={"AutoTokenizer": ["tokenization_evil.T", None]}),
        "tokenizer_config.json: auto_map names code shipped with the model",
    ),
    "unknown-model-type": (
        config_edit(model_type="evilmodel"),
        "config.json: model_type 'evilmodel' is not a family mfsdp trains",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_model_files_naming_code_are_refused_before_launch_and_by_the_loader(
    trainable, tmp_path, case
):
    from trainer.model import load_tokenizer

    edit, says = HOSTILE[case]
    model, marker = _model_copy(trainable, tmp_path), tmp_path / "PWNED"
    _ship_code(model, marker, edit=edit)
    cfg = ModelConfig(path=str(model))
    with pytest.raises(ConfigError) as before_launch:
        check_model_files(cfg, resolve_model_source(cfg))
    with pytest.raises(ConfigError) as in_the_rank:
        load_tokenizer(cfg)
    for caught in (before_launch, in_the_rank):
        assert str(caught.value).startswith(str(model)) and says in str(caught.value)
    assert not marker.exists()


def test_a_tokenizer_class_transformers_lacks_is_refused_naming_it(trainable, tmp_path):
    """transformers falls back to its generic tokenizer for a class it does not have; with
    an auto_map beside it that class would have been the shipped one."""
    from trainer.model import load_tokenizer

    model = _model_copy(trainable, tmp_path)
    tokenizer_config_edit(tokenizer_class="EvilTokenizer")(model)
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(ModelConfig(path=str(model)))
    assert str(caught.value).startswith(
        f"{model / 'tokenizer_config.json'}: tokenizer_class 'EvilTokenizer' is not a tokenizer"
    )


def test_weights_only_as_pickles_are_never_loaded(trainable, tmp_path):
    """transformers unpickled pytorch_model.bin (torch.load) when no safetensors were there."""
    from trainer.model import ModelFilesError, build_hf_config, build_model, load_tokenizer

    model = _model_copy(trainable, tmp_path)
    from safetensors.torch import load_file

    torch.save(load_file(str(model / "model.safetensors")), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    cfg = ModelConfig(path=str(model))
    with pytest.raises(ConfigError, match=r"holds its weights only as pickles \(pytorch_model"):
        check_model_files(cfg, resolve_model_source(cfg))
    config = build_hf_config(cfg, load_tokenizer(cfg))
    with pytest.raises(ModelFilesError, match=r"pytorch_model\.bin is a pickle, which mfsdp never"):
        build_model(cfg, config, torch.device("cpu"), seed=0)


def test_a_run_from_such_a_checkpoint_exits_2_in_one_line_without_asking(trainable, tmp_path):
    """The prompt waited on stdin (a piped `y` ran the code) and, under --json, preceded
    the JSON object on stdout."""
    model, marker = _model_copy(trainable, tmp_path), tmp_path / "PWNED"
    _ship_code(model, marker, edit=HOSTILE["config-auto-map"][0])
    code, err = train_from(model, trainable[1], tmp_path / "run")
    assert code == 2, err
    one_error(err, f"error: {model / 'config.json'}: auto_map names code shipped")
    assert "custom code" not in err and not marker.exists()
    args = ("train", "sft", "--config", "examples/sft_tiny_cpu.yaml", f"model.path={model}")
    args += (f"data.train_files={trainable[1]}", f"trainer.run_dir={tmp_path / 'run'}")
    assert modules_after(MAIN_CATCHING_EXIT, *args, roots=("torch",)) == []  # before launch


# Loaders that read a model, config, tokenizer or generation config from a dir: each call
# must say trust_remote_code=False (and, for a model's weights, use_safetensors=True).
LOADERS = {"from_pretrained", "from_config", "LLM"}


def _loader_calls(source: str) -> list[tuple[int, str, str, set[str], dict]]:
    """(line, receiver, loader, `**` names, keywords) of every loader call in `source`."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in LOADERS:
            continue
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else name
        given = {k.arg: k.value for k in node.keywords if k.arg}
        spread = {ast.unparse(k.value) for k in node.keywords if k.arg is None}
        calls.append((node.lineno, owner, name, spread, given))
    return calls


def _says(given: dict, spread: set[str], scope: dict, key: str, value: bool) -> bool:
    """Whether the call passes `key=value`, directly or through a `**name` dict built in
    the same function as `dict(key=value, ...)`."""
    if key in given:
        return isinstance(given[key], ast.Constant) and given[key].value is value
    return any(scope.get(name, {}).get(key) is value for name in spread)


def _dicts_built(source: str) -> dict[str, dict]:
    """`name = dict(k=constant, ...)` assignments in `source`: name -> {k: constant}."""
    built = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            if getattr(call.func, "id", "") == "dict" and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    built[target.id] = {
                        k.arg: k.value.value
                        for k in call.keywords
                        if k.arg and isinstance(k.value, ast.Constant)
                    }
    return built


def test_every_loader_call_refuses_shipped_code_and_pickles():
    unsafe = []
    for path in sorted([*(REPO / "trainer").rglob("*.py"), *(REPO / "cli").rglob("*.py")]):
        source = path.read_text()
        scope = _dicts_built(source)
        for line, owner, loader, spread, given in _loader_calls(source):
            where = f"{path.relative_to(REPO)}:{line} {owner}.{loader}"
            if not _says(given, spread, scope, "trust_remote_code", False):
                unsafe.append(f"{where}: no trust_remote_code=False")
            reads_weights = loader == "from_pretrained" and "Model" in owner
            if reads_weights and not _says(given, spread, scope, "use_safetensors", True):
                unsafe.append(f"{where}: no use_safetensors=True")
    assert not unsafe, "\n".join(unsafe)


def test_the_loader_scan_finds_calls():
    """The scan above sees the calls it checks (a scan finding none would pass anyway)."""
    calls = _loader_calls((REPO / "trainer" / "model.py").read_text())
    assert {owner for _, owner, _, _, _ in calls} >= {"AutoConfig", "AutoModelForCausalLM"}
