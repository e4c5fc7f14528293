"""browserworker/control: what people and programs ask of runs (requeue, resolve)."""
