"""browserworker/gate: what a page may send while a step runs, every channel, the context's route, approval."""
