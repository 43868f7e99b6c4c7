"""cli: what a user meets on the command line, launch, and exit codes."""
