"""`mfsdp config check` runs the checks `mfsdp train` runs on a config before it loads
anything, and nothing else: every example config checks ok once the paths it names are
there, a bad value exits 2 with train's own line, and neither torch nor transformers is
imported nor anything written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.fresh_python import MAIN_CATCHING_EXIT, mfsdp, modules_after
from tests.support.paths import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def trainer_of(config: Path) -> str:
    return "grpo" if "grpo" in config.name else "sft"


def files_under(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def write_rows(path: Path, rows: list[dict]) -> Path:
    """`rows` as the table `path` names (.parquet, else JSON lines), its dir made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def stage_example(tmp_path: Path, config: Path) -> list[str]:
    """`config` copied to tmp_path/examples, with the data files it names made (two rows of
    its trainer's: the check reads a file's first row, and counts the rows a `val_ratio`
    leaves to train on, which of one row is none) and, where it names a model dir, the
    overrides pointing it at a stand-in dir; the overrides."""
    (tmp_path / "examples").mkdir()
    shutil.copy(config, tmp_path / "examples" / config.name)
    keys = yaml.safe_load(config.read_text())
    row = (
        {
            keys["data"].get("prompt_key", "prompt"): [{"role": "user", "content": "1+1?"}],
            "data_source": "openai/gsm8k",
            "reward_model": {"ground_truth": "2"},
        }
        if trainer_of(config) == "grpo"
        else {
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        }
    )
    for key in ("train_files", "val_files"):
        named = keys["data"].get(key) or []
        for path in [named] if isinstance(named, str) else named:
            write_rows(tmp_path / path, [row, row])
    if "path" not in keys.get("model", {}):
        return []
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "max_position_embeddings": 4096})
    )
    (model / "tokenizer.json").write_text("{}")
    (model / "model.safetensors").touch()
    return [f"model.path={model}"]


@pytest.mark.parametrize("config", EXAMPLES, ids=lambda config: config.name)
def test_every_example_checks_ok_and_writes_nothing(tmp_path, config):
    overrides = stage_example(tmp_path, config)
    before = files_under(tmp_path)
    trainer, given = trainer_of(config), f"examples/{config.name}"
    done = mfsdp("config", "check", trainer, "--config", given, *overrides, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"ok: {given} is a valid mfsdp {trainer} config\n",
        "",
    )
    assert files_under(tmp_path) == before
    as_json = mfsdp(
        "config", "check", trainer, "--config", given, "--json", *overrides, cwd=tmp_path
    )
    assert json.loads(as_json.stdout) == {"valid": True, "trainer": trainer, "config": given}


@pytest.mark.parametrize(
    "override", ["optim.lr=-1", "model.path=no_such_model", "trainer.totl_steps=3"]
)
def test_a_problem_is_the_line_train_prints(tmp_path, override):
    config = REPO / "examples" / "grpo_tiny_cpu.yaml"
    stage_example(tmp_path, config)
    given = ["--config", "examples/grpo_tiny_cpu.yaml", override]
    checked = mfsdp("config", "check", "grpo", *given, cwd=tmp_path)
    trained = mfsdp("train", "grpo", *given, cwd=tmp_path)
    assert checked.returncode == trained.returncode == 2
    assert checked.stderr == trained.stderr
    assert checked.stderr.startswith("error: ") and checked.stderr.count("\n") == 1
    assert checked.stdout == ""


def test_a_missing_data_file_is_the_line_train_prints(tmp_path):
    given = ["--config", str(REPO / "examples" / "sft_tiny_cpu.yaml")]
    checked = mfsdp("config", "check", "sft", *given, cwd=tmp_path)
    trained = mfsdp("train", "sft", *given, cwd=tmp_path)
    assert (checked.returncode, checked.stderr) == (trained.returncode, trained.stderr)
    assert "data.train_files: runs/demo/data/sft/train.parquet: no such file" in checked.stderr


def test_overrides_alone_are_checked(tmp_path):
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    data = write_rows(tmp_path / "train.parquet", [{"messages": chat}])
    done = mfsdp(
        "config", "check", "sft", f"data.train_files={data}", "model.shape=tiny", cwd=tmp_path
    )
    assert (done.returncode, done.stdout) == (
        0,
        "ok: the overrides make a valid mfsdp sft config\n",
    )


def test_neither_torch_nor_transformers_is_imported(tmp_path):
    """Nor by reading the data files' first rows (a parquet file's through pyarrow)."""
    row = {
        "prompt": [{"role": "user", "content": "1+1?"}],
        "data_source": "openai/gsm8k",
        "reward_model": {"ground_truth": "2"},
    }
    data = write_rows(tmp_path / "train.parquet", [row])
    loaded = modules_after(
        MAIN_CATCHING_EXIT,
        "config",
        "check",
        "grpo",
        "--config",
        "examples/grpo_tiny_cpu.yaml",
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"trainer.run_dir={tmp_path / 'run'}",
        roots=("torch", "transformers"),
    )
    assert loaded == []
