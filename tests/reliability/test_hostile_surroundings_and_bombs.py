"""Hostile surroundings (a deleted working dir, stdout that cannot be written) and inputs:
scripts, parquet, jsonl and safetensors headers that expand far past their size, model dirs
whose config.json disagrees with the weights, and data --out over its own inputs:

* a working directory deleted while a shell was in it: a relative --out (export-hf,
  import-hf, `mfsdp data`) failed with errno's bare "[Errno 2] No such file or directory"
  (exit 1, no name; under --json too), and `mfsdp train` died in torch's import with MKL's
  "Cannot load libtorch_cpu.so" and no `error:` line. Every command now stops first,
  naming the directory (exit 2);
* a safetensors header longer than MAX_HEADER_BYTES in a file large enough to hold it was
  refused as "does not fit the file", which it did: the line now names the cap;
* `mfsdp config from-verl` of a launch script whose variables double (`B=$A$A`, `C=$B$B`,
  ... 40 lines): substituted in full, a MemoryError traceback (or all of the machine's
  memory); a command line whose one word is 900 KB: 25 s in shlex (quadratic); 60,000
  words each substituting a 1 KB variable: 25 s and 60 MB of notes. Substitutions now copy
  at most MAX_EXPANDED_CHARS in all and a line is at most MAX_LINE_CHARS, each refused in
  one line naming the script (exit 2), fast, under an address-space limit. (`export
  NAME=value` lines were never taken as assignments, shlex splitting `export` off: now
  they are, as the substitution's docstring always said.)
* a parquet data file of 1.2 MB holding 67M dictionary-encoded rows (`mfsdp data gsm8k|math`,
  training's data files): read whole, 3.3 GB of Arrow and a MemoryError under 4 GiB (all
  of the machine's memory without a limit), reported as "not a readable parquet file ()".
  Rows are now decoded in batches against a budget per byte of file; a sparse jsonl file
  of 100 GB with no newline was read into memory as one line, now refused at
  MAX_JSONL_LINE_BYTES. Both in one line naming the file (exit 2). Text columns read
  back as plain strings (no Arrow schema stored) or nested in chat turns decoded every
  copy of a repeated value inside pyarrow, before any check: 511 bytes of file held 2,000
  copies of a 1 MiB string. Text is now read as dictionaries and each batch's size counted
  from their lengths before a value is copied;
* `mfsdp train` from a model dir whose config.json disagrees with its weights: a vocab_size
  or hidden_size the weights do not have was transformers' size-mismatch traceback in the
  rank (85 lines), and a weight missing from model.safetensors trained from random values
  (exit 0, transformers' load report the only sign). Both are now refused naming the dir
  and the tensor (exit 2), as import-hf refuses them, through the same check;
* stdout that cannot be written (redirected onto a full disk; /dev/full): `--json` failures
  were a traceback (the error's JSON object failed to print too), `--help` and `--version`
  a traceback, every other command `error: [Errno 28] No space left on device`, naming no
  file. Each now says `stdout: cannot write the command's output (...)`, exit 1;
* `mfsdp data gsm8k|math --input D/sft/train.parquet --out D` replaced its own input with
  its conversion (the official data gone, exit 0): refused naming the input (exit 2),
  --out left as it was (two inputs of one split name:
  tests/cli/test_first_use_out_parents_home_and_data_files.py);
* a `.json` data file past MAX_JSONL_LINE_BYTES is read line by line or refused, never whole.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mfsdp_ckpt.storage.safetensors_source import MAX_HEADER_BYTES
from tests.reliability.bad_inputs import (
    ANSWER,
    PPO,
    QUESTION,
    doubling_script,
    repeated_rows_parquet,
)
from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.model_dirs import config_edit, train_from
from tests.support.paths import FIXTURES, REPO
from trainer.data.files import DECODED_FLOOR, MAX_JSONL_LINE_BYTES
from trainer.verl_script_lines import MAX_LINE_CHARS
from trainer.verl_source import MAX_EXPANDED_CHARS

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"

# mfsdp's entry point, started in `gone`, which is removed before the command runs (as when
# a shell's directory is deleted from another one).
IN_A_DELETED_DIR = """
import os, sys
sys.path.insert(0, {repo!r})
from cli.main import main
os.chdir({gone!r})
os.rmdir({gone!r})
sys.argv[0] = "mfsdp"
main()
"""


def _in_deleted_dir(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    gone = tmp_path / "gone"
    gone.mkdir()
    code = IN_A_DELETED_DIR.format(repo=str(REPO), gone=str(gone))
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


DELETED_DIR_COMMANDS = {
    "export-relative-out": ("ckpt", "export-hf", str(RUN), "--out", "hf"),
    "data-relative-out": ("data", "synthetic", "--out", "data"),
    "train": ("train", "sft", "--config", str(REPO / "examples" / "sft_tiny_cpu.yaml")),
    "validate": ("ckpt", "validate", str(RUN)),
}


@pytest.mark.parametrize("case", list(DELETED_DIR_COMMANDS))
def test_a_deleted_working_directory_is_named_before_any_work(tmp_path, case):
    done = _in_deleted_dir(tmp_path, *DELETED_DIR_COMMANDS[case])
    assert done.returncode == 2, done.stdout + done.stderr
    one_error(done.stderr, str(tmp_path / "gone"), "working directory was deleted")
    assert done.stdout == ""


def test_a_deleted_working_directory_under_json_is_one_json_object(tmp_path):
    done = _in_deleted_dir(tmp_path, "ckpt", "export-hf", str(RUN), "--out", "hf", "--json")
    assert done.returncode == 2, done.stderr
    reply = json.loads(done.stdout)
    assert reply["exit_code"] == 2 and str(tmp_path / "gone") in reply["error"]


def test_an_existing_working_directory_still_takes_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("ckpt", "export-hf", RUN, "--out", "hf")
    assert code == 0, out + err
    assert (tmp_path / "hf" / "config.json").is_file()


# --------------------------------------------------------------------------- safetensors header
def test_a_header_over_the_cap_is_named_as_over_the_cap(tmp_path):
    """Was: "header length N does not fit the file", of a file that holds it."""
    model = hf_model(tmp_path)
    weights = model / "model.safetensors"
    length = MAX_HEADER_BYTES + 8
    weights.write_bytes(struct.pack("<Q", length))
    os.truncate(weights, 8 + length + 64)  # sparse: no disk used, never read
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, out + err
    line = one_error_line(err)
    assert str(weights) in line and f"header of {length} bytes, more than the" in line, line
    assert not (tmp_path / "out").exists()


def test_a_header_longer_than_its_file_is_still_named_as_not_fitting(tmp_path):
    model = hf_model(tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", 1 << 62) + weights.read_bytes()[8:])
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, out + err
    assert f"header length {1 << 62} does not fit the file" in one_error_line(err)


# --------------------------------------------------------------------------- from-verl scripts
ADDRESS_SPACE = 2 << 30  # bytes: a fresh interpreter with click and yaml needs ~100 MiB
FAST_SECONDS = 10.0
TRAINING_ADDRESS_SPACE = 8 << 30  # torch and its allocators reserve GiBs they never touch
# a training command refusing a bomb starts torch first: seconds alone, tens of them on a
# machine busy with other work; the bound tells "refused as read" from "decoded it all"
TRAINING_SECONDS = 90.0


def _limited(
    *args: object, space: int = ADDRESS_SPACE
) -> tuple[subprocess.CompletedProcess, float]:
    """`mfsdp ARGS` in a fresh process under `space` bytes of address space; its seconds."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (space, space))

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )
    return done, time.monotonic() - started


