"""Hostile run configs: alias bombs, python tags, bytes that are not UTF-8, special files,
deep nesting and values out of range are refused with one line naming the file or key,
fast and before any work, in files and in `key=value` overrides alike (exit 2 via the CLI)."""

from __future__ import annotations

import os
import time

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import lines_besides_starting
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig

FAST_SECONDS = 5.0


def laughs(levels: int, fan_out: int) -> str:
    """A "billion laughs" flow mapping: level i is a list of `fan_out` aliases of level i-1."""
    parts = ["l0: &l0 [lol]"]
    for level in range(1, levels + 1):
        aliases = ", ".join([f"*l{level - 1}"] * fan_out)
        parts.append(f"l{level}: &l{level} [{aliases}]")
    return "{" + ", ".join(parts) + "}"


BOMBS = {
    "9x10": laughs(9, 10),  # 10^9 leaves, a few hundred bytes
    "5x40": laughs(5, 40),
    "3x999": laughs(3, 999),  # under the alias cap per level, 10^9 leaves in all
    "many-aliases": "{a: &a 1, b: [" + ", ".join(["*a"] * 5000) + "]}",
}


def refused(run, *needles: str, seconds: float = FAST_SECONDS) -> str:
    """The ConfigError message of `run()`, checked to be one line holding `needles`."""
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        run()
    assert time.monotonic() - started < seconds
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message
    for needle in needles:
        assert needle in message, message
    return message


