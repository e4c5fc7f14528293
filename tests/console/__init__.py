"""browserworker/console: the operator console, its pages, tokens and sessions; a page view writes nothing."""
