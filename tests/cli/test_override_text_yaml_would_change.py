"""`mfsdp train` refuses an override YAML would read as other than typed before anything is
written, and `mfsdp demo` refuses an --out holding a control character before anything is
written (its paths go to the run as overrides, quoted: `--out 'runs/demo #2'` is no comment).

Was: `'trainer.run_dir=exp/a #second try'` resumed and extended the run at `exp/a`;
`mfsdp demo --out $'a\\nb'` made `a\\nb/`, then failed (the run dir override folded to
`a b/sft`) and left the partial dir."""

from __future__ import annotations

from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import one_error
from tests.support.paths import REPO

CONFIG = str(REPO / "examples" / "sft_tiny_cpu.yaml")


def test_a_commented_run_dir_is_refused_and_the_run_there_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp" / "a").mkdir(parents=True)
    (tmp_path / "exp" / "a" / "marker").write_text("an earlier run")
    result = CliRunner().invoke(
        app, ["train", "sft", "--config", CONFIG, "trainer.run_dir=exp/a #second try"]
    )
    assert result.exit_code == 2, result.output
    one_error(result.stderr, "override trainer.run_dir:", "as a comment", "quote the value")
    assert sorted(p.name for p in (tmp_path / "exp" / "a").iterdir()) == ["marker"]


def test_demo_out_with_a_control_character_is_refused_before_anything_is_written(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["demo", "--out", "a\nb", "--steps", "1"])
    assert result.exit_code == 2, result.output
    one_error(result.stderr, "--out a\\x0ab: holds a control character (\\n)")
    assert list(tmp_path.iterdir()) == []
