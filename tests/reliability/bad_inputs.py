"""Bad command lines, configs and data (`BAD_INPUTS`): each must be refused with exactly one
`error:` line and the right exit code, next to a copy of the pristine run whose checkpoint
stays byte-identical. Shared by tests/reliability/test_reliability_cli.py and
scripts/reliability_report.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mfsdp_ckpt.format import layout
from tests.reliability.outcome import Expect, Observed, invoke
from tests.reliability.sft_run import BASE_STEP, fresh_copy, sft_args, step_dir, tree_digest


@dataclass(frozen=True)
class BadInput:
    """A command given something wrong; `args(root)` builds its argv against a scratch dir
    holding a copy of the pristine run (`root/run`) and its data (`root/train.jsonl`)."""

    name: str
    what: str
    args: Callable[[Path], list]
    exit_code: int
    fragment: str


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


QUESTION, ANSWER = "What is 1+1? " * 10, "#### 2"
PPO = "python3 -m verl.trainer.main_ppo"


def repeated_rows_parquet(path: Path, row_groups: int, rows: int = 1 << 20) -> Path:
    """GSM8K-shaped rows, one question and answer repeated `rows` times per row group:
    stored once each (dictionary-encoded, indices run-length encoded), about 20 KB per row
    group of 2**20 rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    words = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema([("question", words), ("answer", words)])
    same = pa.array([0] * rows, pa.int32())
    table = pa.Table.from_arrays(
        [
            pa.DictionaryArray.from_arrays(same, pa.array([QUESTION])),
            pa.DictionaryArray.from_arrays(same, pa.array([ANSWER])),
        ],
        schema=schema,
    )
    with pq.ParquetWriter(str(path), schema, compression="zstd") as writer:
        for _ in range(row_groups):
            writer.write_table(table)
    return path


def doubling_script(lines: int) -> str:
    """A verl launch script whose variables double line by line (`A1=$A0$A0`, ...)."""
    doubled = [f"A{i}=$A{i - 1}$A{i - 1}" for i in range(1, lines)]
    return "\n".join(["A0=xxxxxxxx", *doubled, f"{PPO} data.train_files=$A{lines - 1}", ""])


def _sft_on(root: Path, data: Path | None = None, *extra: str) -> list:
    return sft_args(
        data or root / "train.jsonl", root / "run", f"trainer.total_steps={BASE_STEP + 2}", *extra
    )


