"""The shape of the code: sizes a reviewer can read, the layers and no import cycles (import-linter),
a complete public surface, and the one extension protocol."""

from __future__ import annotations

import ast
import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import browserworker
from browserworker.flow import Extension, Extensions
from browserworker.flow._extensions import HOOKS

PACKAGE = Path(browserworker.__file__).parent
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))

MAX_MODULE = 800


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_no_module_is_too_long_to_read() -> None:
    """No module over ~800 lines: a file holds one concern, whatever its size (a function's size
    is ruff's PLR0915, at most 50 statements; the sandbox's page templates and the SQL files are
    data, not code, and are not Python)."""
    too_long = [
        f"{_name(p)}: module of {n} lines" for p in MODULES if (n := len(p.read_text().splitlines())) > MAX_MODULE
    ]
    assert not too_long, "\n".join(too_long)


def test_the_layers_hold_and_no_import_makes_a_cycle() -> None:
    """The import-linter contracts of ``pyproject.toml`` are kept, counting every import
    (function-local and ``if TYPE_CHECKING:`` ones too): the layers (interfaces > runtime >
    gate > journal > flow > store > core), the store and the sandbox importing nothing above
    them, no cycle among the modules of any package, no private module imported from outside
    its package."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_public_surface_is_what_a_user_composes() -> None:
    """``browserworker.__all__`` names the engine, the store and how to open one, flows, verdicts,
    step contexts, extensions and every error; each name resolves."""
    for name in (
        "Engine",
        "Store",
        "open_store",
        "Flow",
        "Verdict",
        "StepContext",
        "Extension",
        "load_flow",
        "BrowserSettings",
        "LeaseSettings",
        "WorkerSettings",
    ):
        assert name in browserworker.__all__, name
    errors = {
        name
        for name, value in vars(browserworker.errors).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == "browserworker.errors"
    }
    assert errors <= set(browserworker.__all__), errors - set(browserworker.__all__)
    for name in browserworker.__all__:
        assert getattr(browserworker, name) is not None, name
    assert (PACKAGE / "py.typed").is_file()


class _Seen(Extension):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def notice(self, run: Any, step_id: str | None, message: str, **fields: Any) -> None:
        self.seen.append(("notice", message))

    async def outcome(self, attempt: Any) -> None:
        await asyncio.sleep(0)
        self.seen.append(("outcome", attempt))


def test_extensions_call_only_what_a_subscriber_overrides_sync_or_async() -> None:
    """A subscriber's plain and async hooks are both called, in subscription order; a hook it
    does not override is never called (it costs nothing); any object with hook methods subscribes."""
    first, second = _Seen(), _Seen()

    class Duck:
        calls: list[str] = []

        def outcome(self, attempt: Any) -> None:
            self.calls.append(attempt)

    bus = Extensions([first, Duck(), second])
    assert [bus.subscribed(h) for h in ("notice", "outcome", "run_started")] == [2, 3, 0]

    async def main() -> None:
        await bus.notice(None, None, "hello")
        await bus.outcome("attempt-1")
        await bus.run_started(None)

    asyncio.run(main())
    assert first.seen == second.seen == [("notice", "hello"), ("outcome", "attempt-1")]
    assert Duck.calls == ["attempt-1"]
    assert set(HOOKS) >= {"context_created", "before_step", "after_step", "lease_lost", "run_settled"}


def test_a_failing_notification_is_logged_but_a_failing_step_hook_fails_the_run() -> None:
    """``notice``/``outcome`` and the like never break a run; ``before_step`` and the other hooks in
    the step's path raise, as the step itself would."""

    class Broken(Extension):
        async def outcome(self, attempt: Any) -> None:
            raise RuntimeError("outcome broke")

        async def before_step(self, ctx: Any, step: Any, context: Any) -> None:
            raise RuntimeError("before_step broke")

    after = _Seen()
    bus = Extensions([Broken(), after])

    async def main() -> None:
        await bus.outcome("a")
        with pytest.raises(RuntimeError, match="before_step broke"):
            await bus.before_step(None, None, None)
        bus.later.outcome("b")  # from code that cannot wait: in the background
        await bus.drain()

    asyncio.run(main())
    assert after.seen == [("outcome", "a"), ("outcome", "b")]


def _is_command(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in ("command", "group"):
            return True
    return False


def test_every_cli_command_body_is_a_handful_of_statements() -> None:
    """Each click command's body (past its docstring) is at most 12 statements: it parses, calls
    the library and prints; the logic lives in the library."""
    long_bodies, commands = [], 0
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and _is_command(node):
                commands += 1
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    body = body[1:]  # the docstring is the command's --help
                statements = sum(isinstance(n, ast.stmt) for part in body for n in ast.walk(part))
                if statements > 12:
                    long_bodies.append(f"{path.name}: {node.name} ({statements} statements)")
    assert commands >= 15  # every command was looked at (they are all in browserworker/cli/)
    assert not long_bodies, long_bodies


def test_a_misspelt_hook_is_refused_when_the_extension_is_defined() -> None:
    """A method named close to a hook but not one (``outcomes``, ``on_outcome``) would never be
    called: defining the class raises, naming the hook meant; other public methods are fine."""
    with pytest.raises(TypeError, match=r"Misspelt.outcomes is not a hook.*did you mean 'outcome'"):

        class Misspelt(Extension):
            def outcomes(self, attempt: Any) -> None: ...

    with pytest.raises(TypeError, match=r"did you mean 'run_started'"):

        class Prefixed(Extension):
            def on_run_started(self, run: Any) -> None: ...

    class Fine(Extension):
        def report(self) -> str:
            return "a helper of its own"

    assert Fine().report() == "a helper of its own"


def test_background_hooks_are_drained_when_the_run_ends() -> None:
    """An async hook called from code that cannot wait has finished once ``drain`` returns
    (a leased run drains its bus at its end)."""
    finished: list[str] = []

    class Slow(Extension):
        async def run_settled(self, run_id: str) -> None:
            await asyncio.sleep(0.05)
            finished.append(run_id)

    async def main() -> None:
        bus = Extensions([Slow()])
        bus.later.run_settled("r1")
        assert finished == []
        await bus.drain()
        assert finished == ["r1"]

    asyncio.run(main())


def test_the_layout_page_names_only_what_is_there_and_every_package() -> None:
    """``docs/layout.md`` cannot go stale: every ``browserworker/...`` or ``tests/...`` path it
    names exists, and every subpackage of the package has its paragraph there."""
    root = PACKAGE.parent
    text = (root / "docs" / "layout.md").read_text()
    named = set(re.findall(r"`((?:browserworker|tests)/[\w./-]*)`", text))
    assert len(named) > 30, named  # the table was read
    missing = sorted(p for p in named if not (root / p).exists())
    assert not missing, missing
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    undescribed = [name for name in packages if f"**`{name}/`" not in text and f"`{name}/`" not in text]
    assert not undescribed, undescribed
