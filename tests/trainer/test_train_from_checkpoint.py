"""`model.path` takes any checkpoint export-hf reads: training that starts from a checkpoint
(ours, an mcore import with `model.hf_config`, our-layout import) takes the same first step
as training that starts from the checkpoint's Hugging Face export; a path that is not there
fails in one line, exit 2, before transformers (and any hub) sees it."""

import re

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.metadata_reads import metadata_reads
from tests.support.paths import REPO
from tests.support.sft import SHORT_RUN, first_loss, tiny_config, write_chat_jsonl
from trainer.config import ConfigError
from trainer.model import build_hf_config, load_tokenizer
from trainer.sft import run_sft


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run trained 2 steps (so its weights are not the seed's), its export and imports."""
    root = tmp_path_factory.mktemp("warm")
    data = write_chat_jsonl(root / "train.jsonl", rows=24)
    run_sft(tiny_config(data, root / "run", *SHORT_RUN, "trainer.total_steps=2"))
    export_hf(root / "run", root / "hf", dtype="fp32")
    import_hf(root / "hf", root / "mcore", layout_name="mcore")
    import_hf(root / "hf", root / "ours", layout_name="hf")
    return root, data


def test_first_step_from_checkpoints_equals_from_their_export(trained):
    root, data = trained
    from_export = first_loss(data, root / "b_hf", f"model.path={root / 'hf'}")
    from_run = first_loss(data, root / "b_run", f"model.path={root / 'run'}")
    from_step = first_loss(
        data, root / "b_step", f"model.path={root / 'run' / 'global_step_2' / 'dist_ckpt'}"
    )
    from_mcore = first_loss(
        data, root / "b_mcore", f"model.path={root / 'mcore'}", f"model.hf_config={root / 'hf'}"
    )
    from_import = first_loss(data, root / "b_ours", f"model.path={root / 'ours'}")
    assert from_run == from_export and from_step == from_export  # same floats, not merely close
    assert from_mcore == from_export and from_import == from_export
    fresh = first_loss(data, root / "b_fresh")  # the seed's random weights: loading really happened
    assert fresh != from_export


def test_mcore_checkpoint_without_hf_config_says_what_to_pass(trained):
    root, _ = trained
    with pytest.raises(
        ConfigError,
        match=r"^model.path: checkpoint .*mcore has no huggingface/config.json"
        r".*set model.hf_config=DIR",
    ):
        load_tokenizer(
            tiny_config(root / "train.jsonl", root / "x", f"model.path={root / 'mcore'}").model
        )


def test_checkpoint_that_does_not_fit_the_config_is_refused(trained, tmp_path):
    root, data = trained
    with pytest.raises(ConfigError, match=r"^model.path: .*shape"):
        run_sft(
            tiny_config(
                data,
                tmp_path / "r",
                *SHORT_RUN,
                f"model.path={root / 'run'}",
                "model.overrides={hidden_size: 64}",
            )
        )


@pytest.mark.parametrize("key", ["model.path", "model.tokenizer"])
def test_missing_path_is_one_line_naming_key_and_path(tmp_path, key):
    missing = tmp_path / "models" / "nope"
    cfg = tiny_config(tmp_path / "d.jsonl", tmp_path / "r", f"{key}={missing}").model
    with pytest.raises(ConfigError) as caught:
        build_hf_config(cfg, load_tokenizer(cfg))
    assert str(caught.value).startswith(f"{key}: {missing} does not exist")
    assert "\n" not in str(caught.value) and "Repo id" not in str(caught.value)


def test_dir_that_is_neither_model_nor_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    cfg = tiny_config(
        tmp_path / "d.jsonl", tmp_path / "r", f"model.path={tmp_path / 'empty'}"
    ).model
    with pytest.raises(
        ConfigError, match=r"^model.path: .*empty is neither a Hugging Face model dir"
    ):
        load_tokenizer(cfg)


@pytest.mark.parametrize("command", ["sft", "grpo"])
@pytest.mark.parametrize("nproc", ["1", "2"])
def test_cli_missing_model_path_exits_2_in_one_line(tmp_path, command, nproc):
    """The example configs name a model this machine lacks: one line, exit 2, before any
    process starts (with 2 processes too)."""
    config = REPO / "examples" / f"{command}_gsm8k_qwen.yaml"
    result = CliRunner().invoke(
        app,
        [
            "train",
            command,
            "--config",
            str(config),
            "--nproc-per-node",
            nproc,
            "model.path=/models/nope",
            f"trainer.run_dir={tmp_path / 'run'}",
        ],
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: model.path: /models/nope does not exist"
        " (a local Hugging Face model dir or checkpoint is needed; nothing is downloaded)"
    ]


def _hf_weights(hf_dir):
    from safetensors.torch import load_file

    weights = {}
    for shard in sorted(hf_dir.glob("*.safetensors")):
        weights.update(load_file(shard))
    return weights


def test_first_step_from_plain_torch_and_hf_trainer_saves_equals_from_their_weights(trained):
    """The same weights saved as torch's DCP recipe nests them (`app.model.`) and as the
    HF Trainer's FSDP save (`checkpoint-N/pytorch_model_fsdp_0/` beside config.json and the
    tokenizer, which made `model.path` say "config.json but no weights"; with the
    training_args.bin the Trainer always writes there, the dir was taken for a model dir and
    transformers found no weights; a trainer_state.json that logged a NaN grad_norm, as the
    Trainer writes one for a step that overflowed, was refused as an asset)."""
    import json
    import shutil

    import torch.distributed.checkpoint as dcp

    root, data = trained
    weights = _hf_weights(root / "hf")
    dcp.save({"app": {"model": weights}}, checkpoint_id=root / "recipe")
    step_dir = root / "trainer_out" / "checkpoint-2"
    dcp.save({"model": weights}, checkpoint_id=step_dir / "pytorch_model_fsdp_0")
    for asset in (root / "hf").iterdir():
        if asset.suffix != ".safetensors":
            shutil.copy(asset, step_dir / asset.name)
    (step_dir / "trainer_state.json").write_text(
        json.dumps({"global_step": 2, "log_history": [{"grad_norm": float("nan"), "step": 1}]})
    )
    (step_dir / "training_args.bin").write_bytes(b"a pickle of TrainingArguments, never read")

    from_export = first_loss(data, root / "c_hf", f"model.path={root / 'hf'}")
    from_recipe = first_loss(
        data, root / "c_recipe", f"model.path={root / 'recipe'}", f"model.hf_config={root / 'hf'}"
    )
    from_step = first_loss(data, root / "c_step", f"model.path={step_dir}")
    from_output = first_loss(data, root / "c_output", f"model.path={root / 'trainer_out'}")
    assert from_recipe == from_export and from_step == from_export
    assert from_output == from_export


def test_a_run_from_a_checkpoint_reads_its_metadata_once(trained, monkeypatch):
    """validate's checks before the load share the load's reader (was: two reads, each
    minutes for a `.metadata` of millions of chunks)."""
    root, data = trained
    reads = metadata_reads(monkeypatch)
    first_loss(data, root / "b_reads", f"model.path={root / 'run'}")
    assert sum(str(root / "run") in read for read in reads) == 1, reads


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{bad", "config.json: not valid JSON"),
        ("{}", "config.json: no model_type"),
        ('{"model_type": "qwen2"}', "no weights (*.safetensors); set model.random_init=true"),
    ],
)
def test_a_config_json_without_weights_is_named_for_what_it_lacks(tmp_path, text, says):
    """A config.json that is not JSON got the hint to train from it (model.random_init),
    which only led to that error next; a readable one still gets the hint."""
    from trainer.config import ModelConfig
    from trainer.model_source import resolve_model_source

    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        resolve_model_source(ModelConfig(path=str(tmp_path)))


def test_resuming_an_import_says_how_to_start_from_it(tmp_path):
    """`checkpoint.resume=` an import-hf run dir's step (weights alone) said only "checkpoint
    holds ['model'], not ['optimizer', 'extra']"; it names model.path, which trains."""
    from mfsdp_ckpt.checkpointer import CheckpointContentsError
    from trainer.tiny import build_tiny_model_dir

    model = build_tiny_model_dir(tmp_path / "hf", seed=0, with_weights=True)
    import_hf(model, tmp_path / "imported", layout_name="hf")
    step = tmp_path / "imported" / "global_step_0"
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    short = ("trainer.total_steps=1", "data.global_batch_size=4")
    resumed = tiny_config(data, tmp_path / "run", *short, f"checkpoint.resume={step}")
    with pytest.raises(CheckpointContentsError) as refused:
        run_sft(resumed)
    assert str(refused.value).endswith(
        "; it holds weights alone: to start training from them, give its step dir as"
        " model.path and a new trainer.run_dir"
    )
    started = run_sft(tiny_config(data, tmp_path / "run2", *short, f"model.path={step}"))
    assert started.final_step == 1
