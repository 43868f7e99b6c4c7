"""Megatron's padded vocabulary, and the exit codes of broken run dirs.

Megatron-LM pads the embedding and output layer to a multiple of
`--make-vocab-size-divisible-by` (128) times the tensor-parallel size, so a Megatron-core
checkpoint can hold more rows than the HF config's vocab_size; export drops the padding
(as Megatron-Bridge's export does) and refuses row counts no padding explains. The tiny
models are written under Megatron-core names with tests/support/hf_to_mcore.py's
independent converter, padded with random rows, and the export's logits are compared with
the source model's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.convert.export_plan import plan_export
from mfsdp_ckpt.convert.export_source import load_config, resolve_source
from mfsdp_ckpt.convert.export_stream import is_streamable
from mfsdp_ckpt.convert.fused_tensors import VOCAB as VOCAB_TRANSFORM
from mfsdp_ckpt.convert.vocab_padding import padding_multiple, vocab_rows_problem
from mfsdp_ckpt.format import layout
from tests.support.distributed import run_distributed
from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import maker, one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

MAKER = maker()
VOCAB = 250
VOCAB_KEYS = ("embedding.word_embeddings.weight", "output_layer.weight")


def _padded(weights: dict, rows: int) -> dict:
    """Megatron's padding rows: initialized like any weight, reached by no token."""
    generator = torch.Generator().manual_seed(3)
    padded = dict(weights)
    for key in VOCAB_KEYS:
        if key in weights:
            extra = torch.randn(
                rows - weights[key].shape[0], weights[key].shape[1], generator=generator
            )
            padded[key] = torch.cat([weights[key], extra])
    return padded


def _megatron_state(weights: dict, optimizer: bool) -> dict:
    state: dict = {"model": {f"module.{k}": v for k, v in weights.items()}, "iteration": 5}
    if optimizer:  # Adam moments have the padded shapes too
        state["optimizer"] = {
            "state": {
                f"module.module.module.{k}": {
                    "exp_avg": torch.zeros_like(v),
                    "exp_avg_sq": torch.ones_like(v),
                    "step": torch.tensor(5.0),
                }
                for k, v in weights.items()
            }
        }
    return state


def _checkpoint(tmp_path: Path, family: str, rows: int, optimizer: bool = True):
    model = tiny_causal_lm(family, vocab=VOCAB)
    weights = _padded(to_mcore(model, norms="te", fc1="split"), rows)
    ckpt = save_dcp(_megatron_state(weights, optimizer), tmp_path / "dist_ckpt")
    model.config.save_pretrained(tmp_path / "assets")
    return model, ckpt, tmp_path / "assets"


# --------------------------------------------------------------------------- the rule
@pytest.mark.parametrize(
    ("vocab", "rows"),
    [
        (50257, 50304),  # GPT-2, Megatron-LM's default divisible-by 128, TP 1
        (250, 256),
        (250, 384),  # 128 x TP 3
        (151936, 152064),  # 128 x TP 2
        (32000, 32768),  # divisible-by 1024 x TP 8
        (50257, 50258),  # Megatron-Bridge: divisible-by 1 (50257 is odd) x TP 2
        (250, 1280),  # divisible-by 1280 = 128 x 10
    ],
)
def test_padding_rule_explains_megatrons_padded_sizes(vocab, rows):
    multiple = padding_multiple(rows, vocab)
    assert multiple is not None and rows % multiple == 0 and rows - vocab < multiple
    assert vocab_rows_problem(rows, vocab) is None


@pytest.mark.parametrize(
    ("vocab", "rows", "words"),
    [
        (250, 240, "240 rows, fewer than the config's vocab_size 250"),
        (250, 1000, "1000 rows, 750 more than the config's vocab_size 250"),
        (151936, 152064 + 8192 * 2, "more than the config's vocab_size 151936"),
    ],
)
def test_padding_rule_refuses_what_no_padding_explains(vocab, rows, words):
    assert padding_multiple(rows, vocab) is None
    assert words in vocab_rows_problem(rows, vocab)


