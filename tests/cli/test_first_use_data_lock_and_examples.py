"""What a first-time user still hit: two `mfsdp data` runs into one --out interleaving their
tables, help examples that name options, keys or directories that do not exist, a LoRA
`inspect --deep` silent while it hashes the base model, and empty path overrides that
silently meant "no path"."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from tests.support.waiting import wait_until

# ------------------------------------------------------------------ one writer per data --out

HOLD_LOCK = """
import sys, time
from mfsdp_ckpt.storage.out_lock import out_lock
with out_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def _hold_lock(out: Path) -> subprocess.Popen:
    """Another live process holding --out's lock, as a running `mfsdp data` does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _tables(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def _lock_files(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(".out-lock"))


def test_a_second_data_run_into_one_out_stops_at_once_and_leaves_the_first_intact(tmp_path):
    out = tmp_path / "addition"
    assert mfsdp("data", "synthetic", "--out", str(out)).returncode == 0
    before = _tables(out)
    holder = _hold_lock(out)
    try:
        started = time.monotonic()
        second = mfsdp("data", "synthetic", "--out", str(out), "--seed", "1")
        assert time.monotonic() - started < 30
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 1, second.stderr
    assert second.stderr == (
        f"error: {out}: another command is writing it (pid {holder.pid}); wait for it or "
        "choose another --out\n"
    )
    assert _tables(out) == before


def test_a_second_data_run_under_json_prints_the_busy_error_object(tmp_path):
    out = tmp_path / "addition"
    holder = _hold_lock(out)
    try:
        second = mfsdp("data", "synthetic", "--out", str(out), "--json")
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 1
    assert json.loads(second.stdout)["exit_code"] == 1
    assert f"{out}: another command is writing it" in json.loads(second.stdout)["error"]


def test_a_lock_left_by_a_killed_run_does_not_block_the_next_and_is_removed(tmp_path):
    out = tmp_path / "addition"
    holder = _hold_lock(out)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert _lock_files(tmp_path) == [".addition.out-lock"]  # what SIGKILL leaves behind
    done = mfsdp("data", "synthetic", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert _lock_files(tmp_path) == [] and (out / "rl" / "train.parquet").is_file()


def test_no_lock_file_is_left_after_a_failed_data_run(tmp_path):
    source = tmp_path / "train.jsonl"
    source.write_text(json.dumps({"question": "1 + 2?"}) + "\n")  # no answer column
    done = mfsdp("data", "gsm8k", "--input", str(source), "--out", str(tmp_path / "out"))
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert _lock_files(tmp_path) == []


def test_no_lock_file_is_left_after_ctrl_c_during_a_data_run(tmp_path):
    source = tmp_path / "train.jsonl"
    row = json.dumps({"question": "1 + 2?", "answer": "1 + 2 = 3\n#### 3"}) + "\n"
    source.write_text(row * 400_000)  # seconds of converting: time to press Ctrl-C
    run = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "data", "gsm8k"]
        + ["--input", str(source), "--out", str(tmp_path / "out")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(lambda: _lock_files(tmp_path), 60, run.communicate, run, every=0.02)
    run.send_signal(signal.SIGINT)
    _out, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert _lock_files(tmp_path) == [] and not (tmp_path / "out" / "rl").exists()


def test_ctrl_c_while_the_lock_is_taken_or_dropped_is_raised_after_the_lock_is_bound(tmp_path):
    """A Ctrl-C pressed between the lock's system calls (open, flock, write; unlink, close)
    is held back to the end of the step, so the caller's `finally` always sees the lock it
    took: the race that left `.out.out-lock` behind when Ctrl-C came just as the file was
    created."""
    import os
    import threading

    from mfsdp_ckpt.storage.out_lock import acquire_out_lock, ctrl_c_deferred, lock_path_for

    out = tmp_path / "out"
    taken = None
    # as in a terminal, whatever the test runner inherited (a background job ignores SIGINT)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    # another thread alive, as torch's and pyarrow's are: the kernel may hand it the signal
    done = threading.Event()
    other = threading.Thread(target=done.wait, daemon=True)
    other.start()
    try:
        with pytest.raises(KeyboardInterrupt), ctrl_c_deferred():
            os.kill(os.getpid(), signal.SIGINT)  # pressed mid-acquisition
            taken = acquire_out_lock(out)
    finally:
        signal.signal(signal.SIGINT, inherited)
        done.set()
    assert taken is not None and lock_path_for(out).exists()
    os.close(taken)


# ------------------------------------------------------------------ examples run as printed


def _help_texts() -> dict[str, str]:
    """Every command's --help, by the command it belongs to."""
    import click
    from click.testing import CliRunner

    from cli.main import app

    texts = {}

    def walk(command: click.Command, path: list[str]) -> None:
        texts[" ".join(["mfsdp", *path])] = CliRunner().invoke(app, [*path, "--help"]).output
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(app, [])
    return texts


