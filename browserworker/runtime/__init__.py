"""Running runs: the engine, the worker, the browser and the step loop.

``_engine`` assembles a store, a browser, leases and extensions; ``_worker`` claims and runs
runs; ``_leased_run`` is one leased run; ``_browser`` finds and starts Chromium. The step loop:
``_executor`` (passes over the steps), ``_passes`` (what they share), ``_actions``,
``_effects`` (intent, gated step, outcome), ``_recovery_rules`` (pure decisions after a crash),
``_recover`` (carrying them out: verifier, settle, review); ``_run_request`` creates a run or
finds the one to resume; ``_login_sessions`` saves and reuses sealed login sessions;
``_live`` is a run whose steps are given one at a time (an agent's
session); ``_settings`` says how long an approval's request is held and may wait.
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._browser import ENV_ARGS, LEAN_FEATURES, BrowserProcess, BrowserSettings, find_chromium, launch_options
    from ._engine import Engine
    from ._live import LiveRun, SentBetween, StepOutcome
    from ._login_sessions import SessionInfo, drop_session, generate_key, list_sessions, replay_seed, sealer_for
    from ._run_request import RunRequest, new_run_id, prepare_run, validate_run_id
    from ._settings import ApprovalSettings, SessionSettings
    from ._worker import Worker, WorkerSettings, WorkerStats

__getattr__, __dir__ = face(__name__)

__all__ = [
    "ENV_ARGS",
    "LEAN_FEATURES",
    "ApprovalSettings",
    "BrowserProcess",
    "BrowserSettings",
    "Engine",
    "LiveRun",
    "RunRequest",
    "SentBetween",
    "SessionInfo",
    "SessionSettings",
    "StepOutcome",
    "Worker",
    "WorkerSettings",
    "WorkerStats",
    "drop_session",
    "find_chromium",
    "generate_key",
    "launch_options",
    "list_sessions",
    "new_run_id",
    "prepare_run",
    "replay_seed",
    "sealer_for",
    "validate_run_id",
]
