#!/usr/bin/env python
"""Run every fault of the reliability suite and write docs/reliability.md.

The faults are the tests' own tables (tests/reliability/: FAULTS, CRASHES, BAD_INPUTS,
the disk-full case); the hostile-allocation and fuzz suites are run through
pytest and reported per test. So the document shows what the tests check, observed now.

    python scripts/reliability_report.py                  # everything (~5 min on 2 cores)
    python scripts/reliability_report.py --skip-crash     # without the 2-process kill runs
    python scripts/reliability_report.py --out /tmp/r.md  # elsewhere

Exit 0 when every row passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.reliability.bad_inputs import BAD_INPUTS, run_bad_input  # noqa: E402
from tests.reliability.crashes import CRASH_STEPS, crash_data, reference_run, run_chain  # noqa: E402
from tests.reliability.disk_full import disk_full_run  # noqa: E402
from tests.reliability.faults import CONSUMERS, FAULTS, apply_and_consume  # noqa: E402
from tests.reliability.outcome import Expect  # noqa: E402
from tests.reliability.sft_run import make_pristine  # noqa: E402

PYTEST_SUITES = (
    "tests/reliability/test_reliability_hostile.py",
    "tests/reliability/test_reliability_fuzz.py",
    "tests/reliability/test_reliability_limits.py",
    "tests/reliability/test_reliability_opcode_fuzz.py",
    "tests/reliability/test_hostile_outputs.py",
    "tests/reliability/test_hostile_config.py",
    "tests/trainer/test_resume_mismatch.py",
    "tests/ckpt/test_interop_hostile.py",
    "tests/ckpt/test_safe_files.py",
)


def cell(text: str, scratch: Path, limit: int = 140) -> str:
    """One table cell: scratch paths shortened, pipes escaped, long messages cut."""
    text = text.replace(str(scratch), "…").replace("\n", " ").replace("|", "\\|")
    text = re.sub(r"/tmp/[\w./-]*?/(run|disk|src)/", r"…/\1/", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict(problems: list[str]) -> str:
    return "pass" if not problems else "**FAIL**: " + "; ".join(problems)


def expected_text(expect: Expect) -> str:
    text = f"exit {expect.exit_code}" + (f", says “{expect.fragment}”" if expect.fragment else "")
    return text + (f" ({expect.note})" if expect.note else "")


def matrix_rows(scratch: Path) -> tuple[list[str], int]:
    pristine = make_pristine(scratch / "pristine")
    rows, failures = [], 0
    for fault in FAULTS:
        for consumer in CONSUMERS:
            observed = apply_and_consume(
                fault, pristine, scratch / f"{fault.name}-{consumer}", consumer
            )
            failures += bool(observed.problems)
            rows.append(
                f"| {fault.name} | {fault.kind} | {fault.what} | {consumer} | "
                f"{expected_text(fault.expect[consumer])} | "
                f"{cell(observed.outcome.brief(), scratch)} | "
                f"{verdict(observed.problems)} |"
            )
    return rows, failures


def any_data_file(text: str) -> str:
    """`text` with a DCP data file's name written `__*.distcp`: which of a save's writers meets
    the full disk first is a race, and the page would change with it from run to run."""
    return re.sub(r"__\d+_\d+\.distcp", "__*.distcp", text)


def bad_input_rows(scratch: Path) -> tuple[list[str], int]:
    pristine = make_pristine(scratch / "pristine-bad")
    rows, failures = [], 0
    for bad in BAD_INPUTS:
        observed = run_bad_input(bad, pristine, scratch / f"bad-{bad.name}")
        failures += bool(observed.problems)
        rows.append(
            f"| {bad.name} | {bad.what} | exit {bad.exit_code}, says “{bad.fragment}” | "
            f"{cell(observed.outcome.brief(), scratch)} | {verdict(observed.problems)} |"
        )
    observed, how = disk_full_run(pristine, scratch / "disk-full")
    failures += bool(observed.problems)
    said = cell(any_data_file(observed.outcome.brief()), scratch)
    rows.append(
        f"| disk_full | resumed run's next save hits a full disk: {how} | "
        "exit 1, says “saving step”, "
        f"step 2 and tracker intact, no temp dir | {said} | "
        f"{verdict(observed.problems)} |"
    )
    return rows, failures


def crash_rows(scratch: Path) -> tuple[list[str], int]:
    data = crash_data(scratch)
    reference = reference_run(data, scratch)
    rows, failures = [], 0
    for result in run_chain(data, scratch, reference):
        failures += bool(result.problems)
        rows.append(
            f"| {result.crash.name} | {result.crash.when} | `{result.kill_at}` | "
            f"{result.killed_rc} | "
            f"exit {result.validate.exit_code}, step {result.validated_step} | "
            f"{result.resumed_from} | "
            f"{'bitwise equal' if result.losses_equal else 'differ'} | "
            f"{result.seconds:.0f} s | "
            f"{verdict(result.problems)} |"
        )
    return rows, failures


def pytest_rows(scratch: Path) -> tuple[list[str], int]:
    report = scratch / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            *PYTEST_SUITES,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    rows, failures = [], 0
    for case in ElementTree.parse(report).iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        failures += failed or skipped
        outcome = "**FAIL**" if failed else ("**skipped**" if skipped else "pass")
        rows.append(
            f"| {case.get('classname', '').split('.')[-1]} | {case.get('name')} | "
            f"{float(case.get('time', 0)):.1f} s | {outcome} |"
        )
    return rows, failures


def render(sections: dict[str, tuple[list[str], int]], seconds: float) -> str:
    import torch

    failed = sum(f for _, f in sections.values())
    lines = [
        "# Reliability: faults tried and what happened",
        "",
        "Generated by `python scripts/reliability_report.py` from the tables the tests in",
        "`tests/reliability/` run: add a case to `faults.py`, `crashes.py` or `bad_inputs.py`.",
        f"Run {datetime.date.today()} on {os.cpu_count()} CPU cores, "
        f"Python {platform.python_version()},"
        f" torch {torch.__version__}, in {seconds / 60:.1f} min: "
        + ("**every row passed**." if not failed else f"**{failed} row(s) failed**."),
        "",
        "Exit codes: 0 ok, 1 the check or run failed, 2 bad usage. "
        "`…` stands for the scratch directory.",
        "",
    ]
    if "crash" in sections:
        lines += [
            "## Crash safety: SIGKILL during a checkpoint save",
            "",
            "A 2-process FSDP2 run (gloo, tiny model, `mfsdp train sft --nproc-per-node 2`) "
            "saves every 2 steps",
            f"up to step {CRASH_STEPS}, and is killed once at each point below: "
            "`MFSDP_CKPT_KILL_AT=<phase>:<rank>@<step>`",
            "SIGKILLs one rank at that point of the save of that step (torchrun then stops "
            "the other). After each",
            "kill `mfsdp ckpt validate RUN` must exit 0 on the step saved before it, and "
            "`checkpoint.resume=auto`",
            "must continue from that step, with losses equal to an uninterrupted run's bit "
            "for bit, up to the",
            "next kill point, where that launch is killed in turn (so every kill is also "
            "resumed from). The last",
            "launch finishes the run; its final checkpoint must pass "
            "`validate --deep --strict`. Time: the killed launch and validate.",
            "",
            "| Kill point | When | MFSDP_CKPT_KILL_AT | Killed run rc | validate | "
            "Resumed from | Losses | Time | Result |",
            "|---|---|---|---|---|---|---|---|---|",
            *sections["crash"][0],
            "",
        ]
    lines += [
        "## Reading a run that is still saving",
        "",
        "Not one of the generated tables: `tests/reliability/test_steps_removed_while_read.py` and",
        "`tests/ckpt/test_removed_while_read.py` check these cases. A run that saves with",
        "`checkpoint.keep_last` removes its old steps while `validate`, `export-hf`, `inspect`"
        " or a",
        "run resuming from that run's dir (`checkpoint.resume=PATH`) may be reading one. When"
        " the step's directories changed while it",
        "was read (a file, the step or its manifest gone), or the tracker named a step that"
        " is gone",
        "by the time the steps are listed and names a newer one now, the read fails in one line,",
        "exit 1: `step N was removed while it was read (a run still saving with keep_last?);"
        " read it",
        'again`. `inspect`, which shows what it could not read (an entry "not decoded", a'
        " record's",
        "problem) instead of failing, says so when its read ended well too: it never describes"
        " half",
        "a step. It is not reported as damage (“their data file __0_0.distcp is missing”,"
        " INVALID):",
        "a step left alone that lacks a file still is. A complete step newer than the one the"
        " tracker",
        "names (the saver renames a step into place, then updates the tracker; a run stopped"
        " between",
        "the two leaves one) is a note, not a warning: the tracker's step is the one read and"
        " the one",
        "`checkpoint.resume=auto`, verl and Megatron-LM resume from, and `--strict` passes.",
        "Resuming, auto trains over any such steps and names each in one note as trained over"
        " (left",
        "beside the run's steps until a save of its step replaces it), with the"
        " `checkpoint.resume`",
        "that continues the newest instead"
        " (`tests/trainer/test_resume_auto_over_a_tracker_set_back.py`).",
        "",
        "A kill while `checkpoint.keep_last` removes an old step"
        " (`MFSDP_CKPT_KILL_AT=mid_prune@N`: after",
        "the save of step N; `tests/ckpt/test_prune_is_crash_safe.py`, not a generated"
        " row) leaves no step",
        "dir behind: the step is renamed out of the step names"
        " (`.global_step_N.removing-PID`) before it is",
        "deleted. `validate` names such a leftover in one warning, and the next save"
        " removes it, as it",
        "removes a `global_step_N` without manifest older than every step kept (what"
        " such a kill left",
        "before 2026-12-06).",
        "",
        "## Damaged and hostile checkpoints",
        "",
        "Each fault is inflicted on a fresh copy of a one-process SFT run "
        "(one checkpoint, step 2). Consumers:",
        "`mfsdp ckpt validate RUN --deep`, `mfsdp ckpt export-hf RUN --out DIR`, "
        "and `mfsdp train sft`",
        "resuming it (`checkpoint.resume=auto`). A refusal must be one `error:` line, "
        "no traceback, no",
        "export directory or temp dir left, the run dir byte-identical; nothing in the "
        "checkpoint may run",
        "code (a marker file would appear) or make a consumer read outside the checkpoint "
        "(the outside",
        "copy is valid data, so reading it would have succeeded).",
        "",
        "A resume (`train sft`, `train grpo`, a LoRA run) checks each tensor blob it loads against",
        "`.metadata` with the check `validate --deep` and export-hf run (`storage/reader.py`'s",
        "`stored_layout`), every blob before the first is copied into a weight: a blob of another",
        "dtype or shape than its entry is refused in their line naming file and key"
        " (`…/__0_4.distcp",
        "[model.model.norm.weight]: blob holds torch.bfloat16 data, metadata says"
        " torch.float32`), where",
        "DCP's own load would cast it into the parameter. NaN/Inf in a loaded tensor are"
        " refused as it is",
        "loaded, in validate --deep's words with its file (`…/__0_4.distcp [KEY]: N NaN and M Inf",
        "values`), before anything in the run dir is written",
        "(tests/ckpt/test_resume_checks_blobs_against_metadata.py).",
        "",
        "| Fault | Kind | Damage | Consumer | Expected | Observed | Result |",
        "|---|---|---|---|---|---|---|",
        *sections["matrix"][0],
        "",
        "## Bad command lines, configs and data; disk full",
        "",
        "Each command runs next to a copy of the same run; "
        "its step-2 checkpoint must stay byte-identical.",
        "",
        "A run that the disk ends (a failed save, `metrics.jsonl` or TensorBoard's event file"
        " not written) says after what failed which",
        "checkpoint the next run resumes from, and how (`the newest checkpoint is"
        " RUN/global_step_N: run the",
        "same command again to resume from it`;"
        " `tests/trainer/test_run_ended_by_a_full_disk_names_the_checkpoint.py`,",
        "`tests/trainer/test_tensorboard_write_failure_names_the_checkpoint.py`).",
        "",
        "| Case | Input | Expected | Observed | Result |",
        "|---|---|---|---|---|",
        *sections["bad"][0],
        "",
        "## Hostile bytes, allocations and fuzzing (pytest suites)",
        "",
        "`tests/reliability/test_reliability_hostile.py` measures peak RSS growth (getrusage,",
        "fresh process) while the reader refuses metadata that would allocate: a 9-byte pickle",
        "naming memo slot 2**28, a 10 TB tensor, 512 GB tiled over a few bytes, offsets past",
        "int64. `tests/reliability/test_reliability_fuzz.py` runs 11,000 derandomized hypothesis",
        "cases over `.metadata` bytes, generated pickles of the allowed DCP types with absurd",
        "values, and manifest JSON: each must parse or raise a documented error.",
        "",
        "`tests/reliability/test_reliability_limits.py` plants hostile bytes by class, each class",
        "as several generated instances, and runs `validate` (cheap and `--deep`), `inspect` and",
        "`export-hf` on them in one process capped at its size after imports + 1.5 GiB of address",
        "space (RLIMIT_AS), 30 s per command: (1) BUILD/SETITEM/APPEND on every global either",
        "class table admits, which must be refused with the dtype table unchanged; (2) an opcode",
        "flood past `.metadata`'s memory budget (every opcode is charged at least the bytes it",
        "retains, measured by `scripts/pickle_budget.py`; the budget is 64 bytes per byte of the",
        "file and at least 1 GiB: a 12.8 MB EMPTY_DICT flood is refused at 1 GiB), memo indices",
        "near 2**31, a key nested 100,000 tuples deep, sparse 1 GiB + 1 byte and 3 GiB",
        "`.metadata` (the limit is 1 GiB: 3.5M chunks take ~500 MB), blob pickles flooded or with",
        "huge memo indices, a DEFLATE-compressed data.pkl inflating to 256 MiB, 5,000 zip",
        "members, a storage claiming more than its record, 40,000 chunks as slabs, 10,000 as a",
        "grid and as an irregular staircase, a manifest listing 100,000 missing files, names of",
        "5,000 and 200,000 characters; (3) a FIFO, `/dev/zero`, a directory or a link out of the",
        "checkpoint where `.metadata`, `manifest.json` or a shard belongs; (4) tensors claiming",
        "up to 1 TiB over a small blob, and blobs holding int32/int64/float64/complex64 data",
        "under a float32 name; (5) tensor names with ANSI escapes, newlines, bidi overrides and",
        "NULs. A case passes when every command refuses with one `error:` line (validate: its",
        "findings and INVALID verdict), exit 1 or 2, no exception (MemoryError and TimeoutError",
        "included), bounded output, and no export left behind. In-process, each flood allocates",
        "at most what it is charged (tracemalloc), a constructor called 100,000 times on one",
        "memoized argument is charged for every copy, and a 180,000-chunk `.metadata` written",
        "with DCP's own classes (past the former 12,000,000-opcode limit: ~69 opcodes a chunk) is",
        "read. `tests/reliability/test_reliability_opcode_fuzz.py` cuts real `.metadata` and blob",
        "`data.pkl` pickles into opcodes and mutates them as programs (delete, repeat, swap,",
        "insert attack opcodes and gadgets), 2,800 derandomized cases under the same",
        "address-space limit: each parses or raises a documented error, and the dtype table is",
        "unchanged after every case.",
        "",
        "| Suite | Test | Time | Result |",
        "|---|---|---|---|",
        *sections["pytest"][0],
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "reliability.md")
    parser.add_argument(
        "--skip-crash", action="store_true", help="Leave out the 2-process kill runs (~3 min)."
    )
    args = parser.parse_args()
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # run `finally`s: kill launched ranks, remove scratch
    started = time.monotonic()
    sections: dict[str, tuple[list[str], int]] = {}
    with tempfile.TemporaryDirectory(prefix="mfsdp-reliability-") as tmp:
        scratch = Path(tmp)
        steps = [("matrix", matrix_rows), ("bad", bad_input_rows), ("pytest", pytest_rows)]
        if not args.skip_crash:
            steps.insert(0, ("crash", crash_rows))
        for name, step in steps:
            print(f"[reliability] {name} ...", file=sys.stderr, flush=True)
            sections[name] = step(scratch / name)
    args.out.write_text(render(sections, time.monotonic() - started))
    failed = sum(f for _, f in sections.values())
    print(f"[reliability] wrote {args.out}: {failed} failing row(s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
