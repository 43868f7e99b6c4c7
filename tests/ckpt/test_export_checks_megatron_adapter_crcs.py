"""Plain export-hf checks the CRC torch.save wrote for each Megatron LoRA adapter record it
reads, exported as a PEFT adapter (--adapter-only) or merged onto the base in --hf-config:
was exit 0, the flipped value written out, where --verify refused it."""

from __future__ import annotations

import pytest
from safetensors.torch import save_file

from tests.ckpt.test_export_verify_fused_record_crc import ADAPTER_B, FAILS, _flip_a_payload_bit
from tests.ckpt.test_interop_megatron_peft import _hf_lora, _megatron_adapters
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp


@pytest.mark.parametrize("adapter_only", [True, False], ids=["adapter_only", "merged"])
def test_a_flipped_bit_in_an_adapter_record_is_refused(adapter_only, tmp_path):
    model = tiny_causal_lm("llama")
    base = tmp_path / "base"
    model.config.save_pretrained(base)
    save_file(model.state_dict(), base / "model.safetensors")
    dcp = save_dcp({"model": _megatron_adapters(model, _hf_lora(model))}, tmp_path / "ckpt")
    args = ("ckpt", "export-hf", dcp, "--hf-config", base, "--lora-alpha", "8")
    extra = ("--adapter-only",) if adapter_only else ()
    assert run_cli(*args, *extra, "--out", tmp_path / "healthy")[0] == 0
    path = _flip_a_payload_bit(dcp, ADAPTER_B)
    code, stdout, err = run_cli(*args, *extra, "--out", tmp_path / "hf")
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert f"{path} [{ADAPTER_B}]" in line and FAILS in line, line
    assert not (tmp_path / "hf").exists()
