"""Hostile paths, safetensors headers, config numbers, model dirs and chat rows for import,
export and training, each handled with the right exit code and nothing on the terminal that
the input chose:

* paths holding a newline, an ANSI/OSC escape or bytes that are not UTF-8: error lines were
  escaped, but the lines of a success (export/import summary, `valid: ...`, notes, the
  tables `mfsdp data` wrote) printed them raw, so a newline forged an `error:` line and an
  escape recoloured or retitled the terminal; pyarrow, given such a path, parsed it as a
  URI (a traceback for a non-UTF-8 name, `s3:x.parquet` read from elsewhere);
* safetensors headers the safetensors library refuses (UTF-16/32, a BOM, `__metadata__`
  that does not map names to strings) and weights stored as integers or bools: import
  took them (exit 0) where transformers cannot load the file and export-hf refuses the
  weight;
* config.json numbers that are NaN or +-Infinity (Python's json reads the literals): import,
  export and validate --hf-config took them, and exports carried `rms_norm_eps: NaN` on;
* `mfsdp train sft` from a model dir whose files are damaged: a config.json transformers
  refuses, a cut-short model.safetensors (a traceback in the rank each), a tokenizer
  without tokenizer.json (every row encoded to nothing: exit 0 with loss 0.0000 each step),
  a tokenizer_config.json value of the wrong type, a tokenizer with no chat template;
* a path too long for the file system (--out, a checkpoint, --hf-config, model.path,
  trainer.run_dir): errno's raw `[Errno 36]` line with exit 1, not a usage error;
* SFT and RL rows whose chat turns a template cannot render (a string as `messages`, a
  number or a list of parts as content) or JSON nested past the recursion limit: a
  traceback in the rank, not the row's name;
* trainer.run_dir that is or lies inside a model dir the run reads (model.path,
  model.hf_config, model.tokenizer): checkpoints were written among the user's download.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.reliability.hf_model import MCORE_QWEN2, hf_model
from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.interop_layouts import run_cli
from tests.support.model_dirs import (
    config_edit,
    drop_chat_template,
    split_safetensors,
    tokenizer_config_edit,
    train_args,
    train_from,
    train_from_args,
)
from tests.support.one_python import Ran, mfsdp_each
from tests.support.paths import REPO, repo_env

SECONDS = 60  # each command takes a second or two; a hang is a failure
EXPORT_SOURCE = MCORE_QWEN2 / "dist_ckpt"  # a Megatron-LM checkpoint of hf_model's shape


def on_a_terminal(*args: str | Path) -> tuple[int, bytes]:
    """`mfsdp ARGS` in a fresh interpreter whose stdout and stderr are a terminal (a pty):
    click strips ANSI escapes only from output that is not one. Returns the exit code and
    the bytes the terminal received (its CR LF line ends as LF)."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.Popen(
            [sys.executable, "-c", "from cli.main import main; main()", *map(os.fsencode, args)],
            cwd=REPO,
            env={**repo_env(), "TQDM_DISABLE": "1"},  # bars are not what is checked
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=follower,
        )
    finally:
        os.close(follower)
    received = []
    with contextlib.suppress(OSError):  # EIO once the command has exited
        while piece := os.read(leader, 1 << 16):
            received.append(piece)
    os.close(leader)
    return done.wait(timeout=SECONDS), b"".join(received).replace(b"\r\n", b"\n")


def assert_inert(output: bytes) -> None:
    """Nothing a terminal acts on (controls other than newline), valid UTF-8, and no line
    that claims an error."""
    text = output.decode("utf-8")  # raw non-UTF-8 bytes from a file name fail here
    assert not any((ord(c) < 0x20 and c != "\n") or c == "\x7f" for c in text), text
    assert not any(line.startswith("error:") for line in text.splitlines()), text


# --------------------------------------------------------------------------- printed paths
# each kind in one name: a line forging an error, ANSI screen and colour escapes, an OSC
# title, bytes that are not UTF-8 (each command is a fresh interpreter: one name, six runs)
HOSTILE_NAME = (
    "run\nerror: forged" + "\x1b[2J\x1b[31m" + "\x1b]0;pwned\x07" + os.fsdecode(b"\xff\xfe")
)


