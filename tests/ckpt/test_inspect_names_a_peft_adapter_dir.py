"""`ckpt inspect`, `ckpt validate` and `ckpt import-hf` on a PEFT adapter dir (verl's
actor/lora_adapter/, `export-hf --adapter-only`) say it is one, with its r, alpha and
targets read from its adapter_config.json alone, and how a run takes it
(model.lora_adapter_path); exit 2. inspect and validate called it "not a checkpoint (looked
for .metadata, dist_ckpt/, ...)", import-hf "no config.json; not a Hugging Face model dir",
which said neither what it is nor where it goes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.interop_layouts import run_cli

LORA = {
    "peft_type": "LORA",
    "r": 8,
    "lora_alpha": 16,
    "target_modules": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "v_proj"],
}


def _adapter_dir(root: Path, config: dict) -> Path:
    """A dir as PEFT saves an adapter; its weights file is no safetensors at all, as only
    the config is read."""
    root.mkdir(parents=True)
    (root / "adapter_config.json").write_text(json.dumps(config))
    (root / "adapter_model.safetensors").write_bytes(b"\xff" * 64)
    return root


@pytest.mark.parametrize(
    ("command", "tail"),
    [
        (("inspect",), ""),
        (("validate",), ""),
        (
            ("import-hf", "--out"),
            "; import-hf makes checkpoints of whole models (config.json and weights)",
        ),
    ],
    ids=["inspect", "validate", "import-hf"],
)
def test_a_peft_lora_adapter_dir_is_named_with_the_key_that_takes_it(tmp_path, command, tail):
    given = _adapter_dir(tmp_path / "actor" / "lora_adapter", LORA)
    out_dir = [tmp_path / "imported"] if command[-1] == "--out" else []
    code, out, err = run_cli("ckpt", *command[:1], given, *command[1:], *out_dir)
    assert code == 2, out + err
    assert err.strip().splitlines()[-1] == (
        f"error: {given}: a PEFT LoRA adapter dir (r 8, lora_alpha 16, target_modules"
        " ['down_proj', 'gate_proj', 'k_proj', 'o_proj' (+2 more)]), not a training"
        " checkpoint; a LoRA run starts from it with"
        f" model.lora_adapter_path={given} (model.path: its base model){tail}"
    )
    assert not (tmp_path / "imported").exists()


def test_an_adapter_of_another_peft_type_is_named_as_such(tmp_path):
    given = _adapter_dir(tmp_path / "ia3", {"peft_type": "IA3", "target_modules": ["k_proj"]})
    code, out, err = run_cli("ckpt", "inspect", given)
    assert code == 2, out + err
    assert err.strip().splitlines()[-1] == (
        f"error: {given}: a PEFT adapter dir of peft_type 'IA3', not LoRA, which is the one"
        " kind of adapter mfsdp trains and exports"
    )
