"""verl keys for settings mfsdp has no switch for, accepted at the values that leave them off
or that do what mfsdp does anyway: one table, read by `trainer.verl_keys`.

verl's own config files and launch scripts set them at those values (`param_offload: False`,
`use_shm: False`, `trust_remote_code: False`, `wrap_policy.min_num_params: 0`): refused as
keys mfsdp does not map, every verl script and verl's default YAML failed on settings that
change nothing here. At such a value a key is ignored with a note; at any other it is refused
with the reason, since mfsdp would not do what it asks. A null is verl's "not set" and is
ignored wherever a key of this table is (`verl_keys.adopt_pairs`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

ACTOR = "actor_rollout_ref.actor."
REF = "actor_rollout_ref.ref."
MODEL = "actor_rollout_ref.model."
OFFLOAD = "CPU offload is not supported yet"
NO_CRITIC = "there is no critic in GRPO"
SAVED = ["model", "optimizer", "extra"]  # what every checkpoint here holds


@dataclass(frozen=True)
class Off:
    """A verl key accepted only at `values`: ignored then (the note says `why`), refused
    otherwise (the error says `refused`); `commands` limits it to sft or grpo."""

    values: tuple[Any, ...]
    why: str
    refused: str
    commands: tuple[str, ...] = ("sft", "grpo")

    def accepts(self, value: Any) -> bool:
        """`value` is one of `values`: a list in any order, and a flag never as a number
        (`False == 0` in Python, and `min_num_params: False` is no size)."""
        return any(_same(value, allowed) for allowed in self.values)


def _same(value: Any, allowed: Any) -> bool:
    if isinstance(value, list) and isinstance(allowed, list):
        return sorted(map(str, value)) == sorted(map(str, allowed))
    return isinstance(value, bool) == isinstance(allowed, bool) and value == allowed


def _offload() -> Iterator[tuple[str, Off]]:
    """CPU offload of each model's parameters, gradients and optimizer state, in verl's FSDP
    (`fsdp_config.*`) and Megatron (`megatron.*`) backends."""
    fsdp = ("param_offload", "optimizer_offload", "offload_policy", "grad_offload")
    megatron = ("param_offload", "grad_offload", "optimizer_offload")
    for prefix, fsdp_prefix, refused in (
        (ACTOR, ACTOR, OFFLOAD),
        (REF, REF, OFFLOAD),
        ("critic.", "critic.model.", NO_CRITIC),
    ):
        why = "no offload" if refused == OFFLOAD else NO_CRITIC
        for name in fsdp:
            yield f"{fsdp_prefix}fsdp_config.{name}", Off((False,), why, refused, ("grpo",))
        for name in megatron:
            yield f"{prefix}megatron.{name}", Off((False,), why, refused, ("grpo",))
    for name in ("cpu_offload", "offload_params"):  # verl's FSDP SFT trainer
        yield f"model.fsdp_config.{name}", Off((False,), "no offload", OFFLOAD, ("sft",))
    yield (
        MODEL + "enable_activation_offload",
        Off(
            (False,),
            "no offload",
            "activation offload is not supported yet (model.activation_checkpointing saves"
            " activation memory here)",
            ("grpo",),
        ),
    )


def _sharding() -> Iterator[tuple[str, Off]]:
    """How verl's FSDP backend wraps and keeps the trained model, where mfsdp's way is the
    one verl's default asks for."""
    wrap = Off(
        (0,),
        "each decoder layer is one sharded unit here, as verl's 0 (by transformer layer)",
        "the sharded units here are decoder layers (strategy.unit_modules)",
    )
    dtype = Off(
        ("fp32", "float32"),
        "main weights are fp32 here",
        "main weights are fp32 here (compute is bf16: strategy.mixed_precision)",
    )
    for prefix, command in (("model.", "sft"), (ACTOR, "grpo"), (REF, "grpo")):
        yield f"{prefix}fsdp_config.wrap_policy.min_num_params", replace(wrap, commands=(command,))
    for prefix, command in (("model.", "sft"), (ACTOR, "grpo")):
        yield f"{prefix}fsdp_config.model_dtype", replace(dtype, commands=(command,))
    yield (
        "model.strategy",
        Off(
            ("fsdp", "fsdp2", "megatron"),
            "strategy.name picks the sharding here",
            "set strategy.name here",
            ("sft",),
        ),
    )


def _model_files() -> Iterator[tuple[str, Off]]:
    """How verl reads the model: shared memory, code from the model dir, an extra module,
    a chat template of its own."""
    for prefix, command in (("model.", "sft"), (MODEL, "grpo")):
        yield (
            f"{prefix}use_shm",
            Off(
                (False,),
                "files are read directly here",
                "shared-memory loading (use_shm) is not supported",
                (command,),
            ),
        )
        yield (
            f"{prefix}trust_remote_code",
            Off(
                (False,),
                "code in a model dir is never run here",
                "code in a model dir is never run here (trainer/model_code.py)",
                (command,),
            ),
        )
        yield (
            f"{prefix}external_lib",
            Off(
                (None,),
                "no module is imported for the model here",
                "importing a module for the model (external_lib) is not supported: models are"
                " the transformers families mfsdp builds",
                (command,),
            ),
        )
    template = (
        "the chat template here is the tokenizer's: set model.tokenizer to a dir whose"
        " tokenizer has the template you want"
    )
    yield "data.chat_template", Off((None,), "the tokenizer's chat template", template, ("sft",))
    yield (
        MODEL + "custom_chat_template",
        Off((None,), "the tokenizer's chat template", template, ("grpo",)),
    )