BAD_INPUTS: tuple[BadInput, ...] = (
    BadInput(
        "unknown_key",
        "override optim.lrr=1",
        lambda r: _sft_on(r, None, "optim.lrr=1"),
        2,
        "unknown config key 'optim.lrr'; did you mean optim.lr",
    ),
    BadInput(
        "mistyped_value",
        "override optim.lr=fast",
        lambda r: _sft_on(r, None, "optim.lr=fast"),
        2,
        "config key 'optim.lr' expects a number, got fast",
    ),
    BadInput(
        "unknown_key_in_file",
        "YAML file with trainer.stepz",
        lambda r: ["train", "sft", "--config", _write(r / "bad.yaml", "trainer:\n  stepz: 3\n")],
        2,
        "unknown config key 'trainer.stepz'",
    ),
    BadInput(
        "config_not_yaml",
        "config file that is not YAML",
        lambda r: ["train", "sft", "--config", _write(r / "bad.yaml", "model: [\n")],
        2,
        "not valid YAML",
    ),
    BadInput(
        "config_missing",
        "--config pointing nowhere",
        lambda r: ["train", "sft", "--config", r / "nope.yaml"],
        2,
        "nope.yaml: no such file or directory",
    ),
    BadInput(
        "data_missing",
        "data.train_files pointing nowhere",
        lambda r: _sft_on(r, r / "absent.jsonl"),
        2,
        "absent.jsonl: no such file or directory",
    ),
    BadInput(
        "missing_columns",
        "rows without messages or prompt/response",
        lambda r: _sft_on(r, _write(r / "nocol.jsonl", '{"question": "1+1"}\n' * 20)),
        2,
        "no 'messages' column",
    ),
    BadInput(
        "empty_dataset",
        "an empty jsonl file",
        lambda r: _sft_on(r, _write(r / "empty.jsonl", "")),
        1,
        "empty.jsonl: holds no rows",
    ),
    BadInput(
        "prompt_too_long",
        "rows longer than data.max_length with truncation=error",
        lambda r: _sft_on(r, None, "data.max_length=16", "data.truncation=error"),
        2,
        "more text than data.max_length=16 tokens can hold",
    ),
    BadInput(
        "resume_path_missing",
        "checkpoint.resume=<missing path>",
        lambda r: _sft_on(r, None, f"checkpoint.resume={r / 'nope'}"),
        2,
        "nope: no such file or directory",
    ),
    BadInput(
        "run_dir_unwritable",
        "trainer.run_dir below a regular file",
        lambda r: sft_args(r / "train.jsonl", r / "train.jsonl" / "run", "trainer.total_steps=1"),
        2,
        "train.jsonl is a file, not a directory",
    ),
    BadInput(
        "nproc_zero",
        "--nproc-per-node 0",
        lambda r: [*_sft_on(r)[:2], "--nproc-per-node", "0", *_sft_on(r)[2:]],
        2,
        "--nproc-per-node must be >= 1",
    ),
    BadInput(
        "export_out_unwritable",
        "export-hf --out below a regular file",
        lambda r: ["ckpt", "export-hf", r / "run", "--out", r / "train.jsonl" / "hf"],
        2,
        "train.jsonl is a file, not a directory",
    ),
    BadInput(
        "export_out_exists",
        "export-hf --out onto an existing dir",
        lambda r: ["ckpt", "export-hf", r / "run", "--out", r],
        2,
        "holds the checkpoint being exported",
    ),
    BadInput(
        "export_ckpt_missing",
        "export-hf of a missing path",
        lambda r: ["ckpt", "export-hf", r / "nope", "--out", r / "hf"],
        2,
        "no such file or directory",
    ),
    BadInput(
        "validate_not_a_checkpoint",
        "validate of a dir that holds no checkpoint",
        lambda r: [
            "ckpt",
            "validate",
            r / "run" / layout.step_dir(r, BASE_STEP).name / layout.HF_ASSETS_DIR,
        ],
        2,
        "not a checkpoint",
    ),
    BadInput(
        "data_input_missing",
        "data gsm8k --input pointing nowhere",
        lambda r: ["data", "gsm8k", "--input", r / "nope.jsonl", "--out", r / "data"],
        2,
        "nope.jsonl",
    ),
    BadInput(
        "data_parquet_bomb",
        "data gsm8k --input: 300 KB of parquet holding 16M repeated rows",
        lambda r: [
            "data",
            "gsm8k",
            "--split",
            "train",
            "--out",
            r / "data",
            "--input",
            repeated_rows_parquet(r / "bomb.parquet", row_groups=16),
        ],
        2,
        "decodes to more than",
    ),
    BadInput(
        "verl_script_variable_bomb",
        "config from-verl of a script whose 40 variables double line by line",
        lambda r: ["config", "from-verl", _write(r / "run.sh", doubling_script(40))],
        2,
        "variables expand to more than",
    ),
    BadInput(
        "verl_source_fifo",
        "config from-verl of a FIFO nobody writes to",
        lambda r: ["config", "from-verl", _fifo(r / "run.sh")],
        2,
        "a FIFO, not a regular file",
    ),
    BadInput(
        "model_unbuildable",
        "model.overrides={hidden_act: nope}: an activation transformers lacks, refused where"
        " the overrides are read (in a new run dir: resuming, the step's own config is"
        " compared with it first)",
        lambda r: sft_args(
            r / "train.jsonl",
            r / "new_run",
            "trainer.total_steps=2",
            "model.overrides={hidden_act: nope}",
        ),
        2,
        "model.overrides.hidden_act: nope is no activation transformers has",
    ),
)


def run_bad_input(bad: BadInput, pristine: Path, scratch: Path) -> Observed:
    """Run one bad command next to a copy of the pristine run; the run must be left intact."""
    run = fresh_copy(pristine, scratch)
    before = tree_digest(step_dir(run))
    outcome = invoke(bad.args(scratch))
    problems = Expect(bad.exit_code, bad.fragment).check(outcome)
    if len([line for line in outcome.output.splitlines() if line.startswith("error:")]) != 1:
        problems.append("not exactly one error line")
    if tree_digest(step_dir(run)) != before:
        problems.append("the previous checkpoint changed")
    return Observed(outcome, problems)
