"""A Megatron-LM save export does not read is refused, or passed over, for its own cause:

* a model saved in virtual-pipeline chunks (`model0`, `model1`, each numbering its layers
  from 0): export-hf said layers were missing, validate named the chunks; both name them;
* a newer iter_N/ in torch_dist beside the tracked fsdp_dtensor step: the note offered it
  to read ("give ITER to read the newer one"), and giving it was exit 2; it is named as a
  format mfsdp does not read, with its converter;
* a fused fc1 with several tensor-parallel ranks whose args name ckpt_format torch_dist (a
  save converted by checkpoint_inspector without --swiglu): the refusal said torch_dist
  "saves with one rank only" (that is torch_dcp) and named no remedy; it names --swiglu.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import STEP, mcore_weights, megatron_args, save_dcp


def _megatron(root: Path, model, state: dict, **args) -> Path:
    run = root / "megatron"
    record = {"args": megatron_args(model, **args), "checkpoint_version": 3.0, "iteration": STEP}
    save_dcp({**record, **state}, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run


def test_virtual_pipeline_chunks_are_named_by_export_as_by_validate(tmp_path):
    model = tiny_causal_lm("qwen2")
    weights = mcore_weights(model)
    first = {k: v for k, v in weights.items() if ".layers.1." not in k}
    second = {
        k.replace(".layers.1.", ".layers.0."): v for k, v in weights.items() if ".layers.1." in k
    }
    run = _megatron(tmp_path, model, {"model0": first, "model1": second})
    code, stdout, _err = run_cli("ckpt", "validate", run)
    assert code == 1 and "model entries model0, model1" in stdout, stdout
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "model entries model0, model1: a model saved in virtual-pipeline" in line
    assert "num_hidden_layers" not in line, line


def test_a_newer_torch_dist_step_is_named_as_one_mfsdp_does_not_read(tmp_path):
    model = tiny_causal_lm("qwen2")
    run = _megatron(tmp_path, model, {"model": mcore_weights(model)})
    newer = run / f"iter_{2 * STEP:07d}"
    newer.mkdir()
    (newer / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    (newer / "common.pt").write_bytes(b"")
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0, stdout + err
    note = next(line for line in err.splitlines() if line.startswith("note:"))
    assert f"{newer.name}/ is newer but a Megatron dist_checkpointing (torch_dist)" in note, note
    assert "convert-torch-dist-to-fsdp-dtensor" in note and "to read the newer" not in note, note


def test_a_fused_fc1_converted_from_torch_dist_names_swiglu(tmp_path):
    model = tiny_causal_lm("qwen2")
    weights = {f"module.{k}": v for k, v in to_mcore(model, norms="te", fc1="fused").items()}
    run = _megatron(
        tmp_path,
        model,
        {"model": weights},
        ckpt_format="torch_dist",
        tensor_model_parallel_size=2,
        use_megatron_fsdp=False,
    )
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "re-run the conversion with --swiglu" in line, err
    assert "ckpt_format 'torch_dist'" in line and "one rank only" not in line, line
