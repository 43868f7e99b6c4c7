"""Lay one DCP checkpoint out the ways verl and Megatron-LM do, for the interop tests.

Each builder takes a fixture dir (`config.json` and a DCP dir, `dist_ckpt/` or
`run/iter_NNNNNNN/`) and a fresh directory and
returns a `Laid` naming the run dir, every level a user may pass (run, step, role, model,
dist_ckpt), and whether the layout carries its own HF config (Megatron-LM and a bare DCP
dir do not: commands need --hf-config). The shapes follow verl's megatron checkpoint
manager, ray_trainer and sft_trainer, and Megatron-LM's checkpointing.py (docs/interop.md);
a verl RL critic holds verl's value head in the output layer's place (`critic_dcp`).
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import error_prefixed_lines
from tests.support.paths import FIXTURES

STEP = 40


def maker():
    """tests/fixtures/megatron_lm_optim/make_megatron_lm_optim.py as a module."""
    path = FIXTURES / "megatron_lm_optim" / "make_megatron_lm_optim.py"
    spec = importlib.util.spec_from_file_location("make_megatron_lm_optim", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def assert_exports_to_source(model, ckpt: Path, out: Path, *args) -> str:
    """`mfsdp ckpt export-hf CKPT --out OUT ARGS` succeeds, loads in transformers with no
    missing or unexpected keys and gives `model`'s logits; returns its stderr."""
    import torch

    from tests.support.export import fixed_inputs, load_report, logits_of

    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--out", out, *args)
    assert code == 0, stdout + err
    assert load_report(out) == {}
    ids = fixed_inputs(model.config.vocab_size)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
    return err


def one_error_line(stderr: str) -> str:
    """The one `error:` line of `stderr`, whatever else it printed."""
    lines = error_prefixed_lines(stderr)
    assert len(lines) == 1, stderr
    return lines[0]


@dataclass
class Laid:
    run: Path
    levels: dict[str, Path]  # level name -> path that must resolve to the same dist_ckpt
    dist_ckpt: Path
    has_hf_config: bool


def dcp_of(fixture: Path) -> Path:
    """A fixture's DCP dir: `dist_ckpt/`, or the step of the Megatron-LM run it holds
    (`run/iter_NNNNNNN/`, as in tests/fixtures/mcore_optim/<family>/)."""
    if (fixture / "dist_ckpt" / ".metadata").is_file():
        return fixture / "dist_ckpt"
    (step,) = sorted((fixture / "run").glob("iter_*"))
    return step


def _copy_dcp(fixture: Path, target: Path) -> Path:
    shutil.copytree(dcp_of(fixture), target)
    return target


EMBEDDING, VALUE_HEAD = "embedding.word_embeddings.weight", "output_layer"


def critic_dcp(fixture: Path, target: Path, bias: bool = True) -> Path:
    """The fixture's checkpoint as verl's Megatron critic saves it: the actor's model with
    its output layer replaced by the value head `LinearForLastLayer(hidden_size, 1)`
    (weight [1, hidden], and a bias [1] with verl's own class), whatever the tying, and
    Adam state for the head as for any parameter (named like the embedding's)."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    whole = target.parent / f"{target.name}.pt"
    target.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # DCP warns that it runs without a process group
        warnings.simplefilter("ignore")
        dcp_to_torch_save(dcp_of(fixture), whole)
        state = torch.load(whole, weights_only=False)  # the test fixture's own file
        whole.unlink()
        model = state["model"]
        embedding = next(k for k in model if k.endswith(EMBEDDING))
        prefix = embedding.removesuffix(EMBEDDING)
        hidden = model[embedding].shape[1]
        head = {"weight": torch.randn(1, hidden) * 0.02}
        if bias:
            head["bias"] = torch.zeros(1)
        for name in [k for k in model if k.startswith(prefix + VALUE_HEAD + ".")]:
            del model[name]
        model.update({f"{prefix}{VALUE_HEAD}.{kind}": value for kind, value in head.items()})
        _value_head_state(state.get("optimizer"), head)
        dcp.save(state, checkpoint_id=str(target), no_dist=True)
    return target


def _value_head_state(optimizer: dict | None, head: dict) -> None:
    """Adam moments and group settings for the value head, beside the embedding's."""
    import torch

    if optimizer is None:
        return
    for table in ("state", "param_to_group_meta"):
        entries = optimizer.get(table, {})
        embedding = next((k for k in entries if k.endswith(EMBEDDING)), None)
        if embedding is None:
            continue
        prefix = embedding.removesuffix(EMBEDDING)
        for name in [k for k in entries if k.startswith(prefix + VALUE_HEAD + ".")]:
            del entries[name]
        for kind, value in head.items():
            like = entries[embedding]
            if table == "state":
                like = {
                    k: torch.zeros_like(value) if k.startswith("exp_avg") else v
                    for k, v in like.items()
                }
            entries[f"{prefix}{VALUE_HEAD}.{kind}"] = like


