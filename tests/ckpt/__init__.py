"""mfsdp_ckpt: the checkpointer, formats, storage, checks and the layouts verl and Megatron-LM
write; convert/ holds export-hf and import-hf."""
