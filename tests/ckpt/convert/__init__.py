"""mfsdp_ckpt.convert: export-hf and import-hf."""