def _hf_dir(fixture: Path, target: Path) -> None:
    target.mkdir(parents=True)
    shutil.copy2(fixture / "config.json", target / "config.json")


def _tracker(run: Path, text: str) -> None:
    (run / "latest_checkpointed_iteration.txt").write_text(text)  # verl: str(step), no newline


def _role_dcp(fixture: Path, target: Path, role: str) -> Path:
    """The actor's DCP is the fixture's; the critic's holds a value head (`critic_dcp`)."""
    return critic_dcp(fixture, target) if role == "critic" else _copy_dcp(fixture, target)


def _recorded_layers(fixture: Path) -> int:
    """The layer count verl's transformer_config.json records of the fixture's model."""
    return json.loads((fixture / "config.json").read_text())["num_hidden_layers"]


def verl_rl_v1(fixture: Path, root: Path, critic: bool = True) -> Laid:
    run = root / "verl_rl_v1"
    step = run / f"global_step_{STEP}"
    roles = ("actor", "critic") if critic else ("actor",)
    for role in roles:
        _role_dcp(fixture, step / role / "dist_ckpt", role)
        _hf_dir(fixture, step / role / "huggingface")
        record = json.dumps({"num_layers": _recorded_layers(fixture)})
        (step / role / "transformer_config.json").write_text(record)
    (step / "data.pt").write_bytes(b"dataloader state")
    _tracker(run, str(STEP))
    actor = step / "actor"
    levels = {"run": run, "step": step, "actor": actor, "dist_ckpt": actor / "dist_ckpt"}
    return Laid(run, levels, actor / "dist_ckpt", True)


def _v2_split(fixture: Path, target: Path, role: str) -> Path:
    """verl's v2 split (megatron_checkpoint_manager.py, MANIFEST_SCHEMA_VERSION 2) in
    `target`: with Megatron-FSDP the one DCP holding every state sits in model/dist_ckpt."""
    dcp = _role_dcp(fixture, target / "model" / "dist_ckpt", role)
    _hf_dir(fixture, target / "model" / "huggingface")
    for empty in ("optimizer", "extra"):  # created by verl's path helpers, left empty
        (target / empty / "dist_ckpt").mkdir(parents=True)
    record = json.dumps({"num_layers": _recorded_layers(fixture)})
    (target / "transformer_config.json").write_text(record)
    contents = {
        name: {"path": f"{name}/dist_ckpt", "format": "megatron_dist_checkpoint"}
        for name in ("model", "optimizer", "extra")
    }
    (target / "ckpt_contents.json").write_text(
        json.dumps(
            {
                "schema_version": 2,
                "framework": "megatron",
                "role": role,
                "global_step": STEP,
                "save_contents": ["model", "optimizer", "extra"],
                "contents": contents,
            }
        )
    )
    return dcp


def verl_rl_v2(fixture: Path, root: Path, critic: bool = False) -> Laid:
    run = root / "verl_rl_v2"
    actor = run / f"global_step_{STEP}" / "actor"
    dcp = _v2_split(fixture, actor, "actor")
    if critic:
        _v2_split(fixture, actor.parent / "critic", "critic")
    _tracker(run, str(STEP))
    levels = {
        "run": run,
        "step": actor.parent,
        "actor": actor,
        "model": actor / "model",
        "dist_ckpt": dcp,
    }
    return Laid(run, levels, dcp, True)


def verl_sft(fixture: Path, root: Path) -> Laid:
    run = root / "verl_sft"
    step = run / f"global_step_{STEP}"
    dcp = _copy_dcp(fixture, step / "dist_ckpt")
    _hf_dir(fixture, step / "huggingface")
    (step / "data_0.pt").write_bytes(b"dataloader state")
    _tracker(run, str(STEP))
    return Laid(run, {"run": run, "step": step, "dist_ckpt": dcp}, dcp, True)