def _many_words(value_chars: int) -> str:
    words = MAX_LINE_CHARS // 8  # `kNNNN=$A` each, the line just under the cap
    command = " ".join(f"k{i}=$A" for i in range(words))
    return f"A={'y' * value_chars}\n{PPO} {command}"[: MAX_LINE_CHARS + 20]


def _long_word(chars: int) -> str:
    return f"{PPO} data.train_files={'x' * chars}"


SCRIPTS = {
    "doubling-variables": (doubling_script(40), "variables expand to more than"),
    "many-substituted-words": (_many_words(60_000), "variables expand to more than"),
    "long-word": (_long_word(900_000), f"more than the {MAX_LINE_CHARS} a launch command"),
    "long-line-of-continuations": (
        PPO + " \\\n  trainer.x=1" * 20_000,
        f"more than the {MAX_LINE_CHARS} a launch command",
    ),
}


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_from_verl_bounds_what_a_script_expands_to(tmp_path, case):
    text, words = SCRIPTS[case]
    script = tmp_path / "run.sh"
    script.write_text(text + "\n")
    done, seconds = _limited("config", "from-verl", script)
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, str(script), words)
    assert seconds < FAST_SECONDS and done.stdout == ""


GRPO = f"{PPO} algorithm.adv_estimator=grpo"  # a run from-verl converts (verl's default is PPO)


