"""`mfsdp demo`: the whole product on a tiny model, on CPU, with nothing downloaded.

Data in GSM8K's official format -> `mfsdp data gsm8k` -> `mfsdp train sft` (FSDP2, two
processes under torchrun) -> `mfsdp ckpt validate --deep` -> `mfsdp ckpt export-hf` ->
reload the export with transformers and answer a question. Each stage is the library call
behind the matching command, so the demo exercises what users run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click

from cli.errors import EXIT_USAGE, GivenPath, fail
from cli.launch import CONFIG_CHECKED, run_ranks
from mfsdp_ckpt.storage.out_lock import out_lock
from mfsdp_ckpt.storage.writable import require_writable_dir

if TYPE_CHECKING:
    from transformers import BatchEncoding

EXAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "sft_tiny_cpu.yaml"
# What a demo dir holds: GSM8K-format rows, their tables, the initial model, the run, the export
RAW_DIR, DATA_DIR, INIT_DIR, RUN_DIR, EXPORT_DIR = "gsm8k_format", "data", "init_model", "sft", "hf"


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=GivenPath(file_okay=False),
    default="runs/demo",
    show_default=True,
    help="Demo directory: new, empty, or a previous demo's (which is replaced).",
)
@click.option(
    "--nproc",
    type=click.IntRange(1, 8),
    default=2,
    show_default=True,
    help="Training processes (torchrun with gloo on CPU when > 1).",
)
@click.option(
    "--steps", type=click.IntRange(1), default=80, show_default=True, help="SFT optimizer steps."
)
def demo(out_dir: str, nproc: int, steps: int) -> None:
    """Train a tiny Qwen2-shaped model on synthetic GSM8K-style data on CPU, checkpoint it,
    validate the checkpoint, export it to Hugging Face safetensors, and generate from it.

    \b
    Example:
      mfsdp demo --out /tmp/mfsdp-demo
    """
    out = Path(out_dir)
    require_writable_dir("--out", out)
    with out_lock(out, "--out"):  # a second demo into `out` meanwhile would delete this one's
        _claim(out)
        _run(out, nproc, steps)


def _run(out: Path, nproc: int, steps: int) -> None:
    """The demo's phases, into the claimed `out`."""
    started = time.monotonic()
    # Each phase that takes seconds says so as it starts (loading torch and transformers alone
    # takes seconds on 2 cores), so the output never sits still without a line.
    _say(f"data: writing GSM8K-format rows, converting them, building a tiny model in {out} ...")
    _quiet_model_loading()
    from mfsdp_ckpt.check.validate import validate_checkpoint
    from mfsdp_ckpt.convert.export_hf import export_hf
    from trainer.data.math_datasets import convert_files
    from trainer.tiny import build_tiny_model_dir, synthetic_arithmetic

    raw = out / RAW_DIR / "train.jsonl"
    raw.parent.mkdir(parents=True)
    raw.write_text(
        "".join(
            json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n"
            for r in synthetic_arithmetic(320, seed=7)
        )
    )
    tables = convert_files("gsm8k", [str(raw)], out / DATA_DIR)
    model_dir = build_tiny_model_dir(out / INIT_DIR, with_weights=True)
    _say(
        f"data: {tables['sft/train']} (SFT) and {tables['rl/train']} (RL); initial model: "
        f"{model_dir}"
    )

    run_dir = out / RUN_DIR
    overrides = [
        f"model.path={model_dir}",
        f"data.train_files={tables['sft/train']}",
        f"trainer.run_dir={run_dir}",
        f"trainer.total_steps={steps}",
        "data.global_batch_size=16",
        f"checkpoint.save_every={max(1, steps // 2)}",
        "trainer.progress_bar=false",
        "trainer.log_every=5",
        f"trainer.eval_every={max(1, steps // 2)}",
    ]
    command = [
        sys.executable,
        "-m",
        "cli.train",
        "sft",
        "--config",
        str(EXAMPLE_CONFIG),
        *overrides,
    ]
    if nproc > 1:
        command[1:3] = [
            "-m",
            "cli.torchrun",
            "--standalone",
            f"--nproc-per-node={nproc}",
            "-m",
            "cli.train",
        ]
    _say(f"train: {nproc} process(es), FSDP2 on CPU, {steps} steps")
    from trainer.threads import configure_threads

    # chosen here, as `mfsdp train` chooses for the ranks it launches (they inherit it): a
    # pinned OMP_NUM_THREADS=1 read to them as the user's, whom `-v` told to unset it
    configure_threads(nproc)
    env = dict(os.environ)
    env[CONFIG_CHECKED] = "1"  # as under `mfsdp train`: one line for a mistake or a Ctrl-C
    if run_ranks(command, env=env) != 0:  # in the user's directory: `--out` may be relative
        raise SystemExit(1)

    _say(f"validate --deep {run_dir}: hashing every file, reading every tensor ...")
    report = validate_checkpoint(run_dir, deep=True)
    for finding in report.findings:
        _say(f"validate: {finding}")
    _say(f"validate --deep {run_dir}: {'valid' if report.ok() else 'INVALID'}")
    if not report.ok():
        raise SystemExit(1)

    hf_dir = out / EXPORT_DIR
    _say(f"export-hf: {run_dir} -> {hf_dir}, then reading it back (--verify) ...")
    result = export_hf(run_dir, hf_dir, dtype="fp32", verify=True)
    if result.mismatches:
        _say(f"export-hf: {len(result.mismatches)} tensor(s) differ from the checkpoint")
        raise SystemExit(1)
    _say(
        f"export-hf: {result.tensors} tensors, {result.bytes / 2**20:.1f} MiB -> {hf_dir} "
        "(verified)"
    )

    question = synthetic_arithmetic(1, seed=99)[0]["question"]
    _say(f"generate: loading {hf_dir} with transformers, answering {question!r} ...")
    answer = _generate(hf_dir, question)
    _say(f"generate: {question!r} -> {answer!r} (a tiny model after a short run: expect the")
    _say("  answer's format, not a correct sum; the pipeline, not the model, is the point)")
    _say(f"done in {time.monotonic() - started:.0f}s; run: {run_dir}, export: {hf_dir}")


