"""SFT data: reading rows, chat tokenization with assistant-only loss masks, micro-batching."""
