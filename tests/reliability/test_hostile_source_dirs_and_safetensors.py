"""Hostile --out paths, model dirs and safetensors for export and import, each refused in one
line and non-zero exit, with nothing read past a special file and nothing written into what
the command reads:

* --out that is, contains or lies in a Hugging Face model dir the command reads
  (export-hf's --hf-config, import-hf's source): --overwrite would replace a user's
  download (a model dir looks like an earlier export);
* safetensors that the safetensors library itself refuses (overlapping, gapped or
  trailing data, a name twice) and shards that are not regular files (a FIFO named by the
  index blocked import forever), an index nested past the recursion limit;
* --json: a failure still prints one JSON object on stdout, whatever failed.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.reliability.hf_model import EXPORT_MCORE_QWEN2, MCORE_QWEN2, hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.model_dirs import split_safetensors
from tests.support.paths import REPO, repo_env
from tests.support.permissions import without_root_overrides

SECONDS = 20  # every case here takes well under one; a hang is a failure, not a stuck run


@pytest.fixture(autouse=True)
def no_hang():
    """A blocking open (a FIFO read as a shard) fails the test instead of stalling CI."""

    def expire(*_):
        raise TimeoutError(f"over {SECONDS} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _tree(directory: Path) -> dict[str, object]:
    """Every entry under `directory` with its kind and bytes (links by target)."""
    found: dict[str, object] = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_file():
            found[name] = path.read_bytes()
        else:
            found[name] = ("special" if not path.is_dir() else "dir",)
    return found


# --------------------------------------------------------------------------- --out vs inputs
def _as_cache_snapshot(model: Path) -> None:
    """The files moved to ../blobs and linked back, as a Hugging Face cache snapshot is."""
    blobs = model.parent / "blobs"
    blobs.mkdir()
    for file in sorted(model.iterdir()):
        file.rename(blobs / file.name)
        file.symlink_to(Path("..") / "blobs" / file.name)


@pytest.mark.parametrize("where", ["same", "parent"])
@pytest.mark.parametrize("snapshot", [False, True])
def test_export_never_replaces_its_hf_config_dir(tmp_path, where, snapshot):
    model = hf_model(tmp_path)
    if snapshot:
        _as_cache_snapshot(model)
    out = {"same": model, "parent": tmp_path}[where]
    before = _tree(tmp_path)
    for config in (model, model / "config.json"):
        code, _out, err = run_cli(
            *EXPORT_MCORE_QWEN2, "--hf-config", config, "--out", out, "--overwrite"
        )
        assert code == 2, err
        one_error(err, "holds the model dir", str(model))
        assert _tree(tmp_path) == before


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
@pytest.mark.parametrize("where", ["same", "inside"])
def test_import_never_writes_into_its_source(tmp_path, layout_name, where):
    model = hf_model(tmp_path)
    out = model if where == "same" else model / "imported"
    before = _tree(model)
    code, _out, err = run_cli(
        "ckpt", "import-hf", model, "--out", out, "--layout", layout_name, "--overwrite"
    )
    assert code == 2, err
    one_error(err, "model dir")
    assert _tree(model) == before


@pytest.mark.parametrize("where", ["beside", "inside"])
def test_export_beside_or_inside_its_hf_config_dir_still_works(tmp_path, where):
    """A new dir adds to nothing the user has (`--hf-config ./config.json --out ./hf`)."""
    model = hf_model(tmp_path)
    before = _tree(model)
    out = tmp_path / "export" if where == "beside" else model / "export"
    code, _out, err = run_cli(
        *EXPORT_MCORE_QWEN2, "--hf-config", model / "config.json", "--out", out
    )
    assert code == 0, err
    assert (out / "model.safetensors").is_file()
    assert {k: v for k, v in _tree(model).items() if not k.startswith("export")} == before


# --------------------------------------------------------------------------- safetensors
def _join(path: Path, header_text: str, data: bytes) -> None:
    encoded = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def _by_offset(header: dict) -> list[str]:
    names = [name for name in header if name != "__metadata__"]
    return sorted(names, key=lambda name: header[name]["data_offsets"][0])


def _overlap(model: Path) -> None:
    """Two norms of one shape pointed at the same bytes: safetensors refuses the file."""
    header, data = split_safetensors(model / "model.safetensors")
    norms = [name for name in _by_offset(header) if name.endswith("layernorm.weight")]
    header[norms[1]]["data_offsets"] = header[norms[0]]["data_offsets"]
    _join(model / "model.safetensors", json.dumps(header), data)


def _gap(model: Path) -> None:
    """Every tensor after the first moved 64 bytes on: 64 bytes nothing holds."""
    header, data = split_safetensors(model / "model.safetensors")
    first, *rest = _by_offset(header)
    for name in rest:
        header[name]["data_offsets"] = [o + 64 for o in header[name]["data_offsets"]]
    end = header[first]["data_offsets"][1]
    _join(model / "model.safetensors", json.dumps(header), data[:end] + bytes(64) + data[end:])


def _trailing(model: Path) -> None:
    header, data = split_safetensors(model / "model.safetensors")
    _join(model / "model.safetensors", json.dumps(header), data + bytes(4096))


def _twice(model: Path) -> None:
    """The last tensor's name given again for the first tensor's bytes (JSON keeps one)."""
    header, data = split_safetensors(model / "model.safetensors")
    first, *_, last = _by_offset(header)
    text = json.dumps(header)
    _join(
        model / "model.safetensors",
        text[:-1] + f', "{last}": ' + json.dumps(header[first]) + "}",
        data,
    )


def _index_to(model: Path, shard: str) -> None:
    header, _ = split_safetensors(model / "model.safetensors")
    os.rename(model / "model.safetensors", model / "a.safetensors")
    first, *rest = _by_offset(header)
    weight_map = {first: shard, **{name: "a.safetensors" for name in rest}}
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _fifo_shard(model: Path) -> None:
    _index_to(model, "b.safetensors")
    os.mkfifo(model / "b.safetensors")


def _device_shard(model: Path) -> None:
    _index_to(model, "b.safetensors")
    os.symlink("/dev/zero", model / "b.safetensors")


def _directory_shard(model: Path) -> None:
    _index_to(model, "b.safetensors")
    (model / "b.safetensors").mkdir()


def _deep_index(model: Path) -> None:
    (model / "model.safetensors").unlink()  # beside model.safetensors an index is ignored
    (model / "model.safetensors.index.json").write_text("[" * 5_000)


SAFETENSORS_DAMAGE = {
    "overlap": (_overlap, "model.safetensors", "overlaps the tensor before it"),
    "gap": (_gap, "model.safetensors", "leaves a gap"),
    "trailing": (_trailing, "model.safetensors", "bytes no tensor holds"),
    "name_twice": (_twice, "model.safetensors", "appears twice"),
    "fifo_shard": (_fifo_shard, "b.safetensors", "a FIFO, not a regular file"),
    "device_shard": (_device_shard, "b.safetensors", "resolves outside the model dir"),
    "directory_shard": (_directory_shard, "b.safetensors", "a directory, not a regular file"),
    "deep_index": (_deep_index, "model.safetensors.index.json", "nested too deeply"),
}


@pytest.mark.parametrize("case", list(SAFETENSORS_DAMAGE))
def test_safetensors_the_library_would_refuse_are_refused(tmp_path, case):
    model = hf_model(tmp_path)
    damage, file, words = SAFETENSORS_DAMAGE[case]
    damage(model)
    before = _tree(model)
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, str(model / file), words)
    assert not (tmp_path / "out").exists() and _tree(model) == before


def test_an_undamaged_model_imports(tmp_path):
    code, _out, err = run_cli("ckpt", "import-hf", hf_model(tmp_path), "--out", tmp_path / "out")
    assert code == 0, err


# --------------------------------------------------------------------------- --json
def _json_failures(tmp_path: Path) -> dict[str, list]:
    missing = tmp_path / "missing"
    not_ckpt = tmp_path / "empty"
    not_ckpt.mkdir()
    broken = shutil.copytree(MCORE_QWEN2 / "dist_ckpt", tmp_path / "broken")
    (broken / ".metadata").write_bytes(b"\x80\x04not a pickle")
    return {
        "inspect_missing": ["ckpt", "inspect", missing, "--json"],
        "validate_not_a_checkpoint": ["ckpt", "validate", not_ckpt, "--json"],
        "inspect_unreadable_metadata": ["ckpt", "inspect", "--json", broken],
        "export_unreadable_metadata": [
            *("ckpt", "export-hf", broken, "--hf-config", MCORE_QWEN2),
            *("--out", tmp_path / "o", "--json"),
        ],
        "import_not_a_model": ["ckpt", "import-hf", not_ckpt, "--out", tmp_path / "o", "--json"],
    }


@pytest.mark.parametrize(
    "case",
    [
        "inspect_missing",
        "validate_not_a_checkpoint",
        "inspect_unreadable_metadata",
        "export_unreadable_metadata",
        "import_not_a_model",
    ],
)
def test_json_failures_print_one_json_object(tmp_path, case):
    code, out, err = run_cli(*_json_failures(tmp_path)[case])
    assert code in (1, 2), out + err
    line = one_error(err)
    report = json.loads(out)
    assert report == {"error": line.removeprefix("error: "), "exit_code": code}


def test_without_json_failures_leave_stdout_empty(tmp_path):
    code, out, err = run_cli("ckpt", "validate", tmp_path / "missing")
    assert code == 2 and out == "", out
    one_error(err, "missing")


@pytest.mark.parametrize(
    "argv",
    [
        ["ckpt", "validate", "--json", "--no-such-flag", "x"],
        ["ckpt", "validate", "x", "--hf-config", "/nonexistent/config.json", "--json"],
        ["ckpt", "export-hf", "x", "--json"],  # --out missing
    ],
)
def test_json_usage_errors_print_one_json_object(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["mfsdp", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    assert exited.value.code == 2
    line = one_error(captured.err)
    assert json.loads(captured.out) == {"error": line.removeprefix("error: "), "exit_code": 2}


# --------------------------------------------------------------------------- huggingface/
def _verl_sft_run(root: Path) -> Path:
    """verl's SFT layout around the mcore fixture: tracker, global_step_40/{dist_ckpt,
    huggingface/config.json}."""
    run = root / "run"
    step = run / "global_step_40"
    shutil.copytree(MCORE_QWEN2 / "dist_ckpt", step / "dist_ckpt")
    (step / "huggingface").mkdir()
    shutil.copy2(MCORE_QWEN2 / "config.json", step / "huggingface" / "config.json")
    (run / "latest_checkpointed_iteration.txt").write_text("40")
    return run


CONFIG_NOT_A_FILE = {
    "directory": (lambda path: path.mkdir(), "a directory"),
    "fifo": (lambda path: os.mkfifo(path), "a FIFO"),
    "link_loop": (lambda path: os.symlink(path.name, path), "symlink loop"),
}


@pytest.mark.parametrize("case", list(CONFIG_NOT_A_FILE))
def test_validate_fails_a_config_json_that_is_no_regular_file(tmp_path, case):
    run = _verl_sft_run(tmp_path)
    assert run_cli("ckpt", "validate", run)[0] == 0
    config = run / "global_step_40" / "huggingface" / "config.json"
    config.unlink()
    make, words = CONFIG_NOT_A_FILE[case]
    make(config)
    code, out, _err = run_cli("ckpt", "validate", run)
    assert code == 1 and "INVALID" in out, out
    assert f"error: {config}: " in out and words in out, out


# --------------------------------------------------------------------------- disk full
def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_import_that_fills_the_disk_names_its_output(tmp_path, layout_name):
    """RLIMIT_FSIZE makes the first large write fail (EFBIG, as ENOSPC would: a pwrite's
    error names no file); Python ignores SIGXFSZ, so the write fails instead of the process."""
    model = hf_model(tmp_path)
    out = tmp_path / "out"
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 10, limits[1]))
    try:
        code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", layout_name)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert code == 1, err
    one_error(err, str(out))
    assert not out.exists() and _leftovers(tmp_path) == []


# --------------------------------------------------------------------------- --hf-config
NOT_A_CAUSAL_LM = {  # transformers reads both configs, but neither is a decoder-only LM
    "t5": {"model_type": "t5", "num_layers": 2, "d_model": 64, "vocab_size": 256},
    "qwen2_vl": {"model_type": "qwen2_vl", "vision_config": {"depth": 2}},
}


@pytest.mark.parametrize("family", list(NOT_A_CAUSAL_LM))
def test_a_config_that_is_no_causal_lm_is_refused_in_one_line(tmp_path, family):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(NOT_A_CAUSAL_LM[family]))
    code, out, _err = run_cli("ckpt", "validate", MCORE_QWEN2 / "dist_ckpt", "--hf-config", config)
    assert code == 1 and "INVALID" in out, out
    assert f"error: {config}: " in out, out
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", config, "--out", tmp_path / "out")
    assert code == 2, err
    one_error(err)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- URLs
def test_an_unreachable_url_is_one_line_naming_it(monkeypatch, tmp_path):
    """Connection refused is a failed read (exit 1), not "not a checkpoint", after a few
    quick retries instead of tensorstore's default minutes of back-off."""
    from mfsdp_ckpt.storage import tensorstore_store

    quick = {"max_retries": 1, "initial_delay": "0.1s", "max_delay": "0.1s"}
    monkeypatch.setattr(
        tensorstore_store, "_CONTEXT", {k: quick for k in tensorstore_store._CONTEXT}
    )
    url = "http://127.0.0.1:9/run"  # the discard port: nothing listens, connect is refused
    code, _out, err = run_cli("ckpt", "export-hf", url, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, url, "read failed")


