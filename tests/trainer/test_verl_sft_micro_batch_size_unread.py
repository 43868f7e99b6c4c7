"""verl's SFT `data.micro_batch_size` is not mfsdp's `data.micro_batch_size`.

verl's SFT trainers have not read `data.micro_batch_size` (a deprecated global count) since
verl f2a76acd9: `micro_batch_size_per_gpu` alone forms their micro-batches, which a converted
`fsdp_sft_trainer` run weighs one by one (`data.loss_normalization=micro_batch`). Carried
over as mfsdp's key of the same spelling, `data.micro_batch_size=8` beside
`micro_batch_size_per_gpu=2` trained micro-batches of 8 rows, whichever of the two came last,
under a note saying 2: a loss verl never computes. It is ignored with a note, in a script
(`+` or not, either trainer) and in a YAML, and verl's default per-GPU count stands where the
source gives none. `mfsdp train`'s own `data.micro_batch_size` is unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainer.config import SFTConfig, load_config
from trainer.verl_import import Conversion, convert_verl

KEYS = "data.train_files=/d/t.parquet model.partial_pretrain=/m data.train_batch_size=16"
IGNORED = "verl's data.micro_batch_size is ignored: "


def script(tmp_path: Path, module: str, keys: str) -> Conversion:
    path = tmp_path / "run.sh"
    path.write_text(f"torchrun --nproc_per_node=1 -m {module} {KEYS} {keys}\n")
    return convert_verl(path)


def ignored_notes(conversion: Conversion) -> list[str]:
    return [note for note in conversion.notes if note.startswith(IGNORED)]


@pytest.mark.parametrize(
    "keys",
    [
        "data.micro_batch_size_per_gpu=2 data.micro_batch_size=8",
        "data.micro_batch_size=8 data.micro_batch_size_per_gpu=2",
        "data.micro_batch_size_per_gpu=2 +data.micro_batch_size=8",
    ],
)
def test_the_per_gpu_count_alone_sets_the_micro_batch_size(tmp_path, keys):
    conversion = script(tmp_path, "verl.trainer.fsdp_sft_trainer", keys)
    assert conversion.tree["data"]["micro_batch_size"] == 2
    assert len(ignored_notes(conversion)) == 1
    assert not [item for item in conversion.dropped if "micro_batch_size" in item]


@pytest.mark.parametrize("module", ["verl.trainer.fsdp_sft_trainer", "verl.trainer.sft_trainer"])
def test_the_key_alone_leaves_verls_default_per_gpu_count(tmp_path, module):
    conversion = script(tmp_path, module, "+data.micro_batch_size=16")
    assert conversion.tree["data"]["micro_batch_size"] == 4  # verl's micro_batch_size_per_gpu
    assert ignored_notes(conversion)
    assert any(
        note.startswith("data.micro_batch_size=4: verl's default") for note in conversion.notes
    )


def test_a_verl_yaml_value_is_ignored_too(tmp_path):
    path = tmp_path / "verl.yaml"
    tree = {
        "data": {"train_files": "/d/t.parquet", "train_batch_size": 16, "micro_batch_size": 8},
        "model": {"partial_pretrain": "/m"},
    }
    path.write_text(yaml.safe_dump(tree))
    conversion = convert_verl(path, "sft")
    assert conversion.tree["data"]["micro_batch_size"] == 4
    assert ignored_notes(conversion)


def test_mfsdp_trains_its_own_key_as_given(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({"data": {"micro_batch_size": 8}}))
    assert load_config(SFTConfig, path).data.micro_batch_size == 8
    assert load_config(SFTConfig, path, ["data.micro_batch_size=3"]).data.micro_batch_size == 3
