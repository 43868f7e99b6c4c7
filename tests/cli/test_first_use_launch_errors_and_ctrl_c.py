"""What a first-time user from verl, torchtitan or Megatron-LM hits after `./dev demo`: help
examples that name what the demo wrote, one-line errors from every rank of a launched run
and from Ctrl-C, YAML mistakes located, exports that say "verified" only when they did, and
an interrupted save that is never read as a checkpoint."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
import torch
from click.testing import CliRunner

from cli.errors import MfsdpGroup
from cli.main import app
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from tests.support.cli_errors import lines_besides_starting
from tests.support.fresh_python import MAIN_CATCHING_EXIT, mfsdp, modules_after
from tests.support.launched_sft import (
    lines_until_step,
    step_reached,
    train_until_stopped,
)
from tests.support.metrics import read_metrics
from tests.support.paths import EXAMPLES, FIXTURES, REPO

MCORE_QWEN2 = FIXTURES / "mcore" / "qwen2"
BAD_YAML = "model:\n  shape: tiny\noptim:\n  lr: [1\n"  # the bracket opens at line 4, column 7


def _all_help() -> str:
    """Every command's --help, as a user pages through them."""
    texts = []

    def walk(command: click.Command, path: list[str]) -> None:
        texts.append(CliRunner().invoke(app, [*path, "--help"]).output)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(app, [])
    return "\n".join(texts)


def test_the_tiny_sft_example_trains_on_what_the_demo_writes(tmp_path):
    """`mfsdp train sft --config examples/sft_tiny_cpu.yaml` (the first example of `mfsdp
    train --help`) after the demo: its data file is one the demo writes, and its run dir is
    not the demo's run (trained with another batch size, so resuming it would be refused)."""
    from trainer.config import SFTConfig, load_config
    from trainer.data.math_datasets import convert_files

    config = load_config(SFTConfig, EXAMPLES / "sft_tiny_cpu.yaml")
    raw = tmp_path / "train.jsonl"
    raw.write_text(json.dumps({"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}) + "\n")
    written = convert_files("gsm8k", [str(raw)], tmp_path / "runs" / "demo" / "data")  # as demo
    relative = {str(Path(path).relative_to(tmp_path)) for path in written.values()}
    assert config.data.train_files[0] in relative, (config.data.train_files, relative)
    assert not config.trainer.run_dir.startswith("runs/demo/")


def test_help_examples_name_the_steps_the_demo_saves():
    from cli.demo import demo

    steps = next(p.default for p in demo.params if p.name == "steps")
    saved = {max(1, steps // 2), steps}
    named = {int(n) for n in re.findall(r"runs/demo/sft/global_step_(\d+)", _all_help())}
    assert named and named <= saved, (named, saved)


def test_no_help_example_writes_into_the_demo_dir():
    """`import-hf runs/demo/hf --out runs/demo/mcore_init`, run as the help shows it, made the
    next `./dev demo` refuse runs/demo ("also holds mcore_init, which the demo did not
    write"). A demo starts over only in a dir holding exactly the files it recorded there
    (`cli.demo_record`), so an example writing anything under it, even into a folder the
    demo made, makes the next demo refuse."""
    from cli.demo import demo

    demo_dir = next(p.default for p in demo.params if p.name == "out_dir")
    written = re.findall(rf"(?:--out |run_dir=)({re.escape(demo_dir)}/\S*)", _all_help())
    assert written == [], written


def test_export_says_verified_only_when_it_verified(tmp_path):
    common = ["ckpt", "export-hf", str(MCORE_QWEN2 / "dist_ckpt"), "--hf-config"]
    common.append(str(MCORE_QWEN2 / "config.json"))
    plain = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "a")])
    assert plain.exit_code == 0 and "exported" in plain.stdout, plain.output
    assert " verified" not in plain.stdout
    as_json = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "b"), "--json"])
    assert json.loads(as_json.stdout)["mismatches"] is None
    checked = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "c"), "--verify"])
    assert checked.exit_code == 0 and " verified in " in checked.stdout, checked.output


