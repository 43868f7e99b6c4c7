"""verl keys for settings mfsdp has no switch for, accepted at the values that leave them off
or that do what mfsdp does anyway: one table, read by `trainer.verl_rules`.

verl's own config files and launch scripts set them at those values (`param_offload: False`,
`use_shm: False`, `trust_remote_code: False`, `wrap_policy.min_num_params: 0`): refused as
keys mfsdp does not map, every verl script and verl's default YAML failed on settings that
change nothing here. At such a value a key is ignored with a note; at any other it is refused
with the reason, since mfsdp would not do what it asks. A null is verl's "not set" and is
ignored wherever a key of this table is (`verl_keys.adopt_pairs`).

The switches of verl's features that change what is trained (multi-turn rollouts and agent
loops, a critic, the profiler, multi-token prediction, rollout correction, reward managers
other than the naive one) are here too, accepted only off: the settings each switch governs
are in `trainer.verl_inert_keys`, ignored at any value since verl reads them only when the
switch is on. So the whole config verl prints carries over, key by key, where its values
train as mfsdp does. verl's SFT trainer reads the files GRPO's actor reads (its model and
FSDP engine, at `model.*` and `engine.*`: HF_MODELS, FSDP_ENGINES) and a profiler of its
own: each of their keys is read for `train sft` as the actor's is for `train grpo`.
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
ROLLOUT = "actor_rollout_ref.rollout."
SAVED = ["model", "optimizer", "extra"]  # what every checkpoint here holds
STRATEGIES = ("fsdp", "fsdp2", "megatron")
SET_STRATEGY = "set strategy.name here"
# Where verl's Megatron engine settings (engine/megatron.yaml) sit, and the command reading
# them: the actor's and the reference model's `megatron.*` in GRPO, SFT's `engine.*`. Each
# table of its keys is written once, by name, and given at each of these.
MEGATRON_ENGINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (ACTOR + "megatron.", ("grpo",)),
    (REF + "megatron.", ("grpo",)),
    ("engine.", ("sft",)),
)
# Where verl's FSDP engine settings (engine/fsdp.yaml) sit, and the command reading them:
# the actor's and the reference model's `fsdp_config.*` in GRPO, sft_trainer's `engine.*`
# (fsdp_sft_trainer's `model.fsdp_config.*` is a file of its own). A key of the FSDP file
# and the Megatron one under SFT's `engine.` (`dtype`, `param_offload`) is read alike.
FSDP_ENGINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (ACTOR + "fsdp_config.", ("grpo",)),
    (REF + "fsdp_config.", ("grpo",)),
    ("engine.", ("sft",)),
)
# Where verl's model settings (model/hf_model.yaml) sit: GRPO's actor_rollout_ref.model,
# sft_trainer's model (fsdp_sft_trainer's `model` shares some of their names)
HF_MODELS: tuple[tuple[str, tuple[str, ...]], ...] = ((MODEL, ("grpo",)), ("model.", ("sft",)))
DETERMINISM = "deterministic kernels are not forced here"
SINGLE_TURN = (
    "the rollout here is single-turn: one response per prompt, no tools, interactions or"
    " custom agent loops"
)


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
        return any(same(value, allowed) for allowed in self.values)


def same(value: Any, allowed: Any) -> bool:
    """Whether `value` is verl's `allowed`: a list in any order, a flag never a number, a
    mapping key by key (`freeze_moe_router: 0` is no flag either)."""
    if isinstance(value, list) and isinstance(allowed, list):
        return sorted(map(str, value)) == sorted(map(str, allowed))
    if isinstance(value, dict) and isinstance(allowed, dict):
        return value.keys() == allowed.keys() and all(same(value[k], allowed[k]) for k in value)
    return isinstance(value, bool) == isinstance(allowed, bool) and value == allowed


# the offload keys of verl's FSDP (`fsdp_config.*`) and Megatron (`megatron.*`) engines
FSDP_OFFLOAD = ("param_offload", "optimizer_offload", "offload_policy", "grad_offload")
MEGATRON_OFFLOAD = ("param_offload", "grad_offload", "optimizer_offload")


def _offload() -> Iterator[tuple[str, Off]]:
    """CPU offload of each trained model's parameters, gradients and optimizer state, in
    verl's FSDP (`fsdp_config.*`) and Megatron (`megatron.*`) backends; the reference
    model's, memory only, is in trainer.verl_inert_keys, as the critic's is."""
    for engines, names in ((FSDP_ENGINES, FSDP_OFFLOAD), (MEGATRON_ENGINES, MEGATRON_OFFLOAD)):
        for engine, commands in engines:
            if engine.startswith(REF):
                continue
            for name in names:
                yield engine + name, Off((False,), "no offload", OFFLOAD, commands)
    for name in ("cpu_offload", "offload_params"):  # verl's FSDP SFT trainer
        yield f"model.fsdp_config.{name}", Off((False,), "no offload", OFFLOAD, ("sft",))
    for model, commands in HF_MODELS:
        yield (
            model + "enable_activation_offload",
            Off(
                (False,),
                "no offload",
                "activation offload is not supported yet (model.activation_checkpointing saves"
                " activation memory here)",
                commands,
            ),
        )


def _megatron() -> Iterator[tuple[str, Off]]:
    """verl's Megatron engine (MEGATRON_ENGINES) at the settings that train as Megatron-FSDP
    here does: the model from model.path's Hugging Face weights, its config as it is,
    compute in bf16; and the actor's and reference model's weights loaded."""
    override = (
        "overriding the model's config is not supported: edit config.json in a copy of the"
        " model dir"
    )
    for engine, commands in MEGATRON_ENGINES:
        settings = {
            "use_dist_checkpointing": Off(
                (False,),
                "the model loads from model.path's Hugging Face weights",
                "loading the model from a Megatron dist checkpoint is not supported: model.path"
                " is a Hugging Face model dir",
            ),
            "dist_checkpointing_path": Off(
                (None,),
                "the model loads from model.path's Hugging Face weights",
                "loading the model from a Megatron dist checkpoint is not supported: model.path"
                " is a Hugging Face model dir",
            ),
            "override_ddp_config": Off(
                ({}, None),
                "no data-parallel settings beyond mfsdp's own",
                "overriding Megatron's data-parallel settings is not supported",
            ),
            "override_mcore_model_config": Off(({}, None), "the model's config as it is", override),
            "dtype": Off(
                ("bfloat16", "bf16"),
                "compute is bf16 here",
                "compute is bf16 here (strategy.mixed_precision)",
            ),
        }
        for name, off in settings.items():
            yield engine + name, replace(off, commands=commands)
    for prefix in (ACTOR, REF):
        yield (
            prefix + "load_weight",
            Off(
                (True,),
                "the model starts from model.path's weights",
                "a model here always starts from model.path's weights",
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
    strategy = Off(STRATEGIES, "strategy.name picks the sharding here", SET_STRATEGY)
    for engine, commands in (("model.fsdp_config.", ("sft",)), *FSDP_ENGINES):
        yield f"{engine}wrap_policy.min_num_params", replace(wrap, commands=commands)
        yield f"{engine}model_dtype", replace(dtype, commands=commands)
    for engine, commands in FSDP_ENGINES:
        yield (
            f"{engine}dtype",
            Off(
                ("bfloat16", "bf16"),
                "compute is bf16 here",
                "compute is bf16 here (strategy.mixed_precision)",
                commands,
            ),
        )
        yield (
            f"{engine}fsdp_size",
            Off(
                (-1,),
                "parameters are sharded over all ranks here, as verl's -1",
                "parameters are sharded over all ranks here (no hybrid sharding groups)",
                commands,
            ),
        )
        yield (
            f"{engine}full_determinism",
            Off((False,), "no deterministic kernels forced", DETERMINISM, commands),
        )
        yield f"{engine}strategy", replace(strategy, commands=commands)
    # the roles' own, and fsdp_sft_trainer's
    for key, command in ((ACTOR, "grpo"), (REF, "grpo"), ("model.", "sft")):
        yield key + "strategy", replace(strategy, commands=(command,))


def _model_files() -> Iterator[tuple[str, Off]]:
    """How verl reads the model: shared memory, code from the model dir, an extra module,
    a chat template of its own."""
    for prefix, commands in HF_MODELS:
        yield (
            f"{prefix}use_shm",
            Off(
                (False,),
                "files are read directly here",
                "shared-memory loading (use_shm) is not supported",
                commands,
            ),
        )
        yield (
            f"{prefix}trust_remote_code",
            Off(
                (False,),
                "code in a model dir is never run here",
                "code in a model dir is never run here (trainer/model_code.py)",
                commands,
            ),
        )
        yield (
            f"{prefix}external_lib",
            Off(
                (None,),
                "no module is imported for the model here",
                "importing a module for the model (external_lib) is not supported: models are"
                " the transformers families mfsdp builds",
                commands,
            ),
        )
    template = (
        "the chat template here is the tokenizer's: set model.tokenizer to a dir whose"
        " tokenizer has the template you want"
    )
    chat_template = Off((None,), "the tokenizer's chat template", template)
    yield "data.chat_template", replace(chat_template, commands=("sft",))  # fsdp_sft_trainer's
    for prefix, commands in HF_MODELS:
        yield prefix + "custom_chat_template", replace(chat_template, commands=commands)


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
            (-1, 0),  # verl reads any number but one above 0 as every row
            "every row is read",
            "every row is read here: limit the rows in the file, or the steps with"
            " trainer.total_steps",
        ),
    )
    yield (
        "data.val_max_samples",
        Off(
            (-1, 0), "every validation row is read", "every validation row is read in SFT", ("sft",)
        ),
    )
    yield (
        "data.ignore_input_ids_mismatch",
        Off(
            (False,),
            "a chat the template does not render turn by turn is refused here, as verl's False",
            "a chat the template does not render turn by turn is refused here, as verl"
            " refuses it with ignore_input_ids_mismatch False",
            ("sft",),
        ),
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
    # verl's enable_thinking for rows without an enable_thinking column (after b178a3cd).
    # Its YAML's `none` is text, which its dataset reads as true (bool('none')): thinking
    # on, what Qwen3's template renders when it is given no enable_thinking, as here.
    yield (
        "data.enable_thinking_default",
        Off(
            ("none",),
            "enable_thinking is not given to the chat template here (verl's none: thinking"
            " on, Qwen3's template's default)",
            "enable_thinking is not given to the chat template here: each row is rendered at"
            " the template's own default",
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
    yield from _megatron_schedule()
    yield (
        "optim.override_optimizer_config",
        Off(
            ({},),
            "no optimizer settings beyond optim's keys",
            "optimizer settings here are optim's keys (optim.betas, optim.eps, optim.weight_decay)",
        ),
    )


# Megatron-core's OptimizerConfig defaults for Adam's betas and eps. verl's Megatron backend
# never passes `optim.betas` (its `init_megatron_optim_config` reads optimizer, lr, min_lr,
# clip_grad and weight_decay only), so its runs train with these unless
# `optim.override_optimizer_config` sets them
MEGATRON_ADAM = {"adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8}
# OptimizerConfig's other fields that verl's Megatron examples override, at Megatron's
# defaults, which are what mfsdp's AdamW does: decoupled weight decay, none on norm weights,
# optimizer state in fp32 on the GPU
MEGATRON_OPTIMIZER_DEFAULTS = {
    "decoupled_weight_decay": True,
    "apply_wd_to_qk_layernorm": False,
    "use_precision_aware_optimizer": False,
    "optimizer_cpu_offload": False,
    "optimizer_offload_fraction": 0.0,
    "overlap_cpu_optimizer_d2h_h2d": False,
}


def _megatron_schedule() -> Iterator[tuple[str, Off]]:
    """verl's Megatron optimizer file (optim/megatron.yaml: Megatron-LM's
    OptimizerParamScheduler) at its defaults, which give the schedule mfsdp's copies: warmup
    from 0, decay over the run's updates, constant weight decay, the config's schedule on
    resume. Its WSD keys are in trainer.verl_inert_keys (read only by that schedule)."""
    schedule = {
        "lr_warmup_init": (
            (0, 0.0),
            "warmup rises from 0 here, as verl's 0.0",
            "warmup here rises from 0 (verl's lr_warmup_init 0.0)",
        ),
        "lr_decay_steps": (
            (None,),
            "the schedule decays over the run's updates here, as verl's null",
            "the schedule here decays over the run's updates (verl's null): set"
            " trainer.total_steps",
        ),
        "weight_decay_incr_style": (
            ("constant",),
            "weight decay is constant here",
            "weight decay here is constant (optim.weight_decay)",
        ),
        "use_checkpoint_opt_param_scheduler": (
            (False,),
            "a resumed run follows the config's schedule here, as verl's False",
            "a resumed run here follows the config's schedule (optim.*), not the checkpoint's",
        ),
    }
    for name, (values, why, refused) in schedule.items():
        yield f"optim.{name}", Off(values, why, refused)


# Where verl's trainers read what their checkpoints hold: sft_trainer a top-level
# `checkpoint:` section, fsdp_sft_trainer (sft_trainer.yaml) `trainer.checkpoint`, main_ppo
# each role's `checkpoint`
CHECKPOINT_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("checkpoint.", ("sft",)),
    ("trainer.checkpoint.", ("sft", "grpo")),
    (ACTOR + "checkpoint.", ("grpo",)),
)


def _checkpoints() -> Iterator[tuple[str, Off]]:
    """What verl loads on a resume: every checkpoint here holds all three of its parts, and
    a resume loads them all (a verl run loading the model alone starts a fresh optimizer).
    What verl saves trains nothing (trainer.verl_inert_keys)."""
    for prefix, commands in CHECKPOINT_SECTIONS:
        yield (
            prefix + "load_contents",
            Off(
                (SAVED,),
                "a checkpoint here holds the model, optimizer and trainer state",
                "a checkpoint here holds the model, optimizer and trainer state, and a resume"
                " loads all three",
                commands,
            ),
        )


def _policy() -> Iterator[tuple[str, Off]]:
    """How the actor and the reference model compute the loss and log-probs, at verl's
    defaults, which are what GRPO here does."""
    yield (
        ACTOR + "policy_loss.loss_mode",
        Off(
            ("vanilla",),
            "PPO's clipped loss with dual clip (clip_ratio_c), as here",
            "the policy loss here is PPO's clipped loss (verl's vanilla)",
            ("grpo",),
        ),
    )
    yield (
        ACTOR + "loss_scale_factor",
        Off(
            (None,),
            "seq-mean-token-sum-norm divides each response's token sum by"
            " rollout.max_response_length here, the width verl's null reads (its responses"
            " are padded to data.max_response_length), and averages over micro-batches, as"
            " verl's actor does",
            "seq-mean-token-sum-norm here divides each response's token sum by"
            " rollout.max_response_length (verl's null)",
            ("grpo",),
        ),
    )
    for key in (ACTOR + "ppo_micro_batch_size", REF + "log_prob_micro_batch_size"):
        yield key, _per_gpu(key)
    yield ROLLOUT + "log_prob_micro_batch_size", _per_gpu(ROLLOUT + "log_prob_micro_batch_size")
    for prefix in (ACTOR, REF):
        yield (
            f"{prefix}router_replay.mode",
            Off(
                ("disabled",),
                "MoE routing is not replayed",
                "replaying MoE routing decisions is not supported",
                ("grpo",),
            ),
        )


def _per_gpu(key: str) -> Off:
    """verl's deprecated global micro-batch size, null where the per-GPU one is used."""
    return Off(
        (None,),
        "micro-batches are counted per GPU here",
        f"micro-batches are counted per GPU here: set {key}_per_gpu",
        ("grpo",),
    )


