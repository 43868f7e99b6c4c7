"""A saved tiny model dir reloads with a tokenizer that encodes and decodes like the embedded one.

transformers loads any qwen2 model dir with `Qwen2Tokenizer`, which rebuilds the
pre-tokenizer itself; a run trained with the embedded tokenizer and then evaluated or
resumed from its exported dir must still see the same token ids.
"""

from transformers import AutoTokenizer

from trainer.tiny import GSM8K_SUFFIX, build_tiny_model_dir, build_tokenizer

TEXTS = [
    "0 + 7 =",
    "0 + 7 = 7\n#### 7",
    "Tom has 12 apples and buys 19 more.\n#### 31",
    "  spaces,\ttabs and   12345 digits\r\n",
    "<|im_start|>user\nhi<|im_end|>",
]


def test_model_dir_tokenizer_matches_embedded_tokenizer(tmp_path):
    embedded = build_tokenizer()
    reloaded = AutoTokenizer.from_pretrained(build_tiny_model_dir(tmp_path / "model"))
    messages = [
        {"role": "user", "content": f"What is 0 + 7? {GSM8K_SUFFIX}"},
        {"role": "assistant", "content": "0 + 7 = 7\n#### 7"},
    ]
    chat = embedded.apply_chat_template(messages, tokenize=False)
    assert chat == reloaded.apply_chat_template(messages, tokenize=False)
    assert len(reloaded) == len(embedded)
    for text in TEXTS + [chat]:
        ids = embedded(text)["input_ids"]
        assert reloaded(text)["input_ids"] == ids, text
        assert reloaded.decode(ids, skip_special_tokens=True) == embedded.decode(
            ids, skip_special_tokens=True
        )
    assert (
        reloaded.eos_token_id == embedded.eos_token_id
        and reloaded.pad_token_id == embedded.pad_token_id
    )
    prompt = reloaded.apply_chat_template(messages[:1], add_generation_prompt=True)
    assert prompt == embedded.apply_chat_template(messages[:1], add_generation_prompt=True)
