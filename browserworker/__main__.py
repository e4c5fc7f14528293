"""``python -m browserworker`` is the ``browserworker`` command."""

from .cli.process import main

main()
