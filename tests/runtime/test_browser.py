"""Finding and starting Chromium: discovery, the tethered driver and browser, the switches it gets, its temporary files."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from browserworker.errors import BrowserNotFound, UsageError
from browserworker.journal import process_is_gone
from browserworker.journal._leases import _stat
from browserworker.runtime import BrowserProcess, BrowserSettings
from browserworker.runtime._browser import (
    LEAN_FEATURES,
    _spawn_driver,
    _without_shared_workers,
    find_chromium,
    merge_disabled_features,
    tethered,
)
from tests.support.paths import FLOWS


def fake_exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_env_override_wins(tmp_path: Path) -> None:
    """BROWSERWORKER_CHROMIUM is used first, and must be an executable."""
    exe = fake_exe(tmp_path / "my-chrome")
    assert find_chromium({"BROWSERWORKER_CHROMIUM": str(exe), "PATH": ""}) == str(exe)
    with pytest.raises(BrowserNotFound, match="not an executable"):
        find_chromium({"BROWSERWORKER_CHROMIUM": str(tmp_path / "nope"), "PATH": ""})


def test_managed_browser_before_system(tmp_path: Path) -> None:
    """Playwright's downloaded Chromium (newest revision) comes before the system one."""
    old = fake_exe(tmp_path / "pw" / "chromium-1100" / "chrome-linux" / "chrome")
    new = fake_exe(tmp_path / "pw" / "chromium-1200" / "chrome-linux" / "chrome")
    system = fake_exe(tmp_path / "bin" / "chromium")
    env = {"PLAYWRIGHT_BROWSERS_PATH": str(tmp_path / "pw"), "PATH": str(system.parent)}
    assert find_chromium(env) == str(new) != str(old)
    assert find_chromium({"PLAYWRIGHT_BROWSERS_PATH": str(tmp_path / "none"), "PATH": str(system.parent)}) == str(
        system
    )


def test_a_headless_browser_is_the_headless_shell_where_there_is_one(tmp_path: Path) -> None:
    """Headless, Chromium's headless shell comes first in each place: Playwright's download
    (its newest revision, in either layout Playwright has used), else the system's; a headed
    browser is never the shell, and without a shell the full Chromium is used."""
    pw = tmp_path / "pw"
    chromium = fake_exe(pw / "chromium-1200" / "chrome-linux" / "chrome")
    old_shell = fake_exe(pw / "chromium_headless_shell-1100" / "chrome-linux" / "headless_shell")
    shell = fake_exe(pw / "chromium_headless_shell-1200" / "chrome-headless-shell-linux64" / "chrome-headless-shell")
    system = fake_exe(tmp_path / "bin" / "chromium")
    system_shell = fake_exe(tmp_path / "bin" / "chromium-headless-shell")
    env = {"PLAYWRIGHT_BROWSERS_PATH": str(pw), "PATH": str(system.parent)}
    assert find_chromium(env, headless=True) == str(shell) != str(old_shell)
    assert find_chromium(env, headless=False) == str(chromium)
    assert BrowserSettings.discover(headless=True, env=env).executable_path == str(shell)
    assert BrowserSettings.discover(headless=False, env=env).executable_path == str(chromium)

    shell.unlink()
    old_shell.unlink()  # Playwright's full Chromium, before the system's shell
    assert find_chromium(env, headless=True) == str(chromium)
    system_only = {"PLAYWRIGHT_BROWSERS_PATH": str(tmp_path / "none"), "PATH": str(system.parent)}
    assert find_chromium(system_only, headless=True) == str(system_shell)
    assert find_chromium(system_only, headless=False) == str(system)
    system_shell.unlink()
    assert find_chromium(system_only, headless=True) == str(system)
    assert find_chromium({**system_only, "BROWSERWORKER_CHROMIUM": str(chromium)}, headless=True) == str(chromium)