def _rollout() -> Iterator[tuple[str, Off]]:
    """verl's rollout at the settings that sample as the engine here does: single-turn,
    sampled to the end-of-sequence token, validated greedily."""
    off = {
        "ignore_eos": (False, "generation stops at the end-of-sequence token here"),
        "do_sample": (True, "responses are sampled here (GRPO needs different ones per prompt)"),
        "over_sample_rate": (0, "every response is generated to its end here"),
        "skip_rollout": (False, "every step rolls out here (no replay of dumped rollouts)"),
        "enable_rollout_routing_replay": (False, "MoE routing decisions are not replayed here"),
        "data_parallel_size": (1, "the engine here is one per rank (data parallel 1)"),
    }
    for name, (value, refused) in off.items():
        yield ROLLOUT + name, Off((value,), refused, refused, ("grpo",))
    for name in ("quantization", "quantization_config_file"):
        yield (
            ROLLOUT + name,
            Off(
                (None,),
                "the engine runs the actor's weights as they are",
                "the rollout engine here runs the actor's weights as they are (no quantization)",
                ("grpo",),
            ),
        )
    for engine in ("vllm", "sglang", "trtllm"):
        yield (
            f"{ROLLOUT}engine_kwargs.{engine}",
            Off(
                ({}, None),
                "no extra engine arguments",
                "extra engine arguments are not supported: the engine's settings here are"
                " rollout's keys",
                ("grpo",),
            ),
        )
    greedy = "validation here is greedy, one response per prompt"
    for name, values in {
        "temperature": (0, 0.0),
        "top_k": (-1, 0),
        "top_p": (1, 1.0),
        "n": (1,),
        "do_sample": (False,),
    }.items():
        yield f"{ROLLOUT}val_kwargs.{name}", Off(values, greedy, greedy, ("grpo",))
    yield from _single_turn()


