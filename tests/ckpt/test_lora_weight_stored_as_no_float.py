"""A LoRA adapter tensor stored as bool or int32 is damage, as a base weight so stored is.

Was: only base weights' dtypes were checked; an adapter's A or B of another dtype read
`valid` and both exports exited 0, casting it to float (merged weights of about 0.2 moved
by up to 22). Now every tensor an export reads as a weight, in every layout, is held to one
rule (`weight_dtype`): validate INVALID naming the tensor and its dtype, both exports exit 1,
found before any kind of adapter is refused. And the refusal of mixed ranks names a tensor
of the odd rank, not the first one in name order (one of the common rank, undamaged).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.ckpt.test_interop_hf_trainer_peft import trainer_run  # noqa: F401 (a fixture)
from tests.ckpt.test_interop_megatron_peft import (
    _PROJ,
    DAMAGED_ADAPTERS,
    RANK,
    _with_adapter_tensor,
)
from tests.support.ckpt_edits import edit_metadata
from tests.support.ckpt_edits import rehash as rehash_files
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp
from tests.trainer.test_lora_export_flags import lora_run  # noqa: F401 (a fixture)

_IN, _OUT = f"{_PROJ}linear_in.weight", f"{_PROJ}linear_out.weight"
_DORA = "module.decoder.layers.0.mlp.linear_fc2.adapter.weight_magnitude"


def _exports(run: Path, out: Path, *flags: str, merge: tuple = ()) -> list[tuple[int, str]]:
    """(exit code, its error line) of the merged export (`merge`: its own flags) and
    --adapter-only, each given `flags`."""
    found = []
    for i, own in enumerate([merge, ("--adapter-only",)]):
        code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out / str(i), *flags, *own)
        found.append((code, one_error_line(err) if code else stdout))
        assert code == 0 or not (out / str(i)).exists()
    return found


def _invalid(run: Path, *flags: str) -> str:
    """validate's verdict INVALID (exit 1): its error lines, joined."""
    code, stdout, err = run_cli("ckpt", "validate", run, *flags)
    assert code == 1 and stdout.splitlines()[-1].startswith("INVALID: "), stdout + err
    return "\n".join(line for line in stdout.splitlines() if line.startswith("error:"))


@pytest.mark.parametrize(
    ("saved", "key", "stored"),
    [
        ("verl", _IN, torch.ones(RANK, 128, dtype=torch.bool)),
        ("bridge", _OUT, torch.ones(128, RANK, dtype=torch.int32)),
        # a kind export refuses (DoRA), stored as integers: damage found first
        ("verl", _DORA, torch.ones(128, dtype=torch.int32)),
    ],
)
def test_a_megatron_adapter_tensor_of_no_float_is_invalid_and_not_exported(
    tmp_path, saved, key, stored
):
    model = tiny_causal_lm("qwen2", vocab=500)
    run, _ = _with_adapter_tensor(tmp_path, model, saved, {key: stored})
    model.save_pretrained(tmp_path / "base")
    says = f"[model.{key}]: stored as {str(stored.dtype).removeprefix('torch.')}, but it is a"
    assert says in _invalid(run)
    merge = ("--hf-config", tmp_path / "base") if saved == "bridge" else ()
    for code, line in _exports(run, tmp_path / "out", merge=merge):
        assert code == 1 and says in line and "floating-point weight" in line, line


def test_a_peft_lora_a_of_no_float_saved_by_the_hf_trainer_is_refused(
    trainer_run,  # noqa: F811
    tmp_path,
):
    root, _, _, adapter = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run, ignore=shutil.ignore_patterns("pytorch_model_fsdp_0"))
    lora_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    state = {**adapter, lora_a: adapter[lora_a] > 0}
    save_dcp({"model": state}, run / "checkpoint-5" / "pytorch_model_fsdp_0")
    says = f"[model.{lora_a}]: stored as bool, but it is a floating-point weight"
    assert says in _invalid(run, "--hf-config", root / "base")
    for code, line in _exports(run, tmp_path / "x", "--hf-config", root / "base"):
        assert code == 1 and says in line, line


def test_a_base_weight_of_no_float_in_the_dir_an_adapter_merges_onto_is_refused(tmp_path):
    """The base of a merge read from a model dir: an int32 weight was written as int32 with
    the adapter's delta rounded into it."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run, _ = _with_adapter_tensor(tmp_path, model, "bridge", {})
    model.save_pretrained(tmp_path / "base")
    (weights,) = (tmp_path / "base").glob("*.safetensors")
    tensors = load_file(weights)
    name = "model.layers.1.self_attn.k_proj.weight"
    tensors[name] = tensors[name].to(torch.int32)
    save_file(tensors, weights, metadata={"format": "pt"})
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "out", "--hf-config", tmp_path / "base"
    )
    line = one_error_line(err)
    assert code == 1 and f"[{name}]: stored as int32, but it is a floating-point" in line, err


def test_an_mfsdp_lora_step_whose_adapter_is_relabelled_int32_is_refused(
    lora_run,  # noqa: F811
    tmp_path,
):
    """Float bits relabelled int32 in the step's own metadata, the manifest made to agree."""
    step = tmp_path / "step"
    shutil.copytree(sorted(lora_run.glob("global_step_*"))[-1], step)
    lora_a = None

    def relabel(metadata) -> None:
        nonlocal lora_a
        lora_a = min(key for key in metadata.state_dict_metadata if ".lora_A." in key)
        metadata.state_dict_metadata[lora_a].properties.dtype = torch.int32

    edit_metadata(step, relabel)
    rehash_files(step)
    says = f"[{lora_a}]: stored as int32, but it is a floating-point weight of the mfsdp LoRA"
    assert says in _invalid(step)
    for code, line in _exports(step, tmp_path / "out"):
        assert code == 1 and says in line, line


def test_mixed_ranks_name_a_tensor_of_the_odd_rank(tmp_path):
    """Was: `[...layers.0.mlp.linear_fc1.adapter.linear_in.weight]: adapters of ranks
    [2, 4]`, a rank-4 tensor like all but the one a user had to find."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run, _ = _with_adapter_tensor(tmp_path, model, "verl", DAMAGED_ADAPTERS["mixed ranks"])
    says = f"[model.{_IN}]: rank {RANK // 2} in 1 adapter(s), rank {RANK} in "
    assert says in _invalid(run)
    for code, line in _exports(run, tmp_path / "out"):
        assert code == 2 and says in line and "adapters of ranks [2, 4]" in line, line
