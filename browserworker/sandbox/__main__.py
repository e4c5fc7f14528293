"""``python -m browserworker.sandbox --port P --db PATH [--dedupe]``.

Prints ``sandbox listening on http://HOST:PORT`` (flushed) once the socket is
listening; with ``--port 0`` the line carries the real port.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .server import serve

READY_PREFIX = "sandbox listening on "


def main(argv: Sequence[str] | None = None) -> None:
    """Parse arguments and serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m browserworker.sandbox", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8800, help="port to bind; 0 picks a free one")
    parser.add_argument("--db", default="sandbox.db", help="SQLite file (created if missing)")
    parser.add_argument(
        "--dedupe", action="store_true", help="dedupe form POSTs on reference regardless of the dedupe knob"
    )
    args = parser.parse_args(argv)

    def ready(url: str) -> None:
        print(f"{READY_PREFIX}{url}", flush=True)

    serve(args.host, args.port, args.db, dedupe=args.dedupe, ready=ready)


if __name__ == "__main__":
    main()
