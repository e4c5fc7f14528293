"""browserworker/control: what people and programs ask of runs (requeue, resolve), and a run that is not there."""
