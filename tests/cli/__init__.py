"""browserworker/cli: the commands, their output for scripts and people, exit codes, fuzzed input."""
