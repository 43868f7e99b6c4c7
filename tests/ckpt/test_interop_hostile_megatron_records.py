"""Hostile records in Megatron-LM and Megatron-Bridge checkpoints: every consumer of
`run_config.yaml`, `args`, the train-state trackers and Bridge's `tokenizer/` stays
bounded in time and memory, fails in one line naming the file and key, and executes
nothing the checkpoint names.

The YAML and pickle "billion laughs" below are a few hundred bytes that expand to 9**9
shared references: walking, copying or printing the tree (repr, json.dumps) would build
about 2 GB and take a minute, so the time bound is what shows a consumer walked it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from mfsdp_ckpt.convert.megatron_record import MAX_RUN_CONFIG_BYTES
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run, megatron_args, megatron_run

COMMANDS = ("export-hf", "inspect", "validate")
BOUND_S = 10.0
ITER = "iter_0000010"


def _yaml_bomb() -> tuple[str, str]:
    """YAML anchors nine deep, nine references each; `*i` names the 9**9-leaf tree."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n", "*a8"


def _pickle_bomb() -> list:
    """The same tree as Python lists: pickle memoises the shared lists, so it is small."""
    tree: list = ["x"] * 9
    for _ in range(8):
        tree = [tree] * 9
    return tree


def _run_all(run: Path, out: Path) -> dict[str, tuple[int, str, str, float]]:
    results = {}
    for command in COMMANDS:
        args = ["ckpt", command, run]
        args += ["--out", out] if command == "export-hf" else []
        args += ["--json"] if command == "inspect" else []
        start = time.monotonic()
        code, stdout, err = run_cli(*args)
        results[command] = (code, stdout, err, time.monotonic() - start)
    return results


def _assert_refused(results, words: str, out: Path) -> None:
    """export exits 1 naming the key; inspect shows why no config was derived; validate
    fails in export's line; each within the bound."""
    code, stdout, err, _took = results["export-hf"]
    assert code == 1 and words in one_error_line(err), stdout + err
    assert not out.exists()
    code, stdout, err, _ = results["inspect"]
    problem = json.loads(stdout)["recorded_model"]["problem"]
    assert code == 0 and words in problem and "\n" not in problem, stdout + err
    code, stdout, err, _ = results["validate"]
    assert code == 1 and one_error_line(results["export-hf"][2]) in stdout, stdout + err
    assert all(r[3] < BOUND_S for r in results.values()), {k: r[3] for k, r in results.items()}


def _bridge_with(tmp_path: Path, edit) -> Path:
    run = bridge_run(tmp_path, tiny_causal_lm("llama"), steps=(10,))
    config = run / ITER / "run_config.yaml"
    config.write_text(edit(yaml.safe_load(config.read_text())))
    return run


def _model_edit(**changes):
    def edit(data: dict) -> str:
        data["model"].update(changes)
        return yaml.safe_dump(data)

    return edit


def _bomb_at(key: str, inner: str | None = None):
    """run_config.yaml whose model `key` (or `key._target_`) is the alias bomb."""
    prefix, ref = _yaml_bomb()

    def edit(data: dict) -> str:
        data["model"][key] = {inner: "BOMB"} if inner else "BOMB"
        return prefix + yaml.safe_dump(data).replace("BOMB", ref)

    return edit


BOMB_KEYS = ("normalization", "hidden_size", "layernorm_epsilon", "add_qkv_bias", "activation_func")


@pytest.mark.parametrize("key", BOMB_KEYS)
def test_a_yaml_alias_bomb_in_run_config_is_refused_without_walking_it(key, tmp_path):
    """Was: a minute and gigabytes (the error line printed repr of the whole tree). The
    bomb is refused as the file is read, whichever key it is at: a damaged checkpoint."""
    run = _bridge_with(tmp_path, _bomb_at(key, "_target_" if key == "activation_func" else None))
    results = _run_all(run, tmp_path / "hf")
    values = MAX_RUN_CONFIG_BYTES // 2  # the value budget: two bytes a value, the file's cap
    words = f"run_config.yaml: expands to over {values} values through anchors/aliases"
    code, stdout, err, _took = results["export-hf"]
    assert code == 1 and words in one_error_line(err), stdout + err
    problem = json.loads(results["inspect"][1])["recorded_model"]["problem"]
    assert results["inspect"][0] == 0 and words in problem, results["inspect"]
    assert results["validate"][0] == 1 and words in results["validate"][1], results["validate"]
    assert all(r[3] < BOUND_S for r in results.values()), {k: r[3] for k, r in results.items()}


