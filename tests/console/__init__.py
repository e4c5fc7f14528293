"""browserworker/console: the operator console, its pages, tokens and sessions."""
