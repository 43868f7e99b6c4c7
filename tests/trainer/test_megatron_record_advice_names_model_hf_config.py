"""A Megatron checkpoint given as `model.path` whose record yields no Hugging Face config
is refused with the trainer's own remedy, `model.hf_config=DIR`. It said "pass --hf-config",
export-hf's flag: `mfsdp train` has no such option, so following it failed again ("No such
option"). export-hf, whose flag it is, still names --hf-config."""

from pathlib import Path

import pytest

from mfsdp_ckpt.convert.megatron_config import MegatronSettingsMissing
from mfsdp_ckpt.convert.megatron_record import recorded_config
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.fresh_python import mfsdp
from tests.support.megatron_checkpoints import megatron_args, megatron_run
from tests.support.model_dirs import trainable_model_dir
from tests.support.paths import FIXTURES
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import resolve_model_source

WITHOUT_POSITIONS = FIXTURES / "mcore_optim" / "qwen2" / "run"  # args lack max_position_embeddings


@pytest.fixture(scope="module")
def no_positions(tmp_path_factory) -> tuple[Path, Path]:
    """(a Megatron-LM run whose args record no positions, a model dir of the same model
    whose config.json the run can take instead)."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("no_positions")
    model_dir, _ = trainable_model_dir(root)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    args = megatron_args(model, max_position_embeddings=None, seq_length=None)
    return megatron_run(root, model, args), model_dir


def _refusal(cfg: ModelConfig) -> str:
    with pytest.raises(ConfigError) as caught:
        resolve_model_source(cfg)
    return str(caught.value)


def test_a_record_without_positions_asks_for_model_hf_config():
    refusal = _refusal(ModelConfig(path=str(WITHOUT_POSITIONS)))
    assert "lacks max_position_embeddings" in refusal, refusal
    assert "model.hf_config=DIR" in refusal and "--hf-config" not in refusal, refusal


def test_train_says_it_in_one_line_and_exit_2(tmp_path):
    done = mfsdp(
        "train",
        "sft",
        "--config",
        "examples/sft_tiny_cpu.yaml",
        f"model.path={WITHOUT_POSITIONS}",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "model.hf_config=DIR" in errors[0] and "--hf-config" not in errors[0]


def test_model_hf_config_asked_for_then_resolves(no_positions):
    run, model_dir = no_positions
    refusal = _refusal(ModelConfig(path=str(run)))
    assert "lacks max_position_embeddings" in refusal, refusal
    assert "model.hf_config=DIR" in refusal and "--hf-config" not in refusal, refusal
    source = resolve_model_source(ModelConfig(path=str(run), hf_config=str(model_dir)))
    assert source is not None and source.assets == model_dir


def test_export_and_validate_still_name_their_flag():
    paths = resolve_checkpoint(WITHOUT_POSITIONS)
    with pytest.raises(MegatronSettingsMissing, match=r"pass --hf-config with the Hugging Face"):
        recorded_config(paths, CheckpointReader(paths.dist_ckpt))
