"""The sealing key a run's kept browser state is journaled with (browserworker.runtime._kept):
looked for once, ahead of the first effect when asked, and the same for every caller."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from browserworker.runtime._kept import KeptState
from browserworker.runtime._login_sessions import Sealer
from browserworker.runtime._settings import SessionSettings
from browserworker.store import SQLiteStore


def _kept(store: Any) -> KeptState:
    return KeptState(SimpleNamespace(store=store, run_id="r-kept"), SessionSettings())  # type: ignore[arg-type]


def test_a_key_looked_for_ahead_is_the_one_every_caller_gets(tmp_path: Path) -> None:
    """look_ahead() finds the store's key in the background (making its key file); callers that
    ask for it at the same time, while it is still being looked for, all get that one sealer."""
    store = SQLiteStore(tmp_path / "kept.db")

    async def go() -> list[Sealer | None]:
        kept = _kept(store)
        kept.look_ahead()
        return list(await asyncio.gather(kept._sealing(), kept._sealing(), kept._sealing()))

    try:
        found = asyncio.run(go())
    finally:
        store.close()
    assert isinstance(found[0], Sealer)
    assert found[1] is found[0] and found[2] is found[0]
    assert store.connector.session_key_file.exists()  # type: ignore[attr-defined]


def test_a_store_with_no_key_keeps_the_state_unsealed() -> None:
    """A store with no key to seal with (PostgreSQL without BROWSERWORKER_SESSION_KEY) gives no
    sealer, looked for ahead or not: the state is kept by this process only, never an error."""
    keyless = SimpleNamespace(connector=SimpleNamespace(location="postgresql://db/runs"))

    async def go() -> tuple[Sealer | None, Sealer | None]:
        ahead, asked = _kept(keyless), _kept(keyless)
        ahead.look_ahead()
        return await ahead._sealing(), await asked._sealing()

    assert asyncio.run(go()) == (None, None)
