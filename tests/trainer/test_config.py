from pathlib import Path

import pytest

from tests.support.paths import REPO
from trainer.config import ConfigError, SFTConfig, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_yaml_then_overrides_win(tmp_path):
    path = write(
        tmp_path, "optim:\n  lr: 1.0e-4\n  betas: [0.8, 0.9]\ndata:\n  train_files: a.jsonl\n"
    )
    cfg = load_config(
        SFTConfig,
        path,
        ["optim.lr=2e-5", "trainer.total_steps=7", "model.overrides={num_hidden_layers: 3}"],
    )
    assert cfg.optim.lr == 2e-5  # `2e-5` is a string to YAML 1.1; numbers still parse
    assert cfg.optim.betas == [0.8, 0.9]
    assert cfg.data.train_files == ["a.jsonl"]  # one file is a list of one
    assert cfg.trainer.total_steps == 7
    assert cfg.model.overrides == {"num_hidden_layers": 3}
    assert cfg.optim.weight_decay == SFTConfig().optim.weight_decay  # untouched default


def test_unknown_key_in_file_names_file_key_and_matches(tmp_path):
    path = write(tmp_path, "optim:\n  lrr: 1.0\n")
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, path)
    message = str(err.value)
    assert str(path) in message and "'optim.lrr'" in message and "optim.lr" in message


def test_unknown_override_and_section_suggestions():
    with pytest.raises(
        ConfigError,
        match=r"override: unknown config key 'optim.warmup'; did you mean optim.warmup_steps",
    ):
        load_config(SFTConfig, None, ["optim.warmup=3"])
    with pytest.raises(ConfigError, match=r"unknown config key 'modell'; did you mean model"):
        load_config(SFTConfig, None, ["modell.path=x"])


@pytest.mark.parametrize(
    "override, expected",
    [
        ("optim.lr=abc", "expects a number"),
        ("data.packing=1", "expects true or false"),
        ("trainer.total_steps=1.5", "expects an integer"),
        ("data.truncation=middle", "one of error | left | right"),
        ("optim=3", "expects a section"),
        ("optim.betas=0.9", "expects a list"),
        ("optim.lr", "expected key=value"),
    ],
)
def test_type_errors_name_the_key(override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(SFTConfig, None, [override])


def test_bad_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(SFTConfig, write(tmp_path, "optim: [\n"))
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(SFTConfig, tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(SFTConfig, write(tmp_path, "- 1\n"))


def test_a_mistyped_config_path_suggests_the_file_it_likely_meant(tmp_path):
    (tmp_path / "sft_tiny.yaml").write_text("trainer: {}\n")
    with pytest.raises(ConfigError) as missing:
        load_config(SFTConfig, tmp_path / "sft_tiny.yml")
    assert str(missing.value).endswith(
        "cannot read config (No such file or directory); "
        f"did you mean {tmp_path / 'sft_tiny.yaml'}?"
    )
    with pytest.raises(ConfigError) as unlike:
        load_config(SFTConfig, tmp_path / "grpo.yaml")
    assert "did you mean" not in str(unlike.value)


def test_nullable_fields_accept_null():
    cfg = load_config(SFTConfig, None, ["trainer.total_steps=null", "checkpoint.keep_last=2"])
    assert cfg.trainer.total_steps is None and cfg.checkpoint.keep_last == 2


def test_gsm8k_example_mirrors_the_seed_settings():
    cfg = load_config(SFTConfig, REPO / "examples" / "sft_gsm8k_qwen.yaml")
    optim = cfg.optim
    assert (optim.lr, optim.warmup_ratio, optim.weight_decay, optim.betas, optim.clip_grad) == (
        1e-5,
        0.2,
        0.1,
        [0.9, 0.95],
        1.0,
    )
    assert (optim.scheduler, optim.min_lr) == ("cosine", 1e-6)
    assert cfg.strategy.name == "megatron_fsdp" and cfg.data.packing
    assert load_config(SFTConfig, REPO / "examples" / "sft_tiny_cpu.yaml").strategy.name == "fsdp2"


@pytest.mark.parametrize(
    ("override", "read_as"),
    [("trainer.total_steps=010", "8"), ("data.max_length=1:00", "60"), ("trainer.seed=-07", "-7")],
)
def test_yaml_11_octal_and_base_60_integers_are_refused(override, read_as):
    """`total_steps=010` trained 8 steps and `max_length=1:00` was 60, without a word."""
    with pytest.raises(ConfigError, match=rf"integer only in YAML 1\.1's .* read as {read_as} "):
        load_config(SFTConfig, None, [override])
    assert load_config(SFTConfig, None, ["trainer.total_steps=10"]).trainer.total_steps == 10


def test_min_lr_above_lr_is_refused_naming_both_keys(tmp_path):
    """The decay "to" min_lr raised the learning rate 10x above optim.lr."""
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, ["optim.lr=1e-4", "optim.min_lr=1e-3"])
    assert str(err.value) == (
        "optim.min_lr=1e-3 is above optim.lr=1e-4: the cosine schedule goes from optim.lr"
        " to optim.min_lr, so it would raise the learning rate; set optim.min_lr <= optim.lr"
    )
    path = write(tmp_path, "optim:\n  lr: 1.0e-4\n  min_lr: 1.0e-3\n")
    assert load_config(SFTConfig, path, ["optim.lr=1e-2"]).optim.lr == 1e-2  # mended
    constant = ["optim.lr=1e-4", "optim.min_lr=1e-3", "optim.scheduler=constant"]
    assert load_config(SFTConfig, None, constant).optim.min_lr == 1e-3  # min_lr unused


def test_val_ratio_beside_val_files_is_refused():
    """val_ratio was ignored without a word when val_files were given."""
    with pytest.raises(ConfigError, match=r"^data.val_ratio=0.1 with data.val_files: "):
        load_config(SFTConfig, None, ["data.val_files=v.jsonl", "data.val_ratio=0.1"])
    chosen = load_config(SFTConfig, None, ["data.val_files=v.jsonl", "data.val_ratio=0"])
    assert chosen.data.val_files == ["v.jsonl"]


def test_contradicting_keys_stop_the_command_in_one_line(tmp_path):
    from tests.support.cli_errors import one_error
    from tests.support.model_dirs import train

    code, err = train("sft", "optim.lr=1e-4", f"trainer.run_dir={tmp_path / 'run'}")
    assert code == 2, err
    one_error(err, "optim.min_lr=0.0003 is above optim.lr=1e-4")


def test_a_list_key_given_one_value_names_what_the_list_holds():
    """Was: "expects a list of a number"."""
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, ["optim.betas=0.9"])
    assert str(caught.value).endswith("'optim.betas' expects a list of numbers, got 0.9")