def _doc_texts() -> dict[str, str]:
    """README.md and docs/*.md, only their ```bash blocks (what a user pastes)."""
    blocks = {}
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        found = re.findall(r"```(?:bash|sh)\n(.*?)```", path.read_text(), flags=re.S)
        blocks[str(path.relative_to(REPO))] = "\n".join(found)
    return blocks


def _commands_in(text: str) -> list[str]:
    """The `mfsdp ...` command lines in `text`, `\\`-continued lines joined, without what a
    shell does around them (a comment, `> file`, `| jq ...`)."""
    from cli.main import app

    commands, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and not re.match(rf"mfsdp (-v+ )?({'|'.join(app.commands)})\b", stripped):
            continue  # prose that starts with the word, e.g. "mfsdp run dir"
        pending = f"{pending} {stripped}" if pending else stripped
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        commands.append(re.split(r"\s(?:#|>|\|)\s", pending)[0].strip())
        pending = ""
    return commands


EXAMPLES_SHOWN = [
    (where, command)
    for where, text in {**_help_texts(), **_doc_texts()}.items()
    for command in _commands_in(text)
]


def test_the_examples_shown_are_what_these_tests_check():
    shown = {command for _where, command in EXAMPLES_SHOWN}
    assert "mfsdp ckpt validate runs/demo/sft --deep" in shown
    assert any(c.startswith("mfsdp data gsm8k --input gsm8k/train.jsonl") for c in shown)
    assert len(EXAMPLES_SHOWN) > 30


def _config_class(words: list[str]):
    from trainer.config import SFTConfig
    from trainer.grpo.config import GRPOConfig

    return SFTConfig if words[1] == "sft" else GRPOConfig


@pytest.mark.parametrize("where, command", EXAMPLES_SHOWN, ids=lambda value: value)
def test_every_example_shown_parses_as_printed(where, command):
    """Each example names a command that exists, options that exist (with a value where
    they take one, a listed choice where they take one of a list), and for `train` config
    keys that exist with values of their type, read over the config file it names when
    that file ships in examples/. Paths a user supplies (models, data) are not checked."""
    import click

    from cli.main import app
    from trainer.config import load_config

    words = shlex.split(command)[1:]
    if words[0] in ("-v", "-vv"):  # the root's own option, before the command
        words = words[1:]
    leaf: click.Command = app
    named = []
    while isinstance(leaf, click.Group):
        assert words and words[0] in leaf.commands, f"{where}: {command}: no such command"
        named.append(words[0])
        leaf, words = leaf.commands[words[0]], words[1:]
    context = click.Context(leaf, info_name=" ".join(named))
    try:
        values, arguments, _order = leaf.make_parser(context).parse_args(words)
    except click.UsageError as err:
        pytest.fail(f"{where}: {command}: {err.format_message()}")
    for param in leaf.params:
        given = values.get(param.name)
        given = given if isinstance(given, (str, list, tuple)) else None  # else: not given
        if isinstance(param.type, click.Choice) and given is not None:
            for value in given if isinstance(given, list) else [given]:
                assert value in param.type.choices, (where, command, param.name, value)
        if param.required and isinstance(param, click.Option):
            assert given is not None, f"{where}: {command}: {param.opts[0]} is required"
    if named[0] == "train":
        config = values.get("config")
        shipped = config if config and (REPO / config).is_file() else None
        overrides = values.get("overrides")
        overrides = list(overrides) if isinstance(overrides, (list, tuple)) else []
        load_config(_config_class(named), shipped and REPO / shipped, overrides)
    arguments_taken = [p for p in leaf.params if isinstance(p, click.Argument)]
    assert len(arguments) == 0 or arguments_taken, f"{where}: {command}: extra {arguments}"


