"""Finding and launching Chromium; one browser per process, a fresh context per attempt.

Discovery order: ``BROWSERWORKER_CHROMIUM`` (a path), Playwright's managed Chromium if
it is installed, then a system Chromium on ``PATH``; for a headless browser, Chromium's headless
shell first in each place where there is one (as Playwright itself launches it: see
:func:`find_chromium`). Extra launch flags come from ``BROWSERWORKER_CHROMIUM_ARGS``
(shell-quoted), e.g. host-resolver rules for hermetic tests.

On Linux the Playwright driver and Chromium are tied to this process: each is started
through ``setpriv --pdeathsig KILL``, so when this process dies (even by SIGKILL) its driver
is killed at once, and the driver's death kills the browser. Without that, the orphaned
driver shuts the browser down gracefully, with nobody gating what its pages still do.

The driver's node keeps its compiled code in ``$TMPDIR/browserworker-<uid>/node-compile-cache``
(``NODE_COMPILE_CACHE``, unless one is set), which takes about 0.1 s off every start.

Each session's driver keeps its temporary files (the browser's profile, about 1.4 MB, and
Playwright's artifacts) in a directory of their own, ``$TMPDIR/browserworker-<uid>/
session-<pid>-<start>-<host>-<random>``, removed when the session closes. A SIGKILLed process
cannot remove its own: the next session on the host removes every one whose process is gone,
so a fleet that crashes now and then does not fill ``/tmp`` with profiles. (Chromium itself
keeps the system's ``$TMPDIR``, where a killed one leaves a 4 KB directory for its singleton
socket, whose path must stay short.)

Chromium is launched without the features in :data:`LEAN_FEATURES`, merged into
Playwright's own ``--disable-features`` list (see :func:`launch_options`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from playwright.async_api import Browser, BrowserContext, Playwright, async_playwright

from ..errors import BrowserNotFound, UsageError
from ..journal import own_start_time, parent_pid, pid_space, process_is_gone
from ..logs import get_logger

log = get_logger("browserworker.browser")

__all__ = ["LEAN_FEATURES", "BrowserProcess", "BrowserSettings", "find_chromium", "launch_options"]

ENV_EXECUTABLE = "BROWSERWORKER_CHROMIUM"
ENV_ARGS = "BROWSERWORKER_CHROMIUM_ARGS"
ENV_SHARED_WORKERS = "BROWSERWORKER_SHARED_WORKERS"
_NO_SHARED_WORKERS = "SharedWorker"  # a Blink feature: --disable-blink-features=SharedWorker
_DISABLE_BLINK = "--disable-blink-features="

LEAN_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup", "WebUIOmniboxFullPopup")
"""Chromium features the kit turns off by default. Every Playwright context is a browser
window of its own, and Chromium 156 preloads the omnibox's WebUI popups for each window in a
renderer of its own (``--top-chrome-webui``: some 400 JavaScript modules): about 0.35 CPU
seconds per context, spent mostly after the page is already usable, for a popup that
automation never opens. Pages and what they send are unaffected. (The headless shell, which
:func:`find_chromium` prefers for headless, has no windows; the switch is harmless there.)"""

_DISABLE = "--disable-features="
_SYSTEM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

_HOW_TO_FIX = (
    "install one (Debian/Ubuntu: `apt-get install chromium`; elsewhere: `playwright install chromium`) "
    f"or point {ENV_EXECUTABLE} at a Chromium/Chrome executable"
)


_MANAGED = {
    # Playwright's downloads (``playwright install chromium`` fetches both), newest revision first
    "chromium": (
        "chromium-*/chrome-linux*/chrome",
        "chromium-*/chrome-mac*/Chromium.app/Contents/MacOS/Chromium",
        "chromium-*/chrome-win*/chrome.exe",
    ),
    "shell": (
        "chromium_headless_shell-*/chrome-headless-shell-*/chrome-headless-shell",
        "chromium_headless_shell-*/chrome-headless-shell-*/chrome-headless-shell.exe",
        "chromium_headless_shell-*/chrome-*/headless_shell",
        "chromium_headless_shell-*/chrome-*/headless_shell.exe",
    ),
}
_SHELL_NAMES = ("chromium-headless-shell", "chrome-headless-shell")


def _managed_chromium(env: Mapping[str, str], kind: Literal["chromium", "shell"] = "chromium") -> str | None:
    """The newest Chromium (``kind`` ``"chromium"``) or headless shell (``"shell"``) that
    ``playwright install`` downloaded, if any."""
    root = env.get("PLAYWRIGHT_BROWSERS_PATH") or str(Path.home() / ".cache" / "ms-playwright")
    found = [p for pattern in _MANAGED[kind] for p in Path(root).glob(pattern) if p.is_file()]
    if not found:
        return None

    def revision(path: Path) -> int:
        tail = path.relative_to(root).parts[0].rpartition("-")[2]
        return int(tail) if tail.isdigit() else 0

    return str(max(found, key=revision))


def find_chromium(env: Mapping[str, str] | None = None, *, headless: bool = False) -> str:
    """The Chromium executable to launch: ``BROWSERWORKER_CHROMIUM``, else Playwright's
    download, else a system one on ``PATH``.

    For a ``headless`` browser, Chromium's headless shell comes first in each of the two
    places where it is found (Playwright's ``chromium_headless_shell`` download, Debian's
    ``chromium-headless-shell``), as Playwright launches it for headless by default: it has no
    browser window to build for each context, and a context costs about half the CPU of one
    in the full browser's headless mode (the same engine, the same pages and network).

    Raises :class:`BrowserNotFound` with the fix when there is none at all.
    """
    env = os.environ if env is None else env
    override = env.get(ENV_EXECUTABLE)
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrowserNotFound(f"{ENV_EXECUTABLE}={override} is not an executable file; {_HOW_TO_FIX}")
        return str(path)
    kinds: tuple[Literal["chromium", "shell"], ...] = ("shell", "chromium") if headless else ("chromium",)
    for kind in kinds:
        managed = _managed_chromium(env, kind)
        if managed:
            return managed
    for name in (*_SHELL_NAMES, *_SYSTEM_NAMES) if headless else _SYSTEM_NAMES:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return found
    raise BrowserNotFound(f"no Chromium found; {_HOW_TO_FIX}")


@dataclass
class BrowserSettings:
    """How to launch the browser and make contexts."""

    headless: bool = True
    executable_path: str | None = None
    args: list[str] = field(default_factory=list)
    launch_options: dict[str, Any] = field(default_factory=dict)
    context_options: dict[str, Any] = field(default_factory=dict)
    disable_features: tuple[str, ...] = LEAN_FEATURES
    shared_workers: Literal["block", "allow"] = "block"
    """``"block"``: pages have no ``SharedWorker`` (what one sends is neither routed nor reported
    by Playwright, so no gate could hold it). ``"allow"`` keeps them; every effect attempt then
    counts as possibly dispatched (reconciled after a crash, never replayed blind)."""

    @classmethod
    def discover(cls, *, headless: bool = True, env: Mapping[str, str] | None = None) -> BrowserSettings:
        """Settings with the discovered executable and the extra args from the environment."""
        env = os.environ if env is None else env
        shared = env.get(ENV_SHARED_WORKERS, "block").strip().lower() or "block"
        if shared not in ("block", "allow"):
            raise UsageError(f"{ENV_SHARED_WORKERS}={env[ENV_SHARED_WORKERS]!r}: use 'block' (the default) or 'allow'")
        return cls(
            headless=headless,
            executable_path=find_chromium(env, headless=headless),
            args=shlex.split(env.get(ENV_ARGS, "")),
            shared_workers=shared,  # type: ignore[arg-type]  # checked above
        )


_NODE_ENV = "PLAYWRIGHT_NODEJS_PATH"  # how playwright-python lets one choose the driver's node
_CACHE_ENV = "NODE_COMPILE_CACHE"  # node >= 22.1 keeps compiled scripts there
_PID_ENV = "BROWSERWORKER_PID_FILE"  # the tethered script writes its pid there (then unsets it)
_DRIVER_PID = "driver.pid"  # in a session's directory: the driver's pid, for a quick close


def tethered(executable: str) -> str:
    """An executable that runs ``executable`` with its parent-death signal set to SIGKILL.

    It is a small shell script in a private directory (``setpriv`` keeps the signal
    across ``exec``). Returns ``executable`` itself where that cannot be done (not Linux, no
    ``setpriv``, no private directory): the process then outlives a killed parent briefly.
    Started with ``$BROWSERWORKER_PID_FILE`` set, the script writes its pid (the process's,
    kept across ``exec``) to that file, and unsets the variable for what it runs.
    """
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None:
        return executable
    script = (
        f"#!/bin/sh\n# browserworker: dies with the process that started it\n"
        # written whole or not at all (a rename): a reader never sees the file empty
        f'if [ -n "${_PID_ENV}" ]; then echo $$ > "${_PID_ENV}.new" && mv -f "${_PID_ENV}.new" "${_PID_ENV}"; '
        f"unset {_PID_ENV}; fi\n"
        f'exec {shlex.quote(setpriv)} --pdeathsig KILL -- {shlex.quote(executable)} "$@"\n'
    )
    try:
        path = _private_script("tethered", script)
    except OSError as exc:
        log.warning("cannot tie the browser to this process", executable=executable, error=str(exc))
        return executable
    return str(path)


def _private_script(prefix: str, script: str) -> Path:
    """``script`` as an executable file in :func:`_private_dir`, named by its content."""
    home = _private_dir()
    path = home / f"{prefix}-{hashlib.sha256(script.encode()).hexdigest()[:16]}"
    if not (path.is_file() and path.read_text() == script):
        tmp = home / f".{path.name}.{os.getpid()}"
        tmp.write_text(script)
        tmp.chmod(0o700)
        os.replace(tmp, path)
    if not os.access(path, os.X_OK):  # e.g. a temporary directory mounted noexec
        raise OSError(f"{path} cannot run")
    return path


def _private_dir() -> Path:
    """``$TMPDIR/browserworker-<uid>``, mode 0700 and ours (refused otherwise)."""
    home = Path(tempfile.gettempdir()) / f"browserworker-{os.getuid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(home)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{home} is not a private directory of this user")
    return home


def _driver_node() -> str:
    from playwright._impl._driver import compute_driver_executable

    return str(compute_driver_executable()[0])


def merge_disabled_features(
    defaults: Sequence[str], args: Sequence[str], extra: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(args, ignore_default_args)`` that turn ``extra`` off without losing what
    Playwright's default arguments (``defaults``) and ``args`` already turn off.

    Chromium reads only the last of several ``--disable-features`` switches, and Playwright
    puts the user's arguments after its own, so one more switch would switch Playwright's
    list back on. Instead Playwright's switch is left out and one switch carries every list.
    """
    own = [a for a in defaults if a.startswith(_DISABLE)]
    given = [a for a in args if a.startswith(_DISABLE)]
    if len(own) != 1 or not extra:
        return list(args), []
    features: list[str] = []
    for switch in own + given:
        features += [f for f in switch[len(_DISABLE) :].split(",") if f]
    features += extra
    merged = _DISABLE + ",".join(dict.fromkeys(features))
    return [a for a in args if not a.startswith(_DISABLE)] + [merged], own


