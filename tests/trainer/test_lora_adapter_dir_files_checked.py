"""Every file read from a `model.lora_adapter_path` dir obeys a model dir's rule
(trainer/lora_adapter_dir.py): a regular file inside the dir (or in the Hugging Face cache
its links lead into), bounded in size. A config linked to another folder trained silently
with that folder's alpha, a link to /etc/passwd was opened and parsed, and a FIFO or a
/dev/zero link (config or weights) was told "is missing" for a file that is there; an
adapter saved as a pickle got the same line, not a word about the pickle."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.hf_cache_dirs import local_dir_of_links
from tests.support.paths import REPO, repo_env
from tests.support.permissions import without_root_overrides
from tests.support.sft import TINY_CONFIG, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG, WEIGHTS
from trainer.config import ConfigError
from trainer.lora_adapter_dir import read_adapter_dir

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter saved by peft itself
KEY = "model.lora_adapter_path"


def _copy(adapter: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(adapter, tmp_path / "adapter"))


def _fifo(copy: Path, name: str) -> str:
    (copy / name).unlink()
    os.mkfifo(copy / name)
    return f"{copy / name}: a FIFO, not a regular file"


def _dev_zero(copy: Path, name: str) -> str:
    (copy / name).unlink()
    (copy / name).symlink_to("/dev/zero")
    return f"{copy / name}: resolves outside the adapter dir {copy} (/dev/zero)"


def _outside(copy: Path, name: str) -> str:
    """The file moved to a folder beside the dir, a link to it left in its place: a config
    there with another alpha trained silently."""
    elsewhere = copy.parent / "elsewhere"
    elsewhere.mkdir()
    moved = Path(shutil.move(copy / name, elsewhere / name))
    if name == CONFIG:
        moved.write_text(json.dumps({**json.loads(moved.read_text()), "lora_alpha": 64}))
    (copy / name).symlink_to(moved)
    return f"{copy / name}: resolves outside the adapter dir {copy} ({moved})"


def _directory(copy: Path, name: str) -> str:
    (copy / name).unlink()
    (copy / name).mkdir()
    return f"{copy / name}: a directory, not a regular file"


CASES: dict[str, Callable[[Path, str], str]] = {
    "fifo": _fifo,
    "dev-zero-link": _dev_zero,
    "link-outside": _outside,
    "directory": _directory,
}


@pytest.mark.parametrize("name", [CONFIG, WEIGHTS])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_that_is_there_but_not_a_regular_file_inside_is_named_for_what_it_is(
    adapter, tmp_path, case, name
):
    copy = _copy(adapter, tmp_path)
    says = CASES[case](copy, name)
    with pytest.raises(ConfigError) as caught:
        read_adapter_dir(copy)
    assert str(caught.value) == f"{KEY}: {says}"


def test_an_adapter_in_the_hugging_face_cache_reads_through_its_links(adapter, tmp_path):
    """A `--local-dir` download's files are links into the cache's blobs/, as a model
    dir's may be: the rule is a model dir's, not "no link at all"."""
    links = local_dir_of_links(adapter, tmp_path / "hub")
    read = read_adapter_dir(links)
    assert read.settings["lora_alpha"] == 4 and set(read.weights.tensors)


class _RunsCode:
    """What a crafted pickle holds: unpickling it creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_an_adapter_saved_as_a_pickle_is_named_and_never_unpickled(adapter, tmp_path):
    copy = _copy(adapter, tmp_path)
    (copy / WEIGHTS).unlink()
    marker = tmp_path / "unpickled"
    (copy / "adapter_model.bin").write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(ConfigError) as caught:
        read_adapter_dir(copy)
    assert str(caught.value) == (
        f"{KEY}: {copy / WEIGHTS} is missing (a PEFT adapter dir has {CONFIG} and {WEIGHTS});"
        " adapter_model.bin is a pickle, which mfsdp never loads (it can run code): if you"
        " trust it, load it with peft (PeftModel.from_pretrained) and save it with"
        f" save_pretrained(..., safe_serialization=True), which writes {WEIGHTS}"
    )
    assert not marker.exists()


def test_a_missing_file_is_still_said_to_be_missing(adapter, tmp_path):
    copy = _copy(adapter, tmp_path)
    (copy / CONFIG).unlink()
    with pytest.raises(ConfigError) as caught:
        read_adapter_dir(copy)
    assert str(caught.value) == (
        f"{KEY}: {copy / CONFIG} is missing (a PEFT adapter dir has {CONFIG} and {WEIGHTS})"
    )


_READ = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from trainer.config import ConfigError
from trainer.lora_adapter_dir import read_adapter_dir
try:
    read_adapter_dir(Path(sys.argv[1]))
except ConfigError as err:
    print(err)
"""


@pytest.mark.parametrize("name", [CONFIG, WEIGHTS])
def test_an_unreadable_file_is_named_as_unreadable(adapter, tmp_path, name):
    copy = _copy(adapter, tmp_path)
    (copy / name).chmod(0)
    done = subprocess.run(
        [*without_root_overrides(), sys.executable, "-c", _READ, str(copy)],
        capture_output=True,
        text=True,
        timeout=300,
        env=repo_env(),
        cwd=REPO,
    )
    assert done.stdout == f"{KEY}: {copy / name}: unreadable (Permission denied)\n", done.stderr


def test_train_sft_refuses_a_config_linked_from_another_folder(adapter, tmp_path):
    """End to end: the run that trained with the other folder's alpha now stops before
    building anything, exit 2, one line naming the file and where it leads."""
    copy = _copy(adapter, tmp_path)
    says = _outside(copy, CONFIG)
    data = write_chat_jsonl(tmp_path / "train.jsonl")
    done = mfsdp(
        "train",
        "sft",
        "--config",
        str(TINY_CONFIG),
        f"data.train_files={data}",
        "data.val_ratio=0",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.total_steps=1",
        f"{KEY}={copy}",
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == f"error: {KEY}: {says}"
