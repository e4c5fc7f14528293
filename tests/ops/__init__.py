"""browserworker/ops: metrics, health, logs, backup and restore, what the console and commands read."""
