"""Is this checkpoint intact, and what is in it: validate and describe (inspect).

Importing this package imports nothing else (no torch): import its modules.
"""