def _single_turn() -> Iterator[tuple[str, Off]]:
    """The switches of verl's multi-turn rollouts, tools and agent loops, all off: its
    RLHFDataset reads the tool keys under `data.` too (`need_tools_kwargs`, the default of a
    row's `extra_info.need_tools_kwargs`, whose rows are refused: trainer.grpo.
    unsupported_rows), so each is refused with this reason, not taken for a typo."""
    for key, values in {
        ROLLOUT + "multi_turn.enable": (False,),
        ROLLOUT + "multi_turn.tool_config_path": (None,),
        ROLLOUT + "multi_turn.function_tool_path": (None,),
        ROLLOUT + "multi_turn.interaction_config_path": (None,),
        "data.tool_config_path": (None,),
        "data.function_tool_path": (None,),
        "data.need_tools_kwargs": (False,),
        ROLLOUT + "agent.default_agent_loop": ("single_turn_agent",),
        ROLLOUT + "agent.agent_loop_config_path": (None,),
        ROLLOUT + "agent.custom_async_server.path": (None,),
        ROLLOUT + "agent.custom_async_server.name": (None,),
    }.items():
        yield key, Off(values, "single-turn rollouts, as here", SINGLE_TURN, ("grpo",))


def _features_off() -> Iterator[tuple[str, Off]]:
    """The switches of verl's features that change what is trained, off: their settings are
    in trainer.verl_inert_keys, read only when the switch is on."""
    profiling = "profiling is not supported"
    mtp = "multi-token prediction is not supported"
    switches: dict[str, tuple[tuple[Any, ...], str]] = {
        "critic.enable": ((None, False), NO_CRITIC),
        ACTOR + "profiler.enable": ((False,), profiling),
        REF + "profiler.enable": ((False,), profiling),
        ROLLOUT + "profiler.enable": ((False,), profiling),
        "global_profiler.steps": ((None, []), profiling),
        ROLLOUT + "mtp.enable": ((False,), mtp),
        ROLLOUT + "mtp.enable_train": ((False,), mtp),
        ROLLOUT + "mtp.enable_rollout": ((False,), mtp),
        "algorithm.use_pf_ppo": ((False,), "PF-PPO's reweighting of samples is not supported"),
        "algorithm.rollout_correction.rollout_is": ((None,), ROLLOUT_CORRECTION),
        "algorithm.rollout_correction.rollout_rs": ((None,), ROLLOUT_CORRECTION),
        "algorithm.rollout_correction.bypass_mode": ((False,), ROLLOUT_CORRECTION),
        "trainer.val_only": ((False,), "validation-only runs are not supported"),
        "trainer.del_local_ckpt_after_load": (
            (False,),
            "checkpoints are never deleted after loading here",
        ),
    }
    for key, (values, refused) in switches.items():
        yield key, Off(values, refused, refused, ("grpo",))
    for model, commands in HF_MODELS:
        for name in ("enable", "enable_train", "enable_rollout"):
            yield f"{model}mtp.{name}", Off((False,), mtp, mtp, commands)
    # sft_trainer's `profiler` section (profiler/profiler.yaml), as a GRPO role's
    yield "profiler.enable", Off((False,), profiling, profiling, ("sft",))
    yield (  # verl's sft_trainer: the first and last step profiled, -1 for none
        "trainer.profile_interval",
        Off(([-1, -1],), profiling, profiling, ("sft",)),
    )


