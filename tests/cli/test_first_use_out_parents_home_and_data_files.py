"""What a first-time user met on a fresh machine: docs/interop.md's recipes
(`import-hf ... --out ckpts/q05_mcore`) stopping at "parent directory does not exist" where
`mfsdp data --out` and transformers' `save_pretrained` make the parents; a `~` in a
config's path (`run_dir: ~/runs/x`) taken literally: a directory named `~` in the current
one, or "no such file" for a file that is there; a jsonl saved with a byte order mark
refused; a command started with stdout and stderr closed failing silently (exit 1); and an
override typed `optim.lr = 1e-4` refused as "expected key=value" or "empty value"."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import typing

import pytest
import torch
import yaml

from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES, REPO
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.config_suggestions import all_keys
from trainer.grpo.config import GRPOConfig

# Keys whose value names a file or directory, by their names: a new one is checked too.
PATH_LIKE = re.compile(r"(path|dir|files|tokenizer|hf_config|resume)$")


def _listing(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_import_and_export_make_the_missing_parents_of_out(tmp_path):
    model = hf_model(tmp_path)
    imported = tmp_path / "ckpts" / "q05_mcore"
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", imported)
    assert code == 0, out + err
    assert (imported / ".metadata").is_file()
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["q05_mcore"]

    exported = tmp_path / "hf" / "deep" / "q05"
    code, out, err = run_cli(
        "ckpt", "export-hf", imported, "--hf-config", model, "--out", exported, "--verify"
    )
    assert code == 0, out + err
    assert (exported / "model.safetensors").is_file()
    assert sorted(p.name for p in (tmp_path / "hf" / "deep").iterdir()) == ["q05"]


def test_a_failed_import_or_export_leaves_no_parent_it_made(tmp_path):
    def poison(tensors: dict[str, torch.Tensor]) -> None:
        tensors["model.norm.weight"][0] = float("nan")

    model = hf_model(tmp_path, edit=poison)
    before = _listing(tmp_path)
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "a" / "b" / "c")
    assert code == 1 and "NaN" in one_error_line(err), out + err
    assert _listing(tmp_path) == before
    imported = tmp_path / "kept" / "imported"
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", imported, "--allow-nonfinite")
    assert code == 0, out + err
    before = _listing(tmp_path)
    code, out, err = run_cli(
        "ckpt", "export-hf", imported, "--hf-config", model, "--out", tmp_path / "x" / "y"
    )
    assert code == 1 and "NaN" in one_error_line(err), out + err
    assert _listing(tmp_path) == before


def test_an_out_below_a_file_names_the_file(tmp_path):
    model = hf_model(tmp_path)
    code, out, err = run_cli(
        "ckpt", "import-hf", model, "--out", model / "config.json" / "sub" / "out"
    )
    assert code == 2, out + err
    assert f"{model / 'config.json'} is a file, not a directory" in one_error_line(err)


def _path_keys(cls: type) -> list[str]:
    hints = typing.get_type_hints(cls)
    keys = [key for key in all_keys(cls) if PATH_LIKE.search(key.rsplit(".", 1)[-1])]
    return [key for key in keys if key.split(".")[0] in hints]


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_a_tilde_in_any_path_key_is_the_home_directory(cls, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    keys = _path_keys(cls)
    assert {"model.path", "data.train_files", "trainer.run_dir", "checkpoint.resume"} <= set(keys)
    config_file = tmp_path / "config.yaml"
    sections: dict[str, list[str]] = {}
    for key in keys:
        section, leaf = key.split(".")
        sections.setdefault(section, []).append(f"  {leaf}: ~/{leaf}")
    config_file.write_text(
        "".join(f"{section}:\n" + "\n".join(lines) + "\n" for section, lines in sections.items())
    )
    from_file = load_config(cls, config_file)
    overridden = load_config(cls, None, [f"{key}=~/{key.split('.')[1]}" for key in keys])
    for config in (from_file, overridden):
        for key in keys:
            section, leaf = key.split(".")
            value = getattr(getattr(config, section), leaf)
            assert value in (f"{tmp_path}/{leaf}", [f"{tmp_path}/{leaf}"]), (key, value)


def test_a_tilde_path_that_exists_passes_the_checks_before_training(tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    config_file = tmp_path / "config.yaml"
    config_file.write_text("model:\n  tokenizer: ~/tok\ntrainer:\n  run_dir: ~/runs/x\n")
    cfg = load_checked_config(SFTConfig, str(config_file), [])
    assert cfg.model.tokenizer == str(tmp_path / "tok")
    assert cfg.trainer.run_dir == str(tmp_path / "runs" / "x")


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda text: b"\xef\xbb\xbf" + text.encode(), id="bom"),
        pytest.param(lambda text: text.replace("\n", "\r\n").encode(), id="crlf"),
    ],
)
def test_a_jsonl_as_windows_editors_save_it_reads_as_any_other(tmp_path, encode):
    from tests.support.data_tables import read_rows

    rows = [{"question": f"{a} + 1?", "answer": f"{a} + 1 = {a + 1}\n#### {a + 1}"} for a in (1, 2)]
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(row) + "\n" for row in rows))
    windows = tmp_path / "train.jsonl"
    windows.write_bytes(encode(plain.read_text()))
    assert read_rows([str(windows)]) == rows
    code, out, err = run_cli("data", "gsm8k", "--input", windows, "--out", tmp_path / "data")
    assert code == 0, out + err
    assert (tmp_path / "data" / "sft" / "train.parquet").is_file()


def test_a_byte_order_mark_inside_a_jsonl_is_still_refused_naming_the_line(tmp_path):
    from tests.support.data_tables import read_rows
    from trainer.data.files import DataFileError

    data = tmp_path / "train.jsonl"
    data.write_bytes(b'{"a": 1}\n\xef\xbb\xbf{"a": 2}\n')
    with pytest.raises(DataFileError, match=r"train.jsonl:2: not valid JSON"):
        read_rows([str(data)])


def _closing_stdout_and_stderr() -> None:
    os.close(1)
    os.close(2)


def test_a_command_started_with_stdout_and_stderr_closed_still_does_its_work(tmp_path):
    out = tmp_path / "hf"
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "ckpt", "export-hf"]
        + [str(FIXTURES / "megatron_fsdp_qwen2" / "run"), "--out", str(out)],
        cwd=REPO,
        preexec_fn=_closing_stdout_and_stderr,
        timeout=120,
    )
    assert done.returncode == 1  # its summary, for a stdout that is closed: the export is done
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen2"


@pytest.mark.parametrize(
    "typed, meant",
    [
        (["optim.lr", "=", "1e-4"], "optim.lr=1e-4"),
        (["optim.lr=", "1e-4"], "optim.lr=1e-4"),
        (["optim.lr", "=1e-4"], "optim.lr=1e-4"),
    ],
)
def test_an_override_typed_with_spaces_around_the_equals_sign_says_so(typed, meant):
    done = mfsdp("train", "sft", "--config", "examples/sft_tiny_cpu.yaml", *typed)
    assert done.returncode == 2, done.stderr
    line = one_error(done.stderr, "spaces around '='", f"write {meant}")
    assert repr(" ".join(typed)) in line


@pytest.mark.parametrize("extra", [[], ["--nproc-per-node", "2"], ["--json"]])
def test_a_second_training_into_a_run_dir_in_use_stops_before_anything_starts(tmp_path, extra):
    """Was: it trained alongside the first, wrote its lines into the same metrics.jsonl and
    failed at its first save on a step dir the first run had renamed."""
    from mfsdp_ckpt.storage.out_lock import acquire_out_lock, release_out_lock

    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1 + 1?", "response": "#### 2"}\n')
    run = tmp_path / "run"
    held = acquire_out_lock(run, "trainer.run_dir")
    try:
        done = mfsdp(
            "train", "sft", "--config", "examples/sft_tiny_cpu.yaml", *extra,
            f"trainer.run_dir={run}", f"data.train_files={data}",
        )  # fmt: skip
    finally:
        release_out_lock(run, held)
    assert done.returncode == 1, done.stderr
    words = (f"{run}: another command is writing it (pid {os.getpid()})", "trainer.run_dir")
    line = one_error(done.stderr, *words)
    if "--json" in extra:
        assert json.loads(done.stdout) == {"error": line.removeprefix("error: "), "exit_code": 1}
    assert not run.exists()


@pytest.mark.parametrize("reached_through", ["a link to it", "a link to its parent"])
def test_a_second_training_into_a_busy_run_dir_through_a_link_stops_too(tmp_path, reached_through):
    """Was: the lock file was named after the path given, so a run started through a symlink
    to a training run dir took a lock of its own, trained into the same steps and replaced
    the first run's checkpoints; both exited 0."""
    from mfsdp_ckpt.storage.out_lock import acquire_out_lock, release_out_lock

    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1 + 1?", "response": "#### 2"}\n')
    (tmp_path / "real").mkdir()
    run = tmp_path / "real" / "run"
    run.mkdir()
    if reached_through == "a link to it":
        (tmp_path / "link").symlink_to(run)
        given = tmp_path / "link"
    else:
        (tmp_path / "parent_link").symlink_to(tmp_path / "real")
        given = tmp_path / "parent_link" / "run"
    held = acquire_out_lock(run, "trainer.run_dir")
    try:
        done = mfsdp(
            "train", "sft", "--config", "examples/sft_tiny_cpu.yaml",
            f"trainer.run_dir={given}", f"data.train_files={data}",
        )  # fmt: skip
    finally:
        release_out_lock(run, held)
    assert done.returncode == 1, done.stderr
    one_error(done.stderr, f"{given}: another command is writing it (pid {os.getpid()})")
    assert sorted(p.name for p in run.iterdir()) == []