PDEATHSIG = """import ctypes
sig = ctypes.c_int()
ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(sig))  # PR_GET_PDEATHSIG
print(sig.value)"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("setpriv") is None,
    reason="parent-death signals are a Linux feature (setpriv)",
)
def test_tethered_executable_dies_with_its_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver and the browser are started through a wrapper that sets their parent-death
    signal to SIGKILL; arguments pass through untouched. A shared directory is refused."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    wrapper = tethered(sys.executable)
    assert wrapper != sys.executable and Path(wrapper).parent == tmp_path / f"browserworker-{os.getuid()}"
    done = subprocess.run([wrapper, "-c", PDEATHSIG], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "9"  # SIGKILL
    plain = subprocess.run([sys.executable, "-c", PDEATHSIG], capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == "0"
    assert tethered(sys.executable) == wrapper  # written once, reused

    (tmp_path / f"browserworker-{os.getuid()}").chmod(0o777)
    assert tethered(sys.executable) == sys.executable  # not private: untethered, with a warning


def test_untethered_without_setpriv(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the wrapper cannot be made, the executable is used as it is."""
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    assert tethered("/usr/bin/chromium") == "/usr/bin/chromium"


def test_no_browser_says_how_to_fix(tmp_path: Path) -> None:
    """With nothing found, the message names the fix."""
    with pytest.raises(BrowserNotFound) as err:
        find_chromium({"PLAYWRIGHT_BROWSERS_PATH": str(tmp_path), "PATH": str(tmp_path)})
    assert "apt-get install chromium" in str(err.value) and "BROWSERWORKER_CHROMIUM" in str(err.value)


def test_cli_reports_missing_browser(tmp_path: Path) -> None:
    """`run` without any browser: exit 2 with the fix, nothing written."""
    from click.testing import CliRunner

    from browserworker.cli import main

    flow = FLOWS / "place_order.py"
    env = {
        **os.environ,
        "PATH": str(tmp_path),
        "PLAYWRIGHT_BROWSERS_PATH": str(tmp_path),
        "BROWSERWORKER_CHROMIUM": "",
        "BROWSERWORKER_DB": str(tmp_path / "bw.db"),
    }
    result = CliRunner().invoke(
        main, ["run", str(flow), "--input", "base_url=http://127.0.0.1:1", "--input", "item=tea"], env=env
    )
    assert result.exit_code == 2 and "no Chromium found" in result.output
    assert not (tmp_path / "bw.db").exists()


def _start_and_stop_driver() -> None:
    async def go() -> None:
        playwright = await (await _spawn_driver())
        await playwright.stop()

    asyncio.run(go())


def test_the_driver_keeps_its_compiled_code_in_a_private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's node is started with ``NODE_COMPILE_CACHE`` in the private directory,
    which it fills; the variable is set only while the driver starts. A cache the user
    chose is left as it is, and used."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("NODE_COMPILE_CACHE", raising=False)
    _start_and_stop_driver()
    ours = tmp_path / f"browserworker-{os.getuid()}" / "node-compile-cache"
    assert ours.is_dir() and stat.S_IMODE(ours.stat().st_mode) == 0o700
    assert any(p.is_file() for p in ours.rglob("*"))  # node wrote compiled code there
    assert "NODE_COMPILE_CACHE" not in os.environ

    theirs = tmp_path / "theirs"
    monkeypatch.setenv("NODE_COMPILE_CACHE", str(theirs))
    shutil.rmtree(ours)
    _start_and_stop_driver()
    assert os.environ["NODE_COMPILE_CACHE"] == str(theirs)
    assert not ours.exists() and any(p.is_file() for p in theirs.rglob("*"))


PLAYWRIGHT_DEFAULTS = [
    "--disable-field-trial-config",
    "--disable-features=PaintHolding,HttpsUpgrades",
    "--enable-features=CDPScreenshotNewSurface",
    "--no-first-run",
]


