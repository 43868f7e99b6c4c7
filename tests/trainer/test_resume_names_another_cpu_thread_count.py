"""A CPU run resumed at another intra-op thread count than its step was trained with says so.

With dropout on, a CPU step's results depend on torch's thread count, and mfsdp picks that
count at each launch from the machine's load unless OMP_NUM_THREADS is set: a step trained
at 2 threads and resumed at 1 went on without a word, and its steps differed from an
uninterrupted run's (about 1e-7) where the docs promised bit for bit. Each step's manifest
now records the count of every process (`info.cpu_threads`, by rank), and the resume names
both counts and the setting that gives the step's threads again, once, on rank 0. A step
saved before the count was recorded, a resume at the same count, and a GPU run say nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.ckpt_edits import edit_manifest
from tests.support.distributed import run_distributed
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft
from trainer.thread_record import THREADS_INFO_KEY, thread_change_warning, threads_of_every_rank

SETTINGS = (
    "model.overrides={attention_dropout: 0.2}",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "trainer.total_steps=3",
    "trainer.device=cpu",
)


@pytest.fixture(autouse=True)
def _threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sets torch's count as a launch would; the process's own is restored after.
    Neither variable set: the remedy names OMP_NUM_THREADS."""
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _train(data: Path, run: Path, threads: int, *overrides: str) -> None:
    torch.set_num_threads(threads)
    run_sft(tiny_config(data, run, *SETTINGS, *overrides))


def _recorded(step_dir: Path) -> object:
    info = json.loads((step_dir / layout.MANIFEST_FILE).read_text())["info"]
    return info.get(THREADS_INFO_KEY, "absent")


def _thread_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "CPU thread(s)" in line]


def test_a_step_trained_at_2_threads_resumed_at_1_says_so_once(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    _train(data, run, 2, "trainer.stop_at_step=1")
    assert _recorded(run / "global_step_1") == [2]
    capsys.readouterr()
    _train(data, run, 1)
    lines = _thread_lines(capsys.readouterr().err)
    assert lines == [
        f"[sft] warning: {run / 'global_step_1' / layout.MANIFEST_FILE}: step 1 was trained"
        " with 2 CPU thread(s) per process, this run has 1: resumed steps match an"
        " uninterrupted run bit for bit only at the same thread count (CPU results with"
        " dropout depend on it; the count is the one set, else mfsdp's choice from the"
        " machine's load); OMP_NUM_THREADS=2 gives the step's threads again"
    ]
    assert _recorded(run / "global_step_3") == [1]  # the steps it saves record its own count


def test_a_resume_at_the_count_the_step_records_says_nothing(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    _train(data, run, 1, "trainer.stop_at_step=1")
    capsys.readouterr()
    _train(data, run, 1)
    assert _thread_lines(capsys.readouterr().err) == []
    assert _recorded(run / "global_step_3") == [1]


def test_a_step_saved_before_the_count_was_recorded_says_nothing(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    _train(data, run, 2, "trainer.stop_at_step=1")
    edit_manifest(run / "global_step_1", lambda manifest: manifest["info"].pop(THREADS_INFO_KEY))
    capsys.readouterr()
    _train(data, run, 1)
    assert _thread_lines(capsys.readouterr().err) == []
    assert _recorded(run / "global_step_3") == [1]


def test_a_gpu_run_is_not_told_of_cpu_threads(tmp_path):
    """Its steps compute on the GPU: the same step, counts differing, is named to a CPU run
    only."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    _train(data, run, 2, "trainer.stop_at_step=1")
    found = resolve_checkpoint(run / "global_step_1")
    assert thread_change_warning(found, [1], torch.device("cpu")) is not None
    assert thread_change_warning(found, [1], torch.device("cuda", 0)) is None


def _gather(rank: int, world_size: int, out: Path) -> None:
    torch.set_num_threads(rank + 1)  # one machine's launcher choosing 1, another's 2
    (out / f"rank{rank}.json").write_text(json.dumps(threads_of_every_rank(torch.device("cpu"))))


def test_every_rank_knows_each_ranks_count(tmp_path):
    run_distributed(_gather, 2, tmp_path)
    assert [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)] == [[1, 2]] * 2


def test_counts_that_differ_by_rank_are_named_by_rank(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    _train(data, run, 1, "trainer.stop_at_step=1")
    step = run / "global_step_1"
    edit_manifest(step, lambda manifest: manifest["info"].update({THREADS_INFO_KEY: [2, 1]}))
    found = resolve_checkpoint(step)
    line = thread_change_warning(found, [1, 1], torch.device("cpu"))
    assert line is not None
    assert "trained with 2, 1 (by rank) CPU thread(s) per process, this run has 1:" in line
    assert line.endswith(
        "; OMP_NUM_THREADS set on each machine to the count its ranks recorded gives them again"
    )
    assert thread_change_warning(found, [1], torch.device("cpu")) is None  # another world size
