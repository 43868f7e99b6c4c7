"""Every `ckpt` command on every layout verl and Megatron-LM write, at every level.

Parametrized over fixtures with optimizer state: a CPU stand-in made by
tests/fixtures/megatron_lm_optim/make_megatron_lm_optim.py (Megatron-LM's keys, with a
distributed optimizer's state), and each real Megatron-core save found in
tests/fixtures/mcore_optim/<family>/ (config.json + run/iter_NNNNNNN/). Each is laid out as
verl RL v1 and v2, verl SFT, Megatron-LM and a bare dist_ckpt dir
(tests/support/interop_layouts.py); mfsdp's own layout comes from
tests/fixtures/megatron_fsdp_qwen2.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.check.report import NO_HF_CONFIG
from mfsdp_ckpt.format import checkpoint_resolution, layout
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.interop_layouts import (
    BUILDERS,
    DAMAGE,
    maker,
    one_error_line,
    run_cli,
    verl_rl_v1,
)
from tests.support.paths import FIXTURES

OURS = FIXTURES / "megatron_fsdp_qwen2" / "run"
REAL_OPTIM = FIXTURES / "mcore_optim"


REAL_FAMILIES = sorted(
    p.name
    for p in REAL_OPTIM.glob("*")
    if (p / "config.json").is_file() and any(p.glob("run/iter_*"))
)


@pytest.fixture(params=["made", *(f"real-{family}" for family in REAL_FAMILIES)])
def optim_fixture(request, made_optim) -> Path:
    return (
        made_optim if request.param == "made" else REAL_OPTIM / request.param.removeprefix("real-")
    )


@pytest.mark.parametrize("family", REAL_FAMILIES)
def test_a_real_megatron_lm_run_with_optimizer_validates_clean(family):
    """The case that said "optimizer state exp_avg is missing" for every parameter."""
    run = REAL_OPTIM / family / "run"
    config = REAL_OPTIM / family / "config.json"
    code, out, err = run_cli("ckpt", "validate", run, "--deep", "--hf-config", config, "--json")
    report = json.loads(out)
    assert code == 0 and report["valid"] and report["findings"] == [], out + err
    assert report["layout"] == layout.MEGATRON_LM and report["step"] == 3


# --------------------------------------------------------------------------- the matrix
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_every_command_reads_every_layout(kind, optim_fixture, tmp_path):
    laid = BUILDERS[kind](optim_fixture, tmp_path)
    config = [] if laid.has_hf_config else ["--hf-config", optim_fixture / "config.json"]
    for level, path in laid.levels.items():
        paths = checkpoint_resolution.resolve_checkpoint(path)
        assert (paths.dist_ckpt, paths.kind) == (laid.dist_ckpt, kind), level
    code, out, err = run_cli("ckpt", "validate", laid.run)
    assert code == 0 and out.splitlines()[-1].startswith(f"valid: {laid.dist_ckpt} ({kind}"), (
        out + err
    )
    assert "no manifest, so file hashes were not checked" in out
    code, out, err = run_cli("ckpt", "validate", laid.run, "--deep", "--json", *config)
    report = json.loads(out)
    assert code == 0 and report["valid"] and report["findings"] == [], out + err
    assert report["layout"] == kind and report["has_manifest"] is False
    code, out, err = run_cli("ckpt", "validate", laid.run, "--strict")
    assert code == 1 and "(--strict requires one)" in out, out + err
    code, out, err = run_cli("ckpt", "validate", laid.run, "--strict", "--json")
    strict = json.loads(out)  # was `valid: false` with no finding saying why
    # without a Hugging Face config (its args lack sizes the derivation needs) the weights'
    # shapes go unchecked, and a warning says so (was: nothing said)
    unchecked = [] if laid.has_hf_config else [NO_HF_CONFIG]
    assert code == 1 and [f["message"].split(";")[0] for f in strict["findings"]] == [
        *unchecked,
        "no manifest.json: --strict requires one (file hashes cannot be checked)",
    ], out
    code, out, err = run_cli("ckpt", "inspect", laid.run, "--json")
    described = json.loads(out)
    assert code == 0 and described["layout"] == kind
    objects = {o["name"]: o for o in described["objects"]}
    if "iteration" in objects:  # Megatron-LM's scalars decode; its argparse.Namespace is
        # read by the restricted Namespace reader only (tests/ckpt/test_inspect_megatron_args.py)
        assert isinstance(objects["iteration"]["value"], int)
        assert objects["args"]["kind"] == "Namespace" and objects["args"]["not_decoded"] is None
    code, out, err = run_cli(
        "ckpt", "export-hf", laid.run, "--out", tmp_path / "hf", "--verify", *config
    )
    assert code == 0 and "verified" in out and re.search(r"\d [kMG]B in ", out), out + err
    assert (tmp_path / "hf" / "config.json").is_file()


def test_our_layout_is_unchanged(tmp_path):
    run = shutil.copytree(OURS, tmp_path / "run")
    step = layout.step_dir(run, 2)
    for path in (run, step, step / "dist_ckpt"):
        paths = checkpoint_resolution.resolve_checkpoint(path)
        assert paths.kind == layout.MFSDP and paths.manifest == step / "manifest.json"
    code, out, err = run_cli("ckpt", "validate", run, "--deep", "--strict")
    assert code == 0 and "no manifest" not in out and "(mfsdp, step 2" in out, out + err
    assert run_cli("ckpt", "inspect", run)[0] == 0
    code, out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, out + err


def test_megatron_optimizer_names_match_their_parameters(made_optim, tmp_path):
    """Megatron's `optimizer.state.module.module.module.<param>.exp_avg` (and the SwiGLU
    weight_w/weight_v split) must pair with `model.module.<param>`: a missing moment is an
    error naming the parameter, a state of no parameter only a warning."""
    import torch
    import torch.distributed.checkpoint as dcp

    maker_module = maker()
    state = maker_module.state_dict(maker_module.CONFIG)
    moments = state["optimizer"]["state"]
    del moments["module.module.module.decoder.layers.0.mlp.linear_fc1.weight_v"]["exp_avg"]
    moments["module.module.module.decoder.layers.7.extra.weight"] = {"exp_avg": torch.zeros(2)}
    dcp.save(state, checkpoint_id=str(tmp_path / "dist_ckpt"), no_dist=True)
    code, out, _ = run_cli("ckpt", "validate", tmp_path / "dist_ckpt", "--json")
    findings = json.loads(out)["findings"]
    assert code == 1
    lost = "optimizer.state.module.module.module.decoder.layers.0.mlp.linear_fc1.weight_v"
    assert [(f["severity"], f["message"].split(";")[0]) for f in findings] == [
        ("error", f"optimizer state exp_avg is missing (no [{lost}.exp_avg])"),
        ("warning", "optimizer state matches no model parameter"),
        ("warning", NO_HF_CONFIG),  # its args lack the sizes a config is derived from
    ]
    assert findings[0]["where"] == "[model.module.decoder.layers.0.mlp.linear_fc1.weight_v]"


def test_megatron_sgd_momentum_is_checked_as_its_state(made_optim, tmp_path):
    """Megatron-FSDP runs Megatron-LM's `--optimizer adam` or `sgd`; torch.optim.SGD keeps
    `momentum_buffer` per parameter. Was: exit 1, "optimizer state exp_avg is missing" and
    "exp_avg_sq is missing" for every parameter of a whole checkpoint."""
    import torch
    import torch.distributed.checkpoint as dcp

    maker_module = maker()
    state = maker_module.state_dict(maker_module.CONFIG)
    state["optimizer"]["state"] = {
        name: {"momentum_buffer": torch.zeros_like(moments["exp_avg"])}
        for name, moments in state["optimizer"]["state"].items()
    }
    dcp.save(state, checkpoint_id=str(tmp_path / "whole"), no_dist=True)
    code, out, err = run_cli("ckpt", "validate", tmp_path / "whole", "--json")
    report = json.loads(out)
    no_config = [f["message"].split(";")[0] for f in report["findings"]]  # args lack sizes
    assert code == 0 and no_config == [NO_HF_CONFIG] and report["has_optimizer_state"], out + err
    lost = "module.module.module.decoder.layers.0.mlp.linear_fc2.weight"
    del state["optimizer"]["state"][lost]["momentum_buffer"]
    dcp.save(state, checkpoint_id=str(tmp_path / "lost"), no_dist=True)
    code, out, _ = run_cli("ckpt", "validate", tmp_path / "lost", "--json")
    findings = json.loads(out)["findings"]
    expected = f"optimizer.state.{lost}.momentum_buffer"  # named by the key it lacks
    assert code == 1 and [(f["severity"], f["message"].split(";")[0]) for f in findings] == [
        ("error", f"optimizer state momentum_buffer is missing (no [{expected}])"),
        ("warning", NO_HF_CONFIG),
    ]
    assert findings[0]["where"] == "[model.module.decoder.layers.0.mlp.linear_fc2.weight]"


# --------------------------------------------------------------------------- damage
@pytest.mark.parametrize("kind", ["verl-rl-v1", "megatron-lm"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_foreign_checkpoints_fail(kind, damage, made_optim, tmp_path):
    laid = BUILDERS[kind](made_optim, tmp_path)
    DAMAGE[damage](laid.dist_ckpt)
    config = [] if laid.has_hf_config else ["--hf-config", made_optim / "config.json"]
    code, out, err = run_cli("ckpt", "validate", laid.run)
    assert code == 1 and out.splitlines()[-1].startswith("INVALID:"), out + err
    code, out, err = run_cli("ckpt", "export-hf", laid.run, "--out", tmp_path / "hf", *config)
    assert code == 1, out + err
    one_error_line(err)
    assert not (tmp_path / "hf").exists()


# --------------------------------------------------------------------------- usage
def test_actor_is_the_default_and_a_critic_is_not_exported(made_optim, tmp_path):
    laid = verl_rl_v1(made_optim, tmp_path)
    step = laid.levels["step"]
    actor = checkpoint_resolution.resolve_checkpoint(step)
    assert (actor.role, actor.roles) == ("actor", ("actor", "critic"))
    critic = checkpoint_resolution.resolve_checkpoint(step, role="critic")
    assert critic.dist_ckpt == step / "critic" / "dist_ckpt"
    code, out, err = run_cli("ckpt", "validate", laid.run, "--role", "critic")
    assert code == 0 and "critic" in out, out + err
    code, out, err = run_cli(
        "ckpt", "export-hf", laid.run, "--role", "critic", "--out", tmp_path / "hf"
    )
    assert code == 2 and "value head is not a language model" in one_error_line(err)


def _usage_cases():
    def no_layout(root, fixture):
        (root / "empty").mkdir()
        return ["ckpt", "validate", root / "empty"], "not a checkpoint (looked for .metadata"

    def steps_without_tracker(root, fixture):
        laid = BUILDERS["verl-sft"](fixture, root)
        (laid.run / "latest_checkpointed_iteration.txt").unlink()
        shutil.copytree(laid.levels["step"], laid.run / "global_step_80")
        return ["ckpt", "inspect", laid.run], "2 step dirs and no latest_checkpointed_iteration.txt"

    def hf_without_config(root, fixture):
        laid = BUILDERS["verl-rl-v1"](fixture, root)
        (laid.levels["actor"] / "huggingface" / "config.json").unlink()
        return ["ckpt", "export-hf", laid.run, "--out", root / "hf"], "pass --hf-config"

    def hugging_face_dir(root, fixture):
        (root / "hf").mkdir()
        shutil.copy2(fixture / "config.json", root / "hf" / "config.json")
        (root / "hf" / "model.safetensors").write_bytes(b"{}")
        return ["ckpt", "export-hf", root / "hf", "--out", root / "out"], "mfsdp ckpt import-hf"

    def several_runs(root, fixture):
        BUILDERS["verl-sft"](fixture, root / "runs")
        BUILDERS["megatron-lm"](fixture, root / "runs")
        return ["ckpt", "validate", root / "runs"], "holds 2 runs; give one of them"

    def missing_role(root, fixture):
        laid = BUILDERS["verl-rl-v2"](fixture, root)
        return ["ckpt", "inspect", laid.run, "--role", "critic"], "no critic/ here"

    def role_on_megatron(root, fixture):
        laid = BUILDERS["megatron-lm"](fixture, root)
        return ["ckpt", "inspect", laid.run, "--role", "actor"], "has no actor/ critic/ roles"

    def out_inside_checkpoint(root, fixture):
        laid = BUILDERS["verl-sft"](fixture, root)
        out = laid.levels["step"] / "dist_ckpt" / "hf"
        return [
            "ckpt",
            "export-hf",
            laid.run / "global_step_40",
            "--out",
            out,
        ], "lies inside the checkpoint"

    def out_onto_sibling_step(root, fixture):
        laid = BUILDERS["verl-sft"](fixture, root)
        other = BUILDERS["megatron-lm"](fixture, root)
        out = other.run / "iter_0000080"
        return [
            "ckpt",
            "export-hf",
            laid.run,
            "--out",
            out,
            "--overwrite",
        ], f"is the name of a checkpoint step of the run {other.run} (its saves write there"

    return {
        f.__name__: f
        for f in (
            no_layout,
            steps_without_tracker,
            hf_without_config,
            hugging_face_dir,
            several_runs,
            missing_role,
            role_on_megatron,
            out_inside_checkpoint,
            out_onto_sibling_step,
        )
    }


USAGE = _usage_cases()


@pytest.mark.parametrize("case", list(USAGE))
def test_usage_errors_are_one_line_exit_2(case, made_optim, tmp_path):
    args, words = USAGE[case](tmp_path, made_optim)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    code, out, err = run_cli(*args)
    assert code == 2, out + err
    assert words in one_error_line(err)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written, nothing removed


def test_a_directory_holding_one_run_resolves_to_it(made_optim, tmp_path):
    """As `mfsdp demo` leaves runs/demo: the run beside data, an HF model dir and an export."""
    laid = BUILDERS["verl-sft"](made_optim, tmp_path / "runs" / "demo")
    for model_dir in ("init_model", "hf"):
        (tmp_path / "runs" / "demo" / model_dir).mkdir()
        shutil.copy2(
            made_optim / "config.json", tmp_path / "runs" / "demo" / model_dir / "config.json"
        )
        (tmp_path / "runs" / "demo" / model_dir / "model.safetensors").write_bytes(b"{}")
    (tmp_path / "runs" / "demo" / "data").mkdir()
    code, out, err = run_cli("ckpt", "validate", tmp_path / "runs" / "demo", "--deep")
    assert code == 0, out + err
    assert f"holds one run: reading {laid.run}" in err


def test_a_step_of_ours_without_its_manifest_is_still_ours(tmp_path):
    run = shutil.copytree(OURS, tmp_path / "run")
    shutil.copytree(layout.step_dir(run, 2), layout.step_dir(run, 3))
    (layout.step_dir(run, 3) / "manifest.json").unlink()
    paths = checkpoint_resolution.resolve_checkpoint(layout.step_dir(run, 3))
    assert paths.kind == layout.MFSDP
    code, out, err = run_cli("ckpt", "validate", layout.step_dir(run, 3))
    assert code == 1 and "manifest is missing" in out, out + err


def test_megatron_release_and_a_config_that_does_not_fit(made_optim, tmp_path):
    run = tmp_path / "megatron"
    shutil.copytree(made_optim / "dist_ckpt", run / "release")
    (run / "latest_checkpointed_iteration.txt").write_text("release")
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert (paths.kind, paths.dist_ckpt, paths.step) == (layout.MEGATRON_LM, run / "release", None)
    wrong = json.loads((made_optim / "config.json").read_text())
    wrong["intermediate_size"] += 8
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    code, out, err = run_cli("ckpt", "validate", run, "--hf-config", tmp_path / "wrong.json")
    assert code == 1 and "the weights do not fit this config" in out, out + err
    assert run_cli("ckpt", "validate", run, "--hf-config", made_optim / "config.json")[0] == 0


def test_a_missing_data_file_is_one_finding_per_file_in_a_deep_validate(made_optim, tmp_path):
    """Was one `[key]: DIR/__0_0.distcp [key]: file is missing` line per tensor in it."""
    laid = BUILDERS["megatron-lm"](made_optim, tmp_path)
    shard = sorted(laid.dist_ckpt.glob("*.distcp"))[0]
    in_it = sum(
        any(c.file == shard.name for c in e.chunks)
        for e in CheckpointReader(laid.dist_ckpt).tensors.values()
    )
    shard.unlink()
    code, out, _ = run_cli("ckpt", "validate", laid.run, "--deep", "--json")
    messages = [f["message"] for f in json.loads(out)["findings"]]
    assert code == 1 and messages.count("referenced by .metadata but missing") == 1, out
    unread = [f for f in json.loads(out)["findings"] if f["message"].startswith("not read:")]
    assert 1 <= len(unread) <= 2, unread  # its tensors, and its non-tensor entries if any
    assert unread[0]["where"].endswith(f"] (+{in_it - 1} more)"), unread
    assert len(messages) <= 4, messages  # + the args record, read for the config, unreadable


def test_a_step_of_ours_copied_under_another_name_is_checked_against_its_manifest(tmp_path):
    """`cp -r run/global_step_80 best`: read as a bare dist_ckpt, its manifest went unread
    ("no manifest, so file hashes were not checked"), and a damaged copy validated clean."""
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    save_single_process_checkpoint(tmp_path / "run", build_tiny_model_dir(tmp_path / "assets"))
    best = tmp_path / "best"
    shutil.copytree(tmp_path / "run" / "global_step_1", best)
    paths = checkpoint_resolution.resolve_checkpoint(best)
    assert (paths.kind, paths.manifest) == (layout.MFSDP, best / layout.MANIFEST_FILE)
    assert paths.step == 1  # the manifest's: the dir's name says none
    code, out, err = run_cli("ckpt", "validate", best, "--deep")
    assert code == 0 and "hashes were not checked" not in out, out + err
    blob = next((best / layout.DIST_CKPT_DIR).glob("*.distcp"))
    blob.write_bytes(blob.read_bytes() + b"x")
    code, out, err = run_cli("ckpt", "validate", best)
    assert code == 1 and f"{blob}: has" in out and "manifest says" in out, out + err


OTHER_TOOLS_MANIFESTS = [
    b'{"name": "other-tool", "version": 2}',
    b"[]",
    b"",
    b'{"format_version": 2, "tool": "orbax-like", "files": ["dist_ckpt/.metadata"]}',
    b'{"tool": "x", "step": 4, "step": 4}',  # duplicate keys: JSON readers take the last
    b'{"tool": "x", // a comment\n "step": 4,}',
    b'\xef\xbb\xbf{"tool": "x"}',  # a UTF-8 byte-order mark, as Windows editors write
    '{"tool": "x"}'.encode("utf-16"),
]


@pytest.mark.parametrize("manifest", OTHER_TOOLS_MANIFESTS)
def test_another_tools_manifest_beside_a_dist_ckpt_leaves_it_a_bare_dcp(manifest, tmp_path):
    """Only a manifest mfsdp wrote makes a renamed dir one of our steps: another tool's
    manifest.json there made a valid checkpoint INVALID ("field 'format_version' is
    missing", "key 'step' appears twice", "not UTF-8 text"), and inspect and export refused
    it, however that tool writes its JSON."""
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    save_single_process_checkpoint(tmp_path / "run", build_tiny_model_dir(tmp_path / "assets"))
    export = tmp_path / "export"
    export.mkdir()
    shutil.copytree(tmp_path / "run" / "global_step_1" / "dist_ckpt", export / "dist_ckpt")
    (export / "manifest.json").write_bytes(manifest)
    assert checkpoint_resolution.resolve_checkpoint(export).manifest is None
    code, out, err = run_cli("ckpt", "validate", export)
    assert code == 0 and "no manifest, so file hashes were not checked" in out, out + err
