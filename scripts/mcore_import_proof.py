"""Proof (1 GPU): an `import-hf --layout mcore` checkpoint loads into Megatron-core under
Megatron-FSDP through Megatron-LM's fsdp_dtensor load path and computes transformers' logits.

Needs CUDA, megatron-core 0.19.2 and megatron-fsdp 0.6.1 (no Transformer Engine: the local
layer spec). Steps:

1. import HF_DIR with `mfsdp_ckpt.convert.import_hf` (layout mcore) into
   WORK/megatron_ckpt/release with `latest_checkpointed_iteration.txt` saying `release`, as
   docs/interop.md's Megatron-LM recipe does; when HF_DIR has no config.json, first write a
   random tiny model of `--family` there (transformers, fp32, norms and biases perturbed so
   a wrong mapping shows);
2. Megatron-LM's first read of every fsdp_dtensor --load: `_load_base_checkpoint(load_dir,
   args, rank0=True)` when megatron.training imports here, else the one call it makes,
   `torch.distributed.checkpoint.load` of `args`, `iteration` and `checkpoint_version`,
   strict (a checkpoint without one of them stops Megatron-LM there);
3. build the GPTModel exactly as tests/fixtures/mcore/make_mcore_fixtures.py does (its own
   functions, with its geometry constants set from HF_DIR's config.json) and wrap it in
   Megatron-core's Megatron-FSDP adapter (optim_grads_params, fp32 main params);
4. load as megatron/training/checkpointing.py does for `--ckpt-format fsdp_dtensor
   --finetune`: `generate_state_dict`'s top-level entries (the run's `args` Namespace,
   `checkpoint_version`, `iteration`) and `state_dict_for_save_checkpoint()` under `model`,
   `preprocess_fsdp_dtensor_state_dict` (fp8 extra state, SwiGLU fc1 -> weight_w/weight_v
   views, uneven DTensor metadata), DCP `load_state_dict` with a strict DefaultLoadPlanner,
   then the adapter's `load_state_dict` of the raw state dict (its post-hook installs the
   loaded main weights);
5. compare the wrapped model's logits with `AutoModelForCausalLM.from_pretrained(HF_DIR)`
   on fixed inputs, fp32, TF32 off; print one JSON line; exit 0 when within --tol.

    torchrun --nproc-per-node 1 scripts/mcore_import_proof.py --hf-dir D --work W
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dist_checkpoint

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "mcore"))

import make_mcore_fixtures as fixtures  # noqa: E402  (the fixture builder's own functions)


def use_geometry(config: dict) -> str:
    """Point the fixture builder's constants at this config; returns the family."""
    family = config["model_type"]
    if family not in fixtures.FAMILIES:
        raise SystemExit(f"{family}: the proof builds {sorted(fixtures.FAMILIES)} only")
    if config.get("rope_scaling"):
        raise SystemExit(
            f"rope_scaling {config['rope_scaling']} is not modelled by the plain-RoPE GPTModel here"
        )
    fixtures.VOCAB, fixtures.HIDDEN, fixtures.FFN = (
        config["vocab_size"],
        config["hidden_size"],
        config["intermediate_size"],
    )
    fixtures.LAYERS, fixtures.HEADS = config["num_hidden_layers"], config["num_attention_heads"]
    fixtures.KV_HEADS = config.get("num_key_value_heads") or config["num_attention_heads"]
    fixtures.MAX_POS = max(
        config.get("max_position_embeddings", fixtures.MAX_POS), fixtures.INPUT_SHAPE[1]
    )
    fixtures.EPS, fixtures.ROPE_THETA = (
        config["rms_norm_eps"],
        float(config.get("rope_theta", fixtures.ROPE_THETA)),
    )
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    fixtures.FAMILIES[family] = {
        **fixtures.FAMILIES[family],
        "head_dim": head_dim,
        "tied": bool(config.get("tie_word_embeddings", False)),
    }
    return family