def _data() -> Iterator[tuple[str, Off]]:
    """How verl reads rows: its data sections in both trainers, and SFT's multi-turn keys."""
    yield (
        "data.use_shm",
        Off(
            (False,),
            "files are read directly here",
            "shared-memory loading (use_shm) is not supported",
        ),
    )
    yield (
        "data.trust_remote_code",
        Off(
            (False,),
            "code in a model dir is never run here",
            "code in a model dir is never run here (trainer/model_code.py)",
        ),
    )
    for name in ("path", "name"):
        yield (
            f"data.custom_cls.{name}",
            Off(
                (None,),
                "rows are read from the table's columns",
                "custom dataset classes are not supported: rows are read from the table's columns",
            ),
        )
    yield (
        "data.apply_chat_template_kwargs",
        Off(
            ({},),
            "no extra chat template arguments",
            "extra chat template arguments are not supported",
        ),
    )
    yield (
        "data.train_max_samples",
        Off(
            (-1,),
            "every row is read",
            "every row is read here: limit the rows in the file, or the steps with"
            " trainer.total_steps",
        ),
    )
    yield (
        "data.val_max_samples",
        Off((-1,), "every validation row is read", "every validation row is read in SFT", ("sft",)),
    )
    yield (
        "data.balance_dp_token",
        Off(
            (False,),
            "no token balancing across ranks",
            "balancing tokens across ranks is not supported",
            ("sft",),
        ),
    )
    yield (
        "data.multiturn.enable",
        Off(
            (False, True),
            "a row's data.messages_key column is read where it has one, else data.prompt_key and"
            " data.response_key",
            "data.multiturn.enable is true or false",
            ("sft",),
        ),
    )
    for prefix in ("data.multiturn.", "data."):
        yield (
            f"{prefix}tools_key",
            Off(
                ("tools",),
                "tool lists are not given to the chat template here",
                "tool lists are not given to the chat template here",
                ("sft",),
            ),
        )
        yield (
            f"{prefix}enable_thinking_key",
            Off(
                ("enable_thinking",),
                "a row's enable_thinking is not given to the chat template here",
                "a row's enable_thinking is not given to the chat template here",
                ("sft",),
            ),
        )
    yield (
        "data.truncation",
        Off(
            ("error",),
            "a prompt over data.max_prompt_length is never cut here: it is dropped"
            " (data.filter_overlong_prompts=true) or an error, as verl's 'error'",
            "prompts are never cut here, as only verl's 'error' leaves them: one over"
            " data.max_prompt_length is dropped (data.filter_overlong_prompts=true) or an error"
            " (false)",
            ("grpo",),
        ),
    )


def _optimizer() -> Iterator[tuple[str, Off]]:
    """verl's optimizer file (optim/fsdp.yaml, which its configs merge in) at its defaults,
    which are what mfsdp's AdamW and schedule do; reached from the actor's
    `actor_rollout_ref.actor.optim.` too."""
    yield (
        "optim.optimizer_impl",
        Off(
            ("torch.optim",),
            "AdamW here is torch.optim's",
            "the optimizer here is torch.optim's AdamW",
        ),
    )
    yield (
        "optim.num_cycles",
        Off(
            (0.5,),
            "the cosine schedule here falls over half a cycle, as verl's 0.5",
            "the cosine schedule here falls over half a cycle (verl's 0.5)",
        ),
    )
    yield (
        "optim.override_optimizer_config",
        Off(
            ({},),
            "no optimizer settings beyond optim's keys",
            "optimizer settings here are optim's keys (optim.betas, optim.eps, optim.weight_decay)",
        ),
    )


def _checkpoints() -> Iterator[tuple[str, Off]]:
    """What verl saves and loads: every checkpoint here holds all three of its parts."""
    for prefix, commands in (("trainer.", ("sft", "grpo")), (ACTOR, ("grpo",))):
        for name in ("save_contents", "load_contents"):
            yield (
                f"{prefix}checkpoint.{name}",
                Off(
                    (SAVED,),
                    "a checkpoint here holds the model, optimizer and trainer state",
                    "a checkpoint here holds the model, optimizer and trainer state, all three"
                    " (`mfsdp ckpt export-hf` writes Hugging Face weights from it)",
                    commands,
                ),
            )


OFF_KEYS: dict[str, Off] = dict(
    [*_offload(), *_sharding(), *_model_files(), *_data(), *_optimizer(), *_checkpoints()]
)
