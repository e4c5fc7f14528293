"""browserworker/journal: a run's lease and its fenced writes."""