def write_random_model(hf_dir: Path, family: str) -> None:
    """A tiny random HF model with the fixtures' geometry (norms/biases not at 1/0)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = fixtures.hf_config(family)
    model_type = config.pop("model_type")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(model_type, **config), dtype=torch.float32
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn(param.shape))
    model.save_pretrained(hf_dir)


def fsdp_model_for(family: str):
    """build_gpt_model + the adapter, exactly as make_mcore_fixtures.make_family wraps it."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    torch.manual_seed(0)
    model_parallel_cuda_manual_seed(0)
    config, model = fixtures.build_gpt_model(family)
    ddp_config = DistributedDataParallelConfig(
        data_parallel_sharding_strategy="optim_grads_params",
        use_megatron_fsdp=True,
        megatron_fsdp_main_params_dtype=torch.float32,
    )
    return FullyShardedDataParallel(config=config, ddp_config=ddp_config, module=model)


def preprocess(state_dict: dict, fsdp_model) -> tuple[dict, str]:
    """Megatron-LM's own preprocess_fsdp_dtensor_state_dict when megatron.training imports
    here; else the same three megatron.core calls it makes (SwiGLU on, no experts)."""
    args = SimpleNamespace(swiglu=True, num_experts=None)
    try:
        from megatron.training.checkpointing import preprocess_fsdp_dtensor_state_dict
    except Exception as err:  # megatron.training pulls in optional packages
        from megatron.core.distributed.fsdp.src.megatron_fsdp.uneven_dtensor import (
            preprocess_state_dict_for_uneven_dtensor,
        )
        from megatron.core.transformer.fsdp_dtensor_checkpoint import (
            handle_fp8_extra_state_case,
            handle_swiglu_in_state_dict,
        )

        state_dict = state_dict.copy()
        handle_fp8_extra_state_case(state_dict["model"])
        state_dict["model"], _ = handle_swiglu_in_state_dict(fsdp_model, state_dict["model"], None)
        preprocess_state_dict_for_uneven_dtensor(state_dict)
        return state_dict, f"megatron.core calls (megatron.training: {type(err).__name__}: {err})"
    return preprocess_fsdp_dtensor_state_dict(
        args, state_dict, fsdp_model
    ), "megatron.training.checkpointing"


# What megatron/training/checkpointing.py's rank-0 first read asks of an fsdp_dtensor checkpoint.
FIRST_READ_KEYS = ("args", "iteration", "checkpoint_version")


def first_read_like_megatron_lm(load_dir: Path) -> dict:
    """Megatron-LM's own `_load_base_checkpoint(load_dir, args, rank0=True)`, which
    `load_checkpoint` runs first for every fsdp_dtensor --load (and
    `load_args_from_checkpoint` for --use-checkpoint-args); where megatron.training does not
    import here, the one call it makes on the tracker's directory."""
    try:
        from megatron.training.checkpointing import _load_base_checkpoint
    except Exception as err:  # megatron.training pulls in optional packages
        tracker = (load_dir / "latest_checkpointed_iteration.txt").read_text().strip()
        state_dict: dict = dict.fromkeys(FIRST_READ_KEYS)
        dist_checkpoint.load(state_dict=state_dict, checkpoint_id=str(load_dir / tracker))
        path = f"torch.distributed.checkpoint.load (megatron.training: {type(err).__name__})"
    else:
        args = SimpleNamespace(
            non_persistent_global_ckpt_dir=None,
            non_persistent_ckpt_type=None,
            ckpt_step=None,
            exit_on_missing_checkpoint=True,
            use_megatron_fsdp=True,
            ckpt_format="fsdp_dtensor",
            auto_detect_ckpt_format=False,
        )
        state_dict = _load_base_checkpoint(str(load_dir), args, rank0=True)[0]
        path = "megatron.training.checkpointing._load_base_checkpoint"
    return {
        "first_read": path,
        "first_read_entries": {key: repr(state_dict[key]) for key in FIRST_READ_KEYS},
    }