_DEFAULT_ARGS: list[str] | None = None  # what Playwright adds to every launch, once read


async def _playwright_default_args(pw: Playwright) -> list[str] | None:
    """The arguments Playwright's Chromium launcher adds by itself: it is asked to launch a
    stand-in executable that writes down its arguments and exits (10 ms). None where that
    cannot be done; read once per process."""
    global _DEFAULT_ARGS
    if _DEFAULT_ARGS is not None:
        return _DEFAULT_ARGS
    if sys.platform.startswith("win"):
        return None
    script = (
        "#!/bin/sh\n# browserworker: writes down the arguments a launcher passes\n"
        'printf \'%s\\0\' "$@" > "$BROWSERWORKER_ARGS_OUT"\nexit 1\n'
    )
    try:
        path = _private_script("args", script)
        out = path.parent / f"args-{os.getpid()}-{id(pw)}.out"
    except OSError as exc:
        log.debug("cannot read Playwright's launch arguments", error=str(exc))
        return None
    try:
        await pw.chromium.launch(executable_path=str(path), env={"BROWSERWORKER_ARGS_OUT": str(out)}, timeout=10_000)
    except Exception:
        pass  # the stand-in exits at once: the launch fails, as it should
    try:
        written = out.read_bytes().decode()
        out.unlink()
    except OSError as exc:
        log.debug("cannot read Playwright's launch arguments", error=str(exc))
        return None
    _DEFAULT_ARGS = [a for a in written.split("\0") if a]
    return _DEFAULT_ARGS


