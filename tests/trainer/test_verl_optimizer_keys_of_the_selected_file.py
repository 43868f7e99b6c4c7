"""An optimizer key the run's optimizer file lacks, given without Hydra's `+`: verl's struct
config refuses it and verl does not start ("Key '...' is not in struct").

Which file builds the optimizer section follows from verl's trainer config and the script's
selections: the engine `sft_trainer`'s optim/fsdp.yaml, or optim/megatron.yaml with
`optim=megatron`; the legacy `fsdp_sft_trainer`'s optim/fsdp.yaml under its own section
(`lr_scheduler`, `warmup_steps_ratio` of earlier verl); main_ppo's actor's optim/fsdp.yaml,
or optim/megatron.yaml with `--config-name=ppo_megatron_trainer` or `model_engine=megatron`.
examples/verl/run_sft_megatron_fsdp.sh once passed Megatron's `optim.lr_decay_style` and
`optim.min_lr` under verl's default FSDP optimizer and converted at exit 0 as a cosine
schedule, a run verl does not start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO
from trainer.verl_import import Conversion, convert_verl

SFT = "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m"
LEGACY = "torchrun -m verl.trainer.fsdp_sft_trainer data.train_files=/d/t.parquet"
GRPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    " data.train_files=/d/t.parquet actor_rollout_ref.model.path=/m"
)
ACTOR = "actor_rollout_ref.actor.optim."
EXAMPLE = REPO / "examples" / "verl" / "run_sft_megatron_fsdp.sh"
# the example before it selected verl's Megatron engine and optimizer
EXAMPLE_ON_FSDP_OPTIMIZER = """torchrun --standalone --nnodes=1 --nproc-per-node=8 \\
  -m verl.trainer.sft_trainer data.train_files=/d/train.parquet data.messages_key=messages \\
  data.train_batch_size=256 data.use_dynamic_bsz=True data.max_token_len_per_gpu=8192 \\
  data.pad_mode=no_padding data.max_length=2048 model.path=/m optim.lr=1e-5 \\
  optim.lr_warmup_steps_ratio=0.2 optim.weight_decay=0.1 optim.betas="[0.9,0.95]" \\
  optim.clip_grad=1.0 optim.lr_decay_style=cosine optim.min_lr=1e-6 \\
  trainer.default_local_dir=/tmp/run trainer.total_epochs=2
"""


def converted(tmp_path: Path, text: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(text + "\n")
    return convert_verl(script)


def refused(conversion: Conversion) -> dict[str, str]:
    """key=value -> its line, for the keys verl's struct refuses."""
    return {
        line.partition(": ")[0]: line for line in conversion.dropped if "is not in struct" in line
    }


def test_the_example_selecting_megatrons_optimizer_converts():
    conversion = convert_verl(EXAMPLE)
    assert conversion.dropped == []
    assert conversion.tree["optim"]["scheduler"] == "cosine"


def test_the_example_on_verls_fsdp_optimizer_is_refused_naming_each_key(tmp_path):
    conversion = converted(tmp_path, EXAMPLE_ON_FSDP_OPTIMIZER)
    lines = refused(conversion)
    assert set(lines) == {"optim.lr_decay_style=cosine", "optim.min_lr=1e-06"}
    line = lines["optim.lr_decay_style=cosine"]
    assert "\n" not in line
    assert "Key 'lr_decay_style' is not in struct" in line
    assert "verl's optim/fsdp.yaml, which has no lr_decay_style" in line
    assert line.endswith("add a key with +optim.lr_decay_style=...")
    # not read as given: verl's default schedule (constant) is written, with no floor
    assert conversion.tree["optim"]["scheduler"] == "constant"
    assert "min_lr" not in conversion.tree["optim"]


@pytest.mark.parametrize(
    ("text", "key", "file"),
    [
        (SFT, "optim.lr_decay_style=cosine", "fsdp"),
        (SFT, "optim.grad_clip=1.0", "fsdp"),  # verl's deprecated name: a dataclass field only
        (f"{SFT} optim=megatron", "optim.lr_scheduler_type=cosine", "megatron"),
        (f"{SFT} optim=megatron", "optim.min_lr_ratio=0.1", "megatron"),
        (LEGACY, "optim.lr_decay_style=cosine", "fsdp"),
        (GRPO, f"{ACTOR}lr_decay_style=cosine", "fsdp"),
        (
            f"{GRPO} --config-name=ppo_megatron_trainer",
            f"{ACTOR}lr_scheduler_type=cosine",
            "megatron",
        ),
    ],
)
def test_a_key_the_selected_file_lacks_is_refused(tmp_path, text, key, file):
    lines = refused(converted(tmp_path, f"{text} {key}"))
    assert list(lines) == [key]
    assert f"verl's optim/{file}.yaml, which has no" in lines[key]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (SFT, "optim.lr_scheduler_type=cosine"),
        (SFT, "optim.warmup_style=cosine"),
        (SFT, "+optim.lr_decay_style=cosine"),  # added with +: verl takes it
        (f"{SFT} optim=megatron", "optim.lr_decay_style=cosine"),
        (f"{SFT} optim=megatron", "optim.min_lr=0.0"),
        (LEGACY, "optim.lr_scheduler=cosine"),  # sft_trainer.yaml's own optim keys
        (LEGACY, "optim.warmup_steps_ratio=0.1"),
        (LEGACY, "optim.lr_scheduler_type=cosine"),
        (f"{LEGACY} optim=megatron", "optim.lr_decay_style=cosine"),
        (GRPO, f"{ACTOR}warmup_style=cosine"),
        (f"{GRPO} --config-name=ppo_megatron_trainer", f"{ACTOR}lr_decay_style=cosine"),
        (f"{GRPO} --config-name=ppo_megatron_trainer", f"{ACTOR}warmup_style=cosine"),
        (f"{GRPO} model_engine=megatron", f"{ACTOR}lr_decay_style=cosine"),
        # an optimizer file whose keys are not known here: nothing is refused
        (f"{SFT} optim=veomni", "optim.lr_decay_style=cosine"),
        (f"{GRPO} model_engine=torchtitan", f"{ACTOR}lr_decay_style=cosine"),
    ],
)
def test_a_key_the_selected_file_has_is_not_refused_as_struct(tmp_path, text, key):
    assert refused(converted(tmp_path, f"{text} {key}")) == {}


def test_a_misspelt_optimizer_key_is_told_the_files_close_names(tmp_path):
    (line,) = refused(converted(tmp_path, f"{SFT} optim.lr_warmup_step=3")).values()
    assert "which has no lr_warmup_step (did you mean lr_warmup_steps," in line
