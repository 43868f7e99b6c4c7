"""`model.path` may name a Megatron-LM or Megatron-Bridge checkpoint without
`model.hf_config`: the config is derived from its `args` / `run_config.yaml` as
`mfsdp ckpt export-hf` derives it, the tokenizer is Bridge's `iter_N/tokenizer/`, and a
Megatron-LM checkpoint (which keeps no tokenizer) asks for `model.tokenizer` in one line.
The first SFT step from each is the one from the Hugging Face export of the same weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import (
    bridge_model_section,
    mcore_weights,
    megatron_args,
    megatron_run,
    save_dcp,
    train_state,
)
from tests.support.metadata_reads import metadata_reads
from tests.support.sft import SHORT_RUN, first_loss, tiny_config, write_chat_jsonl
from trainer import model_source
from trainer.config import ConfigError
from trainer.model import build_hf_config, load_tokenizer
from trainer.sft import run_sft


def _bridge_dir(root: Path, model, tokenizer_files: Path) -> Path:
    """A Megatron-Bridge run dir of `model` whose tokenizer/ holds `tokenizer_files`."""
    import torch

    run = root / "bridge"
    it = save_dcp({"model": mcore_weights(model)}, run / "iter_0000010")
    torch.save(train_state(10), it / "train_state.pt")
    section = {"model": bridge_model_section(model), "tokenizer": {"tokenizer_model": "/m/q"}}
    (it / "run_config.yaml").write_text(yaml.safe_dump(section))
    (it / "tokenizer").mkdir()
    for file in tokenizer_files.iterdir():  # what save_pretrained of the tokenizer wrote
        if file.name not in ("config.json", "generation_config.json", "model.safetensors"):
            shutil.copy(file, it / "tokenizer" / file.name)
    torch.save(train_state(10), run / "latest_train_state.pt")
    return run


@pytest.fixture(scope="module")
def megatron_runs(tmp_path_factory):
    """A tiny run trained 2 steps, its export, and the same weights as a Megatron-LM and a
    Megatron-Bridge checkpoint."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("megatron")
    data = write_chat_jsonl(root / "train.jsonl", rows=24)
    run_sft(tiny_config(data, root / "run", *SHORT_RUN, "trainer.total_steps=2"))
    export_hf(root / "run", root / "hf", dtype="fp32")
    model = AutoModelForCausalLM.from_pretrained(root / "hf", dtype="float32")
    lm = megatron_run(root, model, megatron_args(model))
    bridge = _bridge_dir(root, model, root / "hf")
    return root, data, lm, bridge


def test_first_step_from_megatron_checkpoints_equals_from_their_export(megatron_runs):
    """Was: model.hf_config was needed for both."""
    root, data, lm, bridge = megatron_runs
    from_export = first_loss(data, root / "b_hf", f"model.path={root / 'hf'}")
    from_lm = first_loss(data, root / "b_lm", f"model.path={lm}", f"model.tokenizer={root / 'hf'}")
    from_bridge = first_loss(data, root / "b_bridge", f"model.path={bridge}")
    assert from_lm == from_export and from_bridge == from_export


def test_a_config_naming_more_tokens_than_the_recorded_rows_trains_on_the_rows(
    megatron_runs, tmp_path, caplog
):
    """Megatron-LM pads its tokenizer's length (Qwen2.5: 151665 tokens in 151680 rows, its
    padded_vocab_size), while the model's config.json names more (151936). Was: refused,
    naming model.overrides.vocab_size=151680 to set by hand. Now the model is built with the
    recorded rows, as export-hf writes them, with a note, and trains as from the export."""
    import json
    import logging

    from transformers import AutoModelForCausalLM

    root, data, _lm, _bridge = megatron_runs
    model = AutoModelForCausalLM.from_pretrained(root / "hf", dtype="float32")
    rows = model.config.vocab_size
    args = megatron_args(model, padded_vocab_size=rows, make_vocab_size_divisible_by=1)
    lm = megatron_run(tmp_path, model, args)
    larger = tmp_path / "larger"
    shutil.copytree(root / "hf", larger)
    config = json.loads((larger / "config.json").read_text())
    (larger / "config.json").write_text(json.dumps({**config, "vocab_size": rows + 64}))
    with caplog.at_level(logging.WARNING, logger="mfsdp.model"):
        loss = first_loss(data, tmp_path / "r", f"model.path={lm}", f"model.hf_config={larger}")
    assert loss == first_loss(data, root / "b_hf_rows", f"model.path={root / 'hf'}")
    [note] = [r.getMessage() for r in caplog.records if r.name == "mfsdp.model"]
    assert note.startswith(f"note: model.hf_config's vocab_size {rows}, not {rows + 64}"), note
    assert "padded_vocab_size" in note, note
    cfg = tiny_config(data, tmp_path / "x", f"model.path={lm}", f"model.hf_config={larger}")
    cfg.model.overrides["vocab_size"] = rows + 64  # the user's own choice is checked as given
    with pytest.raises(ConfigError, match="fewer than the config's vocab_size"):
        load_weights_of(cfg)


