"""An output path with `..` after a folder that does not exist (`P/new/..`) names `P`, and
every command checks and writes `P`: `mfsdp demo --out P/new/..` checked a path naming
nothing, wrote the demo into the user's non-empty `P`, listed the user's files as the
demo's, and the next `mfsdp demo --out P` deleted them. The demo's list holds only what the
demo writes, and a list that names more (written by an older mfsdp) is not trusted for it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cli import demo_record
from cli.demo import _claim
from cli.main import app
from mfsdp_ckpt.storage.output_path import collapse_dot_dot
from tests.support.hf_model_files import saved_hf_model
from trainer.config import SFTConfig, load_config
from trainer.grpo.config import GRPOConfig


def _users_dir(root: Path) -> Path:
    folder = root / "P"
    (folder / "results").mkdir(parents=True)
    (folder / "important.txt").write_text("precious")
    (folder / "results" / "r.csv").write_text("r")
    return folder


def _listing(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_demo_into_a_users_dir_through_dot_dot_is_refused_as_the_dir_itself(tmp_path):
    users = _users_dir(tmp_path)
    before = _listing(tmp_path)
    done = CliRunner().invoke(app, ["demo", "--out", f"{users}/new/..", "--steps", "1"])
    assert done.exit_code == 2, done.output
    assert done.stderr == (
        f"error: {users}: directory is not empty and is not a previous demo's output (no"
        f" {demo_record.MARKER}); choose a new --out\n"
    )
    assert _listing(tmp_path) == before  # no `new` made, nothing written


def test_the_demos_list_leaves_out_what_it_did_not_write(tmp_path):
    out = tmp_path / "demo"
    _claim(out)
    (out / "sft").mkdir()
    (out / "sft" / "config.yaml").write_text("trainer: {}\n")
    (out / "important.txt").write_text("a user's, put there while the demo ran")
    demo_record.record(out)
    listed = json.loads((out / demo_record.MARKER).read_text())
    assert listed["dirs"] == ["sft"] and list(listed["files"]) == ["sft/config.yaml"]
    refused = demo_record.refusal(out)
    assert refused is not None and "also holds important.txt, which the demo" in str(refused)


def test_a_list_of_an_older_mfsdp_naming_a_users_file_deletes_nothing(tmp_path):
    """The list `mfsdp demo --out P/new/..` wrote before: the user's files among the demo's."""
    out = tmp_path / "demo"
    _claim(out)
    (out / "sft").mkdir()
    (out / "important.txt").write_text("precious")
    demo_record.record(out)
    listed = json.loads((out / demo_record.MARKER).read_text())
    listed["files"]["important.txt"] = {"size": 8, "sha256": "0" * 64}
    (out / demo_record.MARKER).write_text(json.dumps(listed))
    refused = demo_record.refusal(out)
    assert refused is not None and "also holds important.txt, which the demo" in str(refused)
    done = CliRunner().invoke(app, ["demo", "--out", str(out), "--steps", "1"])
    assert done.exit_code == 2, done.output
    assert (out / "important.txt").read_text() == "precious"


def test_data_through_dot_dot_writes_into_the_dir_and_names_it(tmp_path):
    users = _users_dir(tmp_path)
    done = CliRunner().invoke(app, ["data", "synthetic", "--out", f"{users}/new/.."])
    assert done.exit_code == 0, done.output
    assert not (users / "new").exists()  # was left behind, made by `mkdir -p` as typed
    assert (users / "sft" / "train.parquet").is_file()
    assert f"{users}/sft/train.parquet" in done.stdout and "/.." not in done.stdout


def test_import_through_dot_dot_into_a_users_dir_is_refused_naming_it(tmp_path):
    model = saved_hf_model(tmp_path / "model", "qwen2", tied=True)
    users = _users_dir(tmp_path)
    before = _listing(users)
    done = CliRunner().invoke(app, ["ckpt", "import-hf", str(model), "--out", f"{users}/n/.."])
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(f"error: {users}: holds other files (important.txt,")
    assert _listing(users) == before


def test_run_dir_through_dot_dot_is_the_dir_its_checks_see(tmp_path):
    for config in (SFTConfig, GRPOConfig):
        loaded = load_config(config, overrides=[f"trainer.run_dir={tmp_path}/runs/new/.."])
        assert loaded.trainer.run_dir == f"{tmp_path}/runs"
    loaded = load_config(SFTConfig, overrides=["trainer.run_dir=runs/a/../b/"])
    assert loaded.trainer.run_dir == "runs/b"


def test_only_dot_dot_is_taken_away_and_never_from_a_url():
    assert collapse_dot_dot("P/new/..") == "P"
    assert collapse_dot_dot("./out/") == "./out/"  # as typed, in every line naming it
    assert collapse_dot_dot("../out") == "../out"
    assert collapse_dot_dot("gs://b/x/..") == "gs://b/x/.."
    assert collapse_dot_dot("") == ""
