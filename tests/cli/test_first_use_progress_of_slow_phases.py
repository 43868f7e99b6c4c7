"""What a first-time user hit while waiting: phases of `mfsdp demo` that took seconds
without a line, a LoRA checkpoint's base model hashed without a bar by `validate --deep` and a
merged `export-hf`, commands whose --json printed something other than one JSON object, and
unclear messages for common mistakes (a second run into one run dir, a step dir given as the
run dir, Ctrl-C during training)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tqdm import tqdm

from cli.main import main
from tests.support.paths import REPO
from tests.support.sft import tiny_config, write_chat_jsonl
from tests.support.terminal import Terminal
from trainer.sft import run_sft

# ------------------------------------------------------------------ LoRA base model bars


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_bars")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    settings = (
        f"model.path={base}",
        "model.lora_rank=4",
        "trainer.total_steps=1",
        "data.global_batch_size=4",
    )
    run_sft(tiny_config(data, root / "run", *settings))
    return root


def _bars_drawn(monkeypatch, capsys, argv: list[str]) -> list[str]:
    """What `mfsdp ARGV` draws on a terminal: each bar state it printed (between \\r)."""
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr("sys.argv", ["mfsdp", *argv])
    try:
        main()
    except SystemExit as stop:
        assert stop.code in (0, None), capsys.readouterr()
    stdout = capsys.readouterr().out
    if "--json" in argv:  # the bars go to stderr, stdout keeps its one object
        assert isinstance(json.loads(stdout), dict), stdout
    return [line for line in terminal.getvalue().split("\r") if "%|" in line]


def _base_size(lora_run: Path) -> str:
    return f"/{(lora_run / 'base' / 'model.safetensors').stat().st_size / 1e6:.2f}M ["


@pytest.mark.parametrize("as_json", [False, True], ids=["terminal", "json"])
def test_validate_deep_of_lora_draws_labelled_bars_for_the_base_its_hashes_then_tensors(
    lora_run, monkeypatch, capsys, as_json
):
    """--deep hashes every byte of the base model first (minutes for a 7B one), then every
    file the checkpoint's manifest records (gigabytes of a large step): a bar each in bytes,
    labelled, before validate's bar of tensors; under --json too, on stderr (a script's log
    showed nothing for minutes)."""
    argv = ["ckpt", "validate", str(lora_run / "run"), "--deep"] + (["--json"] if as_json else [])
    bars = _bars_drawn(monkeypatch, capsys, argv)
    base = [bar for bar in bars if bar.startswith("validate base model:")]
    hashes = [bar for bar in bars if bar.startswith("validate hashes:")]
    tensors = [bar for bar in bars if bar.startswith("validate:")]
    assert base and hashes and tensors, bars
    assert len(base) + len(hashes) + len(tensors) == len(bars), bars
    assert _base_size(lora_run) in base[0], bars
    step = max((lora_run / "run").glob("global_step_*"))
    recorded = json.loads((step / "manifest.json").read_text())["files"]
    total = tqdm.format_sizeof(sum(record["size"] for record in recorded.values()))
    assert f"/{total} [" in hashes[0], bars
    assert bars.index(base[-1]) < bars.index(hashes[0])  # the base, its own files, tensors
    assert bars.index(hashes[-1]) < bars.index(tensors[0])


@pytest.mark.parametrize("as_json", [False, True], ids=["terminal", "json"])
def test_a_merged_lora_export_draws_a_labelled_bar_while_it_hashes_the_base(
    lora_run, tmp_path, monkeypatch, capsys, as_json
):
    out = tmp_path / "merged"
    argv = ["ckpt", "export-hf", str(lora_run / "run"), "--out", str(out)]
    bars = _bars_drawn(monkeypatch, capsys, argv + (["--json"] if as_json else []))
    assert (out / "config.json").is_file()
    base = [bar for bar in bars if bar.startswith("export base model:")]
    assert base and _base_size(lora_run) in base[0], bars
    assert any(bar.startswith("export:") for bar in bars), bars


# ------------------------------------------------------------------ no phase without a line


def _lines_of(*args: str) -> list[str]:
    """`mfsdp ARGS` in a fresh interpreter, stdout and stderr as one stream, as a terminal or a
    log file shows them (the order the lines came in)."""
    return _output_of(*args).splitlines()


def _output_of(*args: str) -> str:
    """`_lines_of`'s stream as it came, carriage returns and all."""
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout
    return done.stdout


