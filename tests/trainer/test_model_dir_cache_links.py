"""`mfsdp train sft model.path=DIR` of a model dir downloaded with huggingface_hub's
`--local-dir` before 0.23, whose files are absolute links into the Hugging Face cache's
blobs/: the run starts and trains (was: exit 2, "chat_template.jinja: resolves outside the
model dir"), and each checkpoint's copy of its generation_config.json reads the blob."""

from __future__ import annotations

from tests.support.hf_cache_dirs import local_dir_of_links
from tests.support.model_dirs import train_from
from trainer.config import ModelConfig
from trainer.model_assets import copied_generation_config
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source


def test_a_local_dir_of_links_into_the_cache_passes_the_model_checks(trainable, tmp_path):
    local = local_dir_of_links(trainable[0], tmp_path / "hub")
    cfg = ModelConfig(path=str(local))
    check_model_files(cfg, resolve_model_source(cfg))
    assert (
        copied_generation_config(str(local))
        == (trainable[0] / "generation_config.json").read_bytes()
    )


def test_sft_trains_from_a_local_dir_of_links_into_the_cache(trainable, tmp_path):
    local = local_dir_of_links(trainable[0], tmp_path / "hub")
    code, err = train_from(local, trainable[1], tmp_path / "run")
    assert code == 0, err