# ------------------------------------------------------------------ config files and overrides


@pytest.mark.parametrize(
    "example", sorted(p.name for p in (REPO / "examples").glob("*.yaml")), ids=str
)
def test_every_example_config_loads_and_names_no_key_that_does_not_exist(example):
    from trainer.config import load_config

    load_config(_config_class(["train", example.split("_")[0]]), REPO / "examples" / example)


@pytest.mark.parametrize(
    ("key", "remedy"),
    [
        ("model.path", ", or model.path=null to clear it"),
        # null is refused for a list ("expects a list of strings, got null")
        ("data.val_files", ", or data.val_files=[] to clear it"),
        ("trainer.total_steps", ", or trainer.total_steps=null to clear it"),
        ("optim.lr", ""),  # no value clears it
        ("optim.betas", ""),  # a list that needs its two numbers: [] is refused
    ],
)
def test_an_empty_override_is_one_line_naming_the_key_not_a_silent_null(key, remedy):
    """`model.path=$MODEL` with MODEL unset trained the random tiny model instead."""
    done = mfsdp("train", "sft", "--config", "examples/sft_tiny_cpu.yaml", f"{key}=")
    assert done.returncode == 2
    assert done.stderr == (
        f"error: command-line override {key}=: empty value (an unset shell variable?); "
        f"give a value{remedy}\n"
    )
    if remedy:  # the remedy named is one the config takes
        from trainer.config import SFTConfig, load_config

        override = remedy.split("or ")[1].split(" ")[0]
        load_config(SFTConfig, REPO / "examples" / "sft_tiny_cpu.yaml", [override])


def test_null_still_clears_a_key():
    from trainer.config import SFTConfig, load_config

    config = load_config(SFTConfig, REPO / "examples" / "sft_gsm8k_qwen.yaml", ["model.path=null"])
    assert config.model.path is None


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    """What `mfsdp demo` writes (two steps, one process: the same directories)."""
    from click.testing import CliRunner

    from cli.main import app

    out = tmp_path_factory.mktemp("first_use") / "runs" / "demo"
    done = CliRunner().invoke(app, ["demo", "--out", str(out), "--steps", "2", "--nproc", "1"])
    assert done.exit_code == 0, done.output
    return out


def test_every_demo_path_an_example_names_is_written_by_the_demo_or_by_the_doc_it_cites(
    demo_dir,
):
    """A `runs/demo/NAME` the demo does not write exists only after some doc's recipe: an
    example naming it must say so, or a user runs it straight after the demo and meets "no
    such path"."""
    for where, text in _help_texts().items():
        for line in text.splitlines():
            read = re.sub(r"(--out |run_dir=)\S+", "", line.split(" # ")[0])  # written, not read
            for name in re.findall(r"runs/demo/([\w.-]+)", read):
                if (demo_dir / name).exists():
                    continue
                cited = re.findall(r"# .*?(docs/\w+\.md)", line)
                assert cited, f"{where}: {line.strip()}: the demo writes no runs/demo/{name}"
                recipe = (REPO / cited[0]).read_text()
                assert re.search(rf"(run_dir=|--out )runs/demo/{name}\b", recipe), (where, line)


