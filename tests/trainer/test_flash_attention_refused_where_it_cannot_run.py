"""`model.attn_implementation=flash_attention_2` (3, 4) on CPU built the model, had transformers
reach the Hub for a stand-in kernel and ended in a traceback per rank (exit 1); on CUDA without
the flash-attn package it did the same. Each is refused in one line before anything is built,
exit 2: by the config alone where it says `trainer.device=cpu` (`mfsdp config check` too), by
`check_attention_backend` on the machine otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.sft import write_chat_jsonl
from trainer.attention_names import FLASH_ATTENTION_PACKAGES
from trainer.config import ConfigError, ModelConfig
from trainer.model import check_attention_backend

FLASH = sorted(FLASH_ATTENTION_PACKAGES)


@pytest.mark.parametrize("name", [*FLASH, "paged|flash_attention_2"])
def test_config_check_refuses_flash_attention_on_cpu(tmp_path: Path, name: str) -> None:
    data = write_chat_jsonl(tmp_path / "sft.jsonl")
    given = [
        f"data.train_files=[{data}]",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.device=cpu",
        f"model.attn_implementation={name}",
    ]
    with pytest.raises(MfsdpError) as caught:
        check_config("sft", None, given)
    said = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in said
    assert said.startswith(f"model.attn_implementation={name}: FlashAttention needs CUDA")
    assert "use sdpa on CPU" in said


@pytest.mark.parametrize("name", FLASH)
def test_the_machine_check_refuses_flash_attention_on_cpu(name: str) -> None:
    with pytest.raises(ConfigError, match="FlashAttention needs CUDA"):
        check_attention_backend(ModelConfig(attn_implementation=name), torch.device("cpu"))


@pytest.mark.parametrize("name", FLASH)
def test_cuda_without_the_package_names_the_package(name: str) -> None:
    """No flash-attn package is installed for the tests: a CUDA device (not touched by the
    check) is refused naming the package, never sent on to a Hub kernel."""
    package = FLASH_ATTENTION_PACKAGES[name]
    with pytest.raises(ConfigError) as caught:
        check_attention_backend(ModelConfig(attn_implementation=name), torch.device("cuda"))
    assert f"the {package} package is not installed" in str(caught.value)


@pytest.mark.parametrize("name", ["sdpa", "eager", "varlen", "kernels-community/flash-attn3"])
def test_other_attentions_pass_on_cpu(name: str) -> None:
    check_attention_backend(ModelConfig(attn_implementation=name), torch.device("cpu"))