def test_disabled_features_are_merged_into_playwrights_one_switch() -> None:
    """Chromium reads only the last --disable-features: the kit's features, Playwright's and the
    user's go into one switch, Playwright's own switch is left out, nothing is listed twice."""
    args, ignore = merge_disabled_features(
        PLAYWRIGHT_DEFAULTS, ["--lang=fr", "--disable-features=Foo,PaintHolding"], ["WebUIOmniboxPopup"]
    )
    assert args == ["--lang=fr", "--disable-features=PaintHolding,HttpsUpgrades,Foo,WebUIOmniboxPopup"]
    assert ignore == ["--disable-features=PaintHolding,HttpsUpgrades"]


def test_without_playwrights_switch_or_features_nothing_is_merged() -> None:
    """Where Playwright's own switch is unknown (or there is nothing to add), the arguments are
    passed as given: one more switch would turn Playwright's list back on."""
    assert merge_disabled_features(["--no-first-run"], ["--x"], ["A"]) == (["--x"], [])
    assert merge_disabled_features(PLAYWRIGHT_DEFAULTS, ["--x"], []) == (["--x"], [])


def test_shared_workers_are_blocked_unless_allowed() -> None:
    """By default SharedWorker is among the disabled Blink features (merged into the user's own
    switch, which Chromium reads once); ``allow`` (or the environment variable) leaves it on;
    anything else is a usage error naming the variable."""
    assert _without_shared_workers(["--x"]) == ["--x", "--disable-blink-features=SharedWorker"]
    assert _without_shared_workers(["--disable-blink-features=AutomationControlled"]) == [
        "--disable-blink-features=AutomationControlled,SharedWorker"
    ]
    assert _without_shared_workers(["--disable-blink-features=SharedWorker"]) == [
        "--disable-blink-features=SharedWorker"
    ]
    chromium = {"BROWSERWORKER_CHROMIUM": sys.executable}
    assert BrowserSettings.discover(env=chromium).shared_workers == "block"
    assert BrowserSettings.discover(env={**chromium, "BROWSERWORKER_SHARED_WORKERS": "allow"}).shared_workers == "allow"
    with pytest.raises(UsageError, match="BROWSERWORKER_SHARED_WORKERS"):
        BrowserSettings.discover(env={**chromium, "BROWSERWORKER_SHARED_WORKERS": "maybe"})


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process under ``root``, from /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:  # gone meanwhile
                continue
            if stat is None:
                continue
            ppid = int(stat[1])
            children.setdefault(ppid, []).append((int(entry), cmdline.replace("\0", " ")))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def _browser_processes(settings: BrowserSettings) -> tuple[list[str], int]:
    """Launch as the kit does, open one context with a loaded page: (the browser process's
    --disable-features switches, how many renderers host Chromium's own WebUI by then)."""

    async def go() -> tuple[list[str], int]:
        async with BrowserProcess(settings) as session, session.context() as context:
            page = await context.new_page()
            await page.goto("data:text/html,<p>ready</p>")
            browser = [
                (pid, cmd)
                for pid, cmd in _descendants(os.getpid())
                if "chrom" in cmd.split(" ", 1)[0] and "--type=" not in cmd
            ]
            assert len(browser) == 1
            switches = [a for a in browser[0][1].split(" ") if a.startswith("--disable-features=")]
            webui = 0
            for _ in range(50):  # up to 1 s: the WebUI renderer, if any, starts with the window
                webui = sum(1 for _, cmd in _descendants(browser[0][0]) if "--top-chrome-webui" in cmd)
                if webui:
                    break
                await asyncio.sleep(0.02)
            return switches, webui

    return asyncio.run(go())


@pytest.mark.browser
def test_chromium_starts_no_webui_renderer_per_context() -> None:
    """A context opened by the kit in the full Chromium (headless; the headless shell, which
    the kit prefers for headless, has no windows) has no renderer for Chromium's own omnibox
    WebUI (0.35 CPU-s per context otherwise), and Playwright's disabled features are all still
    disabled: the browser gets one --disable-features with both lists. With Playwright's flags
    alone (the control) the same Chromium starts such a renderer for the context's window."""
    full = BrowserSettings.discover()
    full.executable_path = find_chromium()  # not headless: never the shell
    switches, webui = _browser_processes(full)
    assert len(switches) == 1 and webui == 0
    features = switches[0].split("=", 1)[1].split(",")
    assert set(LEAN_FEATURES) <= set(features)
    assert {"AvoidCorsURLLoaderRestartOnRedirect", "PaintHolding"} <= set(features)  # Playwright's own

    plain = BrowserSettings.discover()
    plain.executable_path = full.executable_path
    plain.disable_features = ()
    switches, webui = _browser_processes(plain)
    assert len(switches) == 1 and webui >= 1