async def launch_options(pw: Playwright, settings: BrowserSettings) -> dict[str, Any]:
    """The keyword arguments of ``pw.chromium.launch`` for ``settings``: headless, the
    executable, the extra args and launch options, with ``settings.disable_features``
    merged into Playwright's own ``--disable-features`` (:func:`merge_disabled_features`).
    Where Playwright's arguments cannot be read, or ``ignore_default_args=True`` is asked
    for, nothing is merged and the features stay as Playwright leaves them."""
    args = list(settings.args)
    if settings.shared_workers == "block":
        args = _without_shared_workers(args)
    options: dict[str, Any] = {"headless": settings.headless, "args": args}
    if settings.executable_path:
        options["executable_path"] = settings.executable_path
    options.update(settings.launch_options)
    ignore = options.get("ignore_default_args")
    if not settings.disable_features or ignore is True:
        return options
    defaults = await _playwright_default_args(pw)
    if defaults is None:
        return options
    options["args"], left_out = merge_disabled_features(defaults, options.get("args") or [], settings.disable_features)
    if left_out:
        options["ignore_default_args"] = list(ignore or []) + left_out
    return options


def _without_shared_workers(args: list[str]) -> list[str]:
    """``args`` with ``SharedWorker`` among the disabled Blink features (merged into a
    ``--disable-blink-features`` the user gave: Chromium reads only the last one)."""
    for i, arg in enumerate(args):
        if arg.startswith(_DISABLE_BLINK):
            features = [f for f in arg[len(_DISABLE_BLINK) :].split(",") if f]
            if _NO_SHARED_WORKERS not in features:
                args[i] = _DISABLE_BLINK + ",".join([*features, _NO_SHARED_WORKERS])
            return args
    return [*args, _DISABLE_BLINK + _NO_SHARED_WORKERS]


