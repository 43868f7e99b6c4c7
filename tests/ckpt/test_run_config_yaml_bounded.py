"""A Megatron-Bridge checkpoint's run_config.yaml is read through the one bounded YAML loader
the run configs use (`mfsdp_ckpt/storage/bounded_yaml.py`): what it refuses is one line
naming the file, exit 1 as a damaged checkpoint, from `validate`, `inspect` and `export-hf`
alike, and from the check that reads its `optimizer:` section.

Was: `yaml.safe_load`, so `!!int ""` raised IndexError and `!!bool x` KeyError (tracebacks
from all three commands); a 5,000-digit integer, a key given twice, and one string copied
by aliases into megabytes as walked were read as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage import bounded_yaml
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import adam_state, bridge_run, mcore_weights, save_dcp
from trainer.config_yaml import YAMLConfigError, parse_yaml

ITER = "iter_0000010"
_LONG = "x" * 2000
HOSTILE = {
    "empty !!int": ('bad: !!int ""\n', "'' at line 1 is not a valid !!int"),
    "!!bool x": ("bad: !!bool x\n", "'x' at line 1 is not a valid !!bool"),
    "!!float word": ("bad: !!float abc\n", "'abc' at line 1 is not a valid !!float"),
    "13th month": ("bad: 2001-13-01\n", "'2001-13-01' at line 1 is not a valid !!timestamp"),
    "huge hex": ("bad: 0x" + "f" * 5000 + "\n", "integer at line 1 has 5000 digits; refusing"),
    "hex wider in decimal": ("bad: 0x" + "f" * 4000 + "\n", "more than 4300 digits in decimal"),
    "key twice": ("bad: 1\nbad: 2\n", "key 'bad' given twice (line 2)"),
    "python tag": ("bad: !!python/name:os.system\n", "YAML tag '!!python/name:os.system'"),
    "too deep": ("bad: " + "[" * 100 + "]" * 100 + "\n", "nested deeper than 64 levels"),
    # 4 levels of 20 references to one 2,000-character string: 320 MB as walked
    "long string copied": (
        f"s: &s {_LONG}\n"
        "l1: &l1 [" + ", ".join(["*s"] * 20) + "]\n"
        "l2: &l2 [" + ", ".join(["*l1"] * 20) + "]\n"
        "l3: &l3 [" + ", ".join(["*l2"] * 20) + "]\n"
        "l4: [" + ", ".join(["*l3"] * 20) + "]\n",
        "characters through anchors/aliases; refusing",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_the_config_loader_and_the_checkpoint_reader_refuse_alike(case):
    """One loader: each is refused by both, in one line starting with the source."""
    text, words = HOSTILE[case]
    for error, read in (
        (YAMLConfigError, lambda: parse_yaml(text, "c.yaml")),
        (
            CheckpointFormatError,
            lambda: bounded_yaml.parse_yaml(
                text,
                "c.yaml",
                CheckpointFormatError,
                bounded_yaml.ExpansionBudget(max_chars=4 << 20),
            ),
        ),
    ):
        with pytest.raises(error) as caught:
            read()
        message = str(caught.value)
        assert message.startswith("c.yaml: ") and words in message, message
        assert "\n" not in message and len(message) < 400, message


def _bridge(tmp_path: Path, extra: str, optimizer_lost: bool = False) -> tuple[Path, Path]:
    """A Bridge run whose run_config.yaml starts with `extra` (ends with it, under
    `optimizer:`, when `optimizer_lost`: its Adam state is then gone whole); the run and
    that file."""
    model = tiny_causal_lm("llama", vocab=64)
    run = bridge_run(tmp_path, model, steps=(10,))
    config = run / ITER / "run_config.yaml"
    if optimizer_lost:
        weights = mcore_weights(model)
        meta = adam_state(weights)["param_to_group_meta"]
        save_dcp(
            {"model": weights, "optimizer": {"state": {}, "param_to_group_meta": meta}},
            config.parent,
        )
        indented = "".join(f"  {line}\n" for line in extra.splitlines())
        config.write_text(config.read_text() + "optimizer:\n  optimizer: adam\n" + indented)
    else:
        config.write_text(extra + config.read_text())
    return run, config


READ_CASES = ["empty !!int", "!!bool x", "huge hex", "key twice", "long string copied"]


@pytest.mark.parametrize("case", READ_CASES)
def test_each_command_names_the_file_in_one_line(case, tmp_path):
    text, words = HOSTILE[case]
    run, config = _bridge(tmp_path, text)
    line = f"{config}: "
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    error = one_error_line(err)
    assert code == 1 and line in error and words in error, stdout + err
    assert not (tmp_path / "hf").exists()
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and f"error: {line}" in stdout and words in stdout, stdout + err
    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    problem = json.loads(stdout)["recorded_model"]["problem"]
    assert code == 0 and problem.startswith(line) and words in problem, stdout + err


def test_the_optimizer_section_is_read_through_the_same_reader(tmp_path):
    """The check of an optimizer state lost whole reads run_config.yaml's `optimizer:`: a
    value there no tag makes leaves the optimizer unknown, named in the one error."""
    run, config = _bridge(tmp_path, HOSTILE["empty !!int"][0], optimizer_lost=True)
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    assert out, err
    errors = [f["message"] for f in json.loads(out)["findings"] if f["severity"] == "error"]
    lost = [message for message in errors if message.startswith("no optimizer state")]
    assert code == 1 and len(lost) == 1, errors
    assert f"which optimizer is not known: {config}: '' at line " in lost[0], lost[0]
    assert "is not a valid !!int" in lost[0], lost[0]


def test_a_plain_run_config_still_reads(tmp_path):
    run, config = _bridge(tmp_path, "note: plain\n")
    assert yaml.safe_load(config.read_text())["note"] == "plain"
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and stdout.startswith("valid: "), stdout + err


def test_a_large_data_blend_within_the_byte_cap_reads(tmp_path):
    """A run trained on a blend of 60,000 shard paths writes them all into run_config.yaml
    (about 2.7 MB, under the 4 MiB cap): its values alone must not make the checkpoint
    invalid (the value budget was 100,000 whatever the file's size)."""
    run, config = _bridge(tmp_path, "")
    data = yaml.safe_load(config.read_text())
    paths = [f"/lustre/fw/shard_{i:05d}_text_document" for i in range(60_000)]
    data["dataset"] = {"blend": [paths, [1.0] * len(paths)], "sequence_length": 4096}
    # libyaml's emitter where installed: the same YAML, written in a tenth of the time
    config.write_text(yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and stdout.startswith("valid: "), stdout + err
