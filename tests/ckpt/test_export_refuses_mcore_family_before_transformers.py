"""A Megatron-core checkpoint exported with the config.json of a family no mcore name table
converts (deepseek_v3, gemma2, phi3, ...) is refused from its model_type, read as JSON,
before transformers is imported: the refusal used to come only after transformers had built
the config (10-30 s on 2 cores, longer than a whole export of a tiny model). A config that
does go through transformers is said by the path the user gave, not the export's hidden
copy of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.export_source import load_copied_config
from mfsdp_ckpt.convert.hf_config import reporting_config_checks
from tests.support.fresh_python import modules_after
from tests.support.paths import FIXTURES

LLAMA = FIXTURES / "mcore" / "llama"  # a Megatron-core DCP of a tiny llama, and its config

# in a fresh interpreter: export a checkpoint under --hf-config; exits 0 only when that is
# refused as a usage error
_EXPORT_REFUSED = """
from mfsdp_ckpt.convert.export_errors import ExportUsageError
from mfsdp_ckpt.convert.export_hf import export_hf
try:
    export_hf(sys.argv[2], sys.argv[3], hf_config=sys.argv[4])
except ExportUsageError:
    pass
else:
    raise SystemExit('not refused')
"""


def _config_of(family: str, directory: Path) -> Path:
    """LLAMA's config.json with model_type `family`, in `directory`."""
    directory.mkdir(parents=True)
    data = json.loads((LLAMA / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**data, "model_type": family}))
    return directory


def test_family_without_mcore_table_is_refused_before_transformers(tmp_path):
    given = _config_of("deepseek_v3", tmp_path / "deepseek")
    out = tmp_path / "hf"
    args = (str(LLAMA / "dist_ckpt"), str(out), str(given))
    assert modules_after(_EXPORT_REFUSED, *args, roots=("transformers",)) == []
    assert not out.exists()


@pytest.mark.parametrize("family", ["deepseek_v3", "gemma2"])
def test_refusal_names_the_checkpoint_and_the_family(tmp_path, family):
    from mfsdp_ckpt.convert.export_errors import ExportUsageError
    from mfsdp_ckpt.convert.export_hf import export_hf

    given = _config_of(family, tmp_path / family)
    ckpt = LLAMA / "dist_ckpt"
    with pytest.raises(ExportUsageError) as refused:
        export_hf(ckpt, tmp_path / "hf", hf_config=given)
    assert str(refused.value).startswith(
        f"{ckpt}: model family {family!r} has no mcore name table (known: ["
    )
    assert ".export-tmp" not in str(refused.value)
    assert not (tmp_path / "hf").exists()


def test_config_read_through_transformers_is_said_by_the_path_given(tmp_path):
    given = _config_of("gemma2", tmp_path / "given")
    copy = tmp_path / ".hf.export-tmp-1" / "config.json"
    copy.parent.mkdir()
    shutil.copy(given / "config.json", copy)
    said: list[str] = []
    with reporting_config_checks(said.append):
        config = load_copied_config(copy, str(given))
    assert said == [str(given / "config.json")]
    assert config.model_type == "gemma2"
