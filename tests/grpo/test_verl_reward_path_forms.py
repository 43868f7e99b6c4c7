"""verl's custom_reward_function.path is read as verl's loader reads it
(verl/utils/import_utils.py `load_module`): `file://rw/f.py` is the relative path rw/f.py (it
was refused as "a file:// URL of the host rw"), and `pkg://a.b.c`, a module to import, is
refused as not supported here, saying to give its file (it was "a URL; ... copy it locally
first", with nothing to copy)."""

import pytest
import yaml

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl


@pytest.mark.parametrize("section", ["custom_reward_function", "reward.custom_reward_function"])
@pytest.mark.parametrize(
    "given, path", [("file://rw/f.py", "rw/f.py"), ("file:///abs/rw/f.py", "/abs/rw/f.py")]
)
def test_a_file_prefix_is_dropped_as_verl_drops_it(section, given, path):
    cfg = load_config(GRPOConfig, None, [f"{section}.path={given}"])
    assert cfg.reward.path == path


@pytest.mark.parametrize(
    "given, module", [("pkg://json", "json"), ("pkg://my_pkg/rewards/math", "my_pkg.rewards.math")]
)
def test_verls_pkg_module_form_is_refused_saying_to_give_its_file(given, module):
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, [f"custom_reward_function.path={given}"])
    assert str(err.value) == (
        f"command-line override: verl key 'custom_reward_function.path={given}' has no"
        " equivalent here: verl's pkg:// module form is not supported here; give the module's"
        f""" file path (python -c "import {module}; print({module}.__file__)" prints it)"""
    )
    assert "URL" not in str(err.value)


def test_from_verl_writes_the_path_and_lists_a_pkg_module_as_not_carried(tmp_path):
    config = tmp_path / "verl.yaml"
    config.write_text(yaml.safe_dump({"custom_reward_function": {"path": "file://rw/f.py"}}))
    assert convert_verl(config, "grpo").tree["reward"]["path"] == "rw/f.py"
    config.write_text(yaml.safe_dump({"custom_reward_function": {"path": "pkg://json"}}))
    dropped = convert_verl(config, "grpo").dropped
    assert any("pkg://json" in item and "module form is not supported" in item for item in dropped)