class BrowserProcess:
    """One Playwright driver and one Chromium for this process; contexts on demand.

    ``async with`` starts both. :meth:`start_driver` starts the driver ahead of that, in the
    background, so that node boots (about 0.3 s) while the caller does other work (the
    ``run`` command loads the flow meanwhile); :meth:`close` stops a driver started so and
    never entered.

    ``quick_close``, for a process that exits after it (the ``run`` command): closing kills
    the driver, and Chromium with it (tied to the driver: see the module docstring), instead of
    closing Chromium gracefully, which takes about 0.1 s. Only once every context is closed
    (each pass stops its pages' renderers, then closes its context: nothing is left to send or
    to save) and only where the driver is tied; otherwise it closes as usual."""

    def __init__(self, settings: BrowserSettings, *, quick_close: bool = False) -> None:
        self.settings = settings
        self.quick_close = quick_close
        self._pw: Playwright | None = None
        self._browser: Browser | None = None
        self._starting: asyncio.Future[Playwright] | None = None  # the driver, from start_driver()
        self.temp_dir: Path | None = None  # the driver's TMPDIR while open (see the module docstring)
        self.gone = False
        """Set when the driver or the browser was found dead (a new context could not be opened):
        :meth:`restart` before using the session again."""

    async def start_driver(self) -> None:
        """Start the driver now and return once its process is running; ``async with`` then
        waits for it to be ready and launches Chromium. Does nothing if already started."""
        if self._starting is None and self._pw is None:
            self.temp_dir = _session_dir()
            self._starting = await _spawn_driver(self.temp_dir)

    async def __aenter__(self) -> BrowserProcess:
        try:
            await self.start_driver()  # unless started already
            starting, self._starting = self._starting, None
            assert starting is not None
            self._pw = await starting
            self._browser = await self._launch(self._pw)
        except BaseException:
            if self._pw is not None:
                await self._pw.stop()
                self._pw = None
            self._remove_temp_dir()
            raise
        return self

    async def _launch(self, pw: Playwright) -> Browser:
        options = await launch_options(pw, self.settings)
        if options.get("executable_path"):
            options["executable_path"] = tethered(options["executable_path"])
        if self.temp_dir is not None:  # Chromium's own $TMPDIR stays: its singleton socket's path
            options.setdefault("env", dict(os.environ))  # must fit a socket address (108 bytes)
        try:
            return await pw.chromium.launch(**options)
        except Exception as exc:
            raise BrowserNotFound(
                f"could not launch Chromium ({self.settings.executable_path or 'managed'}): "
                f"{str(exc).splitlines()[0]}; {_HOW_TO_FIX}"
            ) from exc

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close Chromium and stop the driver (one only started by :meth:`start_driver` too);
        closing again does nothing."""
        starting, self._starting = self._starting, None
        try:
            if starting is not None:
                # a driver started and never used (bad input): with quick_close, not waited
                # for until it is ready only to be stopped; once killed, its start fails at once
                watchers = _waitpid_threads()
                killed = self._kill_driver() if self.quick_close else None
                try:
                    self._pw = await starting
                except Exception:  # it did not start: nothing to stop
                    pass
                if killed is not None and self._pw is None:
                    await _reaped(killed, watchers)
            browser, self._browser = self._browser, None
            if browser is not None and not (self.quick_close and not browser.contexts and self._kill_driver()):
                try:
                    await browser.close()
                except Exception:  # pragma: no cover - the browser may already be gone
                    pass
            pw, self._pw = self._pw, None
            if pw is not None:
                await pw.stop()
        finally:
            self._remove_temp_dir()

    def _kill_driver(self) -> int | None:
        """SIGKILL the driver (its Chromium dies with it): its pid; None if it cannot be told
        which process that is (the driver is not tied, or no session directory)."""
        if self.temp_dir is None:
            return None
        try:
            pid = int((self.temp_dir / _DRIVER_PID).read_text())
        except (OSError, ValueError):
            return None
        if parent_pid(pid) != os.getpid():  # a driver that died and was reaped: its pid may be reused
            return None
        os.kill(pid, signal.SIGKILL)
        return pid

    async def restart(self) -> None:
        """A new driver and Chromium in place of ones that died; contexts of the old ones are gone."""
        await self.close()
        await self.__aenter__()
        self.gone = False

    def _remove_temp_dir(self) -> None:
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    @property
    def browser(self) -> Browser:
        if self._browser is None:
            raise RuntimeError("BrowserProcess used outside `async with`")
        return self._browser

    @asynccontextmanager
    async def context(self, **overrides: Any) -> AsyncIterator[BrowserContext]:
        """A fresh, isolated context (service workers blocked so routing sees every request)."""
        options = {"service_workers": "block", **self.settings.context_options, **overrides}
        try:
            ctx = await self.browser.new_context(**options)
        except Exception as exc:
            if type(exc).__name__ == "TargetClosedError":  # the driver or the browser is gone
                self.gone = True
            raise
        try:
            yield ctx
        finally:
            try:
                await ctx.close()
            except Exception:  # pragma: no cover - already closed on lease loss
                pass


_SPAWN_TURNS = 8
"""Loop turns :func:`_spawn_driver` gives Playwright to start node (it takes two: one to
make its client, one to read the environment and start the process)."""


def _waitpid_threads() -> list[threading.Thread]:
    """asyncio's threads that each wait for one child process to exit (its child watcher's,
    where it uses threads: none where it waits on the loop itself)."""
    return [thread for thread in threading.enumerate() if thread.name.startswith("asyncio-waitpid-")]


async def _reaped(pid: int, watchers: list[threading.Thread], timeout: float = 5.0) -> None:
    """Wait until asyncio has reaped the killed driver ``pid`` and closed the transport of its
    failed start (its pipes and its exit seen on this loop), so that nothing of it is left to be
    closed once the loop is gone. ``watchers``: :func:`_waitpid_threads` before the kill. The
    process is gone from ``/proc`` once a watcher's thread has reaped it; that thread then hands
    the exit to the loop and ends, which can come later (it waits for the GIL): a loop closed in
    between has asyncio warn "Loop ... that handles pid ... is closed"."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline and (
        Path(f"/proc/{pid}").exists() or (watchers and all(thread.is_alive() for thread in watchers))
    ):
        await asyncio.sleep(0.005)
    for _ in range(_SPAWN_TURNS):  # the exit's callbacks, queued by the child watcher as it reaped it
        await asyncio.sleep(0)


