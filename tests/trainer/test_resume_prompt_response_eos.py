"""A run resumed onto prompt/response rows whose checkpoint trained them as a user and an
assistant turn (as mfsdp did before it tokenized them as verl's SFTDataset does) now trains
other tokens on the same rows: it says so, naming that cause beside edited or reordered rows
(the file itself may be unchanged), and goes on."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft
from trainer.tiny import build_tokenizer

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "trainer.total_steps=3",
)


def as_prompt_response(messages_file: Path, out: Path) -> Path:
    """The rows of a `messages` file as prompt/response rows: the same user and assistant
    text, which a chat template renders as the same two turns."""
    rows = [json.loads(line)["messages"] for line in messages_file.read_text().splitlines()]
    out.write_text(
        "".join(
            json.dumps({"prompt": user["content"], "response": reply["content"]}) + "\n"
            for user, reply in rows
        )
    )
    return out


def test_a_resume_onto_rows_now_tokenized_as_verl_warns_and_goes_on(tmp_path, capsys):
    tokenizer = build_tokenizer()
    tokenizer.eos_token = "<|endoftext|>"  # a base model's: not the template's turn end
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    turns = write_chat_jsonl(tmp_path / "turns.jsonl", rows=16)
    rows = as_prompt_response(turns, tmp_path / "rows.jsonl")
    run = tmp_path / "run"
    model = f"model.tokenizer={tmp_path / 'tokenizer'}"
    run_sft(tiny_config(turns, run, model, *SETTINGS, "trainer.stop_at_step=2"))
    capsys.readouterr()
    run_sft(tiny_config(rows, run, model, *SETTINGS))
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    # the same prompts in the same order: the rows are the same, their trained tokens are not
    assert (
        f"[sft] warning: {run}/global_step_2: data.train_files ({rows}) hold the prompts the"
        " checkpoint was trained on, in its order, but their trained tokens differ: another"
        " tokenizer or chat template, edited responses,"
    ) in err
    assert (
        "or prompt/response rows trained before mfsdp tokenized them as verl's SFTDataset"
        " does: the steps after 2 train other tokens of the rows an uninterrupted run reads"
    ) in err
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3
