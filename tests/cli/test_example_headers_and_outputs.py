"""What the examples tell a user to run works as written, and what they write stays apart:
each example config's header makes every data file the config reads (the SFT headers
converted the train split alone, and `data.val_files` then named a file that was not there);
no example's `--out` lies inside another's (`--out hf/` in `mfsdp --help` and `--out
hf/demo` in `mfsdp ckpt --help` put an export inside an export); and every folder they
write in the repository root is one git ignores."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path, PurePosixPath

import pytest
import yaml
from click.testing import CliRunner

from cli.main import app
from tests.cli.test_first_use_data_lock_and_examples import EXAMPLES_SHOWN
from tests.support.paths import EXAMPLES, REPO

CONFIGS = sorted(EXAMPLES.glob("*.yaml"))
GSM8K_ROWS = [
    {"question": f"{a} + 1?", "answer": f"{a} + 1 = {a + 1}\n#### {a + 1}"} for a in (1, 2)
]


def _header_commands(config: Path) -> list[str]:
    """The `mfsdp ...` lines of the comment block at the top of an example config."""
    commands = []
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("mfsdp "):
            commands.append(re.split(r"\s+#\s", text)[0])
    return commands


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_the_header_makes_every_data_file_the_config_reads(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gsm8k").mkdir()
    for split in ("train", "test"):
        rows = "".join(json.dumps(row) + "\n" for row in GSM8K_ROWS)
        (tmp_path / "gsm8k" / f"{split}.jsonl").write_text(rows)
    commands = _header_commands(config)
    assert any(
        c.startswith("mfsdp train ") and f"--config examples/{config.name}" in c for c in commands
    ), commands
    for command in commands:
        if command.startswith("mfsdp data "):
            done = CliRunner().invoke(app, shlex.split(command)[1:])
            assert done.exit_code == 0, f"{config.name}: {command}: {done.output}"
    data = yaml.safe_load(config.read_text())["data"]
    for key in ("train_files", "val_files"):
        named = data.get(key) or []
        for path in [named] if isinstance(named, str) else named:
            if path.startswith("runs/demo/"):  # the demo writes it (the header says so)
                continue
            assert (tmp_path / path).is_file(), f"{config.name}: data.{key} {path}: not made"


def _outputs() -> list[tuple[str, str]]:
    """(where, path) of every `--out` and `trainer.run_dir` the help, docs and example
    configs (their headers and run dirs) write."""
    shown = list(EXAMPLES_SHOWN)
    for config in CONFIGS:
        shown += [(config.name, command) for command in _header_commands(config)]
        run_dir = yaml.safe_load(config.read_text())["trainer"]["run_dir"]
        shown.append((config.name, f"run_dir={run_dir}"))
    return [
        (where, path.rstrip("/") or "/")
        for where, command in shown
        for path in re.findall(r"(?:--out[ =]|run_dir=)(\S+)", command)
    ]


def test_no_example_writes_inside_what_another_example_writes():
    outputs = _outputs()
    for where, path in outputs:
        inside = [
            (other_where, other)
            for other_where, other in outputs
            if PurePosixPath(other) in PurePosixPath(path).parents
        ]
        assert not inside, f"{where}: --out {path} lies inside {inside[0][1]} ({inside[0][0]})"


def test_what_the_examples_write_in_the_repository_is_ignored_by_git():
    ignored = {
        line.strip().strip("/")
        for line in (REPO / ".gitignore").read_text().splitlines()
        if re.fullmatch(r"/[\w.-]+/", line.strip())
    }
    roots = {PurePosixPath(path).parts[0] for _, path in _outputs() if not path.startswith("/")}
    assert roots <= ignored, sorted(roots - ignored)
