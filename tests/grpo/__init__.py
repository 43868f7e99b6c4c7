"""trainer.grpo and trainer.rewards."""