async def _spawn_driver(temp_dir: Path | None = None) -> asyncio.Future[Playwright]:
    """Start Playwright with its node driver tied to this process (see the module docstring),
    with node's compile cache on (:func:`_compile_cache`) and, if given, ``temp_dir`` as the
    driver's ``TMPDIR`` (where it makes the browser's profile and its artifacts directory).
    Returns once node is started: the future is done when the driver is ready.

    playwright-python reads which node to run, and the driver its environment, as it
    starts node, so the variables are set for those loop turns only, and put back as they were.
    """
    overrides: dict[str, str] = {}
    cache = _compile_cache()
    if cache is not None:
        overrides[_CACHE_ENV] = cache
    try:
        real = os.environ.get(_NODE_ENV) or _driver_node()
    except Exception:  # no bundled node: let Playwright say so
        real = None
    node = tethered(real) if real is not None else None
    if node is not None and node != real:
        overrides[_NODE_ENV] = node
    if temp_dir is not None:
        overrides["TMPDIR"] = str(temp_dir)
        if node != real:  # the tethered script writes the driver's pid there
            overrides[_PID_ENV] = str(temp_dir / _DRIVER_PID)
    before = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)
    try:
        starting = asyncio.ensure_future(async_playwright().start())
        for _ in range(_SPAWN_TURNS):
            await asyncio.sleep(0)
            if starting.done():
                break
    finally:
        for name, value in overrides.items():
            previous = before[name]
            if os.environ.get(name) != value:
                continue  # changed meanwhile by someone else: theirs stands
            if previous is None:
                del os.environ[name]
            else:
                os.environ[name] = previous
    return starting