ROLLOUT_CORRECTION = (
    "rollout correction (weighting or rejecting responses by the engine's log-probs) is not"
    " supported"
)


def _model_and_data() -> Iterator[tuple[str, Off]]:
    """The model's and the RL data's settings at the values that read them as here."""
    for model, commands in HF_MODELS:
        yield (
            model + "hf_config_path",
            Off(
                (None,),
                "the model's config is read from model.path",
                "the model's config is read from model.path here",
                commands,
            ),
        )
        yield (
            model + "override_config",
            Off(
                _empty_model_overrides(),
                "the model's config as it is",
                "overriding the model's config is not supported: edit config.json in a copy of"
                " the model dir",
                commands,
            ),
        )
        yield (
            model + "exclude_modules",
            Off(
                (None,),
                "LoRA adapts model.target_modules",
                "LoRA here adapts model.target_modules; excluding modules is not supported",
                commands,
            ),
        )
    data = {
        "tokenizer": (None, "the tokenizer here is model.tokenizer (default: the model's)"),
        "reward_fn_key": ("data_source", "the reward is picked by the data_source column here"),
        "validation_shuffle": (False, "validation prompts are read in file order here"),
        "sampler.class_path": (None, CUSTOM_DATA),
        "sampler.class_name": (None, CUSTOM_DATA),
        "datagen.path": (None, CUSTOM_DATA),
        "datagen.name": (None, CUSTOM_DATA),
    }
    for name, (value, refused) in data.items():
        yield f"data.{name}", Off((value,), refused, refused, ("grpo",))


