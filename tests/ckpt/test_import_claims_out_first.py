"""import-hf holds its --out before it reads the model, as export-hf does."""

import pytest

from mfsdp_ckpt.convert import import_hf as import_module
from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.out_lock import OutputBusyError


class _Planned(Exception):
    """Stops the import once planning started: what happens after is not the point."""


def test_out_is_claimed_before_the_source_is_read(tmp_path, monkeypatch):
    """Planning a large model takes minutes; an export into the same --out finishing
    meanwhile was then replaced by `import-hf --overwrite`. It must find --out busy."""
    (tmp_path / "model").mkdir()
    out = tmp_path / "out"
    out.mkdir()  # empty: what import-hf --overwrite may replace
    seen = []

    def plan_while_another_export_starts(*_args, **_kwargs):
        try:
            with claim_output(out, overwrite=True):
                seen.append("claimed")
        except OutputBusyError:
            seen.append("busy")
        raise _Planned

    monkeypatch.setattr(import_module, "plan_model_import", plan_while_another_export_starts)
    with pytest.raises(_Planned):
        import_module.import_hf(tmp_path / "model", out, overwrite=True)
    assert seen == ["busy"]
    assert list(out.iterdir()) == []  # not replaced while the other command held it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out"]  # lock and work dir gone
