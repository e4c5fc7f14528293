"""A package's public face whose names load on first use (PEP 562): ``import
browserworker.ops`` costs nothing until a name of it is asked for, and then only its module.

Each face lists its names once, in ``if TYPE_CHECKING:`` imports that the type checker and
the import contracts read; :func:`face` reads the same imports from the face's source, so
the two cannot drift apart.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["face"]


def _names(path: Path, package: str) -> dict[str, tuple[str, str | None]]:
    """``name -> (module, attribute or None for the module itself)`` from the ``if
    TYPE_CHECKING:`` block of the face at ``path``."""
    found: dict[str, tuple[str, str | None]] = {}
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom):
                continue
            module = importlib.util.resolve_name("." * stmt.level + (stmt.module or ""), package)
            for alias in stmt.names:
                submodule = f"{module}.{alias.name}"
                if stmt.module is None:  # `from . import _files as files`: a module by name
                    found[alias.asname or alias.name] = (submodule, None)
                else:
                    found[alias.asname or alias.name] = (module, alias.name)
    return found


def face(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package ``package`` (its ``__name__``)."""
    module = sys.modules[package]
    names = _names(Path(module.__file__ or ""), package)

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(where[0])
        value = loaded if where[1] is None else getattr(loaded, where[1])
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(names))

    return __getattr__, __dir__
