"""pytest plugin (entry point ``pytest11``): test flows against the sandbox, or offline from recordings.

Fixtures:

- ``bw_store``: a fresh SQLite journal per test;
- ``sandbox``: the sandbox shop on a free loopback port, one per session, in its own process;
- ``replay``: ``replay("place-order", crash_at="submit:after_dispatch")`` runs a recording's
  flow offline (optionally crashing it at a point and resuming it) and returns a
  :class:`~browserworker.recording.ReplayResult` (the run, its journal, differences);
- ``bw_browser_settings``: how Chromium is launched, taken from pytest-playwright's
  ``browser_type_launch_args`` (``--headed``, ``--browser-channel``, ``--slowmo``).

Options (group ``browserworker``): ``--bw-record=none|once|all`` (like pytest-recording:
``none``, the default, only replays and a missing recording fails with the command that
creates it; ``once`` records what is missing; ``all`` re-records everything),
``--bw-recordings=DIR`` (default ``recordings`` under the rootdir). A failed test keeps
its replays' traces and screenshots under pytest-playwright's ``--output``
(``test-results/``); a passing test keeps nothing.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .store import Store, open_store

if TYPE_CHECKING:  # pragma: no cover
    from .recording import ReplayResult
    from .runtime import BrowserSettings, Engine

RECORD_MODES = ("none", "once", "all")
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_REPLAYS = pytest.StashKey[list["ReplayResult"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("browserworker", "browserworker")
    group.addoption(
        "--bw-sandbox-dedupe",
        action="store_true",
        default=False,
        help="Start the session sandbox with dedupe-on-reference switched on.",
    )
    group.addoption(
        "--bw-record",
        choices=RECORD_MODES,
        default="none",
        help="none: replay recordings only (default); once: record missing recordings against the "
        "live target; all: re-record every recording a test uses.",
    )
    group.addoption(
        "--bw-recordings",
        metavar="DIR",
        default=None,
        help="Directory of recordings (default: recordings/ under the rootdir).",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    replays = item.stash.get(_REPLAYS, [])
    if report.when == "call" and report.failed and replays:
        report.sections.append(("browserworker replays", "\n\n".join(r.report() for r in replays)))


@pytest.fixture
def bw_store(tmp_path: Path) -> Iterator[Store]:
    """A fresh journal database for one test."""
    store = open_store(tmp_path / "browserworker.db")
    yield store
    store.close()


@pytest.fixture
def bw_engine(bw_store: Store, bw_browser_settings: BrowserSettings) -> Engine:
    """An :class:`~browserworker.runtime._engine.Engine` over :func:`bw_store` and the session's browser settings."""
    from .runtime import Engine

    return Engine(bw_store, browser=bw_browser_settings)


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The sandbox shop on a free loopback port, in its own process, for the whole session."""
    from .sandbox.testing import start_sandbox

    proc = start_sandbox(
        tmp_path_factory.mktemp("sandbox") / "sandbox.db", dedupe=request.config.getoption("--bw-sandbox-dedupe")
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def bw_record_mode(pytestconfig: pytest.Config) -> str:
    """``none``, ``once`` or ``all`` (``--bw-record``)."""
    return str(pytestconfig.getoption("--bw-record"))


@pytest.fixture(scope="session")
def bw_recordings_dir(pytestconfig: pytest.Config) -> Path:
    """Where recordings live (``--bw-recordings``, default ``<rootdir>/recordings``)."""
    given = pytestconfig.getoption("--bw-recordings")
    return Path(given).resolve() if given else Path(pytestconfig.rootpath) / "recordings"


@pytest.fixture(scope="session")
def bw_browser_settings(request: pytest.FixtureRequest) -> BrowserSettings:
    """Chromium launch settings: pytest-playwright's ``browser_type_launch_args`` (``--headed``,
    ``--browser-channel``, ``--slowmo``) over the kit's own discovery and ``BROWSERWORKER_CHROMIUM_ARGS``."""
    from .runtime import ENV_ARGS, BrowserSettings

    try:
        launch = dict(request.getfixturevalue("browser_type_launch_args"))
    except pytest.FixtureLookupError:  # pytest-playwright is not installed
        launch = {}
    headless = bool(launch.pop("headless", True))
    extra_args = list(launch.pop("args", []) or [])
    if launch.get("channel") or launch.get("executable_path"):
        settings = BrowserSettings(headless=headless, args=shlex.split(os.environ.get(ENV_ARGS, "")))
    else:
        settings = BrowserSettings.discover(headless=headless)
    settings.args += extra_args
    settings.launch_options.update(launch)
    return settings


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:180] or "test"


