"""bench: the benchmark scripts' own settings."""
