"""`model.overrides` numbers written with an exponent (`1e-5`, `5e5`, `5.0e5`) are floats,
as Hydra and OmegaConf read them, on the command line and in a config file alike: PyYAML's
YAML 1.1 read them as text, which transformers refused as "expected float, got str" or,
for the RoPE keys moved into `rope_parameters`, failed on in the rotary embedding with a
bare TypeError naming no key. Quoted (`'1e-5'`), a value stays text, as in Hydra, and text
where transformers takes a number is refused in one line naming `model.overrides.<key>`."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import one_error
from tests.support.model_dirs import train
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, ModelConfig, SFTConfig, load_config
from trainer.model import build_hf_config, load_tokenizer

EXPONENTS = ["1e-5", "5e5", "5.0e5", "1e6", "-1e-6", "1E5", "5e+5"]
DATA = "data.train_files=[train.parquet]"


def _overrides_given(*overrides: str, text: str | None = None, tmp_path=None) -> dict:
    path = None
    if text is not None:
        path = tmp_path / "sft.yaml"
        path.write_text(text)
    return load_config(SFTConfig, path, [DATA, *overrides]).model.overrides


def _built(overrides: dict):
    cfg = ModelConfig(overrides=overrides)
    return build_hf_config(cfg, load_tokenizer(cfg))


@pytest.mark.parametrize("written", EXPONENTS)
def test_an_exponent_is_a_float_on_the_command_line(written):
    assert _overrides_given(f"model.overrides.rms_norm_eps={written}") == {
        "rms_norm_eps": float(written)
    }
    whole = _overrides_given(f"model.overrides={{rope_theta: {written}}}")
    assert whole == {"rope_theta": float(written)}


@pytest.mark.parametrize("written", EXPONENTS)
def test_an_exponent_is_a_float_in_a_config_file(tmp_path, written):
    text = (
        f"model:\n  overrides:\n    rope_theta: {written}\n"
        f"    rope_scaling: {{factor: {written}}}\n"
    )
    assert _overrides_given(text=text, tmp_path=tmp_path) == {
        "rope_theta": float(written),
        "rope_scaling": {"factor": float(written)},
    }


def test_quoted_it_stays_text(tmp_path):
    assert _overrides_given("model.overrides.rms_norm_eps='1e-5'") == {"rms_norm_eps": "1e-5"}
    text = "model:\n  overrides: {rms_norm_eps: '1e-5', rope_theta: \"5e5\"}\n"
    assert _overrides_given(text=text, tmp_path=tmp_path) == {
        "rms_norm_eps": "1e-5",
        "rope_theta": "5e5",
    }


def test_the_rest_of_a_config_file_is_read_as_before(tmp_path):
    """Only the untyped values are read as Hydra reads floats: the file's other keys keep
    mfsdp's reading (a text key holds the text `1e3` as written)."""
    text = "trainer:\n  project_name: 1e3\nmodel:\n  overrides: {rope_theta: 1e6}\n"
    path = tmp_path / "sft.yaml"
    path.write_text(text)
    cfg = load_config(SFTConfig, path, [DATA])
    assert (cfg.trainer.project_name, cfg.model.overrides) == ("1e3", {"rope_theta": 1e6})


def test_the_model_gets_the_numbers():
    overrides = _overrides_given(
        "model.overrides.rope_theta=5e5", "model.overrides.rms_norm_eps=1e-5"
    )
    config = _built(overrides)
    assert config.rope_parameters["rope_theta"] == 5e5 and config.rms_norm_eps == 1e-5


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"rope_theta": "5e5"}, "model.overrides.rope_theta"),
        (
            {"rope_scaling": {"rope_type": "linear", "factor": "2"}},
            "model.overrides.rope_scaling.factor",
        ),
        ({"rope_parameters": {"rope_theta": "1e6"}}, "model.overrides.rope_parameters.rope_theta"),
    ],
)
def test_text_for_a_rope_number_is_refused_naming_its_key(overrides, key):
    with pytest.raises(ConfigError) as caught:
        _built(overrides)
    message = str(caught.value)
    assert message.startswith(f"{key}: ") and "\n" not in message, message
    assert "is not a number, which transformers takes" in message, message


def test_quoted_text_for_a_number_says_to_write_it_unquoted():
    with pytest.raises(ConfigError) as caught:
        _built({"rms_norm_eps": "1e-5"})
    message = str(caught.value)
    assert message.startswith("model.overrides.rms_norm_eps: transformers refuses it (")
    assert message.endswith("; write 1e-5 unquoted for the number (quoted, it stays text)")


def test_a_run_with_rope_theta_in_exponent_form_trains(tmp_path):
    table = write_chat_jsonl(tmp_path / "train.jsonl", rows=24)

    def run(value: str, name: str) -> tuple[int, str]:
        return train(
            "sft",
            f"model.overrides.rope_theta={value}",
            f"trainer.run_dir={tmp_path / name}",
            "trainer.total_steps=1",
            f"data.train_files={table}",
        )

    code, err = run("5e5", "plain")
    assert code == 0, err
    code, err = run("'5e5'", "quoted")
    assert code == 2, err
    one_error(err, "model.overrides.rope_theta: '5e5' is not a number")
