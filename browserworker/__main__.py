"""``python -m browserworker`` is the ``browserworker`` command."""

from .cli import main

main(prog_name="browserworker")