def write(tmp_path, text: str | bytes, name: str = "config.yaml"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize("bomb", BOMBS)
@pytest.mark.parametrize("section", ["model:\n  overrides: ", "data:\n  train_files: "])
def test_alias_bombs_in_a_file_are_refused_fast(tmp_path, bomb, section):
    path = write(tmp_path, section + BOMBS[bomb] + "\n")
    refused(lambda: load_config(SFTConfig, path), str(path))


@pytest.mark.parametrize("bomb", BOMBS)
def test_alias_bombs_in_an_override_are_refused_fast(bomb):
    override = f"model.overrides={BOMBS[bomb]}"
    refused(lambda: load_config(SFTConfig, None, [override]), "model.overrides")


def test_anchors_that_stay_small_still_work(tmp_path):
    text = "optim: &o {lr: 0.001}\nmodel:\n  overrides: {a: &a [1, 2], b: [*a, *a]}\n"
    path = write(tmp_path, text)
    assert load_config(SFTConfig, path).model.overrides == {"a": [1, 2], "b": [[1, 2], [1, 2]]}


PYTHON_TAGS = [
    '!!python/object/apply:os.system ["touch {marker}"]',
    "!!python/name:os.system",
    "!!python/module:os",
    '!!python/object/new:subprocess.Popen [["touch", "{marker}"]]',
    "!!python/tuple [1, 2]",
]


@pytest.mark.parametrize("tag", PYTHON_TAGS)
def test_python_tags_are_refused_in_files_and_overrides(tmp_path, tag):
    marker = tmp_path / "PWNED"
    value = tag.format(marker=marker)
    path = write(tmp_path, f"model:\n  overrides:\n    x: {value}\n")
    refused(lambda: load_config(SFTConfig, path), str(path), "!!python/")
    refused(lambda: load_config(SFTConfig, None, [f"model.overrides={{x: {value} }}"]), "!!python/")
    refused(lambda: load_config(SFTConfig, None, [f"optim.lr={value}"]), "!!python/")
    assert not marker.exists()


@pytest.mark.parametrize(
    "raw",
    [
        "optim:\n  lr: 0.001 # caf\xe9\n".encode("latin-1"),
        "optim: {lr: 0.001}\n".encode("utf-16"),
        b"\xff\xfe\xfd",
        b"optim:\n  lr: 0.001\n\x80\n",
    ],
)
def test_config_files_that_are_not_utf8_are_refused(tmp_path, raw):
    path = write(tmp_path, raw)
    refused(lambda: load_config(SFTConfig, path), str(path), "UTF-8")


def test_special_and_huge_config_files_are_refused(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    refused(lambda: load_config(SFTConfig, fifo), str(fifo), "not a regular file")
    big = write(tmp_path, "# " + "x" * (2 << 20) + "\n", "big.yaml")
    refused(lambda: load_config(SFTConfig, big), str(big), "MiB")


@pytest.mark.parametrize("depth", [100, 2000, 50_000])
def test_deep_nesting_is_refused(tmp_path, depth):
    path = write(tmp_path, "model:\n  overrides: {a: " + "[" * depth + "]" * depth + "}\n")
    refused(lambda: load_config(SFTConfig, path), str(path))
    refused(lambda: load_config(SFTConfig, None, ["model.overrides=" + "[" * depth + "]" * depth]))


OUT_OF_RANGE = [
    ("optim.lr", "nan"),
    ("optim.lr", ".inf"),
    ("optim.lr", "-1e-5"),
    ("optim.eps", "0"),
    ("optim.betas", "[2, 3]"),
    ("optim.betas", "[0.9]"),
    ("optim.betas", "[0.9, 1.0]"),
    ("optim.betas", "[-0.1, 0.9]"),
    ("optim.weight_decay", "-0.1"),
    ("optim.warmup_ratio", "1.5"),
    ("optim.warmup_steps", "-1"),
    ("optim.clip_grad", "nan"),
    ("optim.min_lr", "-1"),
    ("checkpoint.keep_last", "0"),
    ("checkpoint.keep_last", "-3"),
    ("checkpoint.save_every", "-5"),
    ("trainer.total_steps", "-1"),
    ("trainer.total_steps", "0"),
    ("trainer.epochs", "0"),
    ("trainer.stop_at_step", "-2"),
    ("trainer.log_every", "0"),
    ("trainer.eval_every", "-1"),
    ("trainer.seed", "-7"),
    ("trainer.peak_tflops", "0"),
    ("data.global_batch_size", "0"),
    ("data.max_length", "-10"),
    ("data.val_ratio", "1.0"),
    ("data.max_tokens_per_micro_batch", "0"),
    ("data.micro_batch_size", "-1"),
    ("model.loss_chunk_tokens", "0"),
    ("strategy.bucket_size", "0"),
]


@pytest.mark.parametrize("key, value", OUT_OF_RANGE)
def test_sft_values_out_of_range_name_the_key(key, value):
    refused(lambda: load_config(SFTConfig, None, [f"{key}={value}"]), f"'{key}", "must be")


@pytest.mark.parametrize(
    "key, value",
    [
        ("rollout.n", "0"),
        ("rollout.top_p", "0"),
        ("rollout.top_p", "1.5"),
        ("rollout.top_k", "-2"),
        ("rollout.temperature", "-1"),
        ("rollout.gpu_memory_utilization", "2"),
        ("rollout.max_response_length", "0"),
        ("actor.ppo_epochs", "0"),
        ("actor.clip_ratio_c", "0.5"),
        ("actor.kl_loss_coef", "-1"),
        ("actor.ppo_mini_batch_size", "-16"),
        ("data.train_batch_size", "0"),
        ("algorithm.epsilon", "0"),
        ("optim.lr", "nan"),
        ("optim.betas", "[0.9, 1.5]"),
    ],
)
def test_grpo_values_out_of_range_name_the_key(key, value):
    refused(lambda: load_config(GRPOConfig, None, [f"{key}={value}"]), f"'{key}", "must be")


def test_range_errors_in_a_file_name_the_file(tmp_path):
    path = write(tmp_path, "checkpoint:\n  keep_last: 0\n")
    refused(lambda: load_config(SFTConfig, path), str(path), "'checkpoint.keep_last' must be > 0")


def test_values_at_the_edges_are_accepted():
    cfg = load_config(
        SFTConfig,
        None,
        [
            "optim.lr=0",
            "optim.betas=[0, 0.999]",
            "checkpoint.keep_last=1",
            "checkpoint.save_every=0",
            "trainer.total_steps=1",
            "optim.warmup_ratio=1",
            "data.val_ratio=0",
            "trainer.total_steps=null",
        ],
    )
    assert (cfg.optim.lr, cfg.optim.betas, cfg.checkpoint.keep_last, cfg.trainer.total_steps) == (
        0.0,
        [0.0, 0.999],
        1,
        None,
    )
    edges = ["rollout.top_k=-1", "rollout.top_k=50", "rollout.top_p=1"]
    grpo = load_config(GRPOConfig, None, edges)
    assert (grpo.rollout.top_k, grpo.rollout.top_p) == (50, 1.0)


CLI_CASES = {
    "bomb-file": ("model:\n  overrides: " + BOMBS["9x10"] + "\n", ()),
    "tag-override": ("", ('optim.lr=!!python/object/apply:os.system ["true"]',)),
    "latin1-file": ("optim:\n  lr: 0.001 # caf\xe9\n".encode("latin-1"), ()),
    "range-override": ("", ("checkpoint.keep_last=0",)),
    "nan-override": ("", ("optim.lr=nan",)),
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_refuses_in_one_line_with_exit_2(tmp_path, case):
    text, overrides = CLI_CASES[case]
    path = write(tmp_path, text or "trainer:\n  device: cpu\n")
    started = time.monotonic()
    result = CliRunner().invoke(app, ["train", "sft", "--config", str(path), *overrides])
    assert time.monotonic() - started < FAST_SECONDS
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output


@pytest.mark.parametrize(
    "raw",
    [
        "caf\xe9".encode("latin-1"),
        b"\xff\xfe{}",
        b'{"prompt": "2+2?", "response": "4"}\n\x80\n',  # a first row train takes, then not UTF-8
    ],
)
def test_data_files_that_are_not_utf8_are_refused_in_one_line(tmp_path, raw):
    data = tmp_path / "train.jsonl"
    data.write_bytes(raw)
    result = CliRunner().invoke(
        app,
        [
            "train",
            "sft",
            "trainer.device=cpu",
            f"data.train_files={data}",
            f"trainer.run_dir={tmp_path / 'run'}",
            "trainer.progress_bar=false",
        ],
    )
    assert result.exit_code == 2, result.output
    lines = lines_besides_starting(result.output)
    assert len(lines) == 1 and "UTF-8" in lines[0] and str(data) in lines[0], result.output


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ("{num_attention_heads: 0}", "num_attention_heads must be a positive integer"),
        ("{num_hidden_layers: -1}", "num_hidden_layers must be a positive integer"),
        ("{num_hidden_layers: 100000000}", "num_hidden_layers=100000000 is over the"),
        ("{hidden_size: 0}", "hidden_size must be a positive integer"),
        (
            "{num_attention_heads: 4, num_key_value_heads: 3}",
            "num_attention_heads=4 is not a multiple of num_key_value_heads=3",
        ),
        ("{vocab_size: 1.5}", "vocab_size must be a positive integer"),
    ],
)
def test_model_overrides_with_sizes_that_make_no_sense_are_refused(overrides, reason):
    """Each names the rule its field breaks (the same words config.json's value gets)."""
    override = f"model.overrides={overrides}"
    refused(lambda: load_config(SFTConfig, None, [override]), "'model.overrides'", reason)
