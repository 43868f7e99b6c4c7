"""A resume whose adapters sit on other modules than the step's (another
model.target_modules, or an adapter dir with other target_modules) is refused naming the
trained targets (the manifest's lora.target_modules) and this run's, before the load: it was
refused listing checkpoint keys ("80 key(s) of the checkpoint this run does not have"),
which named no setting. A list of the same modules in another order resumes."""

from __future__ import annotations

import pytest

from tests.support.sft import SHORT_RUN, tiny_config, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

RESUMABLE = (
    *(o for o in SHORT_RUN if not o.startswith("checkpoint.resume=")),
    "checkpoint.save_every=1",
    "model.lora_rank=2",
    "model.lora_alpha=4",
)

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter on q_proj, v_proj, r 2


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """(data, run dir) of a LoRA run on q_proj and k_proj that saved step 1."""
    root = tmp_path_factory.mktemp("targets")
    data, run = write_chat_jsonl(root / "train.jsonl", rows=8), root / "run"
    given = ("model.target_modules=[q_proj,k_proj]", "trainer.total_steps=1")
    assert run_sft(tiny_config(data, run, *RESUMABLE, *given)).final_step == 1
    return data, run


def _refused(step, *overrides: str) -> str:
    data, run = step
    with pytest.raises(ResumeMismatchError) as caught:
        run_sft(tiny_config(data, run, *RESUMABLE, *overrides, "trainer.total_steps=2"))
    message = str(caught.value)
    assert "key(s)" not in message and "\n" not in message
    return message


@pytest.mark.parametrize(
    "targets, shown",
    [("[q_proj]", "[q_proj]"), ("[q_proj,k_proj,v_proj]", "[k_proj, q_proj, v_proj]")],
    ids=["fewer", "more"],
)
def test_other_target_modules_are_named_with_both_lists(step, targets, shown):
    _, run = step
    assert _refused(step, f"model.target_modules={targets}") == (
        f"{run / 'global_step_1' / 'manifest.json'}: the adapter was trained with"
        f" target_modules [k_proj, q_proj], this run has model.target_modules={shown}: the"
        " checkpoint's adapter weights are of other modules; set it back (or a new"
        " trainer.run_dir to start over)"
    )


def test_targets_from_an_adapter_dir_are_named_as_that_files(step, adapter):
    _, run = step
    message = _refused(step, f"model.lora_adapter_path={adapter}")
    assert message.startswith(
        f"{run / 'global_step_1' / 'manifest.json'}: the adapter was trained with"
        f" target_modules [k_proj, q_proj], this run has target_modules [q_proj, v_proj] from"
        f" {adapter / CONFIG} (model.lora_adapter_path): the checkpoint's adapter weights are"
        f" of other modules; drop model.lora_adapter_path ({run / 'config.yaml'} records none:"
        " the run started from a fresh adapter) and set model.lora_rank=2, model.lora_alpha=4"
        " and model.target_modules=[k_proj, q_proj], the trained values"
    )


def test_the_same_modules_in_another_order_resume(step):
    data, run = step
    resumed = tiny_config(
        data, run, *RESUMABLE, "model.target_modules=[k_proj,q_proj]", "trainer.total_steps=2"
    )
    result = run_sft(resumed)
    assert (result.resumed_from, result.final_step) == (1, 2)
