"""`model.attn_implementation=varlen` on CPU: packed rows carry their document boundaries, the
model accepts them, and the SDPA fallback with the block mask gives the unpacked loss and
gradients (the CUDA kernel is checked against it in tests/trainer/test_attention_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig
from trainer.data.batching import collate_packed, collate_padded
from trainer.data.chat import Example
from trainer.model import build_hf_config, build_model, load_tokenizer


def test_packed_rows_carry_document_boundaries():
    batch = collate_packed(
        [Example([5, 6, 7, 8], [0, 1, 1, 1]), Example([9, 10, 11], [0, 1, 1])], pad_id=0
    )
    assert batch.inputs["cu_seqlens"].tolist() == [0, 4, 7]
    assert batch.inputs["cu_seqlens"].dtype == torch.int32


def test_varlen_packed_loss_and_gradients_equal_unpacked():
    cfg = ModelConfig(attn_implementation="varlen", loss="chunked")
    tokenizer = load_tokenizer(cfg)
    model = build_model(cfg, build_hf_config(cfg, tokenizer), torch.device("cpu"), seed=0)
    generator = torch.Generator().manual_seed(3)
    examples = []
    for length, prompt in ((9, 4), (14, 6), (5, 2)):
        ids = torch.randint(3, len(tokenizer), (length,), generator=generator).tolist()
        examples.append(Example(ids, [0] * prompt + [1] * (length - prompt)))
    runs = {
        "packed": lambda: model(**collate_packed(examples, tokenizer.pad_token_id).inputs),
        "one by one": lambda: sum(
            model(**collate_packed([e], tokenizer.pad_token_id).inputs) for e in examples
        ),
        "padded": lambda: model(**collate_padded(examples, tokenizer.pad_token_id).inputs),
    }
    results = {}
    for name, run in runs.items():
        model.zero_grad()
        loss = run()
        loss.backward()
        results[name] = (loss.item(), model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    reference_loss, reference_grad = results["one by one"]
    for name in ("packed", "padded"):
        assert results[name][0] == pytest.approx(reference_loss, rel=1e-5), name
        torch.testing.assert_close(results[name][1], reference_grad, rtol=1e-4, atol=1e-6)


def test_flex_attention_on_cpu_is_refused_before_anything_is_built(tmp_path):
    """FlexAttention has no backward pass on CPU: the run failed at its first step with a
    traceback of 129 lines in every rank."""
    from tests.support.sft import tiny_config, write_chat_jsonl
    from trainer.config import ConfigError
    from trainer.sft import run_sft

    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    cfg = tiny_config(
        data, tmp_path / "run", "model.attn_implementation=flex_attention", "trainer.device=cpu"
    )
    with pytest.raises(ConfigError, match=r"^model\.attn_implementation=flex_attention: Flex"):
        run_sft(cfg)
    assert not (tmp_path / "run").exists()
