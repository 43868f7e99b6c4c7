"""Machines of one `--nnodes` run given one config whose paths hold other contents on each
machine, two torchrun agents on this machine as two "nodes", each in its own working dir:
a relative `data.train_files` naming 32 rows on one and 16 others on the other trained each
rank on its own rows with exit 0 (or hung where the row counts made other step counts).
Now the tokenizer, the model config and each split's rows are compared once read, and a
difference is refused on both nodes, exit 2, in one line naming the key and each machine
by its `--node-rank`, before any step."""

import re
import sys
from pathlib import Path

import pytest

from tests.cli.test_multinode_agreement import error_lines, two_nodes
from tests.support.grpo import write_rl_rows
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from trainer.tiny import build_tokenizer


def homes(tmp_path: Path) -> list[Path]:
    made = [tmp_path / "node0", tmp_path / "node1"]
    for home in made:
        home.mkdir()
    return made


def refused(ended: list[tuple[int, str]], key: str, what: str) -> list[str]:
    """Each node's one error line, asserted to refuse `key` for `what` read differently;
    returned for the values each machine read."""
    lines = []
    for code, stderr in ended:
        assert code == 2, stderr[-3000:]
        (line,) = error_lines(stderr)
        assert f"{key}: the machines of this run read different {what} through it (" in line
        assert "give every machine the same files" in line
        lines.append(line)
    return lines


def read_by(line: str, node_rank: int) -> str:
    """What the line says machine `--node-rank node_rank` read."""
    machine = rf"machine --node-rank {node_rank} \(host [^)]+\)"
    found = re.search(rf"{machine} read ([^;]*?\(digest [0-9a-f]{{12}}\))", line)
    assert found, line
    return found.group(1)


@pytest.mark.slow
def test_other_rows_at_one_relative_path_are_refused_before_any_step(tmp_path):
    nodes = homes(tmp_path)
    write_chat_jsonl(nodes[0] / "data" / "train.jsonl", rows=32)
    write_chat_jsonl(nodes[1] / "data" / "train.jsonl", rows=16, seed=1)
    run = tmp_path / "run"
    ended = two_nodes("data/train.jsonl", [(home, [str(run)]) for home in nodes])
    for line in refused(ended, "data.train_files", "data"):
        assert re.fullmatch(r"32 rows \(digest [0-9a-f]{12}\)", read_by(line, 0)), line
        assert re.fullmatch(r"16 rows \(digest [0-9a-f]{12}\)", read_by(line, 1)), line
    assert not (run / "metrics.jsonl").exists()


@pytest.mark.slow
def test_another_tokenizer_at_one_relative_path_is_refused_before_any_step(tmp_path):
    """The tokenizer is compared before the rows it tokenizes: the line names it."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    nodes = homes(tmp_path)
    tokenizers = [build_tokenizer(), build_tokenizer(vocab_size=300)]
    for home, tokenizer in zip(nodes, tokenizers):
        tokenizer.save_pretrained(home / "tok")
    run = tmp_path / "run"
    ended = two_nodes(data, [(home, [str(run), "model.tokenizer=tok"]) for home in nodes])
    for line in refused(ended, "model.tokenizer", "tokenizers"):
        for node, tokenizer in enumerate(tokenizers):
            assert read_by(line, node).startswith(f"a tokenizer of {len(tokenizer)} tokens ("), line
    assert not (run / "metrics.jsonl").exists()


def grpo_command(data, run_dir, *launch: str) -> list[str]:
    """A tiny GRPO run on CPU training on `data`; the test's overrides follow."""
    return [
        sys.executable,
        "-m",
        "cli.train",
        "grpo",
        "--config",
        str(REPO / "examples" / "grpo_tiny_cpu.yaml"),
        *launch,
        "--json",
        f"data.train_files={data}",
        f"trainer.run_dir={run_dir}",
        "trainer.total_steps=2",
        "trainer.progress_bar=false",
    ]


@pytest.mark.slow
def test_grpo_other_validation_rows_at_one_relative_path_are_refused(tmp_path):
    """As many rows on each machine, other prompts: the digest tells them apart."""
    data = write_rl_rows(tmp_path / "train.jsonl", rows=8)
    nodes = homes(tmp_path)
    write_rl_rows(nodes[0] / "val.jsonl", rows=4)
    write_rl_rows(nodes[1] / "val.jsonl", rows=4, prefix="Quick: ")
    run = tmp_path / "run"
    ended = two_nodes(
        data,
        [(home, [str(run), "data.val_files=val.jsonl"]) for home in nodes],
        command=grpo_command,
    )
    for line in refused(ended, "data.val_files", "data"):
        reads = [read_by(line, node) for node in (0, 1)]
        assert reads[0] != reads[1] and all(r.startswith("4 rows (digest ") for r in reads)
    assert not (run / "metrics.jsonl").exists()