# verl's Megatron LoRA settings (Megatron-Bridge's, verl's HFModelConfig.lora): the GRPO
# actor's, and SFT's on verl's Megatron engine (sft_trainer, engine=megatron); the longer first
MEGATRON_LORA_SECTIONS = (MODEL + "lora.", "model.lora.")


def _megatron_lora() -> Iterator[tuple[str, Off]]:
    """verl's Megatron LoRA (Megatron-Bridge's, read only at a lora.rank above 0) at the
    settings that train adapters as here: no dropout, B starting at zero, the adapter in
    the model's dtype, trained from scratch."""
    both = ("sft", "grpo")  # as verl_rules' rules for lora.rank, alpha and target_modules
    settings = {
        "dropout": Off(
            (0.0,),
            "LoRA dropout is 0 here too",
            "a fresh adapter's LoRA dropout here is 0, as on verl's FSDP backend (an adapter"
            " loaded from model.lora_adapter_path trains with its own lora_dropout)",
            both,
        ),
        "lora_B_init_method": Off(
            ("zero",), "LoRA's B starts at zero here too", "LoRA's B starts at zero here", both
        ),
        "exclude_modules": Off(
            ([], None),
            "LoRA adapts lora.target_modules (model.target_modules)",
            "LoRA here adapts lora.target_modules (model.target_modules); excluding modules is"
            " not supported",
            both,
        ),
        "dtype": Off(
            (None,),
            "the adapter's dtype follows the model's",
            "the adapter's dtype here follows the model's (lora.dtype null)",
            both,
        ),
        "adapter_path": Off(
            (None,),
            "adapters start fresh",
            "a Megatron adapter checkpoint is not read here: model.lora_adapter_path takes a"
            " PEFT adapter dir",
            both,
        ),
    }
    for section in MEGATRON_LORA_SECTIONS:
        for name, off in settings.items():
            yield section + name, off


