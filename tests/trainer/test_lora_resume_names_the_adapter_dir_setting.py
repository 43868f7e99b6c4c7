"""A resume refused for an adapter rank or alpha that this run takes from its adapter dir
(`model.lora_adapter_path`) names that file and field and what resumes the step (the
adapter dir the run started from, or none and the trained values as model.* keys). It
named model.lora_rank / model.lora_alpha and said to set it back, though the run's own note
said that key is not used: no value of it cleared the refusal. That note is said once, by
the main rank, not once per rank."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tests.support.sft import SHORT_RUN, launch_sft, tiny_config, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG, TARGETS, WEIGHTS, _edited
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

RESUMABLE = (
    *(o for o in SHORT_RUN if not o.startswith("checkpoint.resume=")),
    "checkpoint.save_every=1",
)
# What the refusal says resumes the step without an adapter dir: the fixture's r, alpha, targets
TRAINED = "model.lora_rank=2, model.lora_alpha=4 and model.target_modules=[q_proj, v_proj]"

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter, r 2, alpha 4


@pytest.fixture
def started(adapter, tmp_path) -> tuple[Path, Path]:
    """(data, run dir) of a run whose step 1 trained from the adapter dir."""
    data, run = write_chat_jsonl(tmp_path / "train.jsonl", rows=8), tmp_path / "run"
    given = (f"model.lora_adapter_path={adapter}", "trainer.total_steps=1")
    assert run_sft(tiny_config(data, run, *RESUMABLE, *given)).final_step == 1
    return data, run


def _lower_rank(adapter: Path, tmp_path: Path) -> Path:
    """The adapter cut to rank 1: its config's r and its tensors agree, so it loads."""
    copy = Path(shutil.copytree(adapter, tmp_path / "rank1"))
    tensors = load_file(str(copy / WEIGHTS))
    cut = {k: (v[:1] if ".lora_A." in k else v[:, :1]).contiguous() for k, v in tensors.items()}
    save_file(cut, str(copy / WEIGHTS))
    config = json.loads((copy / CONFIG).read_text())
    (copy / CONFIG).write_text(json.dumps({**config, "r": 1}))
    return copy


def _refused(data: Path, run: Path, *overrides: str) -> str:
    with pytest.raises(ResumeMismatchError) as caught:
        run_sft(tiny_config(data, run, *RESUMABLE, *overrides, "trainer.total_steps=2"))
    return str(caught.value)


def _remedy(adapter: Path, run: Path) -> str:
    return (
        f"point model.lora_adapter_path at the adapter dir the run started from"
        f" ({run / 'config.yaml'} records model.lora_adapter_path={adapter}), or drop it and"
        f" set {TRAINED}, the trained values (or a new trainer.run_dir to start over)"
    )


def test_an_alpha_from_the_adapter_dir_is_named_as_that_files(adapter, started, tmp_path):
    data, run = started
    other = _edited(adapter, tmp_path, lora_alpha=8)
    message = _refused(data, run, f"model.lora_adapter_path={other}", "model.lora_alpha=4")
    assert message == (
        f"{run / 'global_step_1' / 'manifest.json'}: the adapter was trained with lora_alpha 4,"
        f" this run has lora_alpha 8 from {other / CONFIG} (model.lora_adapter_path): its"
        f" scale would change; {_remedy(adapter, run)}"
    )
    assert "set it back" not in message


def test_a_rank_from_the_adapter_dir_is_named_as_that_files(adapter, started, tmp_path):
    data, run = started
    other = _lower_rank(adapter, tmp_path)
    message = _refused(data, run, f"model.lora_adapter_path={other}", "model.lora_rank=2")
    assert message == (
        f"{run / 'global_step_1' / 'manifest.json'}: checkpoint was trained with r 2, this run"
        f" has r 1 from {other / CONFIG} (model.lora_adapter_path): {_remedy(adapter, run)}"
    )


def test_each_way_the_refusal_names_resumes_the_step(adapter, started):
    data, run = started
    fresh = (
        "model.lora_rank=2",
        "model.lora_alpha=4",
        f"model.target_modules={TARGETS}",
        "trainer.total_steps=2",
    )
    result = run_sft(tiny_config(data, run, *RESUMABLE, *fresh))
    assert (result.resumed_from, result.final_step) == (1, 2)
    again = (f"model.lora_adapter_path={adapter}", "trainer.total_steps=3")
    result = run_sft(tiny_config(data, run, *RESUMABLE, *again))
    assert (result.resumed_from, result.final_step) == (2, 3)


def test_the_note_on_an_unused_key_is_said_once_whatever_the_ranks(adapter, tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    given = (f"model.lora_adapter_path={adapter}", "model.lora_rank=8", "trainer.total_steps=1")
    _, stderr = launch_sft(data, tmp_path / "run", *RESUMABLE, *given, nproc=2)
    note = f"note: model.lora_rank=8 is not used: {adapter / CONFIG} has r 2"
    assert stderr.count(note) == 1, stderr[-3000:]
