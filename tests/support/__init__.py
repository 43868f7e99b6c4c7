"""Helpers the tests of more than one folder share: paths, multi-process runs, tiny models
and data. A folder's own cases and harness (the reliability fault tables) live in it."""
