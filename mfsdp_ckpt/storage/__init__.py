"""Bytes in and out: bounded, confined reads of checkpoint files and atomic writes of new ones.

Importing this package imports nothing else (no torch): import its modules.
"""
