"""`mfsdp ckpt validate` on a Megatron-Bridge LoRA save whose run_config.yaml `peft.alpha` is
no positive number (-8, 0, the string '8') warns, naming the record and --lora-alpha (exit 0;
--strict exit 1): export-hf refuses that save without --lora-alpha. Was: "valid", no word."""

from __future__ import annotations

import pytest

from tests.ckpt.test_megatron_lora_unusable_recorded_alpha import UNUSABLE, bridge_save_with_alpha
from tests.support.interop_layouts import run_cli


@pytest.mark.parametrize("alpha", UNUSABLE, ids=repr)
def test_validate_warns_and_strict_fails(tmp_path, alpha):
    run, record, base = bridge_save_with_alpha(tmp_path, alpha)
    said = (
        f"{record} peft: alpha {alpha!r} is not a positive number: export-hf needs"
        " --lora-alpha A (the alpha the run trained with)"
    )
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", base)
    assert code == 0 and "\nvalid: " in f"\n{stdout}", stdout + err
    warnings = [line for line in (stdout + err).splitlines() if said in line]
    assert len(warnings) == 1 and "warning" in warnings[0].lower(), stdout + err
    # --strict fails a warning (and a save with no manifest, as a Bridge save is: exit 1 both)
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", base, "--strict")
    assert code == 1 and said in stdout + err, stdout + err


def test_a_usable_alpha_validates_without_a_warning(tmp_path):
    run, _record, base = bridge_save_with_alpha(tmp_path, 8)
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", base)
    assert code == 0 and "warning" not in (stdout + err).lower(), stdout + err