WRONG_VALUES = {
    "layernorm_epsilon=abc": ({"layernorm_epsilon": "abc"}, "layernorm_epsilon='abc'"),
    "layernorm_epsilon=list": ({"layernorm_epsilon": [1e-6]}, "layernorm_epsilon=a list"),
    "layernorm_epsilon=nan": ({"layernorm_epsilon": float("nan")}, "layernorm_epsilon=nan"),
    "rotary_base=inf": ({"rotary_base": float("inf")}, "rotary_base=inf"),
    "rotary_base=None": ({"rotary_base": None}, "rotary_base is not recorded (None)"),
    "rotary_base=-1": ({"rotary_base": -1.0}, "rotary_base=-1.0"),
    "add_qkv_bias='false'": ({"add_qkv_bias": "false"}, "add_qkv_bias='false' is not true"),
    "qk_layernorm=1": ({"qk_layernorm": 1}, "qk_layernorm=1 is not true or false"),
    "share='no'": (
        {"share_embeddings_and_output_weights": "no"},
        "share_embeddings_and_output_weights (inverted)='no'",
    ),
    "gated_linear_unit='false'": (
        {"gated_linear_unit": "false"},
        "gated_linear_unit/activation_func='false'",
    ),
    "silu of another module": (
        {"activation_func": {"_target_": "evil.module.silu", "_call_": False}},
        "gated_linear_unit/activation_func=False",
    ),
    "hidden_size=10**4000": ({"hidden_size": 10**4000}, "hidden_size=an integer of 13288 bits"),
    "hidden_size='128'": ({"hidden_size": "128"}, "hidden_size='128' is not a positive"),
    "num_layers=True": ({"num_layers": True}, "num_layers=True is not a positive integer"),
    "num_layers=-2": ({"num_layers": -2}, "num_layers=-2 is not a positive integer"),
    "num_query_groups=0": ({"num_query_groups": 0}, "num_query_groups=0 is not a positive"),
    "groups not dividing heads": (
        {"num_query_groups": 3},
        "num_attention_heads=4 is not a multiple of num_query_groups=3",
    ),
    "heads not dividing hidden": (
        {"num_attention_heads": 5, "num_query_groups": None, "kv_channels": None},
        "hidden_size=128 is not a multiple of num_attention_heads=5",
    ),
    "vocab_size=[]": ({"vocab_size": []}, "vocab_size=a list is not a positive integer"),
    "num_moe_experts=True": ({"num_moe_experts": True}, "num_moe_experts=True is not a count"),
    "num_moe_experts='8'": ({"num_moe_experts": "8"}, "num_moe_experts='8' is not a count"),
    # a mixture-of-experts record (Mixtral-like: no q/k layernorm, no q/k/v bias)
    "moe_router_topk='2'": (
        {"num_moe_experts": 4, "moe_router_topk": "2"},
        "moe_router_topk='2' is not a positive integer",
    ),
    "moe_router_topk=0": (
        {"num_moe_experts": 4, "moe_router_topk": 0},
        "moe_router_topk=0 is not a positive integer",
    ),
    "moe_ffn_hidden_size=-8": (
        {"num_moe_experts": 4, "moe_ffn_hidden_size": -8},
        "moe_ffn_hidden_size=-8 is not a positive integer",
    ),
    "moe_router_pre_softmax='false'": (
        {"num_moe_experts": 4, "moe_router_topk": 1, "moe_router_pre_softmax": "false"},
        "moe_router_pre_softmax='false' is not true or false",
    ),
    "moe_shared_expert_gate='yes'": (
        {
            "num_moe_experts": 4,
            "add_qkv_bias": True,
            "moe_shared_expert_intermediate_size": 8,
            "moe_shared_expert_gate": "yes",
        },
        "moe_shared_expert_gate='yes' is not true or false",
    ),
    "moe_layer_freq nested lists": (
        {"num_moe_experts": 4, "moe_layer_freq": [[1] * 4] * 4},
        "moe_layer_freq=a list mixes dense and MoE layers",
    ),
    "moe_router_load_balancing_type=[sinkhorn]": (
        {"num_moe_experts": 4, "moe_router_load_balancing_type": ["aux_loss", "sinkhorn"]},
        "moe_router_load_balancing_type=a list cannot be exported (it changes which experts",
    ),
}


