"""The crashing half of a crash replay: ``python -m browserworker.recording._child CONFIG.json``.

Runs the replay in this process until the fault point (``BROWSERWORKER_FAULTS``) or the
router (``reply_lost``) SIGKILLs it. Exits 0 if it was never killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from ..logs import configure_logging
from ..runtime import BrowserSettings
from ..store import open_store
from .files import Ledger, Recording
from .replayer import _load, replay_pass


async def _main(config: dict[str, Any]) -> int:
    recording = Recording.load(config["recording"])
    loaded = _load(recording, config["flow"], config.get("settle"))
    store = open_store(config["db"])
    try:
        run = store.get_run(config["run_id"])
        assert run is not None
        final, _, _ = await replay_pass(
            recording,
            loaded,
            store,
            run,
            ledger=Ledger(Path(config["ledger"])),
            browser=BrowserSettings(**config["browser"]),
            self_test=False,
            workdir=Path(config["db"]).parent,
            crash_on_dispatch=config.get("crash_on_dispatch"),
        )
        print(f"replay ended without crashing: {final.state}", file=sys.stderr)
        return 0
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    configure_logging("warning")
    return asyncio.run(_main(json.loads(Path(args[0]).read_text())))


if __name__ == "__main__":
    sys.exit(main())