def _in_order(lines: list[str], expected: list[str]) -> None:
    """Each pattern matches a line after the line the one before it matched."""
    at = 0
    for pattern in expected:
        found = [i for i in range(at, len(lines)) if re.match(pattern, lines[i])]
        assert found, f"no line {pattern!r} after line {at} in:\n" + "\n".join(lines)
        at = found[0] + 1


def test_each_slow_phase_of_the_demo_says_so_as_it_starts(tmp_path):
    """Loading torch, building the model, validating, exporting and generating each took
    seconds with no line (the output looked hung)."""
    out = tmp_path / "demo"
    lines = _lines_of("demo", "--out", str(out), "--steps", "2", "--nproc", "1")
    _in_order(
        lines,
        [
            r"\[demo\] data: writing .* \.\.\.$",
            r"\[demo\] data: .*\(SFT\)",
            r"\[demo\] train: ",
            r"\[sft\] loading torch and transformers \.\.\.$",
            r"\[sft\] building the model and reading the data \.\.\.$",
            r"\[sft\] fsdp2 on 1 x cpu",
            r"sft: step 2",
            r"\[demo\] validate --deep .*\.\.\.$",
            r"\[demo\] validate --deep .*: valid$",
            r"\[demo\] export-hf: .*\.\.\.$",
            r"\[demo\] export-hf: \d+ tensors",
            r"\[demo\] generate: loading .*\.\.\.$",
            r"\[demo\] generate: '",
            r"\[demo\] done in",
        ],
    )


@pytest.fixture(scope="module")
def launched_to_a_pipe(tmp_path_factory) -> str:
    """`mfsdp train sft --nproc-per-node 2`, one step from a model dir with weights, logged to
    a pipe (`_output_of`): what it printed. One launch (two ranks, each loading torch and
    the weights) read by the two tests below, each on a path of its own: the launcher's and
    the ranks' phase lines, and the library's weight-loading bar each rank leaves out where
    the run draws no bar of its own (rank 0 on a pipe takes the branch a single process
    logged to a pipe takes: `cli.launch._quiet_library_bars`)."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("launched_to_a_pipe")
    model = build_tiny_model_dir(root / "model", with_weights=True)
    rows = write_chat_jsonl(root / "train.jsonl", rows=64)
    return _output_of(
        "train",
        "sft",
        "--config",
        "examples/sft_tiny_cpu.yaml",
        "--nproc-per-node",
        "2",
        f"model.path={model}",
        f"data.train_files={rows}",
        f"trainer.run_dir={root / 'run'}",
        "trainer.total_steps=1",
    )


def test_a_launched_training_run_says_so_before_torchrun_and_the_ranks_load(launched_to_a_pipe):
    lines = launched_to_a_pipe.splitlines()
    _in_order(
        lines,
        [
            r"\[sft\] launching 2 processes \(torchrun\) \.\.\.$",
            r"\[sft\] loading torch and transformers \.\.\.$",
            r"\[sft\] building the model and reading the data \.\.\.$",
            r"\[sft\] fsdp2 on 2 x cpu",
            r"sft: step 1",
        ],
    )
    assert sum("loading torch" in line for line in lines) == 1  # rank 0 only


def test_a_run_logged_to_a_pipe_draws_no_weight_loading_bar(launched_to_a_pipe):
    """transformers' "Loading weights" bar came as carriage-return lines into logs, once per
    rank; the run's own bar is drawn only on a terminal, and now the library's follows."""
    assert "\r" not in launched_to_a_pipe, launched_to_a_pipe
    assert "Loading weights" not in launched_to_a_pipe, launched_to_a_pipe


@pytest.mark.parametrize("rank, quiet", [("0", False), ("1", True)])
def test_only_the_main_rank_on_a_terminal_keeps_the_library_bars(monkeypatch, rank, quiet):
    from types import SimpleNamespace

    from cli.launch import _quiet_library_bars

    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "2")  # a rank of a launched group
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal, as a user's shell
    _quiet_library_bars(SimpleNamespace(trainer=SimpleNamespace(progress_bar=True)))
    assert ("HF_HUB_DISABLE_PROGRESS_BARS" in os.environ) == quiet
