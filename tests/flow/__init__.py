"""browserworker/flow: the flow API, loading flow files, context options, extensions and their bus."""
