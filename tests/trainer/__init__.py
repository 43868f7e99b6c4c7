"""trainer: config, model, loss, optimizer, strategies, threads, SFT runs and resume."""
