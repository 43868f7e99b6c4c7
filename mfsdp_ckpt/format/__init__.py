"""What a checkpoint is on disk: its layout, manifest, dtypes, and the safe reading of DCP metadata
and pickles.

Importing this package imports nothing else (no torch): import its modules.
"""
