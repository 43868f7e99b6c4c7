"""JSON a user hands over is parsed only as deep and as crowded as what reads it can take:

* nesting: Python's json parsed a list ~970 deep, and the manifest's digest of itself
  (`json.dumps` of its fields) then failed a level deeper with a RecursionError, a traceback
  for `mfsdp ckpt validate`. Every depth is now one line, whichever reader parses it;
* containers: a safetensors header of 10M empty arrays (30 MB, under the header's size cap)
  took over a gigabyte to parse, and so would an index; each reader bounds how many objects
  and arrays it parses, with a default for those that name no bound of their own.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from mfsdp_ckpt.format.file_hash import hash_bytes
from mfsdp_ckpt.format.manifest import Manifest, ManifestError, read_manifest
from mfsdp_ckpt.storage import safetensors_source
from mfsdp_ckpt.storage.safetensors_source import SafetensorsError, index_weight_map, read_header
from mfsdp_ckpt.storage.unique_json import (
    DEFAULT_MAX_CONTAINERS,
    MAX_JSON_DEPTH,
    NestingError,
    loads_unique,
    parse_json,
    read_json_file,
)


class Refused(ValueError):
    pass


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _manifest_text(info: str) -> str:
    """A sealed manifest's text whose `info` holds `"x": <info>` after it was sealed (so the
    digest no longer matches: the parse, not the data, is what is tested)."""
    manifest = Manifest(
        step=1,
        world_size=1,
        strategy="megatron_fsdp",
        contents=["model"],
        files={"a.distcp": hash_bytes(b"a")},
        info={"run": "r"},
    )
    return manifest.to_json().replace('"info": {', f'"info": {{"x": {info}, ', 1)


def test_json_nested_to_the_depth_cap_reads():
    assert loads_unique(_nested(MAX_JSON_DEPTH)) is not None
    assert loads_unique('{"a": ' * (MAX_JSON_DEPTH - 1) + "{}" + "}" * (MAX_JSON_DEPTH - 1))


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 500, 974, 990, 5000, 100_000])
def test_json_nested_past_the_depth_cap_is_a_value_error(depth):
    with pytest.raises(NestingError, match="nested too deeply"):
        loads_unique(_nested(depth))
    with pytest.raises(Refused, match=r"^f\.json: not valid JSON \(nested too deeply\)$"):
        parse_json(_nested(depth), "f.json", Refused)


def test_a_manifest_nested_at_any_depth_is_one_manifest_error():
    """Every depth from shallow to past the parser's own limit: the window where json read
    it and the digest's re-encoding did not (a RecursionError) depends on the stack's depth
    when it is read, so all of them are tried."""
    messages = {}
    for depth in range(1, 1200):
        with pytest.raises(ManifestError) as caught:
            Manifest.from_json(_manifest_text(_nested(depth)), "m.json")
        messages[depth] = str(caught.value)
    assert all(m.startswith("m.json: ") and "\n" not in m for m in messages.values())
    deep = {m for depth, m in messages.items() if depth > MAX_JSON_DEPTH}
    assert deep == {"m.json: not valid JSON (nested too deeply)"}


def test_read_manifest_names_the_file_of_a_deep_manifest(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(_manifest_text(_nested(974)))
    with pytest.raises(
        ManifestError, match=r"manifest\.json: not valid JSON \(nested too deeply\)"
    ):
        read_manifest(path)


def test_json_holding_more_containers_than_the_default_is_not_parsed(tmp_path):
    text = "[" + "[]," * DEFAULT_MAX_CONTAINERS + "[]]"
    with pytest.raises(Refused, match=f"objects and arrays than the {DEFAULT_MAX_CONTAINERS}"):
        parse_json(text, "f.json", Refused)
    path = tmp_path / "tokenizer_config.json"
    path.write_text(text)
    with pytest.raises(Refused, match=r"tokenizer_config\.json: .* not parsed"):
        read_json_file(path, 64 << 20, Refused)
    assert len(parse_json(text, "f.json", Refused, DEFAULT_MAX_CONTAINERS + 2)) == (
        DEFAULT_MAX_CONTAINERS + 1
    )


def _safetensors(path: Path, header: str) -> Path:
    data = header.encode()
    path.write_bytes(struct.pack("<Q", len(data)) + data)
    return path


def test_a_header_of_more_containers_than_any_model_has_is_not_parsed(tmp_path):
    arrays = "[" + "[]," * safetensors_source.MAX_HEADER_CONTAINERS + "[]]"
    file = _safetensors(tmp_path / "model.safetensors", f'{{"__x": {arrays}}}')
    with pytest.raises(SafetensorsError) as caught:
        read_header(file, "model.safetensors")
    assert str(caught.value).startswith(f"{file}: header: ")
    assert f"than the {safetensors_source.MAX_HEADER_CONTAINERS} this file may hold" in str(
        caught.value
    )


def test_the_header_cap_holds_three_containers_per_tensor_of_the_largest_header():
    most_tensors = safetensors_source.MAX_HEADER_BYTES // 100
    assert 3 * most_tensors + 2 <= safetensors_source.MAX_HEADER_CONTAINERS


def test_a_deep_header_is_one_line(tmp_path):
    file = _safetensors(tmp_path / "model.safetensors", f'{{"__x": {_nested(974)}}}')
    with pytest.raises(SafetensorsError, match=r"header: not valid JSON \(nested too deeply\)"):
        read_header(file, "model.safetensors")


def _index(tmp_path: Path, text: str) -> Path:
    (tmp_path / "model.safetensors.index.json").write_text(text)
    return tmp_path


def test_an_index_of_many_containers_is_not_parsed(tmp_path):
    arrays = "[" + "[]," * safetensors_source.MAX_INDEX_CONTAINERS + "[]]"
    model = _index(tmp_path, f'{{"metadata": {{"x": {arrays}}}, "weight_map": {{}}}}')
    with pytest.raises(SafetensorsError) as caught:
        index_weight_map(model)
    message = str(caught.value)
    assert message.startswith(f"{model / 'model.safetensors.index.json'}: ")
    assert "more JSON objects and arrays" in message


def test_an_index_of_many_tensors_is_three_containers_and_reads(tmp_path):
    names = {f"model.layers.{i}.mlp.experts.{i}.weight": "a.safetensors" for i in range(100_000)}
    model = _index(tmp_path, json.dumps({"metadata": {"total_size": 8}, "weight_map": names}))
    assert index_weight_map(model) == names


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[1, 2]", "expected a JSON object, found list"),
        ('{"metadata": {}}', "weight_map must map names to file names"),
        ('{"weight_map": {"a": 1}}', "weight_map must map names to file names"),
        ('{"weight_map": {}, "weight_map": {}}', "key 'weight_map' appears twice"),
    ],
)
def test_an_index_that_is_no_index_is_one_line_naming_it(tmp_path, text, words):
    model = _index(tmp_path, text)
    with pytest.raises(SafetensorsError) as caught:
        index_weight_map(model)
    assert str(caught.value).startswith(str(model / "model.safetensors.index.json"))
    assert words in str(caught.value)