def test_variables_within_the_bounds_still_substitute(tmp_path):
    """A script's own variables, as verl's examples use them, and a long one used as often
    as the bound allows."""
    value = "d" * (MAX_LINE_CHARS - 100)
    uses = MAX_EXPANDED_CHARS // len(value) - 1
    script = tmp_path / "run.sh"
    script.write_text(
        f"DATA={value}\nexport LR=1e-6\n{GRPO} \\\n  data.train_files=$DATA/train.parquet "
        "\\\n  actor_rollout_ref.actor.optim.lr=${LR} trainer.total_epochs=${EPOCHS:-3} "
        + " ".join(f"x.k{i}=$DATA" for i in range(uses - 1))
        + "\n"
    )
    code, out, err = run_cli("config", "from-verl", script)
    assert code == 1, err  # the x.k* keys are verl's no more than mfsdp's: not carried over
    assert f"{value}/train.parquet" in out and "1.0e-06" in out, out[-2000:]
    assert f"{uses - 1} key(s) not carried over" in err, err[-2000:]
    assert f"# NOT carried over: x.k{uses - 2}=ddd" in out, out[-2000:]


def test_exported_variables_substitute_as_plain_ones(tmp_path):
    """Was: `export LR=1e-6` not read, `optim.lr=${LR}` refused as not a number (exit 2)."""
    script = tmp_path / "run.sh"
    script.write_text(f"export LR=1e-6\n{GRPO} actor_rollout_ref.actor.optim.lr=$LR\n")
    code, out, err = run_cli("config", "from-verl", script)
    assert code == 0, err
    assert "lr: 1.0e-06" in out, out


# --------------------------------------------------------------------------- data files
def test_a_parquet_file_decoding_to_far_more_than_its_size_is_refused(tmp_path):
    bomb = tmp_path / "train.parquet"
    repeated_rows_parquet(bomb, row_groups=64)
    assert bomb.stat().st_size < 4 << 20
    for args in (
        ("data", "gsm8k", "--input", bomb, "--split", "train", "--out", tmp_path / "out"),
        ("data", "math", "--input", bomb, "--out", tmp_path / "out"),
    ):
        done, seconds = _limited(*args)
        assert done.returncode == 2, done.stderr[-2000:]
        one_error(done.stderr, str(bomb), "decodes to more than", "a compression bomb")
        assert seconds < FAST_SECONDS * 2
    assert not (tmp_path / "out").exists()


