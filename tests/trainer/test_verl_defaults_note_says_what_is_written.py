"""The note on a verl config of verl's own (`--config-name=ppo_trainer`, a YAML's
`defaults: [ppo_trainer]`) says what the output does: verl's defaults are written where
mfsdp's differ; with a file of the user's merged in too, none is.

Was: "as for every key the run does not set, mfsdp's defaults stand", over a config that
held verl's (`data.train_batch_size: 1024`, `trainer.val_before_train: true`).
"""

from __future__ import annotations

from trainer.verl_import import convert_verl

GRPO = "algorithm.adv_estimator=grpo data.train_files=/d actor_rollout_ref.model.path=/m"


def test_verls_config_named_by_the_script(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        f"python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_trainer {GRPO}\n"
    )
    conversion = convert_verl(script)
    [note] = [n for n in conversion.notes if "verl's own config" in n]
    assert "verl's is written into this config, each with a note" in note
    assert "mfsdp's defaults stand" not in note
    assert conversion.tree["data"]["train_batch_size"] == 1024


def test_a_yaml_merging_a_file_of_the_users_too(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "defaults:\n  - ppo_trainer\n  - mine\n  - _self_\nalgorithm:\n  adv_estimator: grpo\n"
    )
    conversion = convert_verl(config)
    [note] = [n for n in conversion.notes if "verl's own config" in n]
    assert "none is written: mfsdp's defaults stand" in note
    assert "train_batch_size" not in conversion.tree.get("data", {})
