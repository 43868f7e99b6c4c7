"""The fault matrix of the reliability suite, as data, shared by the tests and the report.

Each `Fault` says how to damage (or booby-trap) a fresh copy of a small SFT run and what
each consumer must then do: `mfsdp ckpt validate --deep`, `mfsdp ckpt export-hf` and
`mfsdp train sft` resuming (`checkpoint.resume=auto`). `tests/reliability/test_reliability_matrix.py`
parametrizes over `FAULTS`; `scripts/reliability_report.py` runs the same table and writes
docs/reliability.md, so the documented outcomes are the tested ones.

Consumers run in-process through click's runner: an exception that escapes the command's
error mapping (a traceback for the user) shows up as `Outcome.traceback`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the report script imports this module from outside pytest
    sys.path.insert(0, str(REPO))

from cli.main import app  # noqa: E402
from mfsdp_ckpt.checkpointer import KILL_AT_ENV as KILL_ENV  # noqa: E402
from mfsdp_ckpt.format import layout  # noqa: E402
from mfsdp_ckpt.format.dcp_metadata import load_metadata  # noqa: E402
from tests.support.sft import write_chat_jsonl  # noqa: E402

CONFIG = str(REPO / "examples" / "sft_tiny_cpu.yaml")
BASE_STEP = 2  # the pristine run saves this one step
RUN_SETTINGS = (
    "data.val_ratio=0",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "optim.warmup_steps=1",
)
MARKER = "pwned"  # a file a booby-trapped checkpoint tries to create next to the run dir
BAIT = "outside.distcp"  # a file outside the checkpoint that hostile paths point at


# --------------------------------------------------------------------------- pristine run
def sft_args(data: Path, run_dir: Path, *extra: str) -> list[str]:
    """`mfsdp train sft` arguments for the tiny default on `data`, writing `run_dir`."""
    return [
        "train",
        "sft",
        "--config",
        CONFIG,
        f"data.train_files={data}",
        f"trainer.run_dir={run_dir}",
        *RUN_SETTINGS,
        *extra,
    ]


def make_pristine(root: Path) -> Path:
    """A one-process SFT run with one complete checkpoint (step 2); returns the run dir."""
    data = write_chat_jsonl(root / "train.jsonl", rows=24)
    run = root / "run"
    result = CliRunner().invoke(app, sft_args(data, run, f"trainer.total_steps={BASE_STEP}"))
    if result.exit_code != 0:
        raise RuntimeError(f"pristine run failed: {result.output[-2000:]}") from result.exception
    return run


def fresh_copy(pristine: Path, scratch: Path) -> Path:
    """A copy of the pristine run (and its data) in `scratch`, to damage freely."""
    scratch.mkdir(parents=True, exist_ok=True)
    shutil.copy(pristine.parent / "train.jsonl", scratch / "train.jsonl")
    run = scratch / "run"
    shutil.copytree(pristine, run, symlinks=True)
    return run


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under root (symlinks as their target) -> sha256: "nothing was written"."""
    digest = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            digest[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            digest[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            digest[rel] = "dir"
    return digest


# --------------------------------------------------------------------------- consumers
@dataclass
class Outcome:
    exit_code: int
    message: str  # the `error:` line, else the last line of output
    output: str
    traceback: bool  # an exception escaped the command's error handling

    def brief(self) -> str:
        return f"exit {self.exit_code}: {self.message}"


def invoke(args: list[str]) -> Outcome:
    try:
        result = CliRunner().invoke(app, [str(a) for a in args])
    except (
        BaseException
    ) as err:  # DCP's CheckpointException is a BaseException: click lets it through
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return Outcome(
            1, f"{type(err).__name__}: {first}", f"Traceback: {type(err).__name__}: {err}", True
        )
    output = result.output
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    if escaped:
        output += f"\nTraceback: {type(result.exception).__name__}: {result.exception}"
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    message = errors[0] if errors else (lines[-1] if lines else "")
    return Outcome(result.exit_code, message, output, escaped)


def run_validate(run: Path) -> Outcome:
    return invoke(["ckpt", "validate", run, "--deep"])


def run_export(run: Path) -> Outcome:
    return invoke(["ckpt", "export-hf", run, "--out", run.parent / "hf"])


def run_resume(run: Path) -> Outcome:
    return invoke(sft_args(run.parent / "train.jsonl", run, f"trainer.total_steps={BASE_STEP + 1}"))


CONSUMERS: dict[str, Callable[[Path], Outcome]] = {
    "validate": run_validate,
    "export-hf": run_export,
    "resume": run_resume,
}


# --------------------------------------------------------------------------- damage helpers
def step_dir(run: Path) -> Path:
    return layout.step_dir(run, BASE_STEP)


def dist_ckpt(run: Path) -> Path:
    return step_dir(run) / layout.DIST_CKPT_DIR


def biggest_shard(run: Path) -> Path:
    return max(dist_ckpt(run).glob("*.distcp"), key=lambda p: (p.stat().st_size, p.name))


def _edit_manifest(run: Path, edit: Callable[[dict], None]) -> None:
    path = step_dir(run) / layout.MANIFEST_FILE
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def _rehash(run: Path, *names: str) -> None:
    """Make the manifest agree with files changed on purpose, so only the intended fault shows."""

    def edit(data: dict) -> None:
        for name in names:
            file = step_dir(run) / name
            data["files"][name] = {
                "size": file.stat().st_size,
                "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
            }

    _edit_manifest(run, edit)


def _rewrite_metadata(run: Path, edit: Callable) -> None:
    """Load .metadata (safely), let `edit` change it, pickle it back, fix the manifest."""
    path = dist_ckpt(run) / layout.DCP_METADATA_FILE
    metadata = load_metadata(path)
    edit(metadata)
    path.write_bytes(pickle.dumps(metadata))
    _rehash(run, f"{layout.DIST_CKPT_DIR}/{layout.DCP_METADATA_FILE}")


def _first_model_chunk(metadata, name: str = "model.model.norm.weight"):
    """(storage index, storage info) of the first stored chunk of a small model tensor."""
    item = metadata.state_dict_metadata[name]
    from torch.distributed.checkpoint.metadata import MetadataIndex

    index = MetadataIndex(name, item.chunks[0].offsets)
    return next(k for k in metadata.storage_data if k.fqn == index.fqn and k.offset == index.offset)


class _RunsCode:
    """Pickles to a call of os.system: what a malicious checkpoint would contain."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def marker_for(run: Path) -> Path:
    return run.parent / MARKER


# --------------------------------------------------------------------------- the faults
def truncate_shard(run: Path) -> None:
    shard = biggest_shard(run)
    shard.write_bytes(shard.read_bytes()[:-100])


def flip_byte(run: Path) -> None:
    shard = biggest_shard(run)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


def delete_shard(run: Path) -> None:
    biggest_shard(run).unlink()


def add_unknown_file(run: Path) -> None:
    (dist_ckpt(run) / "__7_0.distcp").write_bytes(b"left over from another save")


def edit_manifest_size(run: Path) -> None:
    name = f"{layout.DIST_CKPT_DIR}/{biggest_shard(run).name}"
    _edit_manifest(
        run, lambda data: data["files"][name].update(size=data["files"][name]["size"] + 1)
    )


def truncate_metadata(run: Path) -> None:
    path = dist_ckpt(run) / layout.DCP_METADATA_FILE
    path.write_bytes(path.read_bytes()[:200])


def tracker_names_missing_step(run: Path) -> None:
    (run / layout.TRACKER_FILE).write_text("7\n")


def drop_optimizer_state(run: Path) -> None:
    """The manifest still lists 'optimizer', but .metadata holds no optimizer entries."""

    def edit(metadata) -> None:
        for key in [k for k in metadata.state_dict_metadata if k.startswith("optimizer.")]:
            del metadata.state_dict_metadata[key]
        for index in [i for i in metadata.storage_data if i.fqn.startswith("optimizer.")]:
            del metadata.storage_data[index]

    _rewrite_metadata(run, edit)


def drop_storage_entry(run: Path) -> None:
    """What a save leaves when a writer thread's file fails silently (stock DCP): a chunk
    in the metadata with no storage entry."""
    _rewrite_metadata(run, lambda metadata: metadata.storage_data.pop(_first_model_chunk(metadata)))


def metadata_runs_code(run: Path) -> None:
    path = dist_ckpt(run) / layout.DCP_METADATA_FILE
    path.write_bytes(pickle.dumps(_RunsCode(marker_for(run))))
    _rehash(run, f"{layout.DIST_CKPT_DIR}/{layout.DCP_METADATA_FILE}")


def blob_runs_code(run: Path) -> None:
    """A model tensor's blob is a torch.save of a code-running object (appended, metadata
    repointed, manifest updated): harmless only to a weights-only unpickler."""
    buffer = io.BytesIO()
    torch.save(_RunsCode(marker_for(run)), buffer)
    payload = buffer.getvalue()

    def edit(metadata) -> None:
        index = _first_model_chunk(metadata)
        info = metadata.storage_data[index]
        shard = dist_ckpt(run) / info.relative_path
        offset = shard.stat().st_size
        with open(shard, "ab") as handle:
            handle.write(payload)
        metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=len(payload))
        _rehash(run, f"{layout.DIST_CKPT_DIR}/{info.relative_path}")

    _rewrite_metadata(run, edit)


def manifest_path_traversal(run: Path) -> None:
    _edit_manifest(
        run, lambda data: data["files"].update({"../../x": {"size": 1, "sha256": "0" * 64}})
    )


def metadata_path_traversal(run: Path) -> None:
    """.metadata sends every read of one shard to an identical copy outside the checkpoint."""
    shard = biggest_shard(run)
    outside = run.parent / BAIT
    shutil.copy(shard, outside)
    escape = os.path.relpath(outside, dist_ckpt(run))

    def edit(metadata) -> None:
        for index, info in list(metadata.storage_data.items()):
            if info.relative_path == shard.name:
                metadata.storage_data[index] = dataclasses.replace(info, relative_path=escape)

    _rewrite_metadata(run, edit)


def symlink_out(run: Path) -> None:
    shard = biggest_shard(run)
    outside = run.parent / BAIT
    shutil.copy(shard, outside)
    shard.unlink()
    shard.symlink_to(outside)


def absurd_shape(run: Path) -> None:
    """A tensor claims 2**40 x 2**40 fp32 elements (4 yottabytes)."""

    def edit(metadata) -> None:
        item = metadata.state_dict_metadata["model.model.norm.weight"]
        item.size = torch.Size([2**40, 2**40])

    _rewrite_metadata(run, edit)


def absurd_offset(run: Path) -> None:
    """A chunk claims to start 2**62 bytes into its file and be 2**41 bytes long."""

    def edit(metadata) -> None:
        index = _first_model_chunk(metadata)
        metadata.storage_data[index] = dataclasses.replace(
            metadata.storage_data[index], offset=2**62, length=2**41
        )

    _rewrite_metadata(run, edit)


@dataclass(frozen=True)
class Expect:
    """What one consumer must do: exit code and a fragment of its message ('' = any)."""

    exit_code: int
    fragment: str = ""
    wrote_nothing: bool = True  # on failure, no output and the run dir byte-identical
    note: str = ""  # why, where the outcome is not the obvious one (shown in the report)

    def check(self, outcome: Outcome) -> list[str]:
        problems = []
        if outcome.traceback:
            problems.append("an exception escaped (traceback)")
        if outcome.exit_code != self.exit_code:
            problems.append(f"exit {outcome.exit_code}, expected {self.exit_code}")
        if self.fragment and self.fragment not in outcome.output:
            problems.append(f"output lacks {self.fragment!r}")
        if (
            outcome.exit_code != 0
            and not outcome.message.startswith("error:")
            and outcome.message.strip()
        ):
            if "INVALID" not in outcome.message:  # validate's verdict line is its one-line answer
                problems.append(f"not a one-line error: {outcome.message!r}")
        return problems


@dataclass(frozen=True)
class Fault:
    name: str
    kind: str  # corruption | hostile
    what: str  # what is damaged, for the report
    inflict: Callable[[Path], None]
    expect: dict[str, Expect] = field(default_factory=dict)  # consumer -> expectation


REFUSED = 1  # a bad checkpoint is a failed run/check (exit 1); a path that is not one is usage (2)

FAULTS: tuple[Fault, ...] = (
    Fault(
        "truncated_shard",
        "corruption",
        "largest .distcp loses its last 100 bytes",
        truncate_shard,
        {
            "validate": Expect(1, "(truncated)"),
            "export-hf": Expect(REFUSED, "truncated"),
            "resume": Expect(REFUSED, "truncated"),
        },
    ),
    Fault(
        "flipped_byte",
        "corruption",
        "one byte in the middle of the largest .distcp inverted",
        flip_byte,
        {
            "validate": Expect(1, "sha256 differs from the manifest"),
            "export-hf": Expect(
                0,
                wrote_nothing=False,
                note="plain export does not hash: the files hold the optimizer's "
                "bytes too, so hashing would triple its reads; `export-hf --verify`, `validate --deep` "
                "and resume catch it",
            ),
            "resume": Expect(REFUSED, "sha256"),
        },
    ),
    Fault(
        "deleted_shard",
        "corruption",
        "largest .distcp deleted",
        delete_shard,
        {
            "validate": Expect(1, "missing"),
            "export-hf": Expect(REFUSED, "missing"),
            "resume": Expect(REFUSED, "missing"),
        },
    ),
    Fault(
        "unknown_file",
        "corruption",
        "an extra __7_0.distcp no manifest or metadata names",
        add_unknown_file,
        {
            "validate": Expect(0, "not listed in the manifest (unknown file)"),
            "export-hf": Expect(0, wrote_nothing=False),
            "resume": Expect(0, wrote_nothing=False),
        },
    ),
    Fault(
        "manifest_size_edited",
        "corruption",
        "manifest.json: one file's size + 1",
        edit_manifest_size,
        {
            "validate": Expect(1, "manifest says"),
            "export-hf": Expect(REFUSED, "manifest says"),
            "resume": Expect(REFUSED, "manifest says"),
        },
    ),
    Fault(
        "metadata_truncated",
        "corruption",
        ".metadata cut to its first 200 bytes",
        truncate_metadata,
        {
            "validate": Expect(1, "unreadable DCP metadata"),
            "export-hf": Expect(REFUSED, "unreadable DCP metadata"),
            "resume": Expect(REFUSED, "unreadable DCP metadata"),
        },
    ),
    Fault(
        "tracker_missing_step",
        "corruption",
        "tracker names step 7, which does not exist",
        tracker_names_missing_step,
        {
            "validate": Expect(1, "names step 7, which is missing or incomplete"),
            "export-hf": Expect(2, "names step 7"),
            "resume": Expect(
                0,
                wrote_nothing=False,
                note="resume=auto takes the newest complete step (2) when the "
                "tracker names a missing one; the checkpoint it loads is intact",
            ),
        },
    ),
    Fault(
        "optimizer_absent",
        "corruption",
        "manifest lists 'optimizer'; .metadata has no optimizer state",
        drop_optimizer_state,
        {
            "validate": Expect(
                1, "manifest lists 'optimizer' but the checkpoint has no optimizer state"
            ),
            "export-hf": Expect(REFUSED, "no optimizer state"),
            "resume": Expect(REFUSED, "no optimizer state"),
        },
    ),
    Fault(
        "storage_entry_missing",
        "corruption",
        ".metadata: a model chunk has no storage entry",
        drop_storage_entry,
        {
            "validate": Expect(1, "has no storage entry"),
            "export-hf": Expect(REFUSED, "has no storage entry"),
            "resume": Expect(REFUSED, "has no storage entry"),
        },
    ),
    Fault(
        "metadata_runs_code",
        "hostile",
        ".metadata is a pickle that calls os.system",
        metadata_runs_code,
        {
            "validate": Expect(1, "refusing to load global"),
            "export-hf": Expect(REFUSED, "refusing to load global"),
            "resume": Expect(REFUSED, "refusing to load global"),
        },
    ),
    Fault(
        "blob_runs_code",
        "hostile",
        "a model tensor's blob is a torch.save that calls os.system",
        blob_runs_code,
        {
            "validate": Expect(1, "unreadable blob"),
            "export-hf": Expect(REFUSED, "unreadable blob"),
            "resume": Expect(REFUSED, "Weights only load failed"),
        },
    ),
    Fault(
        "manifest_path_traversal",
        "hostile",
        "manifest.json lists '../../x'",
        manifest_path_traversal,
        {
            "validate": Expect(1, "escapes the checkpoint directory"),
            "export-hf": Expect(REFUSED, "escapes the checkpoint directory"),
            "resume": Expect(REFUSED, "escapes the checkpoint directory"),
        },
    ),
    Fault(
        "metadata_path_traversal",
        "hostile",
        ".metadata points a shard at '../../outside.distcp'",
        metadata_path_traversal,
        {
            "validate": Expect(1, "escapes the checkpoint directory"),
            "export-hf": Expect(REFUSED, "escapes the checkpoint directory"),
            "resume": Expect(REFUSED, "escapes the checkpoint directory"),
        },
    ),
    Fault(
        "symlink_out",
        "hostile",
        "largest .distcp is a symlink to a copy outside the checkpoint",
        symlink_out,
        {
            "validate": Expect(1, "outside the checkpoint"),
            "export-hf": Expect(REFUSED, "outside the checkpoint"),
            "resume": Expect(REFUSED, "outside the checkpoint"),
        },
    ),
    Fault(
        "absurd_shape",
        "hostile",
        "a tensor claims shape (2**40, 2**40)",
        absurd_shape,
        {
            "validate": Expect(1, "absurdly large"),
            "export-hf": Expect(REFUSED, "absurdly large"),
            "resume": Expect(REFUSED, "absurdly large"),
        },
    ),
    Fault(
        "absurd_offset",
        "hostile",
        "a chunk claims offset 2**62, length 2**41",
        absurd_offset,
        {
            "validate": Expect(1, "truncated"),
            "export-hf": Expect(REFUSED, "truncated"),
            "resume": Expect(REFUSED, "truncated"),
        },
    ),
)


def fault_by_name(name: str) -> Fault:
    return next(f for f in FAULTS if f.name == name)


@dataclass
class Observed:
    outcome: Outcome
    problems: list[str]


def apply_and_consume(fault: Fault, pristine: Path, scratch: Path, consumer: str) -> Observed:
    """Inflict `fault` on a fresh copy, run `consumer`, check its expectation and side effects."""
    run = fresh_copy(pristine, scratch)
    fault.inflict(run)
    before = tree_digest(run)
    outcome = CONSUMERS[consumer](run)
    expect = fault.expect[consumer]
    problems = expect.check(outcome)
    if marker_for(run).exists():
        problems.append("the checkpoint ran code (marker file created)")
    if outcome.exit_code != 0 and expect.wrote_nothing:
        if (run.parent / "hf").exists() or list(run.parent.glob(".hf.export-*")):
            problems.append("a partial export was left behind")
        if tree_digest(run) != before:
            problems.append("the run dir changed")
    return Observed(outcome, problems)


# --------------------------------------------------------------------------- crash harness
CRASH_STEPS = 4  # total steps; saves at 2 and 4, the kill lands in the save of step 4
CRASH_SETTINGS = (
    f"trainer.total_steps={CRASH_STEPS}",
    "checkpoint.save_every=2",
    "strategy.name=fsdp2",
)
CRASH_TIMEOUT_S = 180


@dataclass(frozen=True)
class Crash:
    """One SIGKILL point of a 2-process save (MFSDP_CKPT_KILL_AT, see mfsdp_ckpt/checkpointer.py)."""

    name: str
    when: str  # the moment, in the words of the save protocol
    kill_at: str  # <phase>:<rank>@<step>
    async_save: bool = False


CRASHES: tuple[Crash, ...] = (
    Crash("before_files", "temp dir made, before any file", f"before_files:1@{CRASH_STEPS}"),
    Crash("mid_file", "rank 1 dies 4 KiB into its first data file", f"mid_file:1@{CRASH_STEPS}"),
    Crash("after_files", "all DCP files written, none hashed", f"after_files:0@{CRASH_STEPS}"),
    Crash(
        "before_manifest",
        "files hashed, huggingface/ written, before the manifest",
        f"before_manifest:0@{CRASH_STEPS}",
    ),
    Crash(
        "after_manifest", "manifest written, before the rename", f"after_manifest:0@{CRASH_STEPS}"
    ),
    Crash("after_rename", "step dir renamed, before the tracker", f"after_rename:0@{CRASH_STEPS}"),
    Crash(
        "async_mid_file",
        "async save: rank 0's background writer dies mid-file",
        f"mid_file:0@{CRASH_STEPS}",
        async_save=True,
    ),
)


def crash_data(root: Path) -> Path:
    return write_chat_jsonl(root / "train.jsonl", rows=40)


def launch_two_ranks(
    data: Path, run: Path, *extra: str, kill_at: str | None = None
) -> tuple[int, str]:
    """`mfsdp train sft --nproc-per-node 2` in its own session; on a hang (a rank stuck in a
    collective after its peer died) the whole process group is killed. Returns (rc, stderr)."""
    import signal
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(KILL_ENV, None)
    if kill_at:
        env[KILL_ENV] = kill_at
    command = [
        sys.executable,
        "-m",
        "cli.train",
        "sft",
        "--nproc-per-node",
        "2",
        "--json",
        *sft_args(data, run, *CRASH_SETTINGS, *extra)[2:],
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=CRASH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return -9, f"timed out after {CRASH_TIMEOUT_S}s\n{err}"
    finally:
        try:  # torchrun's workers share its session: nothing of this launch may outlive it
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return process.returncode, out + err


def losses(run: Path, skip_lines: int = 0) -> dict[int, float]:
    """step -> train loss from metrics.jsonl after its first `skip_lines` lines (a resumed
    run appends; its lines override the killed run's)."""
    result = {}
    path = run / "metrics.jsonl"
    for line in (path.read_text().splitlines() if path.exists() else [])[skip_lines:]:
        record = json.loads(line)
        if "train/loss" in record:
            result[record["step"]] = record["train/loss"]
    return result


def metrics_lines(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@dataclass
class CrashResult:
    crash: Crash
    killed_rc: int
    validate: Outcome
    validated_step: int | None
    resume_rc: int
    resumed_from: int | None
    losses_equal: bool
    problems: list[str]


def run_crash(crash: Crash, data: Path, root: Path, reference: dict[int, float]) -> CrashResult:
    """Kill a 2-rank run in the save of step 4, validate, resume, compare losses bitwise."""
    run = root / crash.name
    extra = ("checkpoint.async_save=true",) if crash.async_save else ()
    killed_rc, killed_log = launch_two_ranks(data, run, *extra, kill_at=crash.kill_at)
    problems = []
    if killed_rc == 0:
        problems.append("the run was not killed (fault point never reached)")
    outcome = invoke(["ckpt", "validate", run, "--json"])
    try:
        validated_step = json.loads(outcome.output[outcome.output.index("{") :])["step"]
    except ValueError:
        validated_step = None
    if outcome.exit_code != 0 or validated_step != CRASH_STEPS - 2:
        problems.append(
            f"validate: exit {outcome.exit_code}, step {validated_step}, expected exit 0, step 2"
        )
    logged_before_resume = metrics_lines(run)
    resume_rc, resume_log = launch_two_ranks(data, run, *extra)
    resumed_from = None
    for line in reversed(resume_log.splitlines()):
        if line.startswith("{"):
            resumed_from = json.loads(line).get("resumed_from")
            break
    if resume_rc != 0 or resumed_from != CRASH_STEPS - 2:
        problems.append(
            f"resume: exit {resume_rc}, resumed from {resumed_from}: {resume_log[-800:]}"
        )
    resumed = losses(run, skip_lines=logged_before_resume)  # what the resumed run itself computed
    equal = losses(run) == reference and resumed == {
        k: v for k, v in reference.items() if k > CRASH_STEPS - 2
    }
    if not equal:
        problems.append(
            f"losses differ from the uninterrupted run: {losses(run)} (resumed {resumed}) vs {reference}"
        )
    if resume_rc == 0 and invoke(["ckpt", "validate", run, "--deep", "--strict"]).exit_code != 0:
        problems.append("the resumed run's final checkpoint does not validate --deep --strict")
    return CrashResult(
        crash, killed_rc, outcome, validated_step, resume_rc, resumed_from, equal, problems
    )


def reference_run(data: Path, root: Path) -> dict[int, float]:
    rc, log = launch_two_ranks(data, root / "uninterrupted")
    if rc != 0:
        raise RuntimeError(f"uninterrupted run failed: {log[-2000:]}")
    return losses(root / "uninterrupted")


# --------------------------------------------------------------------------- bad CLI, config, data
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
        "config key 'optim.lr' expects a number, got 'fast'",
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
        "cannot read config",
    ),
    BadInput(
        "data_missing",
        "data.train_files pointing nowhere",
        lambda r: _sft_on(r, r / "absent.jsonl"),
        2,
        "absent.jsonl: no such file",
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
        2,
        "exceeds the 0 training rows",
    ),
    BadInput(
        "prompt_too_long",
        "rows longer than data.max_length with truncation=error",
        lambda r: _sft_on(r, None, "data.max_length=16", "data.truncation=error"),
        2,
        "tokens > data.max_length=16",
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
        1,
        "Not a directory",
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
        "parent directory does not exist",
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


# --------------------------------------------------------------------------- disk full
DISK_FULL_HEADROOM = 256 << 10  # bytes free once the run is copied in: far less than one save


def disk_full_run(pristine: Path, scratch: Path) -> tuple[Observed, str]:
    """Resume the pristine run on a filesystem that fills up during the next save.

    As root (CI containers, this project's dev machines) the run lives on a tmpfs mounted
    just big enough, so the write fails with ENOSPC; elsewhere RLIMIT_FSIZE makes the
    kernel fail the first large write with EFBIG. Either way: one `error:` line, exit 1,
    step 2 and the tracker untouched, no temp dir left behind."""
    import resource
    import subprocess

    run = fresh_copy(pristine, scratch / "src")
    used = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    mount = scratch / "disk"
    mount.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={used + DISK_FULL_HEADROOM}",
                "tmpfs",
                str(mount),
            ],
            capture_output=True,
        ).returncode
        == 0
    )
    how = "tmpfs (ENOSPC)" if mounted else "RLIMIT_FSIZE (EFBIG)"
    try:
        target = mount / "run"
        shutil.copytree(run, target)
        shutil.copy(scratch / "src" / "train.jsonl", mount / "train.jsonl")
        before = tree_digest(step_dir(target))

        def limit_file_size() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (DISK_FULL_HEADROOM, DISK_FULL_HEADROOM))

        command = [
            sys.executable,
            "-m",
            "cli.train",
            "sft",
            *sft_args(
                scratch / "src" / "train.jsonl", target, f"trainer.total_steps={BASE_STEP + 2}"
            )[2:],
        ]
        done = subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            preexec_fn=None if mounted else limit_file_size,
        )
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        outcome = Outcome(
            done.returncode,
            errors[0] if errors else done.stderr.strip()[-300:],
            done.stderr,
            "Traceback" in done.stderr,
        )
        problems = Expect(1, "saving step").check(outcome)
        if len(errors) != 1:
            problems.append(f"{len(errors)} error lines")
        if tree_digest(step_dir(target)) != before or layout.read_tracker(target) != BASE_STEP:
            problems.append("the previous checkpoint or the tracker changed")
        if list(target.glob("*.tmp")):
            problems.append("a temp step dir was left behind")
        if invoke(["ckpt", "validate", target, "--deep"]).exit_code != 0:
            problems.append("the run does not validate after the failed save")
        return Observed(outcome, problems), how
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=False)