def _one_long_value(rows: int, column: str, nested: bool) -> object:
    """`rows` rows repeating one 8 MiB string, as a top-level column or as the content of 50
    chat turns per row; dictionary-encoded, so building it copies nothing."""
    import pyarrow as pa

    def repeated(value: str, count: int) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array([0] * count, pa.int32()), pa.array([value]))

    if not nested:
        return pa.table({column: repeated("y" * (8 << 20), rows)})
    turns = pa.StructArray.from_arrays(
        [repeated("user", rows * 50), repeated("y" * (8 << 20), rows * 50)],
        names=["role", "content"],
    )
    starts = pa.array([i * 50 for i in range(rows + 1)], pa.int32())
    return pa.table({column: pa.ListArray.from_arrays(starts, turns)})


@pytest.mark.parametrize("nested", (False, True), ids=("column", "chat-turns"))
def test_text_stored_as_plain_strings_is_counted_before_it_is_decoded(tmp_path, nested):
    """No Arrow schema in the file: pyarrow decoded each of the 2,000 copies itself (8 GiB
    and more, inside iter_batches) before the batch could be measured."""
    import pyarrow.parquet as pq

    bomb = tmp_path / "train.parquet"
    table = _one_long_value(2000, "messages" if nested else "prompt", nested)  # a column read
    pq.write_table(table, str(bomb), compression="zstd", store_schema=False)
    assert bomb.stat().st_size < 4096
    done, seconds = _limited("train", "sft", "--config", REPO / "examples" / "sft_tiny_cpu.yaml",
        f"data.train_files={bomb}", f"trainer.run_dir={tmp_path / 'run'}",
        space=TRAINING_ADDRESS_SPACE,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, str(bomb), "decodes to more than")
    assert seconds < TRAINING_SECONDS


def test_training_refuses_a_parquet_bomb_as_its_data(tmp_path):
    bomb = tmp_path / "train.parquet"
    repeated_rows_parquet(bomb, row_groups=64)
    done, seconds = _limited(
        "train", "sft", "--config", REPO / "examples" / "sft_tiny_cpu.yaml",
        f"data.train_files={bomb}", f"trainer.run_dir={tmp_path / 'run'}",
        "data.prompt_key=question", "data.response_key=answer",  # its columns, read
        space=TRAINING_ADDRESS_SPACE,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, str(bomb), "decodes to more than")
    assert seconds < TRAINING_SECONDS and not (tmp_path / "run").exists()


def test_a_repetitive_parquet_file_within_the_floor_is_read(tmp_path):
    """The same encoding, 100,000 rows: some 30 MB decoded, under DECODED_FLOOR."""
    from tests.support.data_tables import read_rows

    table = tmp_path / "train.parquet"
    repeated_rows_parquet(table, row_groups=2, rows=50_000)
    assert 100_000 * (len(QUESTION) + len(ANSWER) + 2 * 64) < DECODED_FLOOR
    rows = read_rows(table)
    assert len(rows) == 100_000 and rows[-1] == {"question": QUESTION, "answer": ANSWER}


def test_a_jsonl_line_past_the_cap_is_refused_before_it_is_read(tmp_path):
    sparse = tmp_path / "train.jsonl"
    sparse.write_bytes(b'{"question": "1+1", "answer": "#### 2"}\n')
    os.truncate(sparse, 100 << 30)  # sparse: no disk used; line 2 is 100 GB of zero bytes
    done, seconds = _limited(
        "data", "gsm8k", "--input", sparse, "--split", "train", "--out", tmp_path / "out"
    )
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, f"{sparse}:2:", f"a line of more than {MAX_JSONL_LINE_BYTES} bytes")
    assert seconds < FAST_SECONDS and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (b'{"question": "1+1", "answer": "#### 2"}\n', "a line of more than"),
        (b'[{"question": "1+1", "answer": "#### 2"},\n', "a JSON array of more than"),
    ],
    ids=["lines", "array"],
)
def test_a_json_file_past_the_cap_is_never_read_whole(tmp_path, start, expected):
    """A `.json` is read as one document when it is small; a sparse 100 GB one (rows one per
    line, or an array) is read line by line or refused, bounded like a jsonl."""
    sparse = tmp_path / "train.json"
    sparse.write_bytes(start)
    os.truncate(sparse, 100 << 30)
    done, seconds = _limited(
        "data", "gsm8k", "--input", sparse, "--split", "train", "--out", tmp_path / "out"
    )
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, str(sparse), expected)
    assert seconds < FAST_SECONDS and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- model dirs