def test_a_config_json_given_alone_is_named_as_why_no_tokenizer_was_copied(tmp_path):
    """The note said "no tokenizer files in .../config.json", a file, as if it were a dir."""
    config = MCORE_QWEN2 / "config.json"
    args = ["ckpt", "export-hf", str(MCORE_QWEN2 / "dist_ckpt"), "--hf-config", str(config)]
    done = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), "--json"])
    assert done.exit_code == 0, done.output
    notes = [n for n in json.loads(done.stdout)["notes"] if "tokenizer" in n]
    assert notes == [
        f"no tokenizer files: --hf-config {config} is a file, the only one copied (give its"
        f" directory to copy the tokenizer too); AutoTokenizer will not load {tmp_path / 'out'}"
    ]


TINY = ["--config", "examples/sft_tiny_cpu.yaml"]


@pytest.mark.parametrize(
    "args, expected",
    [
        ([*TINY, "data.train_files=examples"], "data.train_files: examples: is a directory"),
        ([*TINY, "data.train_files=examples/sft_tiny_cpu.yaml"], "not a .parquet or .jsonl"),
        (
            [*TINY, "data.train_files=[]"],
            "data.train_files: no training files given; set it (in the --config FILE.yaml",
        ),
        ([], "no --config given, and data.train_files is not set"),
    ],
)
def test_data_mistakes_are_one_line_before_torch_loads(args, expected):
    done = mfsdp("train", "sft", *args)
    lines = lines_besides_starting(done.stderr)
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert expected in lines[0]
    loaded = modules_after(MAIN_CATCHING_EXIT, "train", "sft", *args, roots=("torch",))
    assert loaded == []


def test_a_yaml_mistake_names_its_line_and_column(tmp_path):
    from trainer.config import ConfigError, SFTConfig, load_config

    config = tmp_path / "sft.yaml"
    config.write_text(BAD_YAML)
    with pytest.raises(ConfigError, match=r"sft.yaml: not valid YAML at line 4, column 7: "):
        load_config(SFTConfig, config)
    done = CliRunner().invoke(app, ["config", "from-verl", str(config)])
    assert done.exit_code == 2 and "at line 4, column 7" in done.stderr, done.output


def test_from_verl_reports_a_malformed_script_value_in_one_line(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  data.train_files=[a \\\n  trainer.total_epochs=2\n"
    )
    done = CliRunner().invoke(app, ["config", "from-verl", str(script)])
    assert done.exit_code == 2, done.output
    assert lines_besides_starting(done.stderr) == [
        f"error: {script}: data.train_files: '[a' ends before its bracket or brace is closed,"
        " so verl does not start; quote the value ('...') for its text"
    ]


def test_cuda_without_a_gpu_and_more_ranks_than_gpus_are_usage_errors(monkeypatch):
    from trainer import distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MfsdpUsageError, match=r"trainer\.device=cuda but no CUDA device"):
        distributed.resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(MfsdpUsageError, match="--nproc-per-node 2: only 1 GPU"):
        distributed.check_gpus_for_local_ranks(2)


