"""`mfsdp ckpt export-hf`: a thin click layer over `mfsdp_ckpt.convert.export_hf.export_hf`."""

from __future__ import annotations

import math
import os
import re

import click

from cli.choice import Choice
from cli.config_check_lines import config_check_lines
from cli.dtype_choice import DtypeChoice
from cli.errors import READ_PATH, GivenPath, json_option
from cli.given_once import OnceCommand
from cli.metadata_progress import metadata_progress
from cli.results import allow_nonfinite_option, echo_result, overwrite_option
from trainer.progress import CallbackBar

# `--max-shard-size 5`: a byte count, as transformers reads it. A shard is plausibly 1 MB to
# 1 TB: a bare number of fewer bytes surely meant a unit, the one putting it in that range
# nearest transformers' default shard size (5 -> 5GB, 500 -> 500MB).
_BARE_NUMBER = re.compile(r"\s*[0-9]+(\.[0-9]+)?\s*")
PLAUSIBLE_SHARD_BYTES = (10**6, 10**12)
_UNITS = ("KB", "MB", "GB", "TB")


@click.command(
    "export-hf", cls=OnceCommand, short_help="Checkpoint -> Hugging Face model directory."
)
@click.argument("ckpt", type=READ_PATH)  # empty: refused, was read as the current dir
@click.option(
    "--out",
    "out_dir",
    required=True,
    metavar="DIR",
    type=GivenPath(output=True),
    help="Directory to create.",
)
@click.option(
    "--dtype",
    type=DtypeChoice(),
    default="auto",
    show_default=True,
    help="auto = the dtype in config.json (bf16 for Qwen and Llama releases); without one there, "
    "the stored weights' own (fp32 main params in mfsdp's checkpoints; a bf16 Megatron run "
    "stores bf16 weights, its fp32 main weights are optimizer state, which is not exported). "
    "torch's names (bfloat16, float16, float32) work too.",
)
@click.option(
    "--max-shard-size",
    default=None,
    help="Most tensor bytes per safetensors file (5GB, 500MB, 2GiB, ...)  [default: 5GB], as in"
    " transformers: each file's JSON header comes on top, and a tensor larger than this gets a"
    " file of its own. A bare number counts"
    " bytes, as in transformers; under 1 MB a note (stderr, and --json's notes) names the"
    " unit likely meant."
    " An adapter export (one adapter_model.safetensors) refuses it.",
)
@click.option(
    "--hf-config",
    type=GivenPath(exists=False),
    default=None,
    help="HF model dir (config + tokenizer) or config.json; wins over the checkpoint's own "
    "(huggingface/, or the config derived from Megatron-LM's args / Megatron-Bridge's "
    "run_config.yaml); needed where the checkpoint records neither.",
)
@click.option(
    "--layout",
    "layout_name",
    type=Choice(["auto", "hf", "mcore"]),
    default="auto",
    show_default=True,
    help="Weight names: hf (transformers, FSDP2, megatron_fsdp.fully_shard) or mcore "
    "(Megatron-core GPTModel, fsdp_dtensor).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Threads reading, converting and writing concurrently  [default: 4]. The export of"
    " an mfsdp LoRA checkpoint or of an adapter saved alone (one tensor at a time) refuses it.",
)
@click.option(
    "--io",
    type=Choice(["auto", "local", "tensorstore"]),
    default="auto",
    show_default=True,
    help="How bytes are read: auto = os.pread for paths, tensorstore for URLs.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Re-read every written tensor and compare it with its source, check the written files"
    " and index hold exactly the checkpoint's tensors, as transformers loads them, and hash the"
    " checkpoint's files against its manifest; exit 1 on any mismatch. First, config.json is"
    " built with transformers' own config class: one it refuses is refused before anything is"
    " written.",
)
@click.option(
    "--role",
    type=Choice(["actor", "critic"]),
    default=None,
    help="verl RL step with actor/ and critic/: which one (default actor; a critic is refused, "
    "its value head is not a language model).",
)
@click.option(
    "--adapter-only",
    is_flag=True,
    help="LoRA checkpoints: write a PEFT adapter dir (adapter_config.json + "
    "adapter_model.safetensors). Without it a LoRA checkpoint exports merged "
    "onto the base model its manifest names (Megatron LoRA: onto the base weights saved "
    "beside it; an adapter saved alone, Megatron-Bridge's or the HF Trainer's PEFT save: "
    "onto --hf-config BASE_DIR's weights).",
)
@click.option(
    "--lora-alpha",
    type=float,
    default=None,
    metavar="A",
    help="Megatron or HF Trainer PEFT LoRA checkpoints whose alpha is recorded nowhere (verl"
    " saves none): the run's alpha; the merge adds alpha / dim * linear_out @ linear_in"
    " (lora_B @ lora_A). Overrides a recorded one.",
)
@click.option(
    "--drop-mtp",
    is_flag=True,
    help="Megatron checkpoints of a run with multi-token prediction (--mtp-num-layers): leave"
    " the MTP layers (mtp.layers.N.*, and adapters on them) out, unread, and export the main"
    " model; a note says how many were left out. Without it such a checkpoint is refused"
    " (exit 1): the transformers models export writes have no MTP layers.",
)
@overwrite_option(
    "Replace DIR if it is empty or an earlier export-hf output (once the new one is done;"
    " exports made before 2026-12-06 carry no export mark and are refused)."
)
@allow_nonfinite_option("Export weights holding NaN/Inf (by default: exit 1 naming one).")
@json_option("Print the summary as one JSON object on stdout (a failure as {error, exit_code}).")
def export_hf(
    ckpt: str,
    out_dir: str,
    dtype: str,
    max_shard_size: str | None,
    hf_config: str | None,
    layout_name: str,
    workers: int | None,
    io: str,
    verify: bool,
    role: str | None,
    adapter_only: bool,
    lora_alpha: float | None,
    drop_mtp: bool,
    overwrite: bool,
    allow_nonfinite: bool,
    as_json: bool,
) -> None:
    """Convert a checkpoint to a Hugging Face model directory, on CPU, in bounded memory.

    CKPT is any level of a checkpoint (run dir via the tracker, step dir, verl's actor/ or
    actor/model/, a dist_ckpt dir, Megatron-LM's iter_0000100/, the HF Trainer's output dir,
    checkpoint-N/ or pytorch_model_fsdp_0/, a directory holding one run; layouts in
    docs/interop.md), or a URL (file://, gs://, s3://, http(s)://).
    The result loads with AutoModelForCausalLM.from_pretrained(DIR) and
    AutoTokenizer.from_pretrained(DIR): model*.safetensors (+ index when sharded) and the
    config, generation config and tokenizer files. Tensors stream a few at a time (peak
    memory about the largest tensor plus a fixed buffer, from a path or a URL alike: one
    that keeps its name is read a few MiB at a time, never whole, docs/benchmarks.md);
    the export appears only when complete. Exit 0 ok, 1 bad checkpoint or verify
    mismatch, 2 bad usage.

    \b
    Examples:
      mfsdp ckpt export-hf runs/demo --out hf/demo
      mfsdp ckpt export-hf verl_run/global_step_40 --out hf/step40
      mfsdp ckpt export-hf megatron_run --out hf/q7 --dtype bf16 --verify   # config from args
      mfsdp ckpt export-hf megatron_run --out hf/q7 --drop-mtp   # run with --mtp-num-layers
      mfsdp ckpt export-hf ckpts/iter_0001000 --hf-config Qwen2.5-7B/ --out hf/q7 \\
        --dtype bf16 --verify
      mfsdp ckpt export-hf runs/sft_lora --out hf/lora-adapter --adapter-only  # docs/lora.md
    """
    # Tensors are allocated and freed one after another; with transparent huge pages torch
    # faults them in 2 MiB pages instead of 4 KiB ones, fewer faults per tensor (the
    # settings docs/benchmarks.md's export runs use). Read by torch at its first large
    # allocation, so set it first.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    from trainer.threads import configure_threads_when_torch_loads

    # --verify, a dtype conversion, LoRA merges load torch: train's choice, for one process,
    # made only when torch loads (a plain copy of safetensors loads none)
    configure_threads_when_torch_loads()
    from mfsdp_ckpt.convert.export_hf import export_hf as run_export

    # progress goes to stderr under --json too: stdout holds the one JSON object
    bar = CallbackBar(enabled=True, unit="B", desc="export", unit_scale=True)
    # a merged LoRA export first hashes the whole base model (it must be the one trained on)
    base_bar = CallbackBar(True, "B", desc="export base model", unit_scale=True)
    # --verify reads and converts every tensor again, as long as the export took
    verify_bar = CallbackBar(True, "B", desc="verify", unit_scale=True)

    def progress(tensors: int, total_tensors: int, done: int, total: int) -> None:
        bar.update(done, total, f"{tensors}/{total_tensors} tensors")

    def verify_progress(tensors: int, total_tensors: int, done: int, total: int) -> None:
        bar.close()  # the export's bar, done: one bar at a time
        verify_bar.update(done, total, f"{tensors}/{total_tensors} tensors")

    def run():
        try:
            return run_export(
                ckpt,
                out_dir,
                dtype=dtype,
                max_shard_size=_shard_size(max_shard_size),
                hf_config=hf_config,
                layout_name=layout_name,
                workers=workers,
                verify=verify,
                overwrite=overwrite,
                io=io,
                progress=progress,
                role=role,
                allow_nonfinite=allow_nonfinite,
                adapter_only=adapter_only,
                lora_alpha=lora_alpha,
                drop_mtp=drop_mtp,
                base_progress=base_bar.update if base_bar.enabled else None,
                verify_progress=verify_progress if verify_bar.enabled else None,
            )
        finally:
            base_bar.close()
            bar.close()
            verify_bar.close()

    with metadata_progress(), config_check_lines(not as_json):
        result = run()
    result.notes[:0] = _bare_size_notes(max_shard_size)
    echo_result(result, as_json, derived=("gb_per_s", "convert_gb_per_s", "verify_gb_per_s"))


