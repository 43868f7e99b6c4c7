"""Hostile inputs to `config from-verl` and to the model build, and SIGTERM mid-write:

* `mfsdp config from-verl` of a FIFO nobody writes to (a named pipe, `<(...)` whose writer
  is gone) blocked forever in open(); a socket or a device (/dev/zero) was opened and read
  too. Only a regular file is read now, as `--config` takes only one: one line naming the
  file and what it is (exit 2), at once;
* `mfsdp train` from a model dir whose config.json holds a value transformers reads without
  complaint but cannot build the model from (an unknown `hidden_act`, a rope factor that is a
  string), or with such a `model.overrides`: a traceback of 80 lines in the rank. Now one
  line naming config.json (exit 1) or model.overrides (exit 2) and what transformers said;
* SIGTERM (`kill`, `timeout`, a scheduler stopping a job) ended every command at once: no
  line, and an export's, import's or data conversion's work dir and lock file were left
  beside --out (the next run removed them). It now runs the cleanup Ctrl-C runs and ends
  with `error: SIGTERM: <what Ctrl-C would say>`, exit 143; a launching `mfsdp train`
  passes it on to torchrun, which stops the ranks (they were left running);
* a model's chat template that raises (`raise_exception(...)`, an undefined name,
  `'a' * 10**15`) was a traceback in the rank printing its message raw (escapes, newlines);
  one that loops never finished tokenizing the first row. Each is now one line naming the
  row and the template's dir (exit 2), a loop stopped after TEMPLATE_SECONDS; a tokenizer
  whose regex gives up on a row (Rust's panic) ends in such a line too, not a traceback;
* a FIFO where a run writes its config.yaml or metrics.jsonl (resuming a run dir) blocked
  the run in open() for ever, and Ctrl-C's or SIGTERM's line then blocked reading it; a
  link to /dev/null there swallowed the metrics. Each is one line naming the file, exit 1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.printable import printable
from tests.support.cli_errors import one_error
from tests.support.model_dirs import config_edit, train_from_args
from tests.support.one_python import Ran, mfsdp_each
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from tests.support.waiting import wait_until
from trainer.config import ConfigError, DataConfig, ModelConfig
from trainer.data.chat import ChatFormatError
from trainer.data.sft_dataset import tokenize_rows
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.model import ModelFilesError, build_hf_config, build_model, load_tokenizer

# Long enough for Python and click to start on a busy machine, far shorter than "forever".
QUICK_SECONDS = 60


def _mfsdp_within(seconds: float, *args: str) -> subprocess.CompletedProcess:
    """`mfsdp ARGS` in a fresh interpreter that must end within `seconds` (a hang fails the
    test instead of stalling the suite)."""
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=seconds,
        stdin=subprocess.DEVNULL,
    )


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(path))


def _dev_zero(path):
    path.symlink_to("/dev/zero")


SPECIAL_SOURCES = {
    "fifo": (_fifo, "a FIFO, not a regular file"),
    "socket": (_socket, "a socket, not a regular file"),
    "dev-zero": (_dev_zero, "a character device, not a regular file"),
}


@pytest.mark.parametrize("case", list(SPECIAL_SOURCES))
def test_from_verl_reads_only_a_regular_file(tmp_path, case):
    make, words = SPECIAL_SOURCES[case]
    source = tmp_path / "run.sh"
    make(source)
    done = _mfsdp_within(QUICK_SECONDS, "config", "from-verl", source)
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, str(source), words)
    assert done.stdout == ""


# --------------------------------------------------------------------------- model builds
def _build(model_cfg: ModelConfig) -> None:
    tokenizer = load_tokenizer(model_cfg)
    build_model(model_cfg, build_hf_config(model_cfg, tokenizer), torch.device("cpu"), seed=0)


BAD_BUILDS = {
    # transformers reads both configs without a word and fails in the module's __init__
    "unknown-activation": ({"hidden_act": "\x1b[2Jswish9"}, "KeyError: '\\x1b[2Jswish9'"),
}


@pytest.mark.parametrize("case", list(BAD_BUILDS))
def test_a_model_dir_config_transformers_cannot_build_is_named(tmp_path, trainable, case):
    changes, words = BAD_BUILDS[case]
    model = tmp_path / "model"
    shutil.copytree(trainable[0], model)
    config_edit(**changes)(model)
    with pytest.raises(ModelFilesError) as caught:
        _build(ModelConfig(path=str(model)))
    message = printable(str(caught.value))
    assert message.startswith(f"{model / 'config.json'}: transformers cannot build the model")
    assert words in message and "\n" not in message, message


def test_an_override_activation_transformers_lacks_is_a_usage_error_before_the_build():
    """Was "transformers cannot build the model (KeyError: ...)" once the model was built;
    now refused where the overrides are read, as `config check` reads them."""
    with pytest.raises(ConfigError) as caught:
        _build(ModelConfig(overrides={"hidden_act": "\x1b[2Jswish9"}))
    message = printable(str(caught.value))
    assert message == (
        'model.overrides.hidden_act: "\\e[2Jswish9" is no activation transformers has; did you'
        " mean swish?"
    )


@pytest.fixture(scope="module")
def refused_runs(tmp_path_factory, trainable) -> tuple[Path, dict[str, Ran]]:
    """Two `mfsdp train sft` runs the ranks refuse once torch and transformers are loaded, in
    one interpreter (`mfsdp_each`): "build", whose model dir's config.json transformers
    cannot build (a copy of `trainable`'s in ROOT/build/model), and "template", whose model
    dir's chat template raises on the first row (in ROOT/template/model). ROOT, and each
    run's exit status and lines."""
    source, table = trainable
    root = tmp_path_factory.mktemp("refused_runs")
    unbuildable = root / "build" / "model"
    shutil.copytree(source, unbuildable)
    config_edit(hidden_act="nope")(unbuildable)
    model = root / "template" / "model"
    shutil.copytree(source, model)
    (model / "chat_template.jinja").write_text(HOSTILE_TEMPLATES["raises"][0])
    commands = {
        "build": train_from_args(unbuildable, table, root / "build" / "run"),
        "template": train_from_args(model, table, root / "template" / "run"),
    }
    return root, mfsdp_each(commands)


def test_a_run_whose_model_cannot_be_built_ends_in_one_line(refused_runs):
    """Was a traceback of 80 lines (the rank's, prefixed [rank0]:) and exit 1."""
    root, ran = refused_runs
    done = ran["build"]
    assert done.returncode == 1, done.stderr
    config = root / "build" / "model" / "config.json"
    one_error(
        done.stderr, f"{config}: transformers cannot build the model from it (KeyError: 'nope')"
    )


def test_a_model_that_builds_still_builds(trainable):
    _build(ModelConfig(path=str(trainable[0])))
    _build(ModelConfig(overrides={"hidden_act": "gelu"}))


# --------------------------------------------------------------------------- SIGTERM
def _started(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", *map(str, args)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_during_a_data_run_leaves_nothing_behind(tmp_path):
    """Was: killed at once (143, no line), its lock file and work dir left beside --out."""
    source = tmp_path / "train.jsonl"
    row = json.dumps({"question": "1 + 2?", "answer": "1 + 2 = 3\n#### 3"}) + "\n"
    source.write_text(row * 400_000)  # seconds of converting
    out = tmp_path / "out"
    run = _started("data", "gsm8k", "--input", source, "--out", out)
    wait_until(
        lambda: any(p.name.endswith(".out-lock") for p in tmp_path.iterdir()),
        120,
        run.communicate,
        run,
        every=0.02,
    )
    run.send_signal(signal.SIGTERM)
    _stdout, err = run.communicate(timeout=60)
    assert run.returncode == 143, err
    one_error(err, "SIGTERM: interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl"]


def test_sigterm_during_training_stops_at_a_complete_checkpoint(tmp_path):
    """A scheduler's stop (SIGTERM) of a one-process run: its line says where to resume, and
    no half-saved step dir is left (was: killed at once, no line)."""
    run_dir = tmp_path / "run"
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    run = _started(
        "train",
        "sft",
        "--config",
        REPO / "examples" / "sft_tiny_cpu.yaml",
        f"data.train_files={data}",
        f"trainer.run_dir={run_dir}",
        *("trainer.total_steps=1000", "trainer.epochs=1000", "checkpoint.save_every=1"),
        *("trainer.eval_every=0", "data.val_ratio=0", "trainer.progress_bar=false"),
    )
    tracker = run_dir / "latest_checkpointed_iteration.txt"
    wait_until(tracker.exists, 120, run.communicate, run, every=0.02)
    run.send_signal(signal.SIGTERM)
    _stdout, err = run.communicate(timeout=120)
    assert run.returncode == 143, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: SIGTERM: interrupted after step"), err
    assert "run the same command again to resume from it" in line, line
    assert "Traceback" not in err
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_sigterm_while_the_lock_is_taken_is_raised_after_the_lock_is_bound(tmp_path):
    """SIGTERM, like Ctrl-C, is held back while the lock's system calls run, so the caller's
    `finally` always sees the lock it took."""
    from mfsdp_ckpt.storage.out_lock import acquire_out_lock, ctrl_c_deferred, lock_path_for

    out = tmp_path / "out"
    taken = None
    inherited = signal.signal(signal.SIGTERM, signal.default_int_handler)  # raises, as mfsdp's
    try:
        with pytest.raises(KeyboardInterrupt), ctrl_c_deferred():
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-acquisition
            taken = acquire_out_lock(out)
    finally:
        signal.signal(signal.SIGTERM, inherited)
    assert taken is not None and lock_path_for(out).exists()
    os.close(taken)


# --------------------------------------------------------------------------- chat templates
HOSTILE_TEMPLATES = {
    "raises": ("{{ raise_exception('bad\x1b[2J\\nrow') }}", "(TemplateError: bad\x1b[2J row)"),
    "undefined-call": ("{{ undefined_fn() }}", "(UndefinedError: 'undefined_fn' is undefined)"),
    "memory-bomb": ("{{ 'a' * 1000000000000000 }}", "'a' * 1000000000000000 would make over"),
    "type-error": ("{{ messages[0].content + 1 }}", "(TypeError: can only concatenate"),
    "loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "took more than 0.5 s to render it",
    ),
}
CHAT = [{"role": "user", "content": "1 + 2?"}, {"role": "assistant", "content": "3"}]


@pytest.fixture(scope="module")
def tokenizer(trainable):
    return load_tokenizer(ModelConfig(path=str(trainable[0])))


@pytest.mark.parametrize("case", list(HOSTILE_TEMPLATES))
def test_a_template_that_fails_or_loops_is_named_for_sft_and_rl_rows(
    tmp_path, tokenizer, monkeypatch, case
):
    template, words = HOSTILE_TEMPLATES[case]
    monkeypatch.setattr(tokenizer, "chat_template", template)
    monkeypatch.setattr("trainer.data.chat.TEMPLATE_SECONDS", 0.5)
    rows = tmp_path / "rows.jsonl"
    row = {
        "messages": CHAT,
        "prompt": CHAT[:1],
        "data_source": "openai/gsm8k",
        "reward_model": {"ground_truth": "3"},
    }
    rows.write_text(json.dumps(row) + "\n")
    started = time.monotonic()
    with pytest.raises(ChatFormatError) as sft:
        tokenize_rows([row], DataConfig(), tokenizer, lambda i: f"{rows}:{i + 1}", progress=False)
    with pytest.raises(RLDataError) as rl:
        load_rl_prompts([str(rows)], RLDataConfig(), tokenizer)
    assert time.monotonic() - started < 20
    for caught in (sft, rl):
        message = str(caught.value)
        # a size bomb is a prompt too long to keep: GRPO drops it, then names it as its last
        if not message.startswith(f"{rows}: all 1 prompts are longer than"):
            named = f"{rows}:1: the chat template in {tokenizer.name_or_path}"
            assert message.startswith(named), message
        # the template's own error text is shown escaped, as every message shows control bytes
        assert printable(words) in message and "\n" not in message, message
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # the bound's handler is gone


def test_a_run_whose_template_raises_ends_in_one_escaped_line(refused_runs, trainable):
    """Was the rank's traceback, the template's message printed raw (escapes, newlines)."""
    done = refused_runs[1]["template"]
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, str(trainable[1]), "row 1", "(TemplateError: bad\\x1b[2J row)")