# --------------------------------------------------------------------------- export
@pytest.mark.parametrize(
    ("family", "rows", "optimizer", "dtype"),
    [
        ("llama", 256, True, "fp32"),  # untied: embedding and output layer both padded
        ("llama", 384, False, "bf16"),  # no optimizer state; cast a piece at a time
        ("qwen2", 256, False, "fp32"),  # tied: the embedding only
    ],
)
def test_padding_rows_are_dropped_and_the_logits_match(family, rows, optimizer, dtype, tmp_path):
    """Was: exit 1, "shape (256, 128) as model.embed_tokens.weight, but the config says
    (250, 128)"."""
    model, ckpt, assets = _checkpoint(tmp_path, family, rows, optimizer)
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", assets, "--out", out, "--dtype", dtype,
        "--verify", "--json",
    )  # fmt: skip
    assert code == 0, stdout + err
    result = json.loads(stdout)
    padded = [k for k in VOCAB_KEYS if k != "output_layer.weight" or family == "llama"]
    notes = [note for note in result["notes"] if "vocabulary padding" in note]
    assert result["mismatches"] == [] and len(notes) == len(padded), stdout
    for key, note in zip(padded, notes):
        assert f"[model.module.{key}]: dropped {rows - VOCAB} rows of Megatron's" in note
        assert f"({rows} stored, vocab_size {VOCAB})" in note
    assert load_report(out) == {}
    ids = fixed_inputs(VOCAB)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    atol = 1e-5 if dtype == "fp32" else 0.5
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=atol)
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", assets, "--json")
    # the checkpoint records no head layout: the config given is named as unchecked, alone
    found = [(f["severity"], f["where"]) for f in json.loads(stdout)["findings"]]
    assert code == 0 and found == [("warning", str(assets / "config.json"))], stdout + err


def test_the_plain_text_summary_says_how_many_rows_were_dropped(tmp_path):
    _model, ckpt, assets = _checkpoint(tmp_path, "qwen2", 256)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", assets, "--out", tmp_path / "hf"
    )
    assert code == 0, stdout + err
    assert "dropped 6 rows of Megatron's vocabulary padding (256 stored, vocab_size 250)" in (
        stdout + err
    )


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (240, "240 rows, fewer than the config's vocab_size 250"),
        (1000, "1000 rows, 750 more than the config's vocab_size 250"),
    ],
)
def test_rows_no_padding_explains_are_refused_naming_the_tensor(rows, words, tmp_path):
    model = tiny_causal_lm("llama", vocab=VOCAB)
    weights = to_mcore(model, norms="te", fc1="split")
    for key in VOCAB_KEYS:
        weights[key] = torch.zeros(rows, weights[key].shape[1])
    ckpt = save_dcp(_megatron_state(weights, optimizer=False), tmp_path / "dist_ckpt")
    model.config.save_pretrained(tmp_path / "assets")
    code, out, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", tmp_path / "hf"
    )
    line = one_error_line(err)
    assert code == 2 and "[model.module.embedding.word_embeddings.weight]" in line, out + err
    assert words in line  # --hf-config's vocab_size is what the rows contradict: exit 2
    assert not (tmp_path / "hf").exists()
    code, out, err = run_cli("ckpt", "validate", ckpt, "--hf-config", tmp_path / "assets")
    assert code == 1 and words in out, out + err


# --------------------------------------------------------------------------- uneven shards
SHARD_ROWS = {"embedding.word_embeddings.weight": (200, 56), "output_layer.weight": (250, 6)}