def _empty_model_overrides() -> tuple[Any, ...]:
    """`override_config` values that override nothing: null, `{}`, and verl's Megatron
    default `{model_config: {}, moe_config: {freeze_moe_router: false}}` or part of it (a
    router is trained here as any other layer)."""
    model: tuple[dict[str, Any] | None, ...] = ({}, None)  # None: the section left out
    moe: tuple[dict[str, Any] | None, ...] = ({}, {"freeze_moe_router": False}, None)
    found: list[Any] = [None]
    for model_config in model:
        for moe_config in moe:
            sections = {"model_config": model_config, "moe_config": moe_config}
            found.append({name: value for name, value in sections.items() if value is not None})
    return tuple(found)


# the DAPO recipe's `reward_model.overlong_buffer`, which verl's DAPO reward manager
# (reward_manager=dapo) takes as reward_kwargs.overlong_buffer_cfg with max_resp_len
DAPO_OVERLONG_KEY = "reward_model.overlong_buffer"
DAPO_OVERLONG_CFG = "reward_model.reward_kwargs.overlong_buffer_cfg"
DAPO_OVERLONG = (
    "the overlong penalty of verl's DAPO reward manager (reward_manager=dapo), not available here"
)
CUSTOM_DATA = (
    "custom samplers and data generators are not supported: prompts are read from the files"
    " (data.shuffle)"
)


