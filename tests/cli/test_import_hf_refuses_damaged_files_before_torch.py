"""import-hf refuses a damaged model dir from the files alone, before torch or transformers
loads (seconds each): a truncated safetensors file, a header length past the file's end,
a header that is no JSON, data offsets past the end, an index naming a missing shard, a
config.json of a family import-hf does not read, an --out holding other files. Each is
checked with the standard library; the order is held here by what one interpreter that
met every refusal had imported when it exited."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from tests.reliability.hf_model import hf_model
from tests.support.fresh_python import modules_after
from tests.support.model_dirs import split_safetensors

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"

# each command of argv[2] (a JSON list) run by mfsdp's main; the exit codes into argv[3]
EACH_COMMAND = """
from cli.main import main
commands, results = json.loads(sys.argv[2]), sys.argv[3]
codes = []
for args in commands:
    sys.argv = ['mfsdp', *args]
    try:
        main()
    except SystemExit as done:
        codes.append(done.code)
open(results, 'w').write(json.dumps(codes))
"""


def _rewrite(model: Path, header: dict, data: bytes, length: int | None = None) -> None:
    raw = json.dumps(header).encode()
    size = len(raw) if length is None else length
    (model / WEIGHTS).write_bytes(struct.pack("<Q", size) + raw + data)


def _truncated(model: Path) -> None:
    raw = (model / WEIGHTS).read_bytes()
    (model / WEIGHTS).write_bytes(raw[: len(raw) // 2])


def _header_past_the_end(model: Path) -> None:
    header, data = split_safetensors(model / WEIGHTS)
    _rewrite(model, header, data, length=1 << 40)


def _header_not_json(model: Path) -> None:
    header, data = split_safetensors(model / WEIGHTS)
    raw = json.dumps(header).encode()
    (model / WEIGHTS).write_bytes(struct.pack("<Q", len(raw)) + b"x" + raw[1:] + data)


def _offsets_past_the_end(model: Path) -> None:
    header, data = split_safetensors(model / WEIGHTS)
    name = next(name for name in header if name != "__metadata__")
    header[name]["data_offsets"][1] += 1 << 20
    _rewrite(model, header, data)


def _index_names_a_missing_shard(model: Path) -> None:
    header, _data = split_safetensors(model / WEIGHTS)
    names = sorted(name for name in header if name != "__metadata__")
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    (model / WEIGHTS).rename(model / first)
    weight_map = {name: second if name == names[0] else first for name in names}
    (model / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _unknown_family(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "gpt_neox"}))


DAMAGE: dict[str, tuple[Callable[[Path], None], int]] = {
    "truncated": (_truncated, 1),
    "header_past_the_end": (_header_past_the_end, 1),
    "header_not_json": (_header_not_json, 1),
    "offsets_past_the_end": (_offsets_past_the_end, 1),
    "index_names_a_missing_shard": (_index_names_a_missing_shard, 1),
    "unknown_family": (_unknown_family, 2),
}


def test_damaged_model_dirs_are_refused_before_torch_loads(tmp_path):
    sound = hf_model(tmp_path)
    commands, expected = [], []
    for name, (damage, code) in DAMAGE.items():
        model = shutil.copytree(sound, tmp_path / name)
        damage(model)
        commands.append(["ckpt", "import-hf", str(model), "--out", str(tmp_path / f"{name}_out")])
        expected.append(code)
    taken = tmp_path / "taken"
    (taken / "theirs").mkdir(parents=True)
    commands.append(["ckpt", "import-hf", str(sound), "--out", str(taken)])
    expected.append(2)
    results = tmp_path / "codes.json"
    loaded = modules_after(
        EACH_COMMAND,
        json.dumps(commands),
        str(results),
        roots=("torch", "transformers", "safetensors"),
    )
    assert json.loads(results.read_text()) == expected
    assert loaded == []
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith("_out")]
