"""The shape of the code: sizes a reviewer can read, the layers and no import cycles (import-linter),
command bodies that only call the library, and a layout page that names only what is there. (The
public surface: tests/architecture/test_public_surface.py; the extension protocol:
tests/flow/test_extensions.py.)"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import browserworker

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
