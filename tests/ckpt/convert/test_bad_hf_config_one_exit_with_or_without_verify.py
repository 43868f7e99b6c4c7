"""The same bad --hf-config gets the same answer with or without --verify: exit 2 naming
its config.json. A config.json whose layer_types is not one entry per layer exited 1
naming the checkpoint without --verify (the mcore window check met it), and 2 naming the
config with it (transformers' own check, which --verify runs first, met it)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.ckpt.convert.test_attention_window import _import, _qwen
from tests.support.cli_errors import one_error


@pytest.fixture(scope="module")
def mcore_and_bad_config(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_hf_config")
    source = _qwen(root, "qwen2")
    assert _import(source, root / "ckpt").exit_code == 0
    config = json.loads((source / "config.json").read_text())
    config["layer_types"] = config["layer_types"][:-1]  # one entry short
    bad = root / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps(config))
    return root / "ckpt", bad


@pytest.mark.parametrize("verify", [[], ["--verify"]], ids=["plain", "verify"])
def test_exit_2_naming_the_config(mcore_and_bad_config, tmp_path, verify):
    ckpt, bad = mcore_and_bad_config
    args = ["ckpt", "export-hf", str(ckpt), "--hf-config", str(bad), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*args, "--dtype", "fp32", *verify])
    assert result.exit_code == 2, result.output
    line = one_error(result.output, "layer_types")
    assert line.startswith(f"error: {bad / 'config.json'}: "), line


def test_validate_deep_refuses_the_config_before_reading_values(mcore_and_bad_config, monkeypatch):
    """validate --deep read every byte (minutes) before saying what plain validate says in
    seconds: the config given is refused, and the values are not read."""
    from mfsdp_ckpt.check import validate

    ckpt, bad = mcore_and_bad_config
    read: list[object] = []
    real = validate.check_values
    monkeypatch.setattr(validate, "check_values", lambda *a, **k: read.append(a) or real(*a, **k))
    args = ["ckpt", "validate", "--deep", str(ckpt), "--hf-config", str(bad)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert f"error: {bad / 'config.json'}: " in result.output, result.output
    assert validate.DEEP_SKIPPED in result.output, result.output
    assert read == []
    good = CliRunner().invoke(app, ["ckpt", "validate", "--deep", str(ckpt)])
    assert good.exit_code == 0, good.output
    assert read  # without the bad config the values are read