@pytest.mark.parametrize("case", list(WRONG_VALUES))
def test_wrong_types_and_values_in_run_config_are_refused_naming_the_key(case, tmp_path):
    """Was: tracebacks (float('abc')), NaN/Infinity written into config.json, a string
    "false" taken as true (another family or tying), a foreign `silu` taken as torch's,
    and head counts that divide nothing left to a later, vaguer error."""
    changes, words = WRONG_VALUES[case]
    run = _bridge_with(tmp_path, _model_edit(**changes))
    _assert_refused(_run_all(run, tmp_path / "hf"), words, tmp_path / "hf")


NOT_MAPPINGS = {
    "model a list": ({"model": [1, 2]}, "run_config.yaml: model is a list, not a mapping"),
    "model a string": ({"model": "gpt"}, "run_config.yaml: model is 'gpt', not a mapping"),
    "the file a list": ([1, 2], "run_config.yaml: holds a list, not a mapping of sections"),
}


@pytest.mark.parametrize("case", list(NOT_MAPPINGS))
def test_a_run_config_that_is_not_a_mapping_is_exit_1_naming_it(case, tmp_path):
    """Was: exit 2 asking for --hf-config, as if the record were merely incomplete."""
    content, words = NOT_MAPPINGS[case]
    run = _bridge_with(tmp_path, lambda data: yaml.safe_dump(content))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1 and words in one_error_line(err), stdout + err
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and words in stdout, stdout + err


def test_a_run_config_without_a_model_section_asks_for_hf_config(tmp_path):
    run = _bridge_with(tmp_path, lambda data: yaml.safe_dump({"tokenizer": data["tokenizer"]}))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 2 and "run_config.yaml lacks model" in line, stdout + err


@pytest.mark.parametrize("depth", [900, 50_000])
def test_deeply_nested_run_config_is_one_line(depth, tmp_path):
    nested = "[" * depth + "]" * depth
    run = _bridge_with(tmp_path, lambda data: f"model: {nested}\n")
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "run_config.yaml: nested deeper than 64 levels" in line, stdout + err