HOLD_A_SESSION = """
import asyncio
from browserworker.runtime import BrowserProcess, BrowserSettings

async def main():
    async with BrowserProcess(BrowserSettings.discover()) as session, session.context() as context:
        page = await context.new_page()
        await page.goto("data:text/html,<p>up</p>")
        print(session.temp_dir, flush=True)
        await asyncio.Event().wait()  # until killed

asyncio.run(main())
"""

NEXT_SESSION = """
import asyncio, json, sys
from pathlib import Path
from browserworker.runtime import BrowserProcess, BrowserSettings

async def main():
    async with BrowserProcess(BrowserSettings.discover()) as session:
        print(json.dumps({"own": str(session.temp_dir), "own_there": session.temp_dir.is_dir(),
                          "there": {p: Path(p).exists() for p in sys.argv[1:]}}))

asyncio.run(main())
"""


@pytest.mark.browser
def test_a_killed_sessions_temporary_files_go_with_the_next_session() -> None:
    """The browser's profile lives in the session's own temporary directory; a SIGKILLed
    process leaves it behind, and the next session on the host removes it (its process is
    gone) but not a live process's. A session that closes removes its own."""
    tmp = Path(tempfile.mkdtemp(prefix="bwt-", dir="/tmp"))  # this test's $TMPDIR
    env = {**os.environ, "TMPDIR": str(tmp)}
    procs: list[subprocess.Popen[str]] = []

    def hold() -> Path:
        proc = subprocess.Popen([sys.executable, "-c", HOLD_A_SESSION], stdout=subprocess.PIPE, text=True, env=env)
        procs.append(proc)
        assert proc.stdout is not None
        return Path(proc.stdout.readline().strip())

    try:
        killed, alive = hold(), hold()
        assert killed.parent == tmp / f"browserworker-{os.getuid()}" and killed.is_dir()
        assert any(p.name.startswith("playwright_chromiumdev_profile-") for p in killed.iterdir())
        procs[0].kill()
        procs[0].wait(timeout=30)
        assert killed.is_dir()  # nobody removed it: its process was killed

        out = subprocess.run(
            [sys.executable, "-c", NEXT_SESSION, str(killed), str(alive)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        seen = json.loads(out.stdout)
        assert seen["there"] == {str(killed): False, str(alive): True}  # the dead one's gone, the live one's kept
        assert seen["own_there"] and not Path(seen["own"]).exists()  # its own: there while open, gone at close
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_browser_that_cannot_start_is_one_clear_error_and_leaves_no_files(tmp_path: Path) -> None:
    """An executable that is not a browser: BrowserNotFound with the fix, and the session's
    temporary directory is gone with it."""
    ours = f"session-{os.getpid()}-*"  # this process's sessions (other test workers start theirs)
    before = set((Path(tempfile.gettempdir()) / f"browserworker-{os.getuid()}").glob(ours))
    settings = BrowserSettings(executable_path=str(fake_exe(tmp_path / "not-a-browser")))

    async def start() -> None:
        async with BrowserProcess(settings):
            pass

    with pytest.raises(BrowserNotFound, match="could not launch Chromium .*not-a-browser.*apt-get install chromium"):
        asyncio.run(start())
    assert set((Path(tempfile.gettempdir()) / f"browserworker-{os.getuid()}").glob(ours)) <= before


def _children(parent: int | None = None) -> dict[int, str]:
    """The child processes of ``parent`` (this process): pid to the name of what it runs."""
    parent = os.getpid() if parent is None else parent
    return {
        pid: Path(cmd.split(" ", 1)[0]).name
        for pid, cmd in _descendants(parent)
        if (stat := _stat(pid)) is not None and int(stat[1]) == parent
    }


def _environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.decode().partition("=") for item in f.read().split(b"\0") if item]
    return {k: v for k, _, v in pairs}


@pytest.mark.skipif(not shutil.which("setpriv"), reason="the driver is tied to its parent with setpriv")
def test_the_driver_started_early_runs_before_the_browser_is_entered_and_the_environment_is_put_back() -> None:
    """``start_driver()`` returns with the driver's node running, started with the session's
    directory as its ``TMPDIR`` and its pid written there, while this process's environment
    is already as it was (the flow that loads next sees no borrowed ``TMPDIR``). Entering it
    then launches Chromium on that driver; a driver never entered is stopped by ``close()``."""

    async def go() -> None:
        for enter in (True, False):
            before_env, before_children = dict(os.environ), set(_children())
            process = BrowserProcess(BrowserSettings.discover())
            try:
                await process.start_driver()
                assert dict(os.environ) == before_env
                new = [pid for pid in _children() if pid not in before_children]
                assert len(new) == 1, new  # started: the tethered script, on its way to exec node
                (driver,) = new
                _wait_for_exec(driver, "node")
                assert process.temp_dir is not None and process.temp_dir.is_dir()
                assert _environ_of(driver)["TMPDIR"] == str(process.temp_dir)
                assert "BROWSERWORKER_PID_FILE" not in _environ_of(driver)
                assert (process.temp_dir / "driver.pid").read_text().strip() == str(driver)
                if enter:
                    async with process:
                        async with process.context() as context:
                            page = await context.new_page()
                            assert await page.evaluate("1 + 1") == 2
            finally:
                await process.close()
            assert process_is_gone(driver) and not process.temp_dir.exists()

    asyncio.run(go())


def _recorded_kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every ``os.kill(pid, sig)`` from now on, recorded as it is sent."""
    kills: list[tuple[int, int]] = []
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        kills.append((pid, sig))
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    return kills


async def _early_driver(process: BrowserProcess, timeout: float = 30.0) -> int:
    """Start ``process``'s driver early (as ``run`` does) and return its pid, once the tethered
    script that starts it has written it to the session's directory."""
    await process.start_driver()
    assert process.temp_dir is not None
    pid_file = process.temp_dir / "driver.pid"
    deadline = time.monotonic() + timeout
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the driver never wrote its pid"
        await asyncio.sleep(0.01)
    return int(pid_file.read_text())


def _exits(pid: int, timeout: float = 10.0) -> bool:
    """Whether process ``pid`` (not this process's child) has exited or exits within ``timeout``
    seconds: awaited on a pidfd, which turns readable as the process exits. A process killed by
    its parent's death signal exits a moment after the parent, not with it."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _wait_for_exec(pid: int, name: str, timeout: float = 30.0) -> None:
    """Wait until process ``pid`` runs ``name`` (the tethered script execs ``setpriv``, which
    execs the executable: the pid stays, the name changes)."""
    deadline = time.monotonic() + timeout
    while _children().get(pid) != name:
        assert time.monotonic() < deadline, f"{pid} never ran {name}: {_children().get(pid)}"
        time.sleep(0.01)


@pytest.mark.skipif(not shutil.which("setpriv"), reason="the driver is tied to its parent with setpriv")
def test_a_quick_close_kills_the_driver_and_chromium_once_no_context_is_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """``quick_close``: with every context closed, closing SIGKILLs the driver instead of
    closing Chromium gracefully, and Chromium (tied to the driver) dies with it; with a
    context still open it closes gracefully, as without the option."""
    kills = _recorded_kills(monkeypatch)

    async def go() -> None:
        for leave_open in (False, True):
            kills.clear()
            process = BrowserProcess(BrowserSettings.discover(), quick_close=True)
            async with process:
                assert process.temp_dir is not None
                driver = int((process.temp_dir / "driver.pid").read_text())
                chromium = list(_children(driver))
                assert chromium
                context = await process.browser.new_context()
                await (await context.new_page()).goto("about:blank")
                if not leave_open:
                    await context.close()
            assert [kill for kill in kills if kill[1] == signal.SIGKILL] == (
                [] if leave_open else [(driver, signal.SIGKILL)]
            )
            assert process_is_gone(driver) and all(_exits(pid) for pid in chromium)

    asyncio.run(go())


@pytest.mark.skipif(not shutil.which("setpriv"), reason="the driver is tied to its parent with setpriv")
def test_a_quick_close_kills_a_driver_never_used_without_waiting_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver started early and never used (``run`` refused its input): a quick close
    SIGKILLs it at once, whether its node runs yet or not, instead of waiting for it to be ready
    only to stop it; its start's failure is not raised, and nothing is left (the process, its
    session directory)."""
    kills = _recorded_kills(monkeypatch)

    async def go() -> None:
        for node_runs in (False, True):
            kills.clear()
            process = BrowserProcess(BrowserSettings.discover(), quick_close=True)
            driver = await _early_driver(process)
            assert process.temp_dir is not None
            if node_runs:
                _wait_for_exec(driver, "node")
            await process.close()
            assert [kill for kill in kills if kill[1] == signal.SIGKILL] == [(driver, signal.SIGKILL)], (
                node_runs,
                kills,
            )
            assert process_is_gone(driver) and not process.temp_dir.exists()

    asyncio.run(go())


@pytest.mark.skipif(not shutil.which("setpriv"), reason="the driver is tied to its parent with setpriv")
def test_a_quick_close_waits_until_the_killed_drivers_exit_is_delivered_to_its_loop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """asyncio's child watcher reaps the killed driver on a thread of its own, then hands its
    exit to the loop: a close that returned once the process was gone, with the thread slow to
    hand it over (here 0.2 s), let the loop close first, and asyncio warned "Loop ... that
    handles pid ... is closed" (a stray line under `run`'s one error line). The close waits for
    the hand-over."""
    real_waitpid = os.waitpid

    def slow_waitpid(pid: int, options: int) -> tuple[int, int]:
        reaped = real_waitpid(pid, options)
        if reaped[0] == pid and not options:  # the watcher's blocking wait: its thread slowed after it
            time.sleep(0.2)
        return reaped

    monkeypatch.setattr(os, "waitpid", slow_waitpid)

    async def go() -> None:
        process = BrowserProcess(BrowserSettings.discover(), quick_close=True)
        _wait_for_exec(await _early_driver(process), "node")
        await process.close()

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(go())
        for thread in threading.enumerate():  # the watcher's threads: one left behind warns as it ends
            if thread.name.startswith("asyncio-waitpid-"):
                thread.join(5)
    assert not [r.getMessage() for r in caplog.records if "is closed" in r.getMessage()]


def test_a_quick_close_kills_only_a_driver_that_is_still_this_processs_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's pid is read from the session's directory; a pid that is not (or no longer)
    a child of this process (a driver that died and was reaped: its pid may be reused) is
    never signalled, and neither is a missing or garbled file: the close is then graceful."""
    kills: list[tuple[int, int]] = []
    real_kill = os.kill
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    process = BrowserProcess(BrowserSettings(executable_path="/bin/true"), quick_close=True)
    process.temp_dir = tmp_path
    assert not process._kill_driver()  # no file
    (tmp_path / "driver.pid").write_text("garbled\n")
    assert not process._kill_driver()
    (tmp_path / "driver.pid").write_text(f"{os.getppid()}\n")  # alive, but our parent, not our child
    assert not process._kill_driver()
    child = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "driver.pid").write_text(f"{child.pid}\n")
        assert process._kill_driver()
        assert kills == [(child.pid, signal.SIGKILL)]
    finally:
        real_kill(child.pid, signal.SIGKILL)
        child.wait()