def test_a_record_no_family_computes_is_refused_as_export_refuses_it(megatron_runs, tmp_path):
    """export-hf --hf-config refuses a Megatron record no family computes (layernorm 1p:
    the stored norm weights are w - 1); training with that model.hf_config trained another
    model from the same weights."""
    from transformers import AutoModelForCausalLM

    root, data, _lm, _bridge = megatron_runs
    model = AutoModelForCausalLM.from_pretrained(root / "hf", dtype="float32")
    lm = megatron_run(tmp_path, model, megatron_args(model, apply_layernorm_1p=True))
    cfg = tiny_config(data, tmp_path / "x", f"model.path={lm}", f"model.hf_config={root / 'hf'}")
    with pytest.raises(
        ConfigError, match=r"^model.path: .*\[args\]: apply_layernorm_1p.*model.hf_config"
    ):
        load_weights_of(cfg)
    out = tmp_path / "o"
    code, _, err = run_cli("ckpt", "export-hf", lm, "--hf-config", root / "hf", "--out", out)
    assert code != 0 and "layernorm_1p" in err, err


def test_a_config_choosing_another_rope_trains_as_from_a_model_dir(megatron_runs, tmp_path):
    """Another rope_theta (or yarn scaling to extend the context) in model.overrides is the
    user's choice of the model to train, as from a model dir: not refused for differing from
    the record."""
    root, data, lm, _bridge = megatron_runs
    rope = "model.overrides={rope_parameters: {rope_type: default, rope_theta: 1000000.0}}"
    from_lm = first_loss(
        data, tmp_path / "lm", f"model.path={lm}", f"model.hf_config={root / 'hf'}", rope
    )
    assert from_lm == first_loss(data, tmp_path / "hf", f"model.path={root / 'hf'}", rope)


def load_weights_of(cfg) -> None:
    """Build the model `cfg` describes and load its model.path's weights into it."""
    import torch

    from trainer.model import build_model

    config = build_hf_config(cfg.model, load_tokenizer(cfg.model))
    build_model(cfg.model, config, torch.device("cpu"), seed=0)


def test_derived_config_is_the_records(megatron_runs):
    root, data, _lm, bridge = megatron_runs
    cfg = tiny_config(data, root / "x", f"model.path={bridge}").model
    config = build_hf_config(cfg, load_tokenizer(cfg))
    assert type(config).__name__ == "Qwen2Config" and config.num_hidden_layers == 2


def test_megatron_lm_without_a_tokenizer_asks_for_model_tokenizer(megatron_runs):
    root, data, lm, _bridge = megatron_runs
    cfg = tiny_config(data, root / "y", f"model.path={lm}").model
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(cfg)
    message = str(caught.value)
    assert message.startswith(f"model.path: {lm} holds no tokenizer"), message
    assert "set model.tokenizer=DIR" in message and "/models/never-read-tokenizer" in message
    assert "\n" not in message


def test_a_record_no_family_computes_is_one_line(megatron_runs, tmp_path):
    from transformers import AutoModelForCausalLM

    root, data, _lm, _bridge = megatron_runs
    model = AutoModelForCausalLM.from_pretrained(root / "hf", dtype="float32")
    run = megatron_run(tmp_path, model, megatron_args(model, normalization="LayerNorm"))
    cfg = tiny_config(data, tmp_path / "r", f"model.path={run}", f"model.tokenizer={root / 'hf'}")
    with pytest.raises(ConfigError, match=r"^model.path: .*\[args\]: normalization='LayerNorm'"):
        build_hf_config(cfg.model, load_tokenizer(cfg.model))


def test_a_bridge_tokenizer_linking_out_is_refused(megatron_runs, tmp_path):
    _root, data, _lm, bridge = megatron_runs
    copy = tmp_path / "bridge"
    shutil.copytree(bridge, copy, symlinks=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("users' secret")
    (copy / "iter_0000010" / "tokenizer" / "vocab.txt").symlink_to(secret)
    cfg = tiny_config(data, tmp_path / "r", f"model.path={copy}").model
    with pytest.raises(CheckpointFileError, match=r"vocab.txt: resolves outside"):
        load_tokenizer(cfg)  # export's error for the same file, and its exit code (1)


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_cli_megatron_lm_without_a_tokenizer_exits_2_before_launching(
    megatron_runs, tmp_path, command
):
    from click.testing import CliRunner

    from cli.main import app
    from tests.support.paths import REPO

    _root, _data, lm, _bridge = megatron_runs
    config = REPO / "examples" / f"{command}_gsm8k_qwen.yaml"
    result = CliRunner().invoke(
        app,
        [
            "train",
            command,
            "--config",
            str(config),
            f"model.path={lm}",
            f"trainer.run_dir={tmp_path / 'run'}",
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: model.path: {lm} holds no tokenizer"), line
    assert "set model.tokenizer=DIR" in line


def test_a_run_reads_the_checkpoints_metadata_once_to_derive_and_once_to_load(
    megatron_runs, monkeypatch
):
    """The tokenizer, the config, the model and the saved generation config each resolve
    model.path; one of millions of chunks takes minutes to read, and was read four times."""
    root, data, _lm, bridge = megatron_runs
    monkeypatch.setattr(model_source, "_derived", {})  # what earlier tests derived: forgotten
    reads = metadata_reads(monkeypatch)
    first_loss(data, root / "b_reads", f"model.path={bridge}")
    assert sum(str(bridge) in read for read in reads) == 2, reads