def _quiet_model_loading() -> None:
    """transformers draws a bar for every model it writes or loads (here four, two of them
    from the ranks at once): they came between the demo's own lines. The variable reaches the
    ranks; this process may have loaded transformers already, so its switch is used too."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


DEMO_MARKER = ".mfsdp-demo"  # written first into every demo dir: only such a dir is ever replaced
# Everything a demo writes into its dir (`_run`): only a dir holding nothing else is replaced.
DEMO_ENTRIES = frozenset({DEMO_MARKER, RAW_DIR, DATA_DIR, INIT_DIR, RUN_DIR, EXPORT_DIR})
_SHOWN_ENTRIES = 3


def _claim(out: Path) -> None:
    """Make `out` an empty demo dir. A previous demo's output is replaced; any other non-empty
    directory is refused (exit 2), since its contents are not the demo's to delete, and so is
    a previous demo's that holds anything else (a LoRA run or an export a user put beside
    the demo's own: it was deleted with them)."""
    if out.is_dir() and any(out.iterdir()):
        if not (out / DEMO_MARKER).is_file():
            fail(
                f"{out}: directory is not empty and is not a previous demo's output "
                f"(no {DEMO_MARKER}); choose a new --out",
                EXIT_USAGE,
            )
        foreign = sorted(p.name for p in out.iterdir() if p.name not in DEMO_ENTRIES)
        if foreign:
            shown = ", ".join(foreign[:_SHOWN_ENTRIES])
            more = (
                f" (+{len(foreign) - _SHOWN_ENTRIES} more)" if len(foreign) > _SHOWN_ENTRIES else ""
            )
            fail(
                f"{out}: a previous demo's output that also holds {shown}{more}, which the demo"
                " did not write and will not delete; move it elsewhere, or choose a new --out",
                EXIT_USAGE,
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text("written by mfsdp demo: the next demo run replaces this dir\n")


def _generate(model_dir: Path, question: str) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.tiny import GSM8K_SUFFIX

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompt = cast(
        "BatchEncoding",  # return_dict=True; the stubs' overloads do not say so
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{question} {GSM8K_SUFFIX}"}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        ),
    )
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=32, do_sample=False)
    answer = output[0, prompt["input_ids"].shape[1] :]
    return cast(str, tokenizer.decode(answer, skip_special_tokens=True))  # one sequence: a str


def _say(message: str) -> None:
    click.echo(f"[demo] {message}")