def verl_sft_v2(fixture: Path, root: Path) -> Laid:
    """verl's SFT trainer (checkpoint_handler.py) passes the step dir itself to the
    engine's checkpoint manager: the v2 split with no role level, plus data_<rank>.pt."""
    run = root / "verl_sft_v2"
    step = run / f"global_step_{STEP}"
    dcp = _v2_split(fixture, step, "actor")
    (step / "data_0.pt").write_bytes(b"dataloader state")
    _tracker(run, str(STEP))
    levels = {"run": run, "step": step, "model": step / "model", "dist_ckpt": dcp}
    return Laid(run, levels, dcp, True)


def megatron_lm(fixture: Path, root: Path) -> Laid:
    """In the iteration dir of the step its `iteration` entry records, which Megatron-LM
    resumes from (validate refuses a dir of another step)."""
    from mfsdp_ckpt.storage.reader import CheckpointReader

    run = root / "megatron_lm"
    step = CheckpointReader(dcp_of(fixture)).read_object("iteration")
    dcp = _copy_dcp(fixture, run / f"iter_{step:07d}")
    _tracker(run, f"{step}\n")
    return Laid(run, {"run": run, "step": dcp}, dcp, False)


def bare_dist_ckpt(fixture: Path, root: Path) -> Laid:
    dcp = _copy_dcp(fixture, root / "bare" / "dist_ckpt")
    return Laid(dcp, {"dist_ckpt": dcp}, dcp, False)


BUILDERS = {
    "verl-rl-v1": verl_rl_v1,
    "verl-rl-v2": verl_rl_v2,
    "verl-sft": verl_sft,
    "verl-sft-v2": verl_sft_v2,
    "megatron-lm": megatron_lm,
    "dist_ckpt": bare_dist_ckpt,
}


# --------------------------------------------------------------------------- damage
def largest_shard(dcp: Path) -> Path:
    return max(dcp.glob("*.distcp"), key=lambda p: p.stat().st_size)


def truncate_shard(dcp: Path) -> None:
    shard = largest_shard(dcp)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def remove_shard(dcp: Path) -> None:
    largest_shard(dcp).unlink()


def leave_coverage_gap(dcp: Path) -> str:
    """Shrink one chunk of the first 2-D model tensor by a row: the metadata no longer tiles
    the tensor (what a save that lost one rank's piece leaves). The test fixture's own
    .metadata is unpickled here, never a file from elsewhere."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    with open(dcp / ".metadata", "rb") as handle:
        metadata = pickle.load(handle)
    key, item = next(
        (k, v)
        for k, v in metadata.state_dict_metadata.items()
        if k.startswith("model.") and len(getattr(v, "size", ())) == 2
    )
    chunk = item.chunks[0]
    item.chunks[0] = ChunkStorageMetadata(
        offsets=chunk.offsets, sizes=type(chunk.sizes)((chunk.sizes[0] - 1, *chunk.sizes[1:]))
    )
    with open(dcp / ".metadata", "wb") as handle:
        pickle.dump(metadata, handle)
    return key


DAMAGE = {
    "truncated": truncate_shard,
    "missing_shard": remove_shard,
    "coverage_gap": leave_coverage_gap,
}


# --------------------------------------------------------------------------- tensor parallelism
def per_rank_gate_up(fused, ranks: int):
    """A fused SwiGLU linear_fc1 [gate; up] as a save that keeps each of `ranks`
    tensor-parallel pieces holds it: [gate_0; up_0; gate_1; up_1; ...] (each rank's
    column-parallel rows, in rank order: a Megatron-FSDP DTensor's global view)."""
    import torch

    gate, up = fused.chunk(2)
    pieces = [
        part for rank in range(ranks) for part in (gate.chunk(ranks)[rank], up.chunk(ranks)[rank])
    ]
    return torch.cat(pieces)


def verl_run_of_import(mcore: Path, model: Path, run: Path, step: int) -> Path:
    """RUN/global_step_N/actor/{dist_ckpt, huggingface} as verl's RL v1 layout holds an
    actor, from `mcore` (an mcore-layout import of `model`) and `model`'s config and
    tokenizer, with the tracker naming N (as docs/interop.md builds one); the step dir."""
    actor = run / f"global_step_{step}" / "actor"
    shutil.copytree(mcore, actor / "dist_ckpt")
    shutil.copytree(model, actor / "huggingface", ignore=shutil.ignore_patterns("*.safetensors"))
    (run / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor.parent