def test_a_tilde_after_an_options_equals_sign_is_the_home_directory(tmp_path):
    """`--out=~/syn`: the shell expands `--out ~/syn` but not this; it made a directory
    named `~` in the current one."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()"]
        + ["data", "synthetic", "--out=~/syn", "--json"],
        cwd=cwd,
        env={**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert list(cwd.iterdir()) == []
    assert (home / "syn" / "sft" / "train.parquet").is_file()


@pytest.mark.parametrize("trainer, cls", [("sft", SFTConfig), ("grpo", GRPOConfig)])
def test_every_config_key_and_its_default_is_printed_as_a_config_file(trainer, cls, tmp_path):
    """Was: the keys and defaults were only in trainer/config.py (torchtitan's `--help` and
    verl's `--cfg job` list theirs)."""
    code, out, err = run_cli("config", "defaults", trainer)
    assert code == 0, err
    written = tmp_path / "defaults.yaml"
    written.write_text(out)
    expected = cls()
    if trainer == "grpo":  # its lengths printed to fit the default model.shape (tiny: 512)
        expected.data.max_prompt_length = expected.rollout.max_response_length = 256
    assert load_config(cls, written) == expected
    assert set(all_keys(cls)) <= {
        f"{section}.{key}" if key else section
        for section, values in yaml.safe_load(out).items()
        for key in ["", *values]
    }


def test_the_ckpt_help_explains_the_words_its_options_take():
    """`--layout mcore`, `--role critic` and "fsdp_dtensor" were named in the subcommands'
    help, explained nowhere on the command line."""
    import click

    from cli.main import app

    code, out, err = run_cli("ckpt", "--help")
    assert code == 0, err
    text = " ".join(out.split())
    ckpt = app.commands["ckpt"]
    assert isinstance(ckpt, click.Group)
    words = {
        choice
        for command in ckpt.commands.values()
        for param in command.params
        if "--layout" in param.opts or "--role" in param.opts
        if isinstance(param.type, click.Choice)
        for choice in param.type.choices
        if choice != "auto"
    }
    assert {"hf", "mcore", "actor", "critic"} <= words
    for word in sorted(words | {"fsdp_dtensor", "Megatron-Bridge", "docs/interop.md"}):
        assert re.search(rf"\b{re.escape(word)}\b", text), word


@pytest.mark.parametrize(
    "inside",
    [
        "latest_checkpointed_iteration.txt",
        "global_step_1/manifest.json",
        "global_step_1/dist_ckpt/.metadata",
        "global_step_1/dist_ckpt/__0_0.distcp",
    ],
)
@pytest.mark.parametrize("command", [["inspect"], ["validate"], ["export-hf", "--out", "hf"]])
def test_a_checkpoint_file_given_for_its_directory_names_that_directory(tmp_path, inside, command):
    """Tab completion hands out `RUN/latest_checkpointed_iteration.txt` or `.metadata`; the
    line only said "not a directory"."""
    given = tmp_path / "run" / inside
    given.parent.mkdir(parents=True)
    given.write_text("1")
    code, out, err = run_cli("ckpt", command[0], given, *command[1:])
    assert code == 2, out + err
    assert f"{given}: not a directory" in one_error_line(err)
    assert one_error_line(err).endswith(f": {given.parent} holds it)")


def test_a_second_demo_into_a_demo_dir_in_use_leaves_it_alone(tmp_path):
    """Was: the second demo found the first one's marker, deleted its directory mid-run and
    started over in it."""
    from cli.demo_record import MARKER as DEMO_MARKER
    from mfsdp_ckpt.storage.out_lock import acquire_out_lock, release_out_lock

    out = tmp_path / "demo"
    out.mkdir()
    (out / DEMO_MARKER).write_text("")
    (out / "sft").mkdir()
    held = acquire_out_lock(out)
    try:
        done = mfsdp("demo", "--out", str(out))
    finally:
        release_out_lock(out, held)
    assert done.returncode == 1, done.stderr
    one_error(done.stderr, f"{out}: another command is writing it (pid {os.getpid()})")
    assert sorted(p.name for p in out.iterdir()) == [DEMO_MARKER, "sft"]


GSM8K_ROWS = [
    {"question": f"{a} + 1?", "answer": f"{a} + 1 = {a + 1}\n#### {a + 1}"} for a in (1, 2)
]


@pytest.mark.parametrize(
    "text, rows",
    [
        pytest.param(json.dumps(GSM8K_ROWS, indent=2), GSM8K_ROWS, id="array"),
        pytest.param(json.dumps(GSM8K_ROWS[0], indent=2), GSM8K_ROWS[:1], id="one-object"),
        pytest.param("".join(json.dumps(r) + "\n" for r in GSM8K_ROWS), GSM8K_ROWS, id="lines"),
    ],
)
def test_a_json_file_is_read_as_an_array_an_object_or_lines(tmp_path, text, rows):
    """`json.dump(rows, f, indent=2)` and a pretty-printed MATH problem file were read line
    by line: "line 1: not valid JSON"."""
    from tests.support.data_tables import read_rows

    data = tmp_path / "train.json"
    data.write_text(text)
    assert read_rows([str(data)]) == rows
    code, out, err = run_cli("data", "gsm8k", "--input", data, "--out", tmp_path / "data")
    assert code == 0, out + err


@pytest.mark.parametrize(
    "text, words",
    [
        ('[{"question": "1?",\n "answer": "#### 1"}', "not valid JSON (Expecting ',' delimiter at"),
        ("[1, 2]", "row 1: not a JSON object (int)"),
        ('{"a": 1}\n{"a":\n', "train.json:2: not valid JSON"),
    ],
)
def test_a_broken_json_file_is_one_line_naming_where(tmp_path, text, words):
    data = tmp_path / "train.json"
    data.write_text(text)
    code, out, err = run_cli("data", "gsm8k", "--input", data, "--out", tmp_path / "data")
    assert code == 2, out + err
    assert words in one_error_line(err)


@pytest.mark.parametrize(
    "text, column", [("model:\n\tshape: tiny\n", 1), ("model:\n  shape:\ttiny\n", 9)]
)
def test_a_tab_in_the_config_says_yaml_takes_spaces(tmp_path, text, column):
    """Was PyYAML's "found character '\\t' that cannot start any token"."""
    from trainer.config import ConfigError

    config_file = tmp_path / "config.yaml"
    config_file.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, config_file)
    assert str(caught.value) == (
        f"{config_file}: not valid YAML at line 2, column {column}: a tab, where YAML takes"
        " spaces only (to indent, and after a key's colon)"
    )


