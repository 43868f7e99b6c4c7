"""A full disk while a tokenizer's Python-written files are saved (chat_template.jinja,
tokenizer_config.json, written by transformers' own `open`) names the file, as config.json
and the Rust-written tokenizer.json do. Was: the OSError named no file, so the line named
the output directory (`.../huggingface: not written (File too large)`). The disk fills
deterministically: RLIMIT_FSIZE in a child process (a write past it fails with EFBIG)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import repo_env

LIMIT = 1024  # config.json (about 700 bytes) fits; the grown file does not

SAVING = """
import resource, sys
from pathlib import Path
from transformers import Qwen2Config
from trainer.hf_files import save_hf_files
from trainer.tiny import build_tokenizer, tiny_config_kwargs
out, grown, limit = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
tokenizer = build_tokenizer()
config = Qwen2Config(**tiny_config_kwargs(len(tokenizer)))
if grown == "chat_template.jinja":  # a template as long as real ones are
    tokenizer.chat_template = "{#- " + "a long template. " * 100 + "-#}" + tokenizer.chat_template
else:  # tokenizer_config.json lists every added token
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [f"<|reserved_{i}|>" for i in range(40)]}
    )
out.mkdir()
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    save_hf_files(out, config, tokenizer, None)
except OSError as err:
    print(err.filename, err.strerror, sep="|")
"""


@pytest.mark.parametrize("grown", ["chat_template.jinja", "tokenizer_config.json"])
def test_a_tokenizer_file_the_disk_cannot_hold_is_named(tmp_path, grown):
    out = tmp_path / "huggingface"
    done = subprocess.run(
        [sys.executable, "-c", SAVING, str(out), grown, str(LIMIT)],
        capture_output=True,
        text=True,
        timeout=120,
        env=repo_env(),
    )
    assert done.stdout.strip() == f"{out / grown}|not written (File too large)", done.stderr