class Replayer:
    """The ``replay`` fixture: ``replay(NAME, crash_at=..., settle=..., inputs=..., flow=..., record_inputs=...)``."""

    def __init__(
        self, request: pytest.FixtureRequest, directory: Path, mode: str, browser: BrowserSettings, artifacts: Path
    ) -> None:
        self.request = request
        self.directory = directory
        self.mode = mode
        self.browser = browser
        self.artifacts = artifacts
        self.results: list[ReplayResult] = []

    def path(self, name: str) -> Path:
        return Path(name) if ("/" in name or Path(name).is_absolute()) else self.directory / name

    def __call__(
        self,
        name: str,
        *,
        crash_at: str | None = None,
        settle: float | None = None,
        inputs: Mapping[str, Any] | None = None,
        flow: str | Path | None = None,
        record_inputs: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    ) -> ReplayResult:
        """Replay recording NAME offline and return the result (see ``ReplayResult``).

        ``crash_at="STEP:POINT"`` crashes the replay there (SIGKILL) and resumes it;
        ``settle`` overrides the effects' settle time; ``inputs`` stand in for recorded
        inputs. ``flow`` and ``record_inputs`` (a mapping, or a callable returning one,
        e.g. using the ``sandbox`` fixture) are what ``--bw-record=once|all`` records with.
        """
        from .recording import replay

        path = self.path(name)
        exists = (path / "meta.json").is_file()
        if self.mode == "all" or (self.mode == "once" and not exists):
            self._record(name, path, flow, record_inputs)
        elif not exists:
            pytest.fail(self._missing(name, path, flow, record_inputs), pytrace=False)
        trace_dir = self.artifacts / f"{len(self.results) + 1}-{_slug(path.name)}"
        result = replay(
            path, crash_at=crash_at, settle=settle, inputs=inputs, flow=flow, browser=self.browser, trace_dir=trace_dir
        )
        self.results.append(result)
        self.request.node.stash.setdefault(_REPLAYS, []).append(result)
        return result

    def _missing(
        self,
        name: str,
        path: Path,
        flow: str | Path | None,
        record_inputs: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None,
    ) -> str:
        pairs = (
            " ".join(f"--input {shlex.quote(f'{k}={v}')}" for k, v in record_inputs.items())
            if isinstance(record_inputs, Mapping)
            else "--input KEY=VALUE ..."
        )
        command = f"browserworker run {flow or 'FLOW.py'} --record {path} {pairs}"
        return f"no recording {name!r} at {path} (--bw-record=none only replays). Create it with:\n    {command}\n" + (
            "or run pytest with --bw-record=once"
            if flow and record_inputs is not None
            else "or pass flow= and record_inputs= to replay() and run pytest with --bw-record=once"
        )

    def _record(
        self,
        name: str,
        path: Path,
        flow: str | Path | None,
        record_inputs: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None,
    ) -> None:
        from .flow import load_flow
        from .recording import record, run_sync
        from .runtime import Engine

        if flow is None or record_inputs is None:
            pytest.fail(
                f"--bw-record={self.mode} needs to record {name!r}: pass flow= and record_inputs= to replay()",
                pytrace=False,
            )
        inputs = record_inputs() if callable(record_inputs) else record_inputs
        loaded = load_flow(flow)
        with Engine(open_store(self.artifacts.parent / f"record-{_slug(name)}.db"), browser=self.browser) as engine:
            run, _ = engine.prepare(loaded, inputs, run_id=f"rec-{_slug(name)}-{time.strftime('%Y%m%d%H%M%S')}")
            final = run_sync(record(engine, loaded, run, name=path)).run
        if final is None or final.state != "SUCCEEDED":
            pytest.fail(
                f"recording {name!r} ended {final.state if final else 'without a state'}; see {path}", pytrace=False
            )


@pytest.fixture
def replay(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    bw_record_mode: str,
    bw_recordings_dir: Path,
    bw_browser_settings: BrowserSettings,
) -> Iterator[Replayer]:
    """Replay recordings offline: ``result = replay("place-order", crash_at="submit:after_dispatch")``.

    Traces and screenshots of the replays are kept under ``test-results/<test>/`` only when
    the test fails."""
    replayer = Replayer(request, bw_recordings_dir, bw_record_mode, bw_browser_settings, tmp_path / "bw-artifacts")
    yield replayer
    reports = request.node.stash.get(_REPORTS, {})
    failed = any(r.failed for r in reports.values())
    if failed and replayer.artifacts.is_dir():
        output = Path(str(request.config.getoption("output", "test-results"))).absolute()
        dest = output / _slug(request.node.nodeid)
        shutil.copytree(replayer.artifacts, dest, dirs_exist_ok=True)