def _save_padded_shards(rank: int, world_size: int, weights_file: str, target: str) -> None:
    """The vocabulary tensors as uneven Shard(0) DTensors (Megatron-FSDP's layout): the
    embedding's second shard straddles vocab_size, the output layer's holds padding only."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from mfsdp_ckpt.storage.uneven_chunks import attach_uneven_chunk_metadata

    weights = torch.load(weights_file)
    mesh = init_device_mesh("cpu", (world_size,))
    model = {}
    for key, full in weights.items():
        if key in SHARD_ROWS:
            start, count = sum(SHARD_ROWS[key][:rank]), SHARD_ROWS[key][rank]
            local = full[start : start + count].clone()
            model[f"module.{key}"] = DTensor.from_local(
                local, mesh, [Shard(0)], shape=full.shape, stride=full.stride(), run_check=False
            )
        else:
            model[f"module.{key}"] = full
    attach_uneven_chunk_metadata(model)
    dcp.save({"model": model}, checkpoint_id=target)


def test_uneven_shards_stream_only_the_rows_below_vocab_size(tmp_path):
    model = tiny_causal_lm("llama", vocab=VOCAB)
    weights = _padded(to_mcore(model, norms="te", fc1="split"), 256)
    torch.save(weights, tmp_path / "weights.pt")
    ckpt = tmp_path / "dist_ckpt"
    run_distributed(_save_padded_shards, 2, str(tmp_path / "weights.pt"), str(ckpt))
    model.config.save_pretrained(tmp_path / "assets")
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", out, "--verify"
    )
    assert code == 0 and "verified" in stdout, stdout + err
    ids = fixed_inputs(VOCAB)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
    plan = plan_export(resolve_source(str(ckpt), "auto"), load_config(out / "config.json"))
    vocab = [item for item in plan.items if item.transform is VOCAB_TRANSFORM]
    assert len(vocab) == 2 and all(is_streamable(plan, item) for item in vocab)  # never read whole


# --------------------------------------------------------------------------- broken run dirs
def _verl_run(root: Path, tracker: str | None, steps: tuple[int, ...] = (20,)) -> Path:
    run = root / "run"
    run.mkdir()
    for step in steps:
        save_dcp(MAKER.state_dict(MAKER.CONFIG), run / f"global_step_{step}" / "dist_ckpt")
    if tracker is not None:
        (run / layout.TRACKER_FILE).write_text(tracker)
    return run


def _file_named_step_7(run: Path) -> None:
    (run / "global_step_7").write_text("not a step dir")


DAMAGED_RUNS = {
    # tracker text, step dirs, extra damage, words of the one-line error
    "missing_step": ("7", (20, 30), None, "names step '7', but global_step_7/ is missing"),
    "step_is_a_file": ("7", (20,), _file_named_step_7, "global_step_7 is not a directory"),
    "empty": ("", (20,), None, "expected a step number, found ''"),
    "not_a_number": ("latest", (20,), None, "expected a step number, found 'latest'"),
    "negative": ("-5", (20,), None, "expected a step number, found '-5'"),
    "no_step_dirs": ("7", (), None, "names '7', but there is no step dir here"),
}


@pytest.mark.parametrize("case", list(DAMAGED_RUNS))
def test_a_broken_tracker_is_exit_1_naming_what_is_there(case, tmp_path):
    """A run dir whose tracker is broken is damaged data (exit 1); was exit 2 (bad usage),
    while a tracker naming an empty save was already exit 1."""
    tracker, steps, damage, words = DAMAGED_RUNS[case]
    run = _verl_run(tmp_path, tracker, steps)
    if damage is not None:
        damage(run)
    for command in ("validate", "inspect", "export-hf"):
        args = ["--out", tmp_path / "hf"] if command == "export-hf" else []
        code, out, err = run_cli("ckpt", command, run, *args)
        line = one_error_line(out if command == "validate" else err)  # validate: a finding
        assert code == 1 and str(run / layout.TRACKER_FILE) in line and words in line, (
            command + out + err
        )
        if steps:
            shown = ", ".join(f"global_step_{s}" for s in steps)
            assert line.endswith(f"(step dirs here: {shown})"), line
    code, out, _err = run_cli("ckpt", "validate", run, "--json")
    found = json.loads(out)  # validate's object: the damage is its finding, valid false
    assert code == 1 and found["valid"] is False and words in found["findings"][0]["message"]
    assert not (tmp_path / "hf").exists()


def test_a_run_dir_with_only_an_unfinished_save_is_exit_1(tmp_path):
    """Was exit 2: the run dir is ours (a `global_step_N.tmp/`), its only save incomplete."""
    (tmp_path / "run" / "global_step_3.tmp").mkdir(parents=True)
    code, out, err = run_cli("ckpt", "validate", tmp_path / "run")
    assert code == 1 and "a save of step 3 did not finish" in one_error_line(out), out + err


USAGE_PATHS = {
    "missing_path": (lambda root: root / "nowhere", "nowhere"),
    "not_a_checkpoint": (lambda root: root, "not a checkpoint (looked for .metadata"),
    "steps_without_tracker": (
        lambda root: _verl_run(root, None, (20, 30)),
        "2 step dirs and no latest_checkpointed_iteration.txt; give one of them",
    ),
    "unfinished_step_given": (
        lambda root: _mkdir(root / "run" / "global_step_3.tmp"),
        "an unfinished save of step 3",
    ),
}


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


@pytest.mark.parametrize("case", list(USAGE_PATHS))
def test_paths_that_name_no_checkpoint_stay_exit_2(case, tmp_path):
    make, words = USAGE_PATHS[case]
    path = make(tmp_path)
    code, out, err = run_cli("ckpt", "validate", path)
    assert code == 2 and words in one_error_line(err), out + err
