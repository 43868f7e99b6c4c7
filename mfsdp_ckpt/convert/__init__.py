"""To and from Hugging Face: export, import, weight-name maps, HF configs, LoRA adapters.

Importing this package imports nothing else (no torch): import its modules.
"""
