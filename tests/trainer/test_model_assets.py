"""The files a run reads or copies from its model and tokenizer dirs are checked as data
(trainer/model_assets.py), whether or not the tokenizer comes from the model dir: a
generation_config.json linked out of the model dir, over the JSON asset bound or giving a
key twice is refused before launch (exit 2) and is never copied into a checkpoint, and the
JSON read for an auto_map or tokenizer_class is bounded as a JSON asset is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.export_source import MAX_JSON_ASSET_BYTES, MAX_JSON_ASSET_CONTAINERS
from mfsdp_ckpt.convert.hf_config import HFConfigError
from tests.support.cli_errors import one_error
from tests.support.model_dirs import train
from tests.support.paths import FIXTURES
from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files, check_tokenizer_class, check_tokenizer_files
from trainer.model_source import resolve_model_source

SECRET = "a user's private file"
GENERATION = "generation_config.json"


def _linked_out(path: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(json.dumps({"secret": SECRET}))
    path.unlink(missing_ok=True)
    path.symlink_to(secret)


def _too_large(path: Path, *_: object) -> None:
    path.unlink()
    with open(path, "wb") as handle:
        handle.truncate(MAX_JSON_ASSET_BYTES + 1)  # sparse: no disk used


def _key_twice(path: Path, _tmp_path: Path) -> None:
    path.write_text('{"eos_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}')


DAMAGE = {
    "linked-out": (_linked_out, "resolves outside the model dir"),
    "too-large": (_too_large, f"more than the {MAX_JSON_ASSET_BYTES} this file may have"),
    "key-twice": (_key_twice, "key 'eos_token_id' appears twice"),
}


def _dirs(trainable, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the model dir and of its tokenizer files in a dir of their own."""
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(model / name, tokenizer / name)
    return model, tokenizer


@pytest.mark.parametrize("case", list(DAMAGE))
@pytest.mark.parametrize("own_tokenizer", [True, False], ids=["tokenizer-dir", "model-dir"])
def test_a_damaged_generation_config_is_refused_before_launch(
    trainable, tmp_path, case, own_tokenizer
):
    """Was: with model.tokenizer set, nothing checked it and every checkpoint copied it."""
    model, tokenizer = _dirs(trainable, tmp_path)
    damage, words = DAMAGE[case]
    damage(model / GENERATION, tmp_path)
    cfg = ModelConfig(path=str(model), tokenizer=str(tokenizer) if own_tokenizer else None)
    with pytest.raises(ConfigError) as caught:
        check_model_files(cfg, resolve_model_source(cfg))
    assert str(caught.value).startswith(f"{model / GENERATION}: ") and words in str(caught.value)


def test_the_copy_into_a_checkpoint_refuses_it_too(trainable, tmp_path):
    """Was: write_hf_assets read the link's target whole and wrote it into the step."""
    from transformers import AutoConfig

    from trainer.model import write_hf_assets
    from trainer.tiny import build_tokenizer

    model, _tokenizer = _dirs(trainable, tmp_path)
    _linked_out(model / GENERATION, tmp_path)
    target = tmp_path / "huggingface"
    target.mkdir()
    config = AutoConfig.from_pretrained(str(model), local_files_only=True, trust_remote_code=False)
    with pytest.raises(ConfigError, match=r"generation_config\.json: resolves outside the model"):
        write_hf_assets(target, config, build_tokenizer(), str(model))
    assert not any(SECRET in p.read_text() for p in target.iterdir())


def test_the_model_build_refuses_it_in_the_rank(trainable, tmp_path):
    """from_pretrained reads the model dir's generation_config.json beside the weights: it
    followed the link wherever it led."""
    import torch

    from trainer.model import build_hf_config, build_model, load_tokenizer

    model, tokenizer = _dirs(trainable, tmp_path)
    cfg = ModelConfig(path=str(model), tokenizer=str(tokenizer))
    config = build_hf_config(cfg, load_tokenizer(cfg))
    _linked_out(model / GENERATION, tmp_path)
    with pytest.raises(ConfigError, match=r"generation_config\.json: resolves outside the model"):
        build_model(cfg, config, torch.device("cpu"), seed=0)


@pytest.mark.parametrize("hf_config", [False, True], ids=["own-config", "model.hf_config"])
def test_a_checkpoints_own_generation_config_is_checked_as_export_checks_it(
    trainable, tmp_path, hf_config
):
    """Training from a checkpoint copies its huggingface/generation_config.json into each
    step, also where model.hf_config names the config: a link out of the checkpoint is
    refused, one inside it is fine."""
    run = Path(shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run"))
    assets = run / "global_step_2" / "huggingface"
    (run / "global_step_2" / "generation.json").write_text('{"do_sample": false}')
    (assets / GENERATION).symlink_to(Path("..") / "generation.json")
    cfg = ModelConfig(path=str(run), hf_config=str(trainable[0]) if hf_config else None)
    check_model_files(cfg, resolve_model_source(cfg))
    _linked_out(assets / GENERATION, tmp_path)
    with pytest.raises(ConfigError) as caught:
        check_model_files(cfg, resolve_model_source(cfg))
    assert str(caught.value).startswith(f"{assets / GENERATION}: resolves outside the checkpoint")


def _crowded(path: Path) -> None:
    """A small tokenizer_config.json holding more arrays than a JSON asset may."""
    path.write_text('{"x": [' + ",".join(["[]"] * MAX_JSON_ASSET_CONTAINERS) + "]}")


BOUNDS = {
    "containers": (_crowded, f"more JSON objects and arrays than the {MAX_JSON_ASSET_CONTAINERS}"),
    "bytes": (_too_large, f"more than the {MAX_JSON_ASSET_BYTES} this file may have"),
}


@pytest.mark.parametrize("case", list(BOUNDS))
@pytest.mark.parametrize("check", [check_tokenizer_files, check_tokenizer_class])
def test_tokenizer_json_read_for_code_is_bounded_as_an_asset(trainable, tmp_path, case, check):
    """Was: read up to 1 GiB and parsed whatever it held (a 45 MB file of empty arrays took
    1.1 GB in the launcher before it was refused)."""
    _model, tokenizer = _dirs(trainable, tmp_path)
    damage, words = BOUNDS[case]
    damage(tokenizer / "tokenizer_config.json")
    with pytest.raises(HFConfigError) as caught:
        check(tokenizer)
    assert str(caught.value).startswith(str(tokenizer / "tokenizer_config.json"))
    assert words in str(caught.value)


def test_a_run_with_its_own_tokenizer_dir_copies_no_file_from_outside(trainable, tmp_path):
    """The reported run: exit 0 and the secret in global_step_N/huggingface/. Now exit 2 in
    one line before launch, and no run dir."""
    model, tokenizer = _dirs(trainable, tmp_path)
    _linked_out(model / GENERATION, tmp_path)
    run = tmp_path / "run"
    code, err = train(
        "sft",
        *(f"model.path={model}", f"model.tokenizer={tokenizer}", f"trainer.run_dir={run}"),
        *(f"data.train_files={trainable[1]}", "trainer.total_steps=1", "trainer.eval_every=0"),
    )
    assert code == 2, err
    one_error(err, str(model / GENERATION), "resolves outside the model dir")
    assert not run.exists()