def _rewards() -> Iterator[tuple[str, Off]]:
    """verl's rule-based rewards at the settings that score as here: one call of the reward
    function per response (verl's naive reward manager)."""
    naive = (
        "rewards here are one call of the reward function per response, as verl's naive"
        " reward manager (its dapo, prime and batch managers are not supported)"
    )
    for key, value in {
        "reward_manager.source": "register",
        "reward_manager.name": "naive",
        "reward_manager.module.path": None,
        "reward_model.reward_manager": "naive",
        "reward_model.reward_loop_source": "register",
        "reward_model.reward_loop_module_path": None,
        "reward_model.reward_loop_class_name": None,
    }.items():
        yield key, Off((value,), "verl's naive reward manager, as here", naive, ("grpo",))
    for key in (DAPO_OVERLONG_KEY + ".enable", DAPO_OVERLONG_CFG + ".enable"):
        refused = f"{DAPO_OVERLONG}: rewards are one call of the reward function per response"
        yield (
            key,
            Off((False,), f"{DAPO_OVERLONG}; off", refused + " (verl's naive manager)", ("grpo",)),
        )
    yield (
        "reward_model.sandbox_fusion.url",
        Off(
            (None,),
            "no code sandbox",
            "a code sandbox for rewards is not supported: rewards are rules or reward.path",
            ("grpo",),
        ),
    )


def _renamed_rewards() -> Iterator[tuple[str, Off]]:
    """verl's reward settings under their names since its `reward` section (verl 67dc84b96,
    reward/reward.yaml), read as their old names are (`_rewards`; `reward.reward_model.enable`
    is a rule of trainer.verl_rules, as `reward_model.enable` is)."""
    old_names = dict(_rewards())
    for new, old in {
        "reward.reward_manager.source": "reward_manager.source",
        "reward.reward_manager.name": "reward_manager.name",
        "reward.reward_manager.module.path": "reward_manager.module.path",
        "reward.sandbox_fusion.url": "reward_model.sandbox_fusion.url",
        "sandbox_fusion.url": "reward_model.sandbox_fusion.url",  # legacy_reward_impl.yaml's
    }.items():
        yield new, old_names[old]


