"""The `mfsdp` command line: thin click commands over `mfsdp_ckpt` and `trainer`."""
