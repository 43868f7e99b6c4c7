"""Shared pieces of the rollout-engine tests: prompts, perturbed weights, transformers' log-probs."""

import torch

PROMPTS = [[5, 17, 33, 60, 71], [9, 8], [100, 200, 300, 7, 7, 7, 7, 41]]


def perturbed_model(model_dir, seed: int, device: str = "cpu"):
    """The tiny model with its weights moved by seeded noise, so a weight push is visible."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    return model.eval()


def reference_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """log p(response tokens) by a plain transformers forward over prompt + response (on CPU)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response], device=device)).logits[
            0, len(prompt) - 1 : -1
        ]
    picked = torch.log_softmax(logits.float(), -1).gather(
        -1, torch.tensor(response, device=device)[:, None]
    )
    return picked.squeeze(-1).cpu()