@pytest.mark.parametrize(
    "command, code",
    [
        (["ckpt", "export-hf", "CKPT", "--out", "OUT", "--hf-config", "WEIGHTS"], 2),
        (["ckpt", "validate", "CKPT", "--hf-config", "WEIGHTS"], 2),
        (["train", "sft", "--config", "examples/sft_tiny_cpu.yaml", "model.hf_config=WEIGHTS"], 2),
    ],
)
def test_a_weights_file_given_for_the_hf_config_names_its_model_dir(tmp_path, command, code):
    """Was "model.safetensors config.json: not UTF-8 text (byte 2624)" (export), or accepted
    until training read it (train)."""
    model = hf_model(tmp_path)
    weights = model / "model.safetensors"
    named = {"CKPT": str(FIXTURES / "megatron_fsdp_qwen2" / "run"), "OUT": str(tmp_path / "o")}
    named["WEIGHTS"] = str(weights)
    args = []
    for arg in command:
        for key, value in named.items():
            arg = arg.replace(key, value)
        args.append(arg)
    done = mfsdp(*args)
    assert done.returncode == code, done.stdout + done.stderr
    words = f"{weights}: a weights file, not a config.json (give the model dir holding it: {model})"
    assert words in done.stdout + done.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["validate", "export-hf"])
