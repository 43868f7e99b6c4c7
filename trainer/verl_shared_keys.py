"""The keys of verl's trainer configs that are mfsdp keys of the same name too.

Apart so that both the conversion (trainer.verl_import, which tells a verl override file from
an mfsdp one by them) and the key reader (trainer.verl_keys, which reads a null on one of
them given to `mfsdp train` as verl does) read one list.
"""

from __future__ import annotations

# the keys of verl's trainer configs that are mfsdp keys of the same name too, per command: a
# YAML of these only is a verl override file. main_ppo's are those at the top level of its
# _generated_ppo_trainer.yaml; its model, rollout and optim keys stand under
# actor_rollout_ref, so a top-level `model.path`, `rollout.n` or `optim.lr` (keys of verl's
# generation and SFT configs) makes a GRPO file mfsdp's: counted as shared, an mfsdp GRPO
# config converted at exit 0 with verl's defaults written over it
_DATA_AND_NAMES = frozenset(
    {
        *("data.train_files", "data.val_files", "data.prompt_key", "data.shuffle"),
        *("trainer.project_name", "trainer.experiment_name", "trainer.logger", "trainer.device"),
    }
)
SHARED_WITH_VERL = {
    # fsdp_sft_trainer's sft_trainer.yaml, sft_trainer's sft_trainer_engine.yaml
    "sft": _DATA_AND_NAMES
    | {
        *("data.max_length", "data.messages_key", "data.micro_batch_size", "data.truncation"),
        *("data.prompt_dict_keys", "data.response_key", "data.response_dict_keys"),
        *("model.path", "model.lora_rank", "model.lora_alpha", "model.target_modules"),
        *("optim.lr", "optim.betas", "optim.clip_grad", "optim.weight_decay", "trainer.seed"),
    },
    # main_ppo's _generated_ppo_trainer.yaml: its data, algorithm and trainer sections
    "grpo": _DATA_AND_NAMES
    | {
        *("algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo"),
        *("data.filter_overlong_prompts", "data.max_prompt_length", "data.train_batch_size"),
        *("data.val_max_samples", "trainer.val_before_train"),
    },
}
