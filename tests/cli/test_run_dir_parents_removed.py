"""A run that fails leaves no folders behind that it made for `trainer.run_dir`: the run dir's
missing parents (made as `mkdir -p` would, for its lock beside it) and the run dir itself,
while empty, are removed again, as every command's `--out` is. A bad data file left `s1/s2/`
of `trainer.run_dir=s1/s2/run`."""

from __future__ import annotations

from tests.support.fresh_python import mfsdp


def test_a_failed_run_removes_the_folders_it_made_and_only_those(tmp_path):
    kept = tmp_path / "existing"
    kept.mkdir()
    bad = tmp_path / "bad.parquet"
    bad.write_text("not a parquet file")
    done = mfsdp(
        "train",
        "sft",
        "--config",
        "examples/sft_tiny_cpu.yaml",
        f"data.train_files={bad}",
        f"trainer.run_dir={kept / 's1' / 's2' / 'run'}",
    )
    assert done.returncode == 2, done.stderr
    assert "not a readable parquet file" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet", "existing"]
    assert list(kept.iterdir()) == []