@pytest.mark.parametrize("given", ["dir_without_config", "bad.json"])
def test_an_unreadable_hf_config_is_bad_usage_naming_the_file(tmp_path, command, given):
    """validate reported it as a finding: a sound checkpoint INVALID, exit 1 (export-hf:
    exit 2); export named a config file given itself as `bad.json config.json`."""
    (tmp_path / "dir_without_config").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    hf_config = tmp_path / given
    extra = ["--out", str(tmp_path / "o")] if command == "export-hf" else []
    ckpt = str(FIXTURES / "megatron_fsdp_qwen2" / "run")
    done = mfsdp("ckpt", command, ckpt, "--hf-config", str(hf_config), *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    if hf_config.is_dir():
        line = one_error(done.stderr, str(hf_config))
        assert "no config.json" in line or "config.json: no such file" in line, line
    else:
        line = one_error(done.stderr, f"{hf_config}: not valid JSON")
        assert f"{hf_config} config.json" not in line, line
    assert not (tmp_path / "o").exists()


def _readme_entries() -> dict[str, str]:
    """README's command list: each `mfsdp WORDS ...` line with the indented lines under it,
    by the command words it names (`data gsm8k|math` names both)."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Commands", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    current: list[str] = []
    for line in block.splitlines():
        if line.startswith("mfsdp "):
            group, leaves = (line.split() + ["", ""])[1:3]
            current = [f"{group} {leaf}".strip() for leaf in leaves.split("|")]
            if group == "demo":
                current = ["demo"]
            for name in current:
                entries[name] = line
        else:
            for name in current:
                entries[name] += "\n" + line
    return entries


def test_the_readme_command_list_names_every_option_of_every_command():
    """`--io`, `--rdzv-id`, `--split`, `--seed`, `--digits`, `--steps`, `--command` and
    most commands' `--json` were missing from it."""
    import click

    from cli.main import app

    def leaves(group: click.Group, words: tuple[str, ...] = ()):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from leaves(command, (*words, name))
            else:
                yield " ".join((*words, name)), command

    entries = _readme_entries()
    missing = {}
    for words, command in leaves(app):
        assert words in entries, words
        options = [o for p in command.params for o in p.opts if o.startswith("--")]
        absent = [
            o
            for o in options
            if o != "--help" and not re.search(rf"{re.escape(o)}(?![\w-])", entries[words])
        ]
        if absent:
            missing[words] = absent
    assert missing == {}


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
@pytest.mark.parametrize("variable", ["$HOME", "${HOME}", "${oc.env:HOME}"])
def test_a_variable_in_any_path_key_is_refused_naming_it(cls, variable, tmp_path, monkeypatch):
    """`run_dir: $HOME/runs/x` (or verl's `${oc.env:HOME}`) created a directory named
    `$HOME` in the current one; nothing in a config expands it."""
    from cli.launch import load_checked_config
    from trainer.config import path_values

    monkeypatch.chdir(tmp_path)
    keys = [key for key, _ in path_values(cls())]
    assert set(keys) == set(_path_keys(cls))
    for key in keys:
        config_file = tmp_path / "config.yaml"
        section, leaf = key.split(".")
        config_file.write_text(f"{section}:\n  {leaf}: {variable}/x\n")
        with pytest.raises(ConfigError) as caught:
            load_checked_config(cls, str(config_file), [])
        assert str(caught.value).startswith(f"{key}: {variable}/x holds {variable}, which")
    assert list(tmp_path.iterdir()) == [tmp_path / "config.yaml"]


def test_no_parent_is_made_inside_what_out_may_not_lie_in(tmp_path):
    """The parents of --out are made only once every refusal has passed: nothing is
    created inside a checkpoint or the model dir being imported."""
    model = hf_model(tmp_path)
    run = FIXTURES / "megatron_fsdp_qwen2" / "run"
    copied = tmp_path / "run"
    shutil.copytree(run, copied)
    before = _listing(tmp_path)
    step = next(copied.glob("global_step_*"))
    for command in (
        ["ckpt", "export-hf", copied, "--out", step / "new" / "hf"],
        ["ckpt", "export-hf", copied, "--out", copied / "global_step_999" / "x" / "hf"],
        ["ckpt", "import-hf", model, "--out", model / "sub" / "x"],
    ):
        code, out, err = run_cli(*command)
        assert code == 2 and "lies in" in one_error_line(err), out + err
    assert _listing(tmp_path) == before


def test_files_joined_by_a_comma_say_how_to_write_a_list(tmp_path):
    """`data.train_files=a.jsonl,b.jsonl` (Hydra's sweep syntax) was one missing file."""
    files = []
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text('{"prompt": "1 + 1?", "response": "#### 2"}\n')
        files.append(str(tmp_path / name))
    joined = ",".join(files)
    done = mfsdp(
        "train", "sft", "--config", "examples/sft_tiny_cpu.yaml", f"data.train_files={joined}"
    )
    assert done.returncode == 2, done.stderr
    one_error(
        done.stderr, f"data.train_files: {joined}: no such file", f"data.train_files=[{joined}]"
    )


@pytest.mark.parametrize("given", [["trainer.run_dir=~"], ["optim.lr=~"]])
def test_a_null_where_a_value_is_needed_says_what_yaml_reads_as_null(given):
    """`trainer.run_dir=~` (home, to a shell user) is YAML's null: "got None" said nothing
    of why."""
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, given)
    assert str(caught.value).endswith("got null (YAML's ~, null, or nothing after the colon)")


