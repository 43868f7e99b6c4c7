"""GRPO: group-relative advantages, the clipped PPO policy loss, KL to a reference, and loss
aggregation that stays exact across micro-batches, gradient accumulation and data-parallel ranks.

The algorithm modules (`advantage`, `policy_loss`, `kl`, `aggregation`) are pure tensor
functions with verl's names, so a verl user can read a config and know what it does.
"""
