"""browserworker/sandbox: the demo shop, its routes and fault knobs."""