def test_a_null_list_says_how_to_give_none():
    """`data.train_files=null`: a list takes `[]` for none, which the error did not say
    (`data.val_files=null` is no validation files)."""
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, ["data.train_files=null"])
    assert str(caught.value).endswith("nothing after the colon); an empty list is []")


@pytest.mark.parametrize(
    "names, split", [(["a.jsonl", "b.jsonl"], "train"), (["train.jsonl"] * 2, None)]
)
def test_two_inputs_for_one_split_are_refused_before_anything_is_written(tmp_path, names, split):
    """`--split train` with two inputs, or `a/train.jsonl` with `b/train.jsonl`: the second
    table replaced the first in OUT/sft/train.parquet, exit 0."""
    inputs = []
    for index, name in enumerate(names):
        path = tmp_path / str(index) / name
        path.parent.mkdir()
        path.write_text("".join(json.dumps(row) + "\n" for row in GSM8K_ROWS))
        inputs += ["--input", path]
    extra = ["--split", split] if split else []
    code, out, err = run_cli("data", "gsm8k", *inputs, "--out", tmp_path / "data", *extra)
    assert code == 2, out + err
    line = one_error_line(err)
    assert f"--input {inputs[1]} and --input {inputs[3]} both make split" in line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command", ["export-hf", "import-hf"])
