"""A model dir whose config.json transformers cannot read, or an empty data file, stops
`mfsdp train --nproc-per-node 2` with one error line: every rank reads the same files and
meets the same error, which each of them printed (two identical lines, exit 1)."""

from __future__ import annotations

import shutil

from tests.support.cli_errors import one_error
from tests.support.model_dirs import config_edit, train


def test_a_damaged_config_json_is_said_once_by_two_ranks(tmp_path, trainable):
    source, table = trainable
    model = shutil.copytree(source, tmp_path / "bad")
    config_edit(layer_types=["full_attention"] * 2, num_hidden_layers=3)(model)
    code, err = train(
        "sft",
        *(
            f"model.path={model}",
            f"data.train_files={table}",
            f"trainer.run_dir={tmp_path / 'run'}",
        ),
        *("trainer.total_steps=1", "trainer.eval_every=0", "checkpoint.save_every=0"),
        *("--nproc-per-node", "2"),
    )
    assert code == 1, err
    assert "launching 2 processes" in err, err  # the ranks met it, not the launcher's check
    one_error(err, f"{model}: config.json that transformers cannot read", "layer_types")


def test_an_empty_data_file_is_said_once_by_two_ranks(tmp_path, trainable):
    """Every rank would read the same table and find it empty: one line, not one per rank;
    the launcher reads its first row before torchrun starts, so it says it, once."""
    source, _ = trainable
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    code, err = train(
        "sft",
        *(f"model.path={source}", f"data.train_files={empty}"),
        f"trainer.run_dir={tmp_path / 'run'}",
        *("trainer.total_steps=1", "trainer.eval_every=0", "checkpoint.save_every=0"),
        *("--nproc-per-node", "2"),
    )
    assert code == 1, err
    assert "launching 2 processes" not in err, err
    one_error(err, str(empty), "no rows")
