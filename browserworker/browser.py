"""Finding and launching Chromium; one browser per process, a fresh context per attempt.

Discovery order: ``BROWSERWORKER_CHROMIUM`` (a path), Playwright's managed Chromium if
it is installed, then a system Chromium on ``PATH``. Extra launch flags come from
``BROWSERWORKER_CHROMIUM_ARGS`` (shell-quoted), e.g. host-resolver rules for hermetic tests.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, BrowserContext, Playwright, async_playwright

from .errors import BrowserNotFound

__all__ = ["BrowserSession", "BrowserSettings", "find_chromium"]

ENV_EXECUTABLE = "BROWSERWORKER_CHROMIUM"
ENV_ARGS = "BROWSERWORKER_CHROMIUM_ARGS"
_SYSTEM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

_HOW_TO_FIX = (
    "install one (Debian/Ubuntu: `apt-get install chromium`; elsewhere: `playwright install chromium`) "
    f"or point {ENV_EXECUTABLE} at a Chromium/Chrome executable"
)


def _managed_chromium(env: Mapping[str, str]) -> str | None:
    """The newest Chromium that ``playwright install`` downloaded, if any."""
    root = env.get("PLAYWRIGHT_BROWSERS_PATH") or str(Path.home() / ".cache" / "ms-playwright")
    patterns = ("chromium-*/chrome-linux*/chrome", "chromium-*/chrome-mac*/Chromium.app/Contents/MacOS/Chromium",
                "chromium-*/chrome-win*/chrome.exe")
    found = [p for pattern in patterns for p in Path(root).glob(pattern) if p.is_file()]
    if not found:
        return None

    def revision(path: Path) -> int:
        tail = path.relative_to(root).parts[0].rpartition("-")[2]
        return int(tail) if tail.isdigit() else 0

    return str(max(found, key=revision))


def find_chromium(env: Mapping[str, str] | None = None) -> str:
    """The Chromium executable to launch.

    Raises :class:`BrowserNotFound` with the fix when there is none at all.
    """
    env = os.environ if env is None else env
    override = env.get(ENV_EXECUTABLE)
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrowserNotFound(f"{ENV_EXECUTABLE}={override} is not an executable file; {_HOW_TO_FIX}")
        return str(path)
    managed = _managed_chromium(env)
    if managed:
        return managed
    for name in _SYSTEM_NAMES:
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

    @classmethod
    def discover(cls, *, headless: bool = True, env: Mapping[str, str] | None = None) -> BrowserSettings:
        """Settings with the discovered executable and the extra args from the environment."""
        env = os.environ if env is None else env
        return cls(headless=headless, executable_path=find_chromium(env),
                   args=shlex.split(env.get(ENV_ARGS, "")))


class BrowserSession:
    """One Playwright driver and one Chromium for this process; contexts on demand."""

    def __init__(self, settings: BrowserSettings,
                 on_context: Sequence[Callable[[BrowserContext], Awaitable[None]]] = ()) -> None:
        self.settings = settings
        self.on_context = list(on_context)
        self._pw: Playwright | None = None
        self._browser: Browser | None = None

    async def __aenter__(self) -> BrowserSession:
        self._pw = await async_playwright().start()
        options: dict[str, Any] = {"headless": self.settings.headless, "args": list(self.settings.args)}
        if self.settings.executable_path:
            options["executable_path"] = self.settings.executable_path
        options.update(self.settings.launch_options)
        try:
            self._browser = await self._pw.chromium.launch(**options)
        except Exception as exc:
            await self._pw.stop()
            raise BrowserNotFound(f"could not launch Chromium ({self.settings.executable_path or 'managed'}): "
                                  f"{str(exc).splitlines()[0]}; {_HOW_TO_FIX}") from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._browser is not None:
            try:
                await self._browser.close()
            except Exception:  # pragma: no cover - the browser may already be gone
                pass
        if self._pw is not None:
            await self._pw.stop()

    @property
    def browser(self) -> Browser:
        if self._browser is None:
            raise RuntimeError("BrowserSession used outside `async with`")
        return self._browser

    @asynccontextmanager
    async def context(self, **overrides: Any) -> AsyncIterator[BrowserContext]:
        """A fresh, isolated context (service workers blocked so routing sees every request)."""
        options = {"service_workers": "block", **self.settings.context_options, **overrides}
        ctx = await self.browser.new_context(**options)
        try:
            for setup in self.on_context:  # e.g. a replay router, installed before any step runs
                await setup(ctx)
            yield ctx
        finally:
            try:
                await ctx.close()
            except Exception:  # pragma: no cover - already closed on lease loss
                pass