def _shard_size(text: str | None) -> int | None:
    """--max-shard-size in bytes (`parse_size`), None when not given (the export's default,
    or its refusal where it has no use for one). A bare number counts bytes, as transformers
    reads it (`_bare_size_notes` says when that looks unmeant)."""
    from mfsdp_ckpt.convert.export_options import parse_size

    return None if text is None else parse_size(text)


def _bare_size_notes(text: str | None) -> list[str]:
    """The export's note on a bare --max-shard-size under PLAUSIBLE_SHARD_BYTES, with the
    unit that puts it in that range nearest transformers' default: `--max-shard-size 5` wrote
    one file per tensor without a word, where 5GB was meant. Among the export's notes, so
    --json reports it as it reports them; none for a size with a unit or a plausible one."""
    from mfsdp_ckpt.convert.export_options import DEFAULT_MAX_SHARD_SIZE, parse_size

    if text is None or not _BARE_NUMBER.fullmatch(text):
        return []
    given, (low, high) = text.strip(), PLAUSIBLE_SHARD_BYTES
    size = parse_size(given)
    if size >= low:
        return []
    # one always fits: under 10**6, the number in MB lies in the range
    fitting = [unit for unit in _UNITS if low <= parse_size(given + unit) <= high]
    nearest = min(
        fitting, key=lambda unit: abs(math.log(parse_size(given + unit) / DEFAULT_MAX_SHARD_SIZE))
    )
    return [f"--max-shard-size {given}: {size} bytes; did you mean {given}{nearest}?"]
