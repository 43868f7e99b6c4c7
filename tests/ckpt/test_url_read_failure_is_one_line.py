"""A checkpoint URL that cannot be read fails in mfsdp's one `error:` line, nothing before it.
Was: tensorstore's C++ credential lookup logged each source it tried on stderr (nine lines
about a missing ~/.aws/config for s3://, "Could not find the credentials file ... gcloud auth
application-default login" for gs://) before the line, pointing at credentials when the
host did not resolve. Where the server refused for want of credentials, the line ends with
what the lookup logged last."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mfsdp_ckpt.storage.native_log import captured_native_log
from tests.support.paths import repo_env

CREDENTIAL_ENV = ("AWS_", "GOOGLE_", "CLOUDSDK_", "TENSORSTORE_")


def export_url(url: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    """`mfsdp ckpt export-hf URL --out hf` in a fresh process whose home holds no
    credentials, as a user's first try would be."""
    kept = {k: v for k, v in repo_env().items() if not k.startswith(CREDENTIAL_ENV)}
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()"]
        + ["ckpt", "export-hf", url, "--out", str(home / "hf")],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        env={**kept, "HOME": str(home), **env},
    )


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_an_unreadable_bucket_is_one_error_line(tmp_path, scheme):
    url = f"{scheme}://bucket/run/global_step_1"
    done = export_url(url, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(f"error: {url}/.metadata: read failed ("), done.stderr


def test_an_unresolved_host_is_said_and_credentials_are_not(tmp_path):
    """`.invalid` never resolves (RFC 6761), network or not: the line is the DNS failure."""
    done = export_url(
        "gs://bucket/run", tmp_path, TENSORSTORE_GCS_HTTP_URL="http://storage.invalid"
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert "Could not resolve host: storage.invalid" in done.stderr
    assert "credential" not in done.stderr


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A storage server answering every request as GCS does one without credentials."""

    def do_GET(self) -> None:
        body = b'{"error": {"code": 401, "message": "Anonymous caller has no access"}}'
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


def test_a_refusal_for_want_of_credentials_says_which_were_missed(tmp_path, refusing_server):
    done = export_url("gs://bucket/run", tmp_path, TENSORSTORE_GCS_HTTP_URL=refusing_server)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith("error: gs://bucket/run/.metadata: read failed (PERMISSION_DENI")
    assert "; tensorstore's credential lookup: Could not find the credentials file" in done.stderr
    # the note's middle (the home dir's path) may be cut to keep it short; its end is kept
    assert done.stderr.rstrip().endswith("gcloud auth application-default login)"), done.stderr


def test_only_absl_lines_are_kept_off_stderr(capfd):
    """What else reached descriptor 2 in the block (Python's output, another library's) is
    written out as the block ends; the absl lines' text is handed over."""
    logged: list[str] = []
    with captured_native_log(logged):
        os.write(2, b"E1205 13:02:00.944242   19970 common-io:5] static: no ~/.aws/config\n")
        print("a line of our own", file=sys.stderr)
        os.write(2, b"W1205 13:02:00.951705   19997 aws_api.cc:6148] IMDS failed\nplain\n")
    assert capfd.readouterr().err == "a line of our own\nplain\n"
    assert logged == ["static: no ~/.aws/config", "IMDS failed"]
