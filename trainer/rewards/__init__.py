"""Rule rewards for RL data, chosen per row by its `data_source`, or a user's own function.

`score(data_source, solution_str, ground_truth, extra_info)` is verl's reward signature, so a
verl reward file works unchanged as `reward.path` / `reward.name`.
"""