def load_like_megatron_lm(fsdp_model, checkpoint: Path) -> dict:
    from torch.distributed.checkpoint import FileSystemReader, load_state_dict
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    state_dict = {  # generate_state_dict's entries; `args` is the run's own Namespace
        "args": SimpleNamespace(swiglu=True, num_experts=None),
        "model": fsdp_model.state_dict_for_save_checkpoint(),
        "checkpoint_version": -1.0,
        "iteration": -1,
    }
    raw_model = state_dict["model"].copy()
    state_dict, preprocess_path = preprocess(state_dict, fsdp_model)
    reader = FileSystemReader(str(checkpoint))
    stored = {k for k in reader.read_metadata().state_dict_metadata if k.startswith("model.")}
    requested = {f"model.{k}" for k in state_dict["model"]}
    load_state_dict(
        state_dict=state_dict,
        storage_reader=reader,
        planner=DefaultLoadPlanner(allow_partial_load=False),
    )
    fsdp_model.load_state_dict(
        raw_model, strict=False
    )  # Megatron-LM's load_model_state_dict; installs weights
    return {
        "preprocess": preprocess_path,
        "model_keys_loaded": len(requested),
        "checkpoint_keys_not_requested": sorted(stored - requested),
        "args": repr(state_dict["args"]),
        "checkpoint_version": state_dict["checkpoint_version"],
        "iteration": state_dict["iteration"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hf-dir",
        type=Path,
        required=True,
        help="HF model dir (made here when it has no config.json)",
    )
    parser.add_argument("--work", type=Path, required=True, help="Scratch dir for the import")
    parser.add_argument(
        "--family", default="qwen2", choices=list(fixtures.FAMILIES), help="for a made model"
    )
    parser.add_argument("--tol", type=float, default=1e-4)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1
    )
    try:
        load_dir = args.work / "megatron_ckpt"
        checkpoint = load_dir / "release"
        if rank == 0:
            if not (args.hf_dir / "config.json").is_file():
                write_random_model(args.hf_dir, args.family)
            from mfsdp_ckpt.convert.import_hf import import_hf

            shutil.rmtree(load_dir, ignore_errors=True)  # this proof's own earlier import
            load_dir.mkdir(parents=True)
            imported = import_hf(args.hf_dir, checkpoint, layout_name="mcore")
            (load_dir / "latest_checkpointed_iteration.txt").write_text("release")
            print(f"[proof] {imported.summary()}", file=sys.stderr)
        dist.barrier()
        report = first_read_like_megatron_lm(load_dir)
        family = use_geometry(json.loads((args.hf_dir / "config.json").read_text()))
        fsdp_model = fsdp_model_for(family)
        report.update(load_like_megatron_lm(fsdp_model, checkpoint))
        input_ids = fixtures.fixed_inputs()
        megatron = fixtures.megatron_logits(fsdp_model.eval(), input_ids)
        from transformers import AutoModelForCausalLM

        hf_model = (
            AutoModelForCausalLM.from_pretrained(str(args.hf_dir), dtype=torch.float32)
            .cuda()
            .eval()
        )
        with torch.no_grad():
            reference = hf_model(input_ids=input_ids.cuda()).logits.float().cpu()
        diff = float((megatron - reference).abs().max())
        ok = diff <= args.tol and not report["checkpoint_keys_not_requested"]
        if diff > args.tol:  # diagnosis only: were the loaded main weights never installed?
            fsdp_model.module.install_optimized_model_weights()
            again = fixtures.megatron_logits(fsdp_model.eval(), input_ids)
            report["max_abs_diff_after_explicit_install"] = float((again - reference).abs().max())
        if rank == 0:
            print(
                json.dumps(
                    {
                        "proof": "mcore_import",
                        "family": family,
                        "hf_dir": str(args.hf_dir),
                        "max_abs_diff": diff,
                        "tol": args.tol,
                        "ok": ok,
                        **report,
                        "gpu": torch.cuda.get_device_name(),
                        "versions": fixtures.package_versions(),
                    }
                )
            )
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