def _drop_weight(model: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(model / "model.safetensors"))
    tensors.pop("model.layers.1.mlp.down_proj.weight")
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})


DISAGREEING = {
    "vocab-size": (config_edit(vocab_size=10**9), "[model.embed_tokens.weight]: shape"),
    "hidden-size": (config_edit(hidden_size=1 << 20), "but config.json says"),
    "weight-missing": (
        _drop_weight,
        "weights lack 1 tensor(s) config.json needs, e.g. model.layers.1.mlp.down_proj.weight",
    ),
}


@pytest.mark.parametrize("case", list(DISAGREEING))
def test_training_refuses_weights_config_json_disagrees_with(tmp_path, trainable, case):
    source, table = trainable
    model = tmp_path / "model"
    shutil.copytree(source, model)
    damage, words = DISAGREEING[case]
    damage(model)
    code, err = train_from(model, table, tmp_path / "run")
    assert code == 2, err
    # A config.json of 10**9 rows says its model cannot fit, before the weights refute it
    warned, rest = _memory_warnings(err)
    assert len(warned) == (case != "weight-missing"), err
    one_error(rest, str(model), words)
    assert not (tmp_path / "run").exists()


def _memory_warnings(stderr: str) -> tuple[list[str], str]:
    """The model-states memory warnings of `stderr`, and the rest of it."""
    lines = stderr.splitlines(keepends=True)
    warned = [line for line in lines if "warning: model states need" in line]
    return warned, "".join(line for line in lines if line not in warned)


# --------------------------------------------------------------------------- stdout
FULL_STDOUT = {
    "validate-json": ("ckpt", "validate", str(RUN), "--json"),
    "inspect": ("ckpt", "inspect", str(RUN)),
    "export": ("ckpt", "export-hf", str(RUN), "--out", "{tmp}/hf"),
    "data": ("data", "synthetic", "--out", "{tmp}/data"),
    "help": ("ckpt", "--help"),
    "version": ("--version",),
}


@pytest.mark.parametrize("case", list(FULL_STDOUT))
def test_stdout_that_cannot_be_written_is_named(tmp_path, case):
    args = [arg.format(tmp=tmp_path) for arg in FULL_STDOUT[case]]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", *args],
            cwd=REPO,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if not line.startswith("note: ")]
    assert errors == [
        "error: stdout: cannot write the command's output (No space left on device)"
    ], done.stderr[-3000:]


# --------------------------------------------------------------------------- data outputs
GSM8K_ROWS = "".join(
    json.dumps({"question": f"q{i}", "answer": f"a #### {i}"}) + "\n" for i in range(4)
)


def test_data_refuses_to_write_over_its_own_input(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "sft" / "train.parquet"
    source.parent.mkdir()
    rows = [json.loads(line) for line in GSM8K_ROWS.splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), str(source))
    before = source.read_bytes()
    code, out, err = run_cli(
        "data", "gsm8k", "--input", source, "--split", "train", "--out", tmp_path
    )
    assert code == 2, out + err
    assert f"{source}: is the table --out would write" in one_error_line(err)
    assert source.read_bytes() == before and not (tmp_path / "rl").exists()


def test_inputs_of_different_splits_still_convert_together(tmp_path):
    for name in ("train", "test"):
        (tmp_path / f"{name}.jsonl").write_text(GSM8K_ROWS)
    code, _out, err = run_cli(
        "data", "gsm8k", "--input", tmp_path / "train.jsonl", "--input",
        tmp_path / "test.jsonl", "--out", tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert {p.name for p in (tmp_path / "rl").iterdir()} == {"train.parquet", "test.parquet"}
