"""trainer.data: chat tokenization, batching and packing, dataset files."""