_SESSION = "session-"


def _session_dir() -> Path | None:
    """A new private directory for one session's temporary files, after removing those of
    sessions whose process is gone (see the module docstring); None if none can be made
    (the driver then uses the system's temporary directory, as Playwright does)."""
    try:
        home = _private_dir()
        _remove_dead_sessions(home)
        prefix = f"{_SESSION}{os.getpid()}-{own_start_time() or ''}-{_host_tag()}-"
        return Path(tempfile.mkdtemp(prefix=prefix, dir=home))
    except OSError as exc:
        log.warning("no private temporary directory for the browser", error=str(exc))
        return None


def _host_tag() -> str:
    """This host's name and pid space, hashed: containers and pid namespaces that share a
    temporary directory but not their process ids never judge each other's sessions."""
    return hashlib.sha256(f"{socket.gethostname()}/{pid_space()}".encode()).hexdigest()[:8]


def _remove_dead_sessions(home: Path) -> None:
    """Remove this host's session directories in ``home`` whose process is gone."""
    tag = _host_tag()
    for path in home.glob(f"{_SESSION}*"):
        parts = path.name[len(_SESSION) :].split("-", 3)  # pid, start time, host tag, random
        if (
            len(parts) == 4
            and parts[2] == tag
            and parts[0].isdigit()
            and process_is_gone(int(parts[0]), parts[1] or None)
        ):
            shutil.rmtree(path, ignore_errors=True)


def _compile_cache() -> str | None:
    """Where the driver's node keeps compiled code between starts (``NODE_COMPILE_CACHE``):
    the driver is one 3.6 MB script, and compiling it is most of a cold start (0.52-0.59 s
    down to 0.37-0.43 s here). A cache the user chose is kept; None if none can be made."""
    if os.environ.get(_CACHE_ENV):
        return None
    try:
        path = _private_dir() / "node-compile-cache"
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return str(path)