@pytest.fixture(scope="module")
def launched_from_a_project(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """`mfsdp train sft --nproc-per-node 2` given a data file whose second row is a ShareGPT
    chat (`conversations`, no `messages`), run from a training project's folder whose own
    `trainer/` and `cli/` packages fail as they are imported: the finished launch and the
    file. The launcher checks a file's first row before torchrun starts; the ranks read the
    rest. One launch (two ranks, each loading torch) read by the two tests below, each on a
    path of its own: every rank meeting the same usage mistake, and the ranks importing
    mfsdp's code wherever they are run from (they get as far as reading the second row, in
    mfsdp's `trainer.data`)."""
    root = tmp_path_factory.mktemp("launched_from_a_project")
    data = root / "mixed.jsonl"
    chat = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    sharegpt = [{"from": "human", "value": "2+2?"}]
    data.write_text(json.dumps({"messages": chat}) + "\n" + json.dumps({"conversations": sharegpt}))
    project = root / "project"
    for package in ("trainer", "cli"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f"raise ImportError('the user's {package}')")
    command = [
        sys.executable,
        "-c",
        f"import sys; sys.path.insert(0, {str(REPO)!r})\nfrom cli.main import main; main()",
        *("train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--nproc-per-node", "2"),
        f"data.train_files={data}",
        f"trainer.run_dir={root / 'run'}",
        "trainer.progress_bar=false",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    done = subprocess.run(
        command,
        cwd=project,
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, data


def test_a_usage_mistake_every_rank_meets_is_one_line_and_exit_2(launched_from_a_project):
    done, data = launched_from_a_project
    assert done.returncode == 2, done.stderr
    assert "launching 2 processes" in done.stderr, done.stderr  # the ranks met it
    assert lines_besides_starting(done.stderr) == [
        f"error: {data}:2: no 'messages' column and no 'prompt'/'response' columns (found:"
        " conversations); to read other columns: data.prompt_key=COL data.response_key=COL,"
        " or data.messages_key=COL for a column of chat turns"
    ]


def test_ctrl_c_during_a_launched_run_is_one_line_and_exit_130(tmp_path):
    from mfsdp_ckpt.format import run_steps

    process = train_until_stopped(
        tmp_path,
        "checkpoint.save_every=1",
        "trainer.log_every=1",
    )
    lines = lines_until_step(process, 2)  # the second step's log line: the ranks are training
    os.killpg(process.pid, signal.SIGINT)
    _out, rest = process.communicate(timeout=120)
    assert process.returncode == 130, "".join(lines) + rest
    newest = run_steps.read_tracker(tmp_path / "run")
    assert newest in run_steps.list_complete_steps(tmp_path / "run")
    reached = max(record["step"] for record in read_metrics(tmp_path / "run"))
    assert reached >= 2
    stopped_after = step_reached(tmp_path / "run", reached, newest, 1)
    assert lines_besides_starting(rest) == [
        f"error: interrupted{stopped_after}; the newest checkpoint is"
        f" {tmp_path / 'run'}/global_step_{newest}: run the same command again to resume from it"
    ], rest


def test_ctrl_c_mid_save_is_an_interrupt_and_leaves_no_partial_step(tmp_path, monkeypatch):
    from torch.distributed.checkpoint import FileSystemWriter

    from mfsdp_ckpt.checkpointer import Checkpointer
    from mfsdp_ckpt.format import run_steps

    checkpointer = Checkpointer(tmp_path / "run", strategy="none")
    checkpointer.save(1, {"model": {"w": torch.arange(6.0)}}, contents=("model",))

    def ctrl_c(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(FileSystemWriter, "write_data", ctrl_c)  # DCP's own file writing
    with pytest.raises(KeyboardInterrupt):
        checkpointer.save(2, {"model": {"w": torch.arange(6.0)}}, contents=("model",))
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.is_dir()) == ["global_step_1"]
    assert run_steps.read_tracker(tmp_path / "run") == 1


def test_an_error_caused_by_ctrl_c_is_reported_as_the_interrupt():
    """torch's serializer turns a Ctrl-C that lands in it into an error of its own; the save
    then fails with that error, and the command must still say it was interrupted."""

    @click.group(cls=MfsdpGroup)
    def group() -> None:
        pass

    @group.command()
    def save() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C
            time.sleep(30)  # never reached: the interrupt comes first
        except KeyboardInterrupt:
            raise MfsdpFailedError("step.distcp: enforce fail: unexpected pos") from None

    @group.command()
    def fails() -> None:
        raise MfsdpFailedError("step.distcp: damaged")

    interrupted = CliRunner().invoke(group, ["save"])
    assert interrupted.exit_code == 130 and interrupted.output == "error: interrupted\n"
    later = CliRunner().invoke(group, ["fails"])  # a later command's failure is its own
    assert later.exit_code == 1 and later.output == "error: step.distcp: damaged\n"


def test_an_unfinished_save_is_never_read_as_a_checkpoint(tmp_path):
    from mfsdp_ckpt.checkpointer import Checkpointer
    from mfsdp_ckpt.format import layout

    run = tmp_path / "run"
    Checkpointer(run, strategy="none").save(1, {"model": {"w": torch.ones(4)}}, contents=("model",))
    unfinished = layout.tmp_step_dir(run, 2)
    shutil.copytree(layout.step_dir(run, 1), unfinished)  # files whole, manifest not yet
    (unfinished / "manifest.json").unlink()
    for given in (unfinished, unfinished / "dist_ckpt"):
        done = CliRunner().invoke(app, ["ckpt", "validate", str(given)])
        assert done.exit_code == 2, done.output
        assert lines_besides_starting(done.stderr) == [
            f"error: {given}: an unfinished save of step 2 (renamed to global_step_2/ only "
            f"once complete); give the run dir {run}"
        ]
    assert CliRunner().invoke(app, ["ckpt", "validate", str(run)]).exit_code == 0


def test_the_exit_code_comes_from_a_rank_that_failed_not_one_torchrun_stopped(tmp_path):
    """torchrun terminates the other ranks once one fails, and its own "first failure" (by
    whole-second timestamps) can be a terminated one: exit 1 for a usage mistake."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from cli.torchrun import _deciding_failure, rank_exit_code

    no_file = str(tmp_path / "none.json")
    failures = {
        0: ProcessFailure(local_rank=0, pid=10, exitcode=2, error_file=no_file),
        1: ProcessFailure(local_rank=1, pid=11, exitcode=-signal.SIGTERM, error_file=no_file),
    }
    failures[1].timestamp = failures[0].timestamp - 1  # "first" by torchrun's clock
    rank, failure = _deciding_failure(failures)
    assert rank == 0 and rank_exit_code(failure.exitcode) == 2
    assert rank_exit_code(-signal.SIGINT) == 130 and rank_exit_code(-signal.SIGKILL) == 1


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["ckpt", "export-hf", "x", "--outt", "y"],
            "No such option '--outt' (did you mean '--out'?)",
        ),
        (["ckpt", "exportt-hf"], "No such command 'exportt-hf' (did you mean 'export-hf'?)"),
    ],
)
def test_a_typo_gets_the_closest_name_only(args, line):
    done = mfsdp(*args)
    group = " ".join(args[:2] if args[1] == "export-hf" else args[:1])
    assert done.returncode == 2
    assert done.stderr == f"error: {line}; see 'mfsdp {group} --help'\n"


def test_import_hf_given_the_weights_file_names_the_dir_to_give(tmp_path):
    weights = tmp_path / "model" / "model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"")
    done = CliRunner().invoke(
        app, ["ckpt", "import-hf", str(weights), "--out", str(tmp_path / "o")]
    )
    assert done.exit_code == 2
    assert lines_besides_starting(done.stderr) == [
        f"error: {weights}: a file, not a directory (give the Hugging Face model dir holding "
        f"it: {weights.parent})"
    ]


def test_a_users_own_trainer_or_cli_package_in_the_working_directory_is_not_imported(
    launched_from_a_project,
):
    """The ranks run `python -m cli.train`, whose sys.path starts with the working
    directory: a training project's own `trainer/` package there was imported instead of
    mfsdp's, and `--nproc-per-node 2` died with its traceback. The ranks here read the data
    with mfsdp's `trainer` (its refusal of the second row is their line, not an ImportError)."""
    done, data = launched_from_a_project
    assert "the user's" not in done.stderr, done.stderr
    assert done.returncode == 2 and f"error: {data}:2: " in done.stderr, done.stderr