def _newer_switches() -> Iterator[tuple[str, Off]]:
    """Switches verl added after b178a3cd (its printed config at 1dda039), at the values that
    train as here: quantization-aware training, context parallelism, MoE routing replay,
    low-precision optimizer states, disaggregated or separate rollout engines, its V1
    trainer's asynchronous modes, DAPO's dynamic sampling, rollout caching and
    distillation are off; the schedule counts updates from 0."""
    grpo = ("grpo",)
    qat = ("QAT is off", "quantization-aware training is not supported")
    for role in (ACTOR, REF):
        for section in ("", "fsdp_config."):
            yield f"{role}{section}qat.enable", Off((False,), *qat, grpo)
    for engine, commands in MEGATRON_ENGINES:
        yield engine + "qat.enable", Off((False,), *qat, commands)
        yield (
            engine + "dynamic_context_parallel",
            Off(
                (False,),
                "context parallelism is off",
                "context parallelism is not supported: mfsdp shards data-parallel only",
                commands,
            ),
        )
        yield (
            engine + "router_replay.mode",
            Off(
                ("disabled",),
                "routing replay is off",
                "MoE routing replay is not supported",
                commands,
            ),
        )
    yield (
        "optim.zero_indexed_step",
        Off(
            (True,),
            "the schedule here counts updates from 0 (lr 0 at the first warmup update)",
            "the schedule here counts updates from 0 (verl's zero_indexed_step=true)",
        ),
    )
    yield (
        "optim.use_precision_aware_optimizer",
        Off(
            (False,),
            "Adam's states are fp32 here",
            "Megatron's precision-aware optimizer is not supported: Adam's states are fp32 here",
        ),
    )
    for name in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        yield (
            f"optim.{name}",
            Off(
                ("fp32", "float32"),
                "fp32, as here",
                "gradients and Adam's states are fp32 here",
            ),
        )
    yield (
        "optim.use_layer_wise_distributed_optimizer",
        Off((False,), "off", "Megatron's layer-wise distributed optimizer is not supported"),
    )
    colocated = "the rollout here shares the trainer's GPUs (colocated)"
    yield ROLLOUT + "full_determinism", Off((False,), DETERMINISM, DETERMINISM, grpo)
    yield (
        ROLLOUT + "disaggregation.enabled",
        Off(
            (False,), "off", f"disaggregated prefill and decode is not supported: {colocated}", grpo
        ),
    )
    yield (
        ROLLOUT + "nnodes",
        Off((0,), colocated, f"a rollout on nodes of its own is not supported: {colocated}", grpo),
    )
    yield (
        "trainer.v1.trainer_mode",
        Off(
            ("sync",),
            "verl's V1 trainer in sync mode rolls out the policy of the last update, as here",
            "asynchronous (off-policy) training is not supported: each rollout here uses the"
            " weights of the last update",
            grpo,
        ),
    )
    sampler = "trainer.v1.sampler."  # its replay buffer's, read in sync mode too
    yield (
        sampler + "custom_sampler.path",
        Off(
            (None,),
            "verl's own sampler: each step trains on its batch's prompts, as here",
            "a custom sampler of verl's V1 trainer is not supported",
            grpo,
        ),
    )
    yield (
        sampler + "sync_refill_failed_groups",
        Off((False,), "off", "refilling failed rollout groups is not supported", grpo),
    )
    dapo = "DAPO's dynamic sampling (algorithm.filter_groups) is not supported"
    yield "algorithm.filter_groups.enable", Off((False,), "off", dapo, grpo)
    yield (
        "data.gen_batch_size",
        Off(
            (None,),
            "verl fetches data.train_batch_size prompts a step then, as here",
            "verl fetches data.gen_batch_size prompts a step in place of data.train_batch_size"
            " (for DAPO's dynamic sampling, not supported): set data.train_batch_size to it",
            grpo,
        ),
    )
    yield (
        "data.mm_processor_kwargs",
        Off(({}, None), "no multimodal inputs", "the models trained here are text models", grpo),
    )
    for stage in ("rollout", "async_rollout", "rollout_tq"):
        yield (
            f"skip.{stage}.enable",
            Off((False,), "off", "reusing cached rollouts (verl's skip) is not supported", grpo),
        )
    yield (
        "distillation.enabled",
        Off((False,), "off", "distillation from a teacher model is not supported", grpo),
    )


OFF_KEYS: dict[str, Off] = dict(
    [
        *_offload(),
        *_megatron(),
        *_sharding(),
        *_model_files(),
        *_data(),
        *_optimizer(),
        *_checkpoints(),
        *_policy(),
        *_rollout(),
        *_features_off(),
        *_model_and_data(),
        *_megatron_lora(),
        *_rewards(),
        *_renamed_rewards(),
        *_newer_switches(),
    ]
)
