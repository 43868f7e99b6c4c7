"""An mfsdp LoRA checkpoint named to `export-hf` by a store's URL (gs://, s3://, http://) is
refused, exit 2, saying it must be local: its export reads local files only. Was: read
through the URL as any checkpoint, its adapter tensors were called a live PEFT model's
names with advice to pass --hf-config BASE_DIR (and with --adapter-only, "not a local LoRA
checkpoint"), none of which exports it. Here a local HTTP server is the store: tensorstore
reads it as it reads gs:// or s3://, byte ranges over the network."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES
from tests.trainer.test_lora_export_flags import lora_run  # noqa: F401 (a fixture)

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _RangeHandler(SimpleHTTPRequestHandler):
    """Files under `directory`, a `Range: bytes=A-B` request answered with those bytes
    (206), or 416 past the end, as object stores answer tensorstore's reads."""

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        wanted = _RANGE.match(self.headers.get("Range", ""))
        if wanted is None or not path.is_file():
            super().do_GET()
            return
        data = path.read_bytes()
        start = int(wanted.group(1))
        end = int(wanted.group(2)) + 1 if wanted.group(2) else len(data)
        if start >= len(data):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = data[start:end]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


class _ManifestDeniedHandler(_RangeHandler):
    """As an object store answers a reader without list rights for a missing object: 403."""

    def do_GET(self) -> None:
        if self.path.endswith("/manifest.json"):
            self.send_error(403)
            return
        super().do_GET()

    def do_HEAD(self) -> None:
        if self.path.endswith("/manifest.json"):
            self.send_error(403)
            return
        super().do_HEAD()


@pytest.fixture
def served() -> Iterator[Callable[[Path], str]]:
    """`serve(directory)`: the http:// URL of a local server of `directory`."""
    servers: list[ThreadingHTTPServer] = []

    def serve(directory: Path, kind: type[_RangeHandler] = _RangeHandler) -> str:
        handler = functools.partial(kind, directory=str(directory))
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("flags", [[], ["--adapter-only"]])
def test_a_lora_step_at_a_store_url_is_refused_as_not_local(
    lora_run: Path,  # noqa: F811
    served,
    tmp_path: Path,
    flags: list[str],
):
    step = sorted(lora_run.glob("global_step_*"))[-1]
    url = f"{served(lora_run)}/{step.name}"
    out = tmp_path / "out"
    code, _out, err = run_cli("ckpt", "export-hf", url, "--out", out, *flags)
    assert code == 2 and one_error_line(err) == (
        f"error: {url}: an mfsdp LoRA checkpoint, exported from local files only; copy the"
        " step dir to a local dir first and give that path"
    ), err
    assert not out.exists()


def test_a_checkpoint_that_is_not_lora_still_exports_from_a_store_url(served, tmp_path: Path):
    """(An HTTP store lists no files: its config is given locally.)"""
    run = FIXTURES / "megatron_fsdp_qwen2" / "run"
    url = served(run) + "/global_step_2"
    config = run / "global_step_2" / "huggingface"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", url, "--out", tmp_path / "o", "--hf-config", config
    )
    assert code == 0, stdout + err


def test_a_checkpoint_at_the_stores_root_still_exports(served, tmp_path: Path):
    """A bare DCP served at the root has no step dir above it to hold a manifest."""
    run = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2"
    url = served(run / "dist_ckpt")
    code, stdout, err = run_cli(
        "ckpt", "export-hf", url, "--out", tmp_path / "o", "--hf-config", run / "huggingface"
    )
    assert code == 0, stdout + err


def test_a_manifest_the_store_refuses_to_read_is_no_lora_manifest(served, tmp_path: Path):
    """A verl or Megatron checkpoint has no manifest.json; a store answering 403 for it (a
    reader without list rights) must not stop the export of such a checkpoint."""
    run = FIXTURES / "megatron_fsdp_qwen2" / "run"
    url = served(run, _ManifestDeniedHandler) + "/global_step_2"
    config = run / "global_step_2" / "huggingface"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", url, "--out", tmp_path / "o", "--hf-config", config
    )
    assert code == 0, stdout + err