def test_targets_in_run_config_are_names_never_imported(tmp_path):
    """`_target_` of the model section, the activation and the dtype name classes and
    functions: they are compared as names and never imported, whatever module they name."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "target_marker_module.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "def silu(x):\n    return x\n"
    )
    edit = _model_edit(
        _target_="target_marker_module.Provider",
        activation_func={"_target_": "target_marker_module.silu", "_call_": False},
    )
    run = _bridge_with(tmp_path, edit)
    sys.path.insert(0, str(tmp_path))
    try:
        results = _run_all(run, tmp_path / "hf")
    finally:
        sys.path.remove(str(tmp_path))
    assert not marker.exists() and "target_marker_module" not in sys.modules
    _assert_refused(results, "gated_linear_unit/activation_func=False", tmp_path / "hf")


# --------------------------------------------------------------------------- Megatron-LM args
ARGS_CASES = {
    "bomb": ({"normalization": _pickle_bomb()}, "normalization=a list"),
    "huge int": ({"hidden_size": 2**2000}, "hidden_size=an integer of 2001 bits"),
    "string eps": ({"norm_epsilon": "1e-5"}, "norm_epsilon='1e-5' is not a positive number"),
    "string flag": ({"add_qkv_bias": "False"}, "add_qkv_bias='False' is not true or false"),
    "None untie": (
        {"untie_embeddings_and_output_weights": None},
        "untie_embeddings_and_output_weights is not recorded (None)",
    ),
    "zero heads": ({"num_attention_heads": 0}, "num_attention_heads=0 is not a positive"),
    "groups not dividing": ({"num_query_groups": 3}, "is not a multiple of num_query_groups=3"),
}


@pytest.mark.parametrize("case", list(ARGS_CASES))
def test_wrong_types_and_values_in_args_are_refused_naming_the_arg(case, tmp_path):
    """Was: a minute of repr for the pickle's shared lists, a traceback for a string
    epsilon, a string flag taken as true, a None tying flag taken as false."""
    changes, words = ARGS_CASES[case]
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, **changes))
    results = _run_all(run, tmp_path / "hf")
    _assert_refused(results, words, tmp_path / "hf")
    assert "[args]" in one_error_line(results["export-hf"][2])


def test_a_tokenizer_name_that_is_no_path_is_not_echoed(tmp_path):
    model = tiny_causal_lm("llama")
    name = "x" * 100_000 + "\nerror: forged"
    run = megatron_run(tmp_path, model, megatron_args(model, tokenizer_model=name))
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0 and "forged" not in err and len(err) < 10_000, err[:2000]


# --------------------------------------------------------------------------- Bridge files
def _tokenizer_link_out(tokenizer: Path, outside: Path) -> None:
    (tokenizer / "vocab.txt").symlink_to(outside)


def _tokenizer_fifo(tokenizer: Path, outside: Path) -> None:
    os.mkfifo(tokenizer / "merges.txt")


def _tokenizer_subdir_link_out(tokenizer: Path, outside: Path) -> None:
    (tokenizer / "sub").mkdir()
    (tokenizer / "sub" / "special.json").symlink_to(outside)


def _tokenizer_subdir_is_link(tokenizer: Path, outside: Path) -> None:
    (tokenizer / "extra").symlink_to(outside.parent, target_is_directory=True)


def _tokenizer_dir_is_link(tokenizer: Path, outside: Path) -> None:
    shutil.rmtree(tokenizer)
    tokenizer.symlink_to(outside.parent, target_is_directory=True)


def _tokenizer_dir_is_file(tokenizer: Path, outside: Path) -> None:
    shutil.rmtree(tokenizer)
    tokenizer.write_text("tokenizer")


TOKENIZER_CASES = {
    "file linked out": (_tokenizer_link_out, "vocab.txt: resolves outside the checkpoint"),
    "FIFO": (_tokenizer_fifo, "merges.txt: a FIFO"),
    "subdir file linked out": (_tokenizer_subdir_link_out, "special.json: resolves outside"),
    "subdir linked out": (_tokenizer_subdir_is_link, "extra: resolves outside"),
    "tokenizer/ linked out": (_tokenizer_dir_is_link, "tokenizer: a symlink"),
    "tokenizer a file": (_tokenizer_dir_is_file, "tokenizer: not a directory"),
}


@pytest.mark.parametrize("case", list(TOKENIZER_CASES))
def test_bridge_tokenizer_files_are_copied_only_from_inside_the_checkpoint(case, tmp_path):
    """Links out of the checkpoint are never followed into the export, a FIFO never
    blocks it; was: a tokenizer/ that is a symlink or a file exported as "no tokenizer"."""
    make, words = TOKENIZER_CASES[case]
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("users' secret")
    run = bridge_run(tmp_path, tiny_causal_lm("llama"), steps=(10,))
    make(run / ITER / "tokenizer", secret)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 1 and words in one_error_line(err), stdout + err
    assert not out.exists()


def _train_state_bytes(**changes) -> bytes:
    import io

    import torch

    from tests.support.megatron_checkpoints import train_state

    state = {**train_state(10), **changes}
    state = {key: value for key, value in state.items() if value is not None}  # None: removed
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _tracker_cases():
    import torch

    return {
        "truncated": (lambda: _train_state_bytes()[:300], "not a torch.save zip archive"),
        "not a zip": (lambda: b"step=10\n", "not a torch.save zip archive"),
        "huge": (lambda: b"\0" * (2 << 20), "more than the 1048576"),
        "negative": (
            lambda: _train_state_bytes(step=torch.tensor(-3)),
            "step -3 is out of range (0 to 999999999999999999)",
        ),
        "out of range": (
            lambda: _train_state_bytes(step=torch.tensor(2**62)),
            "step 4611686018427387904 is out of range",
        ),
        "no step": (lambda: _train_state_bytes(step=None), "holds no 'step' entry"),
        "float": (lambda: _train_state_bytes(step=torch.tensor(2.5)), "found 2.5"),
        "vector": (lambda: _train_state_bytes(step=torch.tensor([1, 2])), "not a 0-dim"),
        "plain int": (lambda: _train_state_bytes(step=10), "[step]: not a tensor"),
        "missing iter": (
            lambda: _train_state_bytes(step=torch.tensor(30)),
            "names step '30', but iter_0000030/ is missing",
        ),
    }


@pytest.mark.parametrize("case", list(_tracker_cases()))
def test_a_damaged_latest_train_state_is_one_line_exit_1(case, tmp_path):
    make, words = _tracker_cases()[case]
    run = bridge_run(tmp_path, tiny_causal_lm("llama"), steps=(10,))
    (run / "latest_train_state.pt").write_bytes(make())
    for command in ("validate", "export-hf"):
        args = ["--out", tmp_path / "hf"] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, run, *args)
        line = one_error_line(stdout if command == "validate" else err)  # validate: a finding
        assert code == 1 and "latest_train_state.pt" in line and words in line, stdout + err
        assert "iter_0000010" in line


def test_the_iteration_train_state_is_never_read(tmp_path):
    """iter_N/train_state.pt only marks the dir as Megatron-Bridge's: a FIFO there never
    blocks, damaged bytes there never fail the export."""
    run = bridge_run(tmp_path, tiny_causal_lm("llama"), steps=(10,))
    state = run / ITER / "train_state.pt"
    state.unlink()
    os.mkfifo(state)
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, stdout + err


def _namespace_archive(pickle_bytes: bytes) -> bytes:
    """A torch.save archive of an argparse.Namespace whose data.pkl is `pickle_bytes`."""
    import argparse
    import io
    import zipfile

    import torch

    saved = io.BytesIO()
    torch.save(argparse.Namespace(a=1), saved)
    source = zipfile.ZipFile(io.BytesIO(saved.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            data = pickle_bytes if info.filename.endswith("data.pkl") else source.read(info)
            archive.writestr(info.filename, data)
    return out.getvalue()


def test_a_deeply_nested_args_value_is_one_line():
    """90,000 nested lists (EMPTY_LIST/APPEND opcodes, within the memory budget) load
    without recursion; was: RecursionError from repr when the error line was built."""
    from mfsdp_ckpt.convert.megatron_config import MegatronConfigError, hf_config_from_megatron
    from mfsdp_ckpt.format.saved_objects import load_namespace

    depth = 90_000
    data = b"\x80\x02cargparse\nNamespace\n)\x81}X\x0d\x00\x00\x00normalization"
    data += b"]" * depth + b"a" * (depth - 1) + b"sb."
    fields = load_namespace(_namespace_archive(data), "args")
    sizes = dict(
        num_layers=2,
        hidden_size=8,
        num_attention_heads=2,
        ffn_hidden_size=16,
        swiglu=True,
        position_embedding_type="rope",
        untie_embeddings_and_output_weights=False,
        padded_vocab_size=32,
        max_position_embeddings=64,
    )
    with pytest.raises(MegatronConfigError, match=r"^args: normalization=a list cannot be"):
        hf_config_from_megatron({**sizes, **fields}, "args")


def test_args_whose_names_are_not_strings_are_one_line():
    """A Namespace maps names to values. Its names are checked once, on the Namespace the
    pickle returns: a BUILD keeps its state dict unwalked, so that BUILDing many Namespaces
    from one memoized dict of a million names costs no more per BUILD than from one name."""
    from mfsdp_ckpt.errors import CheckpointFormatError
    from mfsdp_ckpt.format.saved_objects import load_namespace

    data = b"\x80\x02cargparse\nNamespace\n)\x81}K\x01K\x02sb."
    with pytest.raises(
        CheckpointFormatError, match=r"^args: argparse.Namespace state is not a dict of names$"
    ):
        load_namespace(_namespace_archive(data), "args")