def test_an_out_nothing_can_be_created_beside_is_one_line_naming_out(tmp_path, command):
    """Was `error: [Errno 2] No such file or directory: '/proc/.x.out-lock'` (exit 1): the
    hidden lock file named, not --out."""
    source = str(FIXTURES / "megatron_fsdp_qwen2" / "run")
    if command == "import-hf":
        source = str(hf_model(tmp_path))
    own_config = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2" / "huggingface"
    extra = ["--hf-config", str(own_config)] if command == "export-hf" else []
    done = mfsdp("ckpt", command, source, "--out", "/proc/mfsdp-out", *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_error(done.stderr, "/proc/mfsdp-out")
    assert "Errno" not in line and ".out-lock" not in line, line


def test_a_run_dir_linked_into_a_folder_this_user_cannot_write_locks_beside_the_link(
    tmp_path, monkeypatch
):
    """`runs/x -> /scratch/me`, where /scratch itself is the system's: the lock (beside the
    run dir where it really is) could not be created there, and a run that trained before
    the lock followed links was refused. The lock then sits beside the link, as before."""
    from mfsdp_ckpt.storage import out_lock

    target_parent = tmp_path / "scratch"
    (target_parent / "me").mkdir(parents=True)
    link = tmp_path / "runs" / "x"
    link.parent.mkdir()
    link.symlink_to(target_parent / "me")
    assert out_lock.lock_path_for(link) == target_parent / ".me.out-lock"
    real_access = os.access
    monkeypatch.setattr(
        out_lock.os,
        "access",
        lambda path, mode: False if str(path) == str(target_parent) else real_access(path, mode),
    )
    assert out_lock.lock_path_for(link) == link.parent / ".x.out-lock"
    with out_lock.out_lock(link, "trainer.run_dir"):
        assert (link.parent / ".x.out-lock").exists()
    assert not (link.parent / ".x.out-lock").exists()


@pytest.mark.parametrize("out", ["/", "/tmp/.."])
def test_the_demo_into_the_root_directory_is_refused_in_one_line(out):
    """`mfsdp demo --out /` printed a traceback (ValueError: PosixPath('/') has an empty
    name) where `mfsdp data synthetic --out /` said one line."""
    code, _out, err = run_cli("demo", "--out", out)
    assert code == 2, err
    assert one_error_line(err) == (  # `/tmp/..` named without its `..`, as it is checked
        "error: /: not a name an output can be created at; name a new directory"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["data", "synthetic", "--out", ""],
        ["ckpt", "export-hf", "CKPT", "--out", ""],
        ["ckpt", "import-hf", "MODEL", "--out", " "],
        ["ckpt", "validate", ""],
        ["ckpt", "inspect", ""],
        ["train", "sft", "--config", ""],
        ["demo", "--out", ""],
    ],
)
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(tmp_path, args):
    """`--out "$OUT"` with OUT unset: `mfsdp data synthetic` wrote its tables into the working
    directory, import-hf advised removing a run that happened to be there."""
    as_json = [] if args[0] == "demo" else ["--json"]  # the demo prints no report
    done = mfsdp(*args, *as_json, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = one_error(done.stderr, "is empty (an unset shell variable?)")
    if as_json:
        assert json.loads(done.stdout)["error"] == line.removeprefix("error: ")
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran
