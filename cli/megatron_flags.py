"""Megatron-LM's training flags (and verl's Hydra flags), as what `mfsdp train` takes instead.

`mfsdp train sft|grpo` takes a run's settings as `key=value` overrides of its config, not as
flags, so a user coming from Megatron-LM types `--lr 1e-3` or `--save DIR` by habit and got
click's "No such option '--lr'", with a guess as unrelated as '--help', or nothing at all.
This is the one table of those flags, each with the key of the same meaning in `mfsdp config
defaults sft|grpo`, or, where the meaning differs, the reason nothing here is that flag: a
near miss (Megatron-LM's selective recompute for mfsdp's whole-layer one) would be a silent
change of what the run does. `cli.app` turns an entry into the usage error's one line.
"""

from __future__ import annotations

from dataclasses import dataclass

VALUE = "{value}"  # where the value given with the flag goes (`optim.lr=1e-3`)
NO_VALUE = "VALUE"  # what stands there when the flag came without one


@dataclass(frozen=True)
class Meant:
    """What a flag of `origin` is in `mfsdp train sft` (`sft`) and `grpo` (`grpo`; None:
    as in sft): overrides to type, or (`none`) why nothing here is that flag."""

    sft: str
    grpo: str | None = None
    none: bool = False
    origin: str = "Megatron-LM"

    def for_command(self, command: str) -> str:
        return self.grpo if command == "grpo" and self.grpo is not None else self.sft


def _none(why: str, origin: str = "Megatron-LM") -> Meant:
    return Meant(why, none=True, origin=origin)


_DATA_FILES = "(parquet or jsonl chat rows, not Megatron-LM's .bin/.idx; `mfsdp data` makes them)"


def _model_field(name: str) -> Meant:
    """A model shape flag: the HF config field of the model built or loaded."""
    return Meant(f"model.overrides={{{name}: {VALUE}}} (an HF config field)")


FLAGS: dict[str, Meant] = {
    # learning rate and optimizer
    "--lr": Meant(f"optim.lr={VALUE}"),
    "--min-lr": Meant(f"optim.min_lr={VALUE}"),
    "--lr-decay-style": Meant(f"optim.scheduler={VALUE} (cosine, linear or constant)"),
    "--lr-warmup-iters": Meant(f"optim.warmup_steps={VALUE}"),
    "--lr-warmup-fraction": Meant(f"optim.warmup_ratio={VALUE}"),
    "--lr-decay-iters": _none("the schedule always decays over trainer.total_steps"),
    "--weight-decay": Meant(f"optim.weight_decay={VALUE}"),
    "--clip-grad": Meant(f"optim.clip_grad={VALUE}"),
    "--adam-beta1": Meant("optim.betas=[BETA1,BETA2] (both together)"),
    "--adam-beta2": Meant("optim.betas=[BETA1,BETA2] (both together)"),
    "--adam-eps": Meant(f"optim.eps={VALUE}"),
    "--optimizer": _none("the optimizer is always AdamW (its settings are optim.*)"),
    # length of the run and batches
    "--train-iters": Meant(f"trainer.total_steps={VALUE}"),
    "--train-samples": _none("a run's length is trainer.total_steps (steps) or trainer.epochs"),
    "--micro-batch-size": Meant(
        f"data.micro_batch_size={VALUE} (with data.packing=false; packed micro-batches are"
        " sized by data.max_tokens_per_micro_batch)",
        grpo=f"actor.ppo_micro_batch_size_per_gpu={VALUE}",
    ),
    "--global-batch-size": Meant(
        f"data.global_batch_size={VALUE}",
        grpo=f"actor.ppo_mini_batch_size={VALUE} (prompts per optimizer step, each with"
        " rollout.n responses)",
    ),
    "--seq-length": Meant(
        f"data.max_length={VALUE}",
        grpo="data.max_prompt_length=N and rollout.max_response_length=N (prompt and"
        " response apart)",
    ),
    "--seed": Meant(f"trainer.seed={VALUE}"),
    # checkpoints
    "--save": Meant(f"trainer.run_dir={VALUE} (its checkpoints go there)"),
    "--load": Meant(
        f"checkpoint.resume={VALUE} (a checkpoint to continue) or model.path={VALUE}"
        " (weights to start from)"
    ),
    "--pretrained-checkpoint": Meant(f"model.path={VALUE}"),
    "--finetune": Meant("model.path=CHECKPOINT (its weights, from step 0)"),
    "--save-interval": Meant(f"checkpoint.save_every={VALUE}"),
    "--async-save": Meant("checkpoint.async_save=true"),
    "--ckpt-format": _none(
        "checkpoints are always DTensor checkpoints (Megatron-LM's fsdp_dtensor);"
        " `mfsdp ckpt export-hf` converts them"
    ),
    # precision, sharding, memory
    "--bf16": Meant("strategy.mixed_precision=bf16"),
    "--fp16": _none("the choices are strategy.mixed_precision=bf16 or fp32"),
    "--use-megatron-fsdp": Meant("strategy.name=megatron_fsdp"),
    "--data-parallel-sharding-strategy": Meant(f"strategy.zero_dp_strategy={VALUE}"),
    "--use-distributed-optimizer": _none(
        "the optimizer state is sharded as strategy.zero_dp_strategy says (by default)"
    ),
    "--recompute-granularity": Meant(
        "model.activation_checkpointing=true (whole decoder layers, Megatron-LM's full)"
    ),
    "--recompute-activations": _none(
        "it recomputes parts of attention; model.activation_checkpointing=true recomputes"
        " whole decoder layers"
    ),
    "--tensor-model-parallel-size": _none("the model is sharded over data-parallel ranks only"),
    "--pipeline-model-parallel-size": _none("the model is sharded over data-parallel ranks only"),
    "--context-parallel-size": _none("the model is sharded over data-parallel ranks only"),
    # model and data
    "--num-layers": _model_field("num_hidden_layers"),
    "--hidden-size": _model_field("hidden_size"),
    "--num-attention-heads": _model_field("num_attention_heads"),
    "--ffn-hidden-size": _model_field("intermediate_size"),
    "--tokenizer-model": Meant(f"model.tokenizer={VALUE} (an HF tokenizer dir)"),
    "--data-path": Meant(f"data.train_files=[{VALUE}] {_DATA_FILES}"),
    "--train-data-path": Meant(f"data.train_files=[{VALUE}] {_DATA_FILES}"),
    "--valid-data-path": Meant(f"data.val_files=[{VALUE}] {_DATA_FILES}"),
    "--split": Meant(
        "data.val_ratio=FRACTION (the share of training rows held out for validation)",
        grpo="data.val_files=[FILE] (validation prompts)",
    ),
    # logging
    "--log-interval": Meant(f"trainer.log_every={VALUE}"),
    "--eval-interval": Meant(f"trainer.eval_every={VALUE}"),
    "--tensorboard-dir": Meant("trainer.tensorboard=true (it writes RUN_DIR/tensorboard/)"),
    "--wandb-project": Meant(f"trainer.project_name={VALUE} with wandb in trainer.logger"),
    "--wandb-exp-name": Meant(f"trainer.experiment_name={VALUE}"),
    # verl's Hydra command line
    "--config-name": Meant(
        "--config FILE.yaml (a verl config: `mfsdp config from-verl` converts it)", origin="verl"
    ),
    "--config-path": Meant(
        "--config FILE.yaml (a verl config: `mfsdp config from-verl` converts it)", origin="verl"
    ),
}


def flag_meant(flag: str, value: str | None, command: str) -> str | None:
    """The end of the error line for `flag` (given with `value`, None where it came without
    one) in `mfsdp train <command>`, or None where it is no flag of the table. Megatron-LM's
    argparse spells a few flags with `_`, and users more: `--train_iters` is `--train-iters`."""
    meant = FLAGS.get(flag.replace("_", "-"))
    if meant is None:
        return None
    text = meant.for_command(command).replace(VALUE, NO_VALUE if value is None else value)
    if meant.none:
        return f"{meant.origin}'s {flag} has no equivalent in mfsdp: {text}"
    return f"mfsdp takes {meant.origin}'s {flag} as {text}"


def takes_value(flag: str, command: str) -> bool:
    """Whether the table's entry for `flag` writes the flag's value into the key it names
    (`--lr 1e-3`): only then is the word after the flag its value (`--bf16 optim.lr=1`)."""
    meant = FLAGS.get(flag.replace("_", "-"))
    return meant is not None and not meant.none and VALUE in meant.for_command(command)
