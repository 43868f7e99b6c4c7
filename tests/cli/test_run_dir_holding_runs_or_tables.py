"""`trainer.run_dir` may not be a directory that holds runs, or an `mfsdp data` output.

`mfsdp demo --out demo` writes the run demo/sft beside its tables demo/data. Training with
`trainer.run_dir=demo` put steps beside demo/sft, and `mfsdp ckpt validate demo` then read
those, not "the one run demo holds"; `trainer.run_dir=demo/data` put checkpoints among the
parquet tables. Both are refused before anything starts, in one line naming what the dir
holds (`trainer.local_paths.check_run_dir_holds_no_other_output`); an empty dir, or one
holding other files, stays the run's own.
"""

from __future__ import annotations

import pytest

from mfsdp_ckpt.format import layout, step_saving
from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, SFTConfig
from trainer.grpo.config import GRPOConfig


def _run(run_dir):
    """A run of ours: a tracked step with its manifest."""
    step = layout.step_dir(run_dir, 1)
    (step / layout.DIST_CKPT_DIR).mkdir(parents=True)
    (step / layout.MANIFEST_FILE).write_text("{}")
    step_saving.write_tracker(run_dir, 1)


def _demo(root):
    """What `mfsdp demo --out root` leaves: the run sft/, the tables data/, a model dir."""
    _run(root / "sft")
    for table in ("sft/train.parquet", "rl/train.parquet", "rl/test.parquet"):
        (root / "data" / table).parent.mkdir(parents=True, exist_ok=True)
        (root / "data" / table).write_bytes(b"PAR1")
    (root / "init_model").mkdir()
    (root / "init_model" / "config.json").write_text("{}")


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_a_dir_holding_runs_or_tables_is_refused(cls, tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    _demo(tmp_path / "demo")
    with pytest.raises(ConfigError) as caught:
        load_checked_config(cls, None, ["trainer.run_dir=demo"])
    assert str(caught.value) == (
        "trainer.run_dir: demo holds the run demo/sft; give that to resume it, or a new dir"
        " (e.g. trainer.run_dir=runs/NAME)"
    )
    _run(tmp_path / "demo" / "grpo")
    with pytest.raises(ConfigError, match=r"demo holds the runs demo/.*; give one of them"):
        load_checked_config(cls, None, ["trainer.run_dir=demo"])
    with pytest.raises(ConfigError) as caught:
        load_checked_config(cls, None, ["trainer.run_dir=demo/data"])
    assert str(caught.value).startswith(
        "trainer.run_dir: demo/data is an mfsdp data output (sft/, rl/ tables)"
    )
    with pytest.raises(ConfigError, match="demo/data/rl holds the tables of the mfsdp data"):
        load_checked_config(cls, None, ["trainer.run_dir=demo/data/rl"])
    # the run itself, an empty dir, a dir of other files, a new dir: the run's own
    load_checked_config(cls, None, ["trainer.run_dir=demo/sft"])
    (tmp_path / "empty").mkdir()
    load_checked_config(cls, None, ["trainer.run_dir=empty"])
    (tmp_path / "other" / "sft").mkdir(parents=True)
    (tmp_path / "other" / "notes.txt").write_text("mine\n")
    load_checked_config(cls, None, ["trainer.run_dir=other"])
    load_checked_config(cls, None, ["trainer.run_dir=new/run"])


def test_train_into_a_demo_dir_exits_2_in_one_line(tmp_path):
    _demo(tmp_path / "demo")
    data = tmp_path / "chat.jsonl"
    write_chat_jsonl(data, rows=4)
    done = mfsdp(
        *["train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml")],
        *[f"data.train_files={data}", "trainer.run_dir=demo", "trainer.total_steps=1"],
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, "trainer.run_dir: demo holds the run demo/sft; give that to resume")
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["data", "init_model", "sft"]
