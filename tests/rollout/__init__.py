"""trainer.rollout: the hf and vllm engines and token sampling."""
