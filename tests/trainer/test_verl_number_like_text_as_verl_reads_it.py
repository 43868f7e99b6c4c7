"""`mfsdp config from-verl` names a run by the text verl ends up using for a number-like
value of a text key: on the command line Hydra types the value (decimal integers, floats
with a point or an exponent, inf, nan, true/false in any case) and verl prints the Python
value into its names (`checkpoints/${trainer.project_name}/...`, the trackers'); what Hydra
does not type (`0x1f`, `yes`) is the text written. In a verl YAML, OmegaConf's YAML 1.1
loader types it (`0x1f` is 31, `yes` true, `1e3` 1000.0). Where verl takes a path, a
number fails in verl, and is refused."""

import pytest

from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"


def converted_script(tmp_path, *overrides: str) -> dict:
    script = tmp_path / "run.sh"
    script.write_text(" ".join([LAUNCH, *overrides]) + "\n")
    return convert_verl(script).tree


@pytest.mark.parametrize(
    "written, named",
    [
        ("42", "42"),
        ("2024", "2024"),
        ("1.50", "1.5"),
        ("1e3", "1000.0"),
        ("1_0", "10"),
        ("true", "True"),
        ("FALSE", "False"),
        ("0x1f", "0x1f"),
        ("yes", "yes"),
        ("off", "off"),
        ("007", "007"),
        ("\"'42'\"", "42"),
    ],
)
def test_a_run_named_on_the_command_line_is_named_as_verl_prints_it(tmp_path, written, named):
    tree = converted_script(
        tmp_path, f"trainer.project_name={written}", f"trainer.experiment_name={written}"
    )
    assert (tree["trainer"]["project_name"], tree["trainer"]["experiment_name"]) == (named, named)


@pytest.mark.parametrize("written", ["42", "1.50", "true"])
def test_a_run_dir_verl_reads_as_a_number_or_boolean_is_refused(tmp_path, written):
    with pytest.raises(VerlSourceError, match=r"'trainer\.run_dir' is the (number|boolean) "):
        converted_script(tmp_path, f"trainer.default_local_dir={written}")


def test_a_run_dir_quoted_for_hydra_is_its_text(tmp_path):
    tree = converted_script(tmp_path, "trainer.default_local_dir=\"'42'\"")
    assert tree["trainer"]["run_dir"] == "42"


@pytest.mark.parametrize(
    "written, named", [("42", "42"), ("0x1f", "31"), ("yes", "True"), ("1e3", "1000.0")]
)
def test_a_run_named_in_a_verl_yaml_is_named_as_omegaconf_reads_it(tmp_path, written, named):
    config = tmp_path / "verl.yaml"
    config.write_text(
        "algorithm:\n  adv_estimator: grpo\n"
        f"trainer:\n  project_name: {written}\n"
        "  default_local_dir: checkpoints/${trainer.project_name}/x\n"
        "actor_rollout_ref:\n  rollout:\n    n: 4\n"
    )
    trainer = convert_verl(config, "grpo").tree["trainer"]
    assert (trainer["project_name"], trainer["run_dir"]) == (named, f"checkpoints/{named}/x")