# Commands that run on CPU from what the demo writes: the checkpoint, data and config ones.
RUNNABLE = re.compile(r"mfsdp (ckpt|data|config) ")
STEPS_SHOWN = "global_step_80"  # the step the examples name: the demo's default 80 steps


def _paths_read(words: list[str]) -> list[str]:
    """The paths a command reads: its arguments and option values of free text (not choices,
    numbers or flags), `--out` and `--split` aside."""
    import click

    from cli.main import app

    leaf: click.Command = app
    while isinstance(leaf, click.Group):
        leaf, words = leaf.commands[words[0]], words[1:]
    values, _args, _order = leaf.make_parser(click.Context(leaf)).parse_args(words)
    read = []
    for param in leaf.params:
        given = values.get(param.name)
        if param.name in ("out_dir", "split") or not isinstance(given, (str, list, tuple)):
            continue
        if isinstance(param.type, (click.Path, click.types.StringParamType)):
            read += [given] if isinstance(given, str) else list(given)
    return read


def test_every_example_that_reads_only_what_the_demo_wrote_runs_as_printed(
    demo_dir, tmp_path, monkeypatch
):
    """Parsing is not running: each ckpt/data/config example whose paths are all the demo's
    (or the repository's examples/) is run, in a directory of its own holding a copy of
    runs/demo, and must exit 0. Examples naming other runs (megatron_run/, Qwen2.5-7B/) need
    a real model and are parsed only (above)."""
    import shutil

    from click.testing import CliRunner

    from cli.main import app

    step = sorted(demo_dir.joinpath("sft").glob("global_step_*"))[-1].name
    ran: set[str] = set()
    for index, (where, command) in enumerate(EXAMPLES_SHOWN):
        if not RUNNABLE.match(command) or command in ran:
            continue
        words = shlex.split(command.replace(STEPS_SHOWN, step))[1:]
        named = _paths_read(words)
        if not all(w.startswith(("runs/demo", "examples/")) for w in named):
            continue  # another tool's checkpoint or a model this machine does not have
        cwd = tmp_path / f"example_{index}"
        shutil.copytree(demo_dir, cwd / "runs" / "demo", symlinks=True)
        (cwd / "examples").symlink_to(REPO / "examples")
        if not all((cwd / w).exists() for w in named):
            continue  # written only by a doc's own recipe
        monkeypatch.chdir(cwd)
        done = CliRunner().invoke(app, words)
        assert done.exit_code == 0, f"{where}: {command}: {done.output}"
        ran.add(command)
    assert len(ran) >= 10, sorted(ran)


def test_the_demo_chooses_threads_as_train_does_and_says_so(tmp_path):
    """The demo pinned OMP_NUM_THREADS=1 for its ranks, which then read it as the user's:
    `mfsdp -v demo` said "(OMP_NUM_THREADS as set); unset OMP_NUM_THREADS to let mfsdp
    choose" to a user who had set nothing. The same complete demo (one demo run serves
    both, for suite time) ends naming a next command as it was started (`./dev` here)."""
    from mfsdp_ckpt.command_as_run import DEV_SCRIPT
    from trainer.threads import CHOSEN_MARKER

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", CHOSEN_MARKER)}
    out = tmp_path / "d"
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "-v", "demo", "--out"]
        + [str(out)]
        + ["--steps", "1", "--nproc", "1"],
        cwd=REPO,
        env={**env, DEV_SCRIPT: "../mfsdp/dev"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if "[mfsdp.threads]" in line]
    assert len(said) == 1 and "set OMP_NUM_THREADS to override" in said[0], said
    last = done.stdout.splitlines()[-1]
    assert last.startswith("[demo] done in "), last
    assert last.endswith(
        f"s; run: {out / 'sft'}, export: {out / 'hf'}; next: `../mfsdp/dev mfsdp ckpt inspect"
        f" {out / 'sft'}`"
    ), last
