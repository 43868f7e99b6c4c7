"""A verl run that sets trainer.total_training_steps past trainer.total_epochs epochs trains
what verl trains once converted: verl's fit loops (verl/trainer/ppo/ray_trainer.py
`RayPPOTrainer.fit`, verl/trainer/fsdp_sft_trainer.py `FSDPSFTTrainer.fit`,
verl/trainer/sft_trainer.py `SFTTrainer.fit`) run `for epoch in range(total_epochs)` and
return at `global_steps >= total_training_steps` only inside that loop, so the run ends at
whichever comes first. mfsdp's `trainer.total_steps` won over `trainer.epochs`, and a
converted script trained more steps than verl would. mfsdp's own configs keep mfsdp's rule.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.runner import planned_steps
from trainer.sft import run_sft
from trainer.verl_import import Conversion, convert_verl

ROWS, BATCH = 32, 8  # four steps an epoch
SFT = "torchrun -m verl.trainer.fsdp_sft_trainer data.train_batch_size=8 "


def converted(tmp_path: Path, text: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


def as_overrides(trainer: dict[str, object]) -> list[str]:
    """A trainer section as overrides of the tiny SFT config."""
    return [f"trainer.{key}={value}" for key, value in trainer.items()]


def test_a_converted_run_ends_with_its_epochs_as_verl_ends_it(tmp_path, capsys):
    conversion = converted(
        tmp_path, SFT + "trainer.total_training_steps=40 trainer.total_epochs=2\n"
    )
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=ROWS)
    cfg = tiny_config(
        data,
        tmp_path / "run",
        f"data.global_batch_size={BATCH}",
        "trainer.device=cpu",
        *as_overrides(conversion.tree["trainer"]),
    )

    result = run_sft(cfg)

    assert result.final_step == 2 * (ROWS // BATCH)
    assert any("trainer.steps_within_epochs=true" in note for note in conversion.notes)
    capsys.readouterr()
    run_sft(cfg)  # again: the key that ends it is named with its own value
    assert "and trainer.epochs=2: nothing left to train" in capsys.readouterr().err


def test_a_converted_run_ends_at_its_steps_when_they_come_first():
    trainer = {"total_steps": 3, "epochs": 2, "steps_within_epochs": True}
    cfg = tiny_config(Path("unused.jsonl"), Path("unused"), *as_overrides(trainer))
    assert planned_steps(cfg, "data.global_batch_size", BATCH, ROWS, "rows") == 3


def test_a_converted_run_of_epochs_alone_has_no_bound_to_add(tmp_path):
    conversion = converted(tmp_path, SFT + "trainer.total_epochs=2\n")
    assert "steps_within_epochs" not in conversion.tree["trainer"]


def test_mfsdp_total_steps_still_wins_over_epochs_in_its_own_configs():
    """examples/sft_tiny_cpu.yaml sets epochs: 1 and total_steps: 12; `trainer.total_steps=20`
    on it trains 20 steps however few rows an epoch has."""
    cfg = tiny_config(Path("unused.jsonl"), Path("unused"), "trainer.total_steps=20")
    assert planned_steps(cfg, "data.global_batch_size", BATCH, ROWS, "rows") == 20
