"""A write that fails while a command fills its hidden work dir (export-hf, a LoRA export
merged or adapter-only, import-hf) names the file as it is in the output and that nothing of
the output was kept (not the work dir, removed by the time the line is read).

Was (with `ulimit -f`): `error: OUT/model.safetensors: cannot reserve ... (File too large)`,
`error: OUT/__0_1.distcp: File too large` and `error: OUT/adapter_model.safetensors: write
failed (File too large)`, naming a file at the final --out, which was never made: the
write happened in `.OUT.export-tmp-<pid>/`, removed on the failure.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mfsdp_ckpt.storage.file_errors import in_work_dir
from tests.support.hf_model_files import saved_hf_model
from tests.support.paths import REPO, repo_env
from tests.support.sft import tiny_config, write_chat_jsonl

FILE_LIMIT = 4096  # bytes: above every small file the commands write, below the weights


def _limit_file_size() -> None:
    """RLIMIT_FSIZE, with SIGXFSZ ignored: a write past it fails with EFBIG."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def _mfsdp(*args: object, limited: bool = True) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        cwd=REPO,
        preexec_fn=_limit_file_size if limited else None,
    )
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return saved_hf_model(tmp_path_factory.mktemp("hf"), "qwen2", tied=False)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    """One LoRA step of the tiny model; its merged export and its adapter exceed FILE_LIMIT."""
    from trainer.sft import run_sft
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    settings = (f"model.path={base}", "model.lora_rank=4", "model.target_modules=[q_proj]")
    run_sft(tiny_config(data, root / "run", *settings, "data.global_batch_size=4"))
    return root / "run"


def _work_dir_line(out: Path, file: str, reason: str) -> re.Pattern[str]:
    return re.compile(
        rf"error: {re.escape(str(out))}: writing {file} failed \({reason}\);"
        r" nothing of the output was kept"
    )


def _only_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("layout", "written"),
    [("mcore", r"__0_[0-9]+\.distcp"), ("hf", r"global_step_0/dist_ckpt/__0_[0-9]+\.distcp")],
)
def test_import_names_the_file_in_its_work_dir(tmp_path, model, layout, written):
    out = tmp_path / "fz" / "i"
    out.parent.mkdir()
    code, err = _mfsdp("ckpt", "import-hf", model, "--out", out, "--layout", layout)
    assert code == 1, err
    assert _work_dir_line(out, written, "File too large").fullmatch(_only_error_line(err)), err
    assert os.listdir(out.parent) == [], "a failed import leaves nothing"


def test_export_names_the_file_in_its_work_dir(tmp_path, model):
    imported = tmp_path / "imported"
    code, err = _mfsdp(
        "ckpt", "import-hf", model, "--out", imported, "--layout", "hf", limited=False
    )
    assert code == 0, err
    out = tmp_path / "fz" / "e"
    out.parent.mkdir()
    code, err = _mfsdp("ckpt", "export-hf", imported, "--out", out)
    assert code == 1, err
    reason = r"cannot reserve [0-9]+ bytes for \S+ \(File too large\)"
    assert _work_dir_line(out, "model.safetensors", reason).fullmatch(_only_error_line(err)), err
    assert os.listdir(out.parent) == [], "a failed export leaves nothing"


@pytest.mark.parametrize(
    ("flags", "written"),
    # the first file past the limit; the adapter is written as model.safetensors, renamed
    # adapter_model.safetensors once whole
    [([], r"\S+"), (["--adapter-only"], r"model\.safetensors")],
    ids=["merged", "adapter-only"],
)
def test_a_lora_export_names_the_file_in_its_work_dir(tmp_path, lora_run, flags, written):
    out = tmp_path / "fz" / "l"
    out.parent.mkdir()
    code, err = _mfsdp("ckpt", "export-hf", lora_run, "--out", out, *flags)
    assert code == 1, err
    assert _work_dir_line(out, written, r".*File too large\)?").fullmatch(_only_error_line(err)), (
        err
    )
    assert os.listdir(out.parent) == [], "a failed export leaves nothing"


def test_only_a_file_inside_the_work_dir_is_reworded(tmp_path):
    work = tmp_path / ".e.export-tmp-7"
    full = OSError(errno.ENOSPC, "No space left on device", str(work / "sub" / "x.bin"))
    said = in_work_dir(full, work)
    assert isinstance(said, OSError) and said.errno == errno.ENOSPC and said.filename is None
    assert str(said.strerror) == (
        "writing sub/x.bin failed (No space left on device); nothing of the output was kept"
    )
    for kept in (
        OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "source.bin")),
        OSError(errno.ENOSPC, "No space left on device", str(work)),
        OSError(errno.ENOMEM, "Cannot allocate memory", str(work / "x.bin")),
        OSError(errno.EIO, "no file named"),
    ):
        assert in_work_dir(kept, work) is kept