def test_a_tokenizer_whose_regex_gives_up_is_named_not_a_panic(tmp_path, trainable):
    """A tokenizer.json pre-tokenizer regex that backtracks past Oniguruma's limit on a row:
    pyo3's PanicException (no Exception, so no handler took it) and 200 lines."""
    tokenizer_dir = tmp_path / "tokenizer"
    tokenizer_dir.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(trainable[0] / name, tokenizer_dir / name)
    spec = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = {
        "type": "Split",
        "pattern": {"Regex": "(a|aa)+$"},  # exponential backtracking on a...ab
        "behavior": "Isolated",
        "invert": False,
    }
    (tokenizer_dir / "tokenizer.json").write_text(json.dumps(spec))
    tokenizer = load_tokenizer(ModelConfig(tokenizer=str(tokenizer_dir)))
    row = {"messages": [{"role": "user", "content": "a" * 60 + "b"}, CHAT[1]]}
    with pytest.raises(ChatFormatError) as caught:
        tokenize_rows([row], DataConfig(), tokenizer, lambda i: f"rows.jsonl row {i}", False)
    assert str(caught.value).startswith(
        f"rows.jsonl row 0: the tokenizer of {tokenizer_dir} cannot encode it (PanicException:"
    ), caught.value


# --------------------------------------------------------------------------- run dir files
WRITE_RUN_FILES = """
import sys
from mfsdp_ckpt.errors import MfsdpError
from trainer.config import SFTConfig, write_resolved_config
from trainer.metrics import MetricsLogger, last_logged_step
run = sys.argv[1]
for write in (
    lambda: write_resolved_config(run, SFTConfig()),
    lambda: MetricsLogger(run, True, SFTConfig().trainer).log(1, {"loss": 1.0}),
):
    try:
        write()
        print("written")
    except MfsdpError as err:
        print(err)
print(last_logged_step(run, 0))
"""