@pytest.fixture
def served(tmp_path):
    """tmp_path over HTTP (a plain server: no listing, as most are not)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # stderr is the command's, under test
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_http_checkpoint_whose_assets_cannot_be_listed_asks_for_hf_config(tmp_path, served):
    _verl_sft_run(tmp_path)
    code, _out, err = run_cli("ckpt", "export-hf", f"{served}/run", "--out", tmp_path / "out")
    assert code == 2, err
    one_error(err, "cannot list its files", "--hf-config")


# --------------------------------------------------------------------------- cloned model dirs
def _as_git_clone(model: Path) -> None:
    """What `git clone` of a Hub repo and `huggingface-cli download --local-dir` leave: the
    weights again under .git/lfs (a sparse 2 GiB stand-in), download state under .cache."""
    lfs = model / ".git" / "lfs" / "objects" / "ab" / "cd"
    lfs.mkdir(parents=True)
    with open(lfs / ("ab" * 32), "wb") as handle:
        handle.truncate(2 << 30)
    (model / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    (model / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (model / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text("x\n")


def _hidden(directory: Path) -> list[str]:
    return [str(p) for p in directory.rglob(".*")]


def test_a_cloned_model_dir_exports_without_its_hidden_dirs(tmp_path):
    model = hf_model(tmp_path)
    _as_git_clone(model)
    out = tmp_path / "export"
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", model, "--out", out)
    assert code == 0, err
    assert (out / "tokenizer.json").is_file() and _hidden(out) == []


def test_a_cloned_model_dir_imports_without_its_hidden_dirs(tmp_path):
    model = hf_model(tmp_path)
    _as_git_clone(model)
    out = tmp_path / "run"
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", "hf")
    assert code == 0, err
    assets = out / "global_step_0" / "huggingface"
    assert (assets / "tokenizer.json").is_file() and _hidden(assets) == []


# --------------------------------------------------------------------------- permissions
def test_validate_fails_a_data_file_it_cannot_open(tmp_path):
    run = _verl_sft_run(tmp_path)
    shard = next((run / "global_step_40" / "dist_ckpt").glob("*.distcp"))
    shard.chmod(0)
    command = [
        *without_root_overrides(),
        sys.executable,
        "-c",
        "from cli.main import main; main()",
    ]
    done = subprocess.run(
        [*command, "ckpt", "validate", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        cwd=REPO,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: {shard}: unreadable (Permission denied)" in done.stdout, done.stdout


METADATA_NOT_A_FILE = {
    "fifo": (lambda path: os.mkfifo(path), "a FIFO"),
    "link_loop": (lambda path: os.symlink(path.name, path), "symlink loop"),
    "device": (lambda path: os.symlink("/dev/zero", path), "points outside the checkpoint"),
}


@pytest.mark.parametrize("case", list(METADATA_NOT_A_FILE))
def test_validate_names_a_metadata_that_is_no_regular_file(tmp_path, case):
    """A damaged checkpoint (exit 1, naming .metadata), not "not a checkpoint" (exit 2)."""
    run = _verl_sft_run(tmp_path)
    metadata = run / "global_step_40" / "dist_ckpt" / ".metadata"
    metadata.unlink()
    make, words = METADATA_NOT_A_FILE[case]
    make(metadata)
    for given in (run, run / "global_step_40", metadata.parent):
        code, out, _err = run_cli("ckpt", "validate", given)
        assert code == 1 and "INVALID" in out, out
        assert f"error: {metadata}: " in out and words in out, out


# --------------------------------------------------------------------------- config dtype
@pytest.mark.parametrize("named", ["int8", "bool", "float8_e4m3fn", "complex64", "float64"])
def test_auto_dtype_never_casts_to_a_dtype_a_config_names_that_export_does_not_write(named):
    """A family read through transformers (here Mistral) turns config.json's dtype string
    into a torch.dtype; `auto` must not cast float weights to int8 or bool because of it."""
    from transformers import AutoConfig

    from mfsdp_ckpt.convert.export_plan import choose_dtype
    from mfsdp_ckpt.format.dtypes import BFLOAT16, FLOAT32

    stored = list(CheckpointReader(MCORE_QWEN2 / "dist_ckpt").tensors.values())
    config = AutoConfig.for_model("mistral", dtype=named)
    assert choose_dtype("auto", config, stored) == FLOAT32  # the checkpoint's own
    assert choose_dtype("auto", AutoConfig.for_model("mistral", dtype="bfloat16"), []) == BFLOAT16
