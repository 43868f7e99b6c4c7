"""import-hf reports its progress while it reads the weights, not only once every tensor was
read: each is read for the NaN/Inf check (or cast) before its bytes are queued, and a
Qwen3-MoE of 62,563 tensors took 51 s with no bar moving and no plain line, the one report
coming from the writer's finish at 100%."""

from __future__ import annotations

from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.hf_model_files import saved_hf_model


def test_progress_is_heard_per_tensor_read(tmp_path):
    model = saved_hf_model(tmp_path, "qwen2", tied=False)
    heard: list[tuple[int, int]] = []

    def progress(tensors: int, total: int, _nbytes: int, _total_bytes: int) -> None:
        heard.append((tensors, total))

    import_hf(model, tmp_path / "out", layout_name="hf", progress=progress)
    total = heard[-1][1]
    assert heard[-1] == (total, total)
    assert total > 10
    assert len(heard) >= total  # one report per tensor at least, the last one whole
    assert [done for done, _ in heard] == sorted(done for done, _ in heard)
