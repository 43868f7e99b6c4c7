"""Hugging Face model dirs for the tests that train from one or damage one: a tiny model
`mfsdp train sft` starts from, the edits that damage its files, its weights resharded with
an index, and a safetensors file taken apart for a test to damage its header."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.support.fresh_python import mfsdp


def trainable_model_dir(root: Path) -> tuple[Path, Path]:
    """A Hugging Face model dir `mfsdp train sft` can start from (the tiny tokenizer, a
    Qwen2 of its vocabulary, random weights) and the SFT table to train it on."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from trainer.grpo.synthetic import write_addition_data
    from trainer.tiny import build_tokenizer, tiny_config_kwargs

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        **tiny_config_kwargs(len(tokenizer)),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    tables = write_addition_data(root / "data", seed=0, digits=10)
    return root / "model", tables["sft"]


def train_args(kind: str, *overrides: str) -> list[str]:
    """The arguments of `mfsdp train KIND` on the tiny CPU example with `overrides`."""
    return ["train", kind, "--config", f"examples/{kind}_tiny_cpu.yaml", *overrides]


def train(kind: str, *overrides: str) -> tuple[int, str]:
    """`mfsdp train KIND` on the tiny CPU example with `overrides`: (exit code, stderr)."""
    done = mfsdp(*train_args(kind, *overrides))
    return done.returncode, done.stderr


def train_from_args(model: Path, table: Path, run: Path) -> list[str]:
    """The arguments of `mfsdp train sft` of `model` on `table` for one step into `run`,
    saving nothing."""
    return train_args(
        "sft",
        *(f"model.path={model}", f"data.train_files={table}", f"trainer.run_dir={run}"),
        *("trainer.total_steps=1", "trainer.eval_every=0", "checkpoint.save_every=0"),
    )


def train_from(model: Path, table: Path, run: Path) -> tuple[int, str]:
    """`mfsdp train sft` of `model` on `table` for one step into `run`, saving nothing:
    (exit code, stderr)."""
    done = mfsdp(*train_from_args(model, table, run))
    return done.returncode, done.stderr


def config_edit(**changes: object) -> Callable[[Path], None]:
    """An edit setting `changes` in a model dir's config.json."""

    def edit(model: Path) -> None:
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, **changes}))

    return edit


def tokenizer_config_edit(**changes: object) -> Callable[[Path], None]:
    """An edit setting `changes` in a model dir's tokenizer_config.json."""

    def edit(model: Path) -> None:
        config = json.loads((model / "tokenizer_config.json").read_text())
        (model / "tokenizer_config.json").write_text(json.dumps({**config, **changes}))

    return edit


def drop_chat_template(model: Path) -> None:
    """Remove every chat template the model dir holds, in tokenizer_config.json or beside it."""
    tokenizer_config_edit(chat_template=None)(model)
    for template in model.glob("chat_template.*"):
        template.unlink()


def shard_in_two(model: Path) -> tuple[dict[str, str], list[str]]:
    """model.safetensors split in two shards (no index written); returns the weight map an
    index would hold and the names in the second shard."""
    from safetensors.torch import load_file

    tensors = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2]}
    halves["model-00002-of-00002.safetensors"] = names[1::2]
    for file, part in halves.items():
        save_file({name: tensors[name] for name in part}, str(model / file))
    weight_map = {name: file for file, part in halves.items() for name in part}
    return weight_map, halves["model-00002-of-00002.safetensors"]


def shard_with_index(model: Path) -> None:
    """`model` as two shards and the model.safetensors.index.json that lists them."""
    weight_map, _second = shard_in_two(model)
    index = {"metadata": {}, "weight_map": weight_map}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))


def split_safetensors(path: Path) -> tuple[dict, bytes]:
    """A safetensors file's header, parsed, and the data bytes after it."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]