@pytest.mark.parametrize("special", ["fifo", "dev-null", "directory"])
def test_a_special_file_where_the_run_writes_is_refused_without_blocking(tmp_path, special):
    """config.yaml and metrics.jsonl are written in place: a FIFO there blocked the run in
    open() for ever (from its first step; Ctrl-C's line then blocked reading it), a link to
    /dev/null swallowed the metrics."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.yaml", "metrics.jsonl"):
        if special == "fifo":
            os.mkfifo(run / name)
        elif special == "dev-null":
            (run / name).symlink_to(os.devnull)
        else:
            (run / name).mkdir()
    done = subprocess.run(
        [sys.executable, "-c", WRITE_RUN_FILES, str(run)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=QUICK_SECONDS,
    )
    # a link is refused as a link, whatever it leads to: it is never written through
    kind = {"fifo": "a FIFO", "dev-null": "a symlink", "directory": "a directory"}
    lines = [line.split(";")[0] for line in done.stdout.splitlines()]
    not_regular = "" if special == "dev-null" else ", not a regular file"
    assert lines == [
        f"{run / 'config.yaml'}: {kind[special]}{not_regular}",
        f"{run / 'metrics.jsonl'}: {kind[special]}{not_regular}",
        "None",
    ], done.stdout + done.stderr


def test_the_run_files_are_still_written_and_appended(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", WRITE_RUN_FILES, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=QUICK_SECONDS,
    )
    assert done.stdout.splitlines() == ["written", "written", "1"], done.stdout + done.stderr
    assert "trainer:" in (tmp_path / "config.yaml").read_text()
