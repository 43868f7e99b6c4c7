"""`mfsdp ckpt import-hf`: a thin click layer over `mfsdp_ckpt.convert.import_hf.import_hf`."""

from __future__ import annotations

import click

from cli.choice import Choice
from cli.config_check_lines import config_check_lines
from cli.dtype_choice import DtypeChoice
from cli.errors import READ_PATH, GivenPath, json_option
from cli.given_once import OnceCommand
from cli.results import allow_nonfinite_option, echo_result, overwrite_option
from trainer.progress import CallbackBar


@click.command(
    "import-hf", cls=OnceCommand, short_help="Hugging Face model -> DCP checkpoint to train."
)
@click.argument("hf_dir", type=READ_PATH)
@click.option(
    "--out",
    "out_dir",
    required=True,
    metavar="DIR",
    type=GivenPath(file_okay=False, output=True),
    help="Directory to create.",
)
@click.option(
    "--layout",
    "layout_name",
    type=Choice(["mcore", "hf"]),
    default="mcore",
    show_default=True,
    help="mcore: a Megatron-core fsdp_dtensor checkpoint (Megatron-LM, verl); DIR is the DCP dir. "
    "hf: an mfsdp run dir (step 0, manifest, huggingface/) that training starts from.",
)
@click.option(
    "--mcore-norms",
    "norms",
    type=Choice(["local", "te"]),
    default=None,
    help="mcore layernorm names: local (the default) = input_layernorm / pre_mlp_layernorm "
    "(Megatron-core's local "
    "spec, no Transformer Engine); te = TE's fused ...linear_qkv.layer_norm_weight / "
    "...mlp.linear_fc1.layer_norm_weight. --layout mcore only.",
)
@click.option(
    "--mcore-experts",
    "experts",
    type=Choice(["auto", "grouped", "sequential"]),
    default=None,
    help="mcore names of an MoE model's experts (--layout mcore only): grouped = TEGroupedMLP's "
    "...mlp.experts.linear_fc1.weight<E>_w (Transformer Engine spec with --moe-grouped-gemm); "
    "sequential = SequentialMLP's ...mlp.experts.local_experts.<E>.linear_fc1.weight_w (local "
    "spec, or TE without --moe-grouped-gemm); auto (the default) = grouped with --mcore-norms "
    "te, else sequential.",
)
@click.option(
    "--dtype",
    type=DtypeChoice(),
    default="auto",
    show_default=True,
    help="auto keeps each tensor's stored dtype (bit-exact); otherwise floating tensors are cast. "
    "torch's names (bfloat16, float16, float32) work too.",
)
@overwrite_option(
    "Replace DIR if it is an empty directory or an earlier import-hf output of the same "
    "--layout (only once the new checkpoint is complete); anything else there (a Hugging "
    "Face model dir, another checkpoint, other files) is never replaced."
)
@allow_nonfinite_option(
    "Import weights holding NaN/Inf (or overflowing --dtype) instead of failing."
)
@json_option("Print the summary as one JSON object on stdout (a failure as {error, exit_code}).")
def import_hf(
    hf_dir: str,
    out_dir: str,
    layout_name: str,
    norms: str | None,
    experts: str | None,
    dtype: str,
    overwrite: bool,
    allow_nonfinite: bool,
    as_json: bool,
) -> None:
    """Convert a Hugging Face safetensors model into a DCP checkpoint, on CPU, in bounded memory.

    HF_DIR holds config.json and model.safetensors (or shards with model.safetensors.index.json);
    Qwen2/Qwen2.5, Qwen3, Llama 3, Mistral, tied or untied, and the mixture-of-experts
    Qwen3-MoE, Qwen2-MoE and Mixtral. Tensors stream one at a time (peak memory tens
    of MiB; with --dtype casting, about the largest tensor in that dtype); DIR appears only
    when complete. A weight holding NaN/Inf stops
    the import (as it stops export-hf). Exit 0 ok, 1 unreadable or inconsistent model, 2 bad
    usage.

    \b
    Examples:
      mfsdp ckpt import-hf runs/demo/hf --out runs/demo_mcore_init
      mfsdp ckpt import-hf Qwen2.5-0.5B --out megatron/release
      mfsdp ckpt import-hf Qwen2.5-0.5B --out runs/q05 --layout hf
    """
    from cli.missing_path import refuse_missing
    from mfsdp_ckpt.convert.import_hf import import_hf as run_import
    from mfsdp_ckpt.format.hub_id import hub_id_hint
    from mfsdp_ckpt.format.path_refusals import refuse_url
    from trainer.threads import configure_threads
    from trainer.tokenizer_vocabulary import vocabulary_missing

    refuse_url(hf_dir)  # `file:///x` read as the local dir file:/x was "no such directory"
    refuse_missing(hf_dir, hint=hub_id_hint(hf_dir, ""))
    configure_threads(1)  # torch writes the checkpoint: train's choice, for one process

    def run():
        with (
            config_check_lines(not as_json),
            # in bytes, as export-hf's bar: tensors go largest first, so a count of them
            # stood still for minutes on the first few and gave no rate or time left
            CallbackBar(enabled=True, unit="B", desc="import", unit_scale=True) as update,
        ):
            progress = (
                (
                    lambda tensors, total, done, total_bytes: update(
                        done, total_bytes, f"{tensors}/{total} tensors"
                    )
                )
                if update
                else None
            )
            return run_import(
                hf_dir,
                out_dir,
                layout_name=layout_name,
                dtype=dtype,
                norms=norms,
                experts=experts,
                overwrite=overwrite,
                progress=progress,
                allow_nonfinite=allow_nonfinite,
            )

    result = run()
    missing = vocabulary_missing(hf_dir)  # as export-hf says it of its output
    if missing is not None:
        result.notes.append(
            f"{missing}: training from {out_dir} needs model.tokenizer=DIR, a local dir with the"
            " model's tokenizer files"
        )
    echo_result(result, as_json, derived=("convert_gb_per_s",))
