"""The verl trainer module given through a variable, as verl's own SFT scripts start it
(`ENTRYPOINT=${ENTRYPOINT:-"-m verl.trainer.sft_trainer"}` then `torchrun ...
${ENTRYPOINT}`; `python3 -m $TRAINER`): found by the variable's value in the script, with a
note.

Was: "no `python3 -m verl.trainer.main_ppo ...` or verl SFT trainer command found" (exit 2).
"""

from __future__ import annotations

import pytest

from trainer.verl_import import VerlSourceError, convert_verl


@pytest.mark.parametrize(
    "assignment, used",
    [
        ('ENTRYPOINT=${ENTRYPOINT:-"-m verl.trainer.sft_trainer"}', "${ENTRYPOINT}"),
        ('ENTRYPOINT="-m verl.trainer.sft_trainer"', "$ENTRYPOINT"),
    ],
)
def test_sft_trainer_from_a_variable(tmp_path, assignment, used):
    script = tmp_path / "run.sh"
    script.write_text(
        f"{assignment}\ntorchrun --nproc_per_node=2 {used} data.train_files=/d model.path=/m\n"
    )
    conversion = convert_verl(script)
    assert conversion.command == "sft" and conversion.tree["model"]["path"] == "/m"
    assert conversion.flags == ["--nproc-per-node", "2"]
    assert (
        f"{used}: verl's trainer verl.trainer.sft_trainer, the variable's value in the script"
        in (conversion.notes)
    )


def test_main_ppo_from_a_variable(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "TRAINER=verl.trainer.main_ppo\n"
        "python3 -m $TRAINER algorithm.adv_estimator=grpo actor_rollout_ref.model.path=/m\n"
    )
    conversion = convert_verl(script)
    assert conversion.command == "grpo" and conversion.tree["model"]["path"] == "/m"


def test_a_variable_the_script_does_not_set_finds_nothing(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("python3 -m $NOT_SET_HERE algorithm.adv_estimator=grpo\n")
    with pytest.raises(VerlSourceError, match=r"no `python3 -m verl\.trainer\.main_ppo"):
        convert_verl(script)


def test_a_module_named_only_in_a_branchs_value_is_said_so(tmp_path):
    """verl's test_sft_engine_all.sh sets its command in an if/else, known only as it runs."""
    script = tmp_path / "run.sh"
    script.write_text(
        'if [ "$mode" = spmd ]; then\n'
        '  ENTRYPOINT="-m verl.trainer.sft_trainer"\n'
        '  COMMAND="torchrun --nproc-per-node=2 ${ENTRYPOINT}"\n'
        "fi\n"
        "$COMMAND data.train_files=/d model.path=/m\n"
    )
    with pytest.raises(VerlSourceError) as caught:
        convert_verl(script)
    assert str(caught.value) == (
        f"{script}: the verl trainer verl.trainer.sft_trainer is named only in the value of"
        " ENTRYPOINT (line 2), which is known only as the script runs where a command uses it"
        " (set in a block that may not run, or through another variable): write that command"
        " with `-m verl.trainer.sft_trainer` to convert it"
    )
