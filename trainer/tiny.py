"""The embedded default: a tiny Qwen2-shaped model and a tokenizer built locally.

Nothing here downloads anything. The tokenizer is a byte-level BPE trained in a second on
synthetic GSM8K-style text, with Qwen's chat markers and a chat template whose
`{% generation %}` block lets transformers return assistant-token masks (the SFT masks here
are verl's, which read no such block). It splits
text exactly as Qwen2's tokenizer does (one digit a token, among others), because a saved
model dir says `model_type: qwen2` and transformers then always loads it with
`Qwen2Tokenizer`, which keeps only the vocabulary and merges from tokenizer.json and rebuilds
the rest; any other splitting would make the reloaded tokenizer disagree with the one the
run trained with.
Head dim is 32 so that vLLM's CPU attention accepts the model too.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module without transformers
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% "
    "endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WEIGHTS_FILE = "model.safetensors"
GSM8K_SUFFIX = 'Let\'s think step by step and output the final answer after "####".'


def tiny_config_kwargs(vocab_size: int) -> dict[str, Any]:
    """Qwen2 shape in miniature: GQA (4 query heads, 2 KV groups), qkv bias, SwiGLU, RMSNorm,
    RoPE."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )


def tiny_config_fields(tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """The tiny model's Qwen2Config fields for `tokenizer`: the shape, sized to its
    vocabulary, and the ids generation stops and pads at."""
    return dict(
        **tiny_config_kwargs(len(tokenizer)),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def synthetic_arithmetic(n: int, seed: int = 0) -> list[dict]:
    """GSM8K-shaped rows: a word problem and a worked answer ending in `#### <number>`."""
    rng = random.Random(seed)
    rows = []
    for index in range(n):
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        question = f"Tom has {a} apples and buys {b} more. How many apples does Tom have now?"
        answer = f"Tom has {a} + {b} = {a + b} apples.\n#### {a + b}"
        rows.append({"question": question, "answer": answer, "index": index})
    return rows


def build_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A PreTrainedTokenizerFast with Qwen-style chat markers, trained on synthetic text.

    Normalizer, pre-tokenizer and decoder are taken from `Qwen2Tokenizer` itself, so that
    `AutoTokenizer.from_pretrained(<saved model dir>)` (which picks `Qwen2Tokenizer` for any
    qwen2 config, whatever tokenizer_config.json says) encodes and decodes exactly like this one.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    corpus = []
    for row in synthetic_arithmetic(400, seed=1234):
        corpus += [row["question"] + " " + GSM8K_SUFFIX, row["answer"]]
    corpus += [str(i) for i in range(200)] + [
        "system",
        "user",
        "assistant",
        "You are a helpful assistant.",
    ]
    qwen2 = Qwen2Tokenizer().backend_tokenizer
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = qwen2.normalizer
    tokenizer.pre_tokenizer = qwen2.pre_tokenizer
    tokenizer.decoder = qwen2.decoder
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",  # Qwen2Tokenizer's default, so both list the same special tokens
        bos_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model_dir(
    out_dir: str | os.PathLike, seed: int = 0, with_weights: bool = False
) -> Path:
    """Write config.json, generation_config.json and tokenizer files (and weights if asked).

    The directory then works wherever a Hugging Face model dir is expected. A write that
    fails (a full disk) is an OSError naming its file (`named_writes.writing`).
    """
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mfsdp_ckpt.storage.named_writes import writing
    from trainer.hf_files import save_hf_files

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    # what save_pretrained records of the weights written below (vLLM picks its model class
    # by the architecture)
    weights_fields: dict[str, Any] = (
        {"architectures": ["Qwen2ForCausalLM"], "dtype": "float32"} if with_weights else {}
    )
    config = Qwen2Config(**tiny_config_fields(tokenizer), bos_token_id=None, **weights_fields)
    save_hf_files(out, config, tokenizer, generation=None)
    if with_weights:
        torch.manual_seed(seed)
        weights = Qwen2ForCausalLM(config).state_dict()
        del weights["lm_head.weight"]  # tied to the embedding: saved once, as save_pretrained does
        with writing(out / WEIGHTS_FILE):
            save_file(weights, out / WEIGHTS_FILE, metadata={"format": "pt"})
    return out
