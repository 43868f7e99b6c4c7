"""DeepSpeed's checkpoints are named as DeepSpeed's, with its zero_to_fp32.py.

`DeepSpeedEngine.save_checkpoint(OUT)` writes `OUT/latest`, `OUT/zero_to_fp32.py` and
`OUT/global_stepN/{mp_rank_00_model_states.pt, bf16_zero_pp_rank_R_mp_rank_00_optim_states.pt}`;
the HF Trainer with DeepSpeed puts the same into `checkpoint-N/` beside config.json and
its own state. The tag dir was called "a Megatron-LM legacy checkpoint" (whose marker is a
directory `mp_rank_NN/`), with advice to load it in Megatron-LM, and the dirs above it
"not a checkpoint"; `model.path` of checkpoint-N named the Trainer's scheduler and RNG
pickles as weights to convert with transformers. The files here are torch.save pickles of
plain dicts under DeepSpeed's names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import resolve_model_source

STEP = 5
TAG = f"global_step{STEP}"
STATE_FILES = (
    "mp_rank_00_model_states.pt",
    "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
    "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
)


def _deepspeed_save(out: Path) -> Path:
    """OUT as DeepSpeed's save_checkpoint leaves it (ZeRO-2, two data-parallel ranks)."""
    tag = out / TAG
    tag.mkdir(parents=True)
    for name in STATE_FILES:
        torch.save({"module": {"w": torch.zeros(2)}, "file": name}, tag / name)
    (out / "latest").write_text(TAG)
    (out / "zero_to_fp32.py").write_text("# DeepSpeed's converter, copied by save_checkpoint\n")
    return out


def _trainer_checkpoint(run: Path, weights: bool = False) -> Path:
    """The HF Trainer's checkpoint-N with DeepSpeed: the save above, config.json and the
    Trainer's state; `weights`: model.safetensors too (ZeRO-3 gathering 16-bit weights)."""
    checkpoint = _deepspeed_save(run / f"checkpoint-{STEP}")
    model = tiny_causal_lm("qwen2", vocab=64)
    if weights:
        model.save_pretrained(checkpoint)
    else:
        model.config.save_pretrained(checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": STEP}))
    for name in ("scheduler.pt", "rng_state_0.pth"):
        torch.save({"file": name}, checkpoint / name)
    return checkpoint


def _levels(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each path a user gives, with the converter call its line must hold."""
    out = _deepspeed_save(tmp_path / "ds")
    checkpoint = _trainer_checkpoint(tmp_path / "trainer")
    return {
        "tag dir": (out / TAG, f"python {out / 'zero_to_fp32.py'} {out} OUT -t {TAG}"),
        "save dir": (out, f"python {out / 'zero_to_fp32.py'} {out} OUT --safe"),
        "trainer checkpoint": (checkpoint, f"python {checkpoint / 'zero_to_fp32.py'} {checkpoint}"),
        "trainer run": (checkpoint.parent, f"python {checkpoint / 'zero_to_fp32.py'} {checkpoint}"),
    }


@pytest.mark.parametrize("level", ["tag dir", "save dir", "trainer checkpoint", "trainer run"])
def test_every_level_is_named_deepspeed_with_zero_to_fp32(level, tmp_path):
    given, converter = _levels(tmp_path)[level]
    for command in ("validate", "inspect", "export-hf"):
        args = ["--out", tmp_path / "hf"] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, given, *args)
        line = one_error_line(err)
        assert code == 2 and "a DeepSpeed checkpoint" in line, stdout + err
        assert converter in line and "--safe_serialization" in line, line
        assert "Megatron" not in line and "not a checkpoint" not in line, line
    assert not (tmp_path / "hf").exists()


def test_without_its_copy_of_zero_to_fp32_the_installed_module_is_named(tmp_path):
    out = _deepspeed_save(tmp_path / "ds")
    (out / "zero_to_fp32.py").unlink()
    code, _out, err = run_cli("ckpt", "inspect", out)
    line = one_error_line(err)
    assert code == 2 and f"python -m deepspeed.utils.zero_to_fp32 {out} OUT" in line, err


@pytest.mark.parametrize("level", ["tag dir", "save dir", "trainer checkpoint", "trainer run"])
def test_model_path_names_it_deepspeed_not_the_trainers_pickles(level, tmp_path):
    given, converter = _levels(tmp_path)[level]
    with pytest.raises(ConfigError) as refused:
        resolve_model_source(ModelConfig(path=str(given)))
    said = str(refused.value)
    assert said.startswith("model.path: ") and "a DeepSpeed checkpoint" in said, said
    assert converter in said, said
    for wrong in ("neither", "is a pickle", "from_pretrained", "rng_state", "scheduler.pt"):
        assert wrong not in said, said


def test_import_hf_of_the_trainer_checkpoint_names_deepspeed(tmp_path):
    checkpoint = _trainer_checkpoint(tmp_path / "trainer")
    code, _out, err = run_cli("ckpt", "import-hf", checkpoint, "--out", tmp_path / "imported")
    line = one_error_line(err)
    assert code == 1 and "it is a DeepSpeed checkpoint" in line, err
    assert "is a pickle" not in line and not (tmp_path / "imported").exists()


def test_a_trainer_checkpoint_with_gathered_weights_is_a_model_dir(tmp_path):
    """ZeRO-3 with stage3_gather_16bit_weights_on_model_save: the Trainer writes
    model.safetensors beside the DeepSpeed state, and the checkpoint is a model dir."""
    checkpoint = _trainer_checkpoint(tmp_path / "trainer", weights=True)
    code, _out, err = run_cli("ckpt", "inspect", checkpoint)
    line = one_error_line(err)
    assert code == 2 and "a Hugging Face model dir" in line and "DeepSpeed" not in line, err
    assert resolve_model_source(ModelConfig(path=str(checkpoint))).assets == checkpoint


def test_megatron_legacys_mp_rank_dir_is_still_megatron(tmp_path):
    """The marker told apart: a directory mp_rank_NN/ is Megatron-LM's, a file is not."""
    iteration = tmp_path / "iter_0000005"
    (iteration / "mp_rank_00").mkdir(parents=True)
    (iteration / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"never read")
    code, _out, err = run_cli("ckpt", "validate", iteration)
    line = one_error_line(err)
    assert code == 2 and "a Megatron-LM legacy checkpoint" in line, err
    (iteration / "mp_rank_00" / "model_optim_rng.pt").unlink()
    (iteration / "mp_rank_00").rmdir()
    (iteration / "mp_rank_00").write_bytes(b"a file of that name")
    code, out, err = run_cli("ckpt", "validate", iteration)  # a save that did not finish:
    assert "Megatron-LM legacy" not in one_error_line(out), out + err  # validate's finding


def test_a_deepspeed_save_dir_as_trainer_run_dir_is_refused_as_deepspeeds(tmp_path):
    """Its global_stepN/ are not named as mfsdp's steps: it was taken for an empty run,
    and the run's steps were saved in beside DeepSpeed's."""
    from mfsdp_ckpt.format import layout, run_steps

    out = _deepspeed_save(tmp_path / "ds")
    for refuse in (run_steps.resume_step, lambda run: run_steps.refuse_replacing_steps(run, None)):
        with pytest.raises(layout.CheckpointPathError) as caught:
            refuse(out)
        assert str(caught.value).startswith(
            f"trainer.run_dir: {out} is another trainer's run dir, which mfsdp does not resume"
            f" or save into: {out}: a DeepSpeed checkpoint"
        ), caught.value