def test_success_lines_print_hostile_paths_escaped(tmp_path):
    model = hf_model(tmp_path)
    run = tmp_path / HOSTILE_NAME
    code, shown = on_a_terminal("ckpt", "import-hf", model, "--out", run, "--layout", "hf")
    assert code == 0, shown
    assert_inert(shown)
    for args in (
        ("ckpt", "validate", run),
        ("ckpt", "inspect", run),
        ("ckpt", "export-hf", run, "--out", tmp_path / (HOSTILE_NAME + "hf")),
        ("ckpt", "import-hf", model, "--out", tmp_path / (HOSTILE_NAME + "mc")),
        ("data", "synthetic", "--out", tmp_path / (HOSTILE_NAME + "data")),
    ):
        code, shown = on_a_terminal(*args)
        assert code == 0, (args, shown)
        assert_inert(shown)
        assert shown.strip(), args  # the summary is there, escaped


@pytest.mark.parametrize("name", [b"gsm\xff.parquet", b"s3:gsm.parquet", b"file:gsm.parquet"])
def test_parquet_names_pyarrow_would_parse_as_uris_are_read_and_written(tmp_path, name):
    """pyarrow given a path parses it as a URI: a name that is not UTF-8 raised
    UnicodeEncodeError (a traceback when writing), one with a scheme went elsewhere."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"question": f"q{i}", "answer": f"a #### {i}"} for i in range(4)]
    pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "plain.parquet"))
    source = tmp_path / os.fsdecode(name)
    os.rename(tmp_path / "plain.parquet", source)
    out = tmp_path / os.fsdecode(b"out\xff")
    code, shown = on_a_terminal(
        "data", "gsm8k", "--input", source, "--split", "train", "--out", out
    )
    assert code == 0, shown
    assert_inert(shown)
    with open(out / "sft" / "train.parquet", "rb") as handle:
        assert pq.read_table(handle).num_rows == 4


# --------------------------------------------------------------------------- safetensors headers
def _rewrite_header(model: Path, encode: Callable[[dict], bytes]) -> None:
    """model.safetensors with its header edited and encoded by `encode`, data unchanged."""
    header, data = split_safetensors(model / "model.safetensors")
    encoded = encode(header)
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def _with_metadata(value: object) -> Callable[[dict], bytes]:
    return lambda header: json.dumps({**header, "__metadata__": value}).encode()


HEADERS = {
    "utf-16": (lambda header: json.dumps(header).encode("utf-16"), "header is not UTF-8"),
    "utf-32": (lambda header: json.dumps(header).encode("utf-32"), "header is not UTF-8"),
    "bom": (lambda header: b"\xef\xbb\xbf" + json.dumps(header).encode(), "BOM"),
    "metadata-int": (_with_metadata({"format": 5}), "__metadata__ must map names to strings"),
    "metadata-nested": (_with_metadata({"a": {"b": "c"}}), "__metadata__ must map names"),
    "metadata-list": (_with_metadata(["pt"]), "__metadata__ must map names to strings"),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_headers_the_safetensors_library_refuses_are_refused(tmp_path, case):
    """json.loads given bytes also reads UTF-16/32 and a BOM, and nothing looked at
    `__metadata__`: import took files that transformers cannot load."""
    from safetensors import SafetensorError, safe_open

    model = hf_model(tmp_path)
    encode, words = HEADERS[case]
    _rewrite_header(model, encode)
    with pytest.raises(SafetensorError), safe_open(str(model / "model.safetensors"), "pt"):
        pass
    before = (model / "model.safetensors").read_bytes()
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, str(model / "model.safetensors"), words)
    assert not (tmp_path / "out").exists()
    assert (model / "model.safetensors").read_bytes() == before


def test_a_header_padded_with_spaces_still_imports(tmp_path):
    """safetensors pads its header with spaces to align the data: that stays valid."""
    model = hf_model(tmp_path)
    _rewrite_header(model, lambda header: json.dumps(header).encode() + b" " * 7)
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 0, err


# --------------------------------------------------------------------------- weight dtypes
@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("layout", ["mcore", "hf"])
def test_import_refuses_weights_stored_as_integers(tmp_path, dtype, layout):
    """export-hf refuses a weight stored as integers; import wrote one into the checkpoint
    (a float file relabelled I32 imported as int32 weights, exit 0)."""
    key = "model.layers.0.self_attn.q_proj.weight"

    def as_integers(tensors: dict[str, torch.Tensor]) -> None:
        tensors[key] = (tensors[key] * 100).to(dtype)

    model = hf_model(tmp_path, edit=as_integers)
    out = tmp_path / "out"
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", layout)
    assert code == 1, err
    stored = str(dtype).removeprefix("torch.")
    one_error(err, str(model / "model.safetensors"), key, f"stored as {stored}", "floating-point")
    assert not out.exists()


# --------------------------------------------------------------------------- train from a model dir
def _drop_tokenizer_json(model: Path) -> None:
    (model / "tokenizer.json").unlink()


def _truncate_weights(model: Path) -> None:
    os.truncate(model / "model.safetensors", (model / "model.safetensors").stat().st_size // 2)


MODEL_DIR_DAMAGE = {
    # a tokenizer without its vocabulary encoded every row to nothing: exit 0, loss 0.0000;
    # refused before launch now, as bad usage (model.tokenizer=DIR fixes it)
    "no-tokenizer-json": (_drop_tokenizer_json, 2, "", "turns text into no tokens"),
    # the rest were tracebacks in the rank
    "weights-cut-short": (_truncate_weights, 1, "model.safetensors", "truncated"),
    "heads-null": (config_edit(num_attention_heads=None), 1, "", "num_attention_heads"),
    "tie-a-string": (config_edit(tie_word_embeddings="false"), 1, "", "tie_word_embeddings"),
    # config.json is read before launch now: a bad one is bad usage there
    "eps-nan": (config_edit(rms_norm_eps=float("nan")), 2, "config.json", "rms_norm_eps is nan"),
    "theta-inf": (config_edit(rope_theta=float("inf")), 2, "config.json", "rope_theta is inf"),
    "max-length-a-string": (
        tokenizer_config_edit(model_max_length="x"),
        1,
        "",
        "tokenizer that transformers cannot read",
    ),
    # a base model's tokenizer: every row is a chat (usage: model.tokenizer=DIR fixes it)
    "no-chat-template": (drop_chat_template, 2, "", "has no chat template"),
}


@pytest.fixture(scope="module")
def damaged_model_dir_runs(tmp_path_factory, trainable) -> tuple[Path, dict[str, Ran]]:
    """Each MODEL_DIR_DAMAGE case's model dir (a damaged copy of `trainable`'s, in ROOT/CASE/
    model) and its `train_from` run, all in one interpreter (`mfsdp_each`): each loads torch
    and transformers before it meets its damage. The intact dir's run below is a launch
    of its own."""
    source, table = trainable
    root = tmp_path_factory.mktemp("damaged")
    commands = {}
    for case, (damage, *_expected) in MODEL_DIR_DAMAGE.items():
        model = root / case / "model"
        shutil.copytree(source, model)
        damage(model)
        commands[case] = train_from_args(model, table, root / case / "run")
    return root, mfsdp_each(commands)


@pytest.mark.parametrize("case", list(MODEL_DIR_DAMAGE))
def test_training_from_a_damaged_model_dir_fails_in_one_line(damaged_model_dir_runs, case):
    root, runs = damaged_model_dir_runs
    _damage, expected, file, words = MODEL_DIR_DAMAGE[case]
    assert runs[case].returncode == expected, runs[case].stderr
    one_error(runs[case].stderr, str(root / case / "model" / file), words)


def test_training_from_the_intact_model_dir_runs(tmp_path, trainable):
    code, err = train_from(*trainable, tmp_path / "run")
    assert code == 0, err


# --------------------------------------------------------------------------- config.json numbers
NONFINITE_CONFIGS = {
    "eps-nan": ('"rms_norm_eps": NaN', "rms_norm_eps is nan"),
    "theta-inf": ('"rope_theta": Infinity', "rope_theta is inf"),
    "theta-overflow": ('"rope_theta": 1e999', "rope_theta is inf"),
    "nested": ('"rope_scaling": {"rope_type": "linear", "factor": -Infinity}', "factor is -inf"),
    "in-a-list": ('"layer_scales": [1.0, NaN]', "layer_scales[1] is nan"),
}


@pytest.mark.parametrize("case", list(NONFINITE_CONFIGS))
def test_config_numbers_that_are_not_finite_are_refused_naming_the_key(tmp_path, case):
    """Python's json reads NaN and Infinity (RFC 8259 JSON has neither): import-hf and
    export-hf took `rms_norm_eps: NaN` and wrote it into their output, a model that computes
    NaN; validate --hf-config called the checkpoint valid against it (now: bad usage, exit 2,
    as export-hf says it)."""
    text, words = NONFINITE_CONFIGS[case]
    model = hf_model(tmp_path)
    config = json.loads((model / "config.json").read_text())
    config.pop(text.split(":")[0].strip('"'), None)  # the key once, with the bad value
    (model / "config.json").write_text(json.dumps(config)[:-1] + ", " + text + "}")
    imported = tmp_path / "imported"
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", imported)
    assert code == 1, err
    one_error(err, str(model / "config.json"), words)
    assert not imported.exists()
    code, out, err = run_cli("ckpt", "validate", EXPORT_SOURCE, "--hf-config", model)
    assert code == 2 and not out, out  # bad usage, as for export: no verdict on the checkpoint
    one_error(err, f"--hf-config {model / 'config.json'}", words)
    exported = tmp_path / "exported"
    code, _out, err = run_cli(
        "ckpt", "export-hf", EXPORT_SOURCE, "--hf-config", model, "--out", exported
    )
    assert code == 2, err
    one_error(err, "config.json", words)
    assert not exported.exists()


# --------------------------------------------------------------------------- names too long
LONG = "y" * 300  # NAME_MAX is 255 bytes on common Linux file systems


def _long_name_cases(tmp_path: Path, model: Path, table: Path) -> dict[str, list]:
    sft = ["train", "sft", "--config", REPO / "examples" / "sft_tiny_cpu.yaml"]
    sft += [f"data.train_files={table}"]
    return {
        "import --out": ["ckpt", "import-hf", model, "--out", tmp_path / LONG],
        "export --out": ["ckpt", "export-hf", EXPORT_SOURCE, "--out", tmp_path / LONG],
        "data --out": ["data", "synthetic", "--out", tmp_path / LONG / "data"],
        "train run_dir": [*sft, f"trainer.run_dir={tmp_path / LONG}"],
        "inspect PATH": ["ckpt", "inspect", tmp_path / LONG],
        "export --hf-config": [
            *("ckpt", "export-hf", EXPORT_SOURCE, "--hf-config", tmp_path / LONG),
            *("--out", tmp_path / "out"),
        ],
        "train model.path": [*sft, f"model.path={tmp_path / LONG}"],
    }


def test_names_too_long_for_the_file_system_are_usage_errors(tmp_path, trainable):
    """Path.exists() raises ENAMETOOLONG instead of saying no: such a path was errno's raw
    `[Errno 36] File name too long: '...'` with exit 1, after an import had begun."""
    model = hf_model(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for what, args in _long_name_cases(tmp_path, model, trainable[1]).items():
        done = mfsdp(*map(str, args))
        assert done.returncode == 2, (what, done.stderr)
        one_error(done.stderr, LONG[:100], "too long")
        assert sorted(p.name for p in tmp_path.iterdir()) == before, what


# --------------------------------------------------------------------------- chat rows
def _jsonl(path: Path, row: str, copies: int = 16) -> Path:
    path.write_text((row + "\n") * copies)
    return path


ANSWER = '{"role": "assistant", "content": "7"}'
SFT_ROWS = {
    "messages-a-string": ('{"messages": "hello"}', "chat turns must be a list"),
    "content-a-number": (
        '{"messages": [{"role": "user", "content": 5}, ' + ANSWER + "]}",
        "role and content must be text",
    ),
    "content-a-list-of-parts": (
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}, '
        + ANSWER
        + "]}",
        "role and content must be text",
    ),
    "role-a-number": (
        '{"messages": [{"role": 1, "content": "a"}, ' + ANSWER + "]}",
        "role and content must be text",
    ),
    "nested-5000-deep": ('{"messages": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
}


RL_ROW = (
    '{"prompt": [{"role": "user", "content": 5}], "data_source": "openai/gsm8k",'
    ' "reward_model": {"ground_truth": "7"}}'
)


@pytest.fixture(scope="module")
def chat_row_runs(tmp_path_factory) -> tuple[Path, dict[str, Ran]]:
    """`mfsdp train sft` on each SFT_ROWS case's file (ROOT/CASE/train.jsonl) and `mfsdp train
    grpo` on RL_ROW's (ROOT/rl/rl.jsonl), all in one interpreter (`mfsdp_each`): each reads
    its own file, with the tokenizer and chat template loaded first."""
    root = tmp_path_factory.mktemp("chat_rows")
    commands = {}
    for case, (row, _words) in SFT_ROWS.items():
        (root / case).mkdir()
        data = _jsonl(root / case / "train.jsonl", row)
        commands[case] = train_args(
            "sft", f"data.train_files={data}", f"trainer.run_dir={root / case / 'run'}"
        )
        commands[case].append("data.val_ratio=0")
    (root / "rl").mkdir()
    data = _jsonl(root / "rl" / "rl.jsonl", RL_ROW, copies=64)
    commands["rl"] = train_args(
        "grpo",
        *(f"data.train_files={data}", f"data.val_files={data}"),
        f"trainer.run_dir={root / 'rl' / 'run'}",
    )
    return root, mfsdp_each(commands)


@pytest.mark.parametrize("case", list(SFT_ROWS))
def test_chat_rows_the_template_cannot_render_are_named(chat_row_runs, case):
    """A string as `messages`, a number or OpenAI's list of parts as content, JSON nested
    past the recursion limit: tracebacks in the rank (or a turn per character)."""
    root, runs = chat_row_runs
    _row, words = SFT_ROWS[case]
    assert runs[case].returncode == 2, runs[case].stderr
    one_error(runs[case].stderr, str(root / case / "train.jsonl"), words)


def test_rl_prompts_the_template_cannot_render_are_named(chat_row_runs):
    root, runs = chat_row_runs
    assert runs["rl"].returncode == 2, runs["rl"].stderr
    one_error(runs["rl"].stderr, f"{root / 'rl' / 'rl.jsonl'}:1:", "role and content must be text")


# --------------------------------------------------------------------------- run_dir vs inputs
def _listing(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


READ_KEYS = ["model.path", "model.hf_config", "model.tokenizer"]
RUN_DIRS_INSIDE = [".", "runs/sft", "sub/../."]


@pytest.fixture(scope="module")
def run_dir_inside_runs(tmp_path_factory, trainable) -> dict[str, tuple[Path, dict, Ran]]:
    """For each key of READ_KEYS and run dir of RUN_DIRS_INSIDE: a copy of `trainable`'s model
    dir, its files before, and `mfsdp train sft` reading it as KEY with trainer.run_dir
    inside it; the runs in one interpreter (`mfsdp_each`)."""
    source, table = trainable
    root = tmp_path_factory.mktemp("run_dir_inside")
    models, commands = {}, {}
    for number, (key, where) in enumerate((k, w) for k in READ_KEYS for w in RUN_DIRS_INSIDE):
        model = root / str(number) / "model"
        shutil.copytree(source, model)
        models[key, where] = model, _listing(model)
        reads = [f"{key}={model}"]
        if key == "model.hf_config":  # it names the config of a checkpoint given as model.path
            reads.append(f"model.path={EXPORT_SOURCE}")
        commands[f"{key} {where}"] = train_args(
            "sft",
            *reads,
            f"data.train_files={table}",
            f"trainer.run_dir={model}/{where}",
            "trainer.total_steps=1",
        )
    runs = mfsdp_each(commands)
    return {
        f"{key} {where}": (*models[key, where], runs[f"{key} {where}"]) for key, where in models
    }


@pytest.mark.parametrize("key", READ_KEYS)
@pytest.mark.parametrize("where", RUN_DIRS_INSIDE)
def test_run_dir_in_a_model_dir_the_run_reads_is_refused(run_dir_inside_runs, key, where):
    """trainer.run_dir = model.path (or inside it) wrote global_step_N/, metrics and
    config.yaml among the user's download, as export-hf and import-hf refuse for --out."""
    model, before, ran = run_dir_inside_runs[f"{key} {where}"]
    assert ran.returncode == 2, ran.stderr
    one_error(ran.stderr, "trainer.run_dir", f"inside {key} {model}")
    assert _listing(model) == before
