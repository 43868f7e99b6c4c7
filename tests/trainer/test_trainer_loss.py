import pytest
import torch

from trainer.config import ModelConfig
from trainer.data.batching import collate_packed, collate_padded
from trainer.data.chat import Example
from trainer.loss import IGNORE_INDEX, chunked_cross_entropy_sum, plain_cross_entropy_sum
from trainer.model import attach_loss_forward, build_hf_config, build_model, load_tokenizer


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_chunked_cross_entropy_equals_plain_loss_and_gradients(chunk):
    torch.manual_seed(0)
    hidden = torch.randn(3, 11, 16, requires_grad=True)
    weight = torch.randn(97, 16, requires_grad=True)
    targets = torch.randint(0, 97, (3, 11))
    targets[0, :4] = IGNORE_INDEX
    targets[2, :] = IGNORE_INDEX  # a row with no loss at all
    plain = plain_cross_entropy_sum(hidden, weight, targets)
    plain_grads = torch.autograd.grad(plain * 0.37, (hidden, weight))
    chunked = chunked_cross_entropy_sum(hidden, weight, targets, chunk)
    chunked_grads = torch.autograd.grad(chunked * 0.37, (hidden, weight))
    assert chunked.item() == pytest.approx(plain.item(), rel=1e-6)
    for ours, reference in zip(chunked_grads, plain_grads):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert torch.count_nonzero(chunked_grads[0][2]) == 0


def test_chunked_cross_entropy_bf16_close_to_fp32_reference():
    torch.manual_seed(0)
    hidden = torch.randn(64, 32)
    weight = torch.randn(500, 32) * 0.2
    targets = torch.randint(0, 500, (64,))
    reference = plain_cross_entropy_sum(hidden, weight, targets)
    low = chunked_cross_entropy_sum(hidden.bfloat16(), weight.bfloat16(), targets, 16)
    assert low.dtype == torch.float32
    assert low.item() == pytest.approx(reference.item(), rel=2e-2)


@pytest.fixture(scope="module")
def tiny_model():
    cfg = ModelConfig(loss="plain")
    tokenizer = load_tokenizer(cfg)
    return build_model(cfg, build_hf_config(cfg, tokenizer), torch.device("cpu"), seed=0), tokenizer


def _examples(vocab: int) -> list[Example]:
    generator = torch.Generator().manual_seed(3)
    examples = []
    for length, prompt in ((9, 4), (14, 6), (5, 2)):
        ids = torch.randint(3, vocab, (length,), generator=generator).tolist()
        examples.append(Example(ids, [0] * prompt + [1] * (length - prompt)))
    return examples


@pytest.mark.parametrize("mode", ["plain", "chunked"])
def test_packed_and_padded_loss_equal_unpacked_loss(tiny_model, mode):
    model, tokenizer = tiny_model
    attach_loss_forward(model, mode, chunk_tokens=7)
    examples = _examples(len(tokenizer))
    one_by_one = sum(model(**collate_packed([e], tokenizer.pad_token_id).inputs) for e in examples)
    packed_batch = collate_packed(examples, tokenizer.pad_token_id)
    packed = model(**packed_batch.inputs)
    padded = model(**collate_padded(examples, tokenizer.pad_token_id).inputs)
    assert packed_batch.targets == sum(e.num_targets for e in examples)
    assert packed.item() == pytest.approx(one_by_one.item(), rel=1e-5)
    assert padded.item() == pytest.approx(one_by_one.item(), rel=1e-5)
    # gradients agree too (packing must not leak attention across documents)
    grads = []
    for loss_fn in (
        lambda: model(**packed_batch.inputs),
        lambda: sum(model(**collate_packed([e], tokenizer.pad_token_id).inputs) for e in examples),
    ):
        model.zero_grad()
        loss_fn().backward()
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)
