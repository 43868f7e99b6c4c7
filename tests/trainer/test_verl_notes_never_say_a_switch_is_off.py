"""The note of a verl key read only behind a switch of verl's never says the switch is off.

With algorithm.use_kl_in_reward=True (refused: KL in the reward is not supported) the notes of
algorithm.kl_penalty and algorithm.kl_ctrl.* said "it is off (use_kl_in_reward)", against the
source and the refusal beside them. Every such note now says which switch verl reads the key
behind, true whatever the run sets the switch to.
"""

from __future__ import annotations

import re

from trainer.verl_import import convert_verl
from trainer.verl_inert_keys import INERT_KEYS, SECTIONS

OFF = re.compile(r"\b(is|are) off\b|\(off\)")


def test_no_inert_note_says_a_switch_is_off():
    said = [f"{key}: {inert.why}" for key, inert in {**INERT_KEYS, **SECTIONS}.items()]
    assert [line for line in said if OFF.search(line)] == []


def test_kl_in_reward_on_gets_no_note_saying_it_is_off(tmp_path):
    script = tmp_path / "run.sh"
    words = [
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=True",
        "algorithm.kl_penalty=low_var_kl",
        "algorithm.kl_ctrl.kl_coef=0.01",
    ]
    script.write_text(" \\\n    ".join(words) + "\n")
    conversion = convert_verl(script)
    assert [item for item in conversion.dropped if "use_kl_in_reward" in item]
    kl_notes = [note for note in conversion.notes if "kl_penalty" in note or "kl_ctrl" in note]
    assert len(kl_notes) == 2
    for note in kl_notes:
        assert not OFF.search(note)
        assert "only with algorithm.use_kl_in_reward on" in note
