"""The public surface, exactly: ``browserworker.__all__`` is the list of ``docs/api.md``, every
name resolves, every exception a user can meet is exported and documented with its exit code,
the subpackages' faces name only what is there, the version is the package's, and the
approval settings are read where settings are made (the gate reads no environment)."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import browserworker
from browserworker.errors import BrowserworkerError, UsageError
from tests.support.paths import ROOT

PACKAGE = Path(browserworker.__file__).parent
API_PAGE = ROOT / "docs" / "api.md"

# The faces users import, besides the top level; each has its section in docs/api.md.
FACES = [
    "browserworker.flow",
    "browserworker.store",
    "browserworker.control",
    "browserworker.prove",
    "browserworker.recording",
    "browserworker.runtime",
    "browserworker.agent",
    "browserworker.mcp",
]

# Exceptions defined in the package with a public-looking name that no user meets, and why.
NEVER_MET = {
    "browserworker.runtime._passes.Again": "ends a pass inside the executor, which catches it",
    "browserworker.runtime._passes.Stop": "ends a run's passes inside the executor, which catches it",
    "browserworker.runtime._login_sessions.SessionUnreadable": (
        "caught where it is raised: a saved session the key cannot open counts as none (the run logs in)"
    ),
    "browserworker.recording.replayer.ReplayStopped": "caught by replay(): the result says why the run stopped",
    "browserworker.store.sqlite._files.Unreadable": (
        "a StoreError of a dialect's file operations: backup, restore and check-db word it (UsageError) "
        "or let it pass as the StoreError it is"
    ),
    "browserworker.store.sqlite._files.Locked": "restore words it as DatabaseInUse",
    "browserworker.store.postgres._restore.NotADump": "restore and backup word it (UsageError, StoreError)",
    "browserworker.agent._service._RunLeft": "a ToolCallError: the agent meets it as a tool error",
}

# The demo shop is independent of the kit (an import contract says so): its exceptions belong
# to its own modules' faces, not to browserworker's.
SANDBOX = "browserworker.sandbox"


def _sections() -> dict[str, list[str]]:
    """The names docs/api.md lists (``- `NAME`...`` and ``| `NAME` |...`` lines), by the module
    of their ``## `module` `` section."""
    found: dict[str, list[str]] = {}
    current = None
    for line in API_PAGE.read_text().splitlines():
        heading = re.match(r"^## `([\w.]+)`\s*$", line)
        if heading:
            current = heading.group(1)
            found[current] = []
            continue
        named = re.match(r"^(?:- |\| )`(\w+)`", line)
        if named and current is not None:
            found[current].append(named.group(1))
    return found


def _exception_rows() -> dict[str, list[str]]:
    """The exceptions table of docs/api.md: name -> its cells."""
    rows = {}
    for line in API_PAGE.read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


def _modules() -> list[ModuleType]:
    """Every module of the package, imported (``__main__`` would run the command)."""
    modules = [browserworker]
    for info in pkgutil.walk_packages(browserworker.__path__, "browserworker."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            modules.append(importlib.import_module(info.name))
    return modules


def _defined_exceptions() -> dict[str, type[BaseException]]:
    """Every BaseException subclass defined anywhere in the package, by qualified name."""
    found = {}
    for module in _modules():
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{module.__name__}.{value.__qualname__}"] = value
    return found


def test_all_is_exactly_the_names_of_the_api_page() -> None:
    """``browserworker.__all__`` equals the list of docs/api.md's ``browserworker`` section:
    nothing exported undocumented, nothing documented that is not exported, nothing twice."""
    listed = _sections()["browserworker"]
    assert len(listed) > 40, listed  # the page was read
    assert sorted(listed) == sorted(set(listed)), [n for n in listed if listed.count(n) > 1]
    assert len(browserworker.__all__) == len(set(browserworker.__all__))
    assert set(listed) == set(browserworker.__all__), {
        "documented, not exported": set(listed) - set(browserworker.__all__),
        "exported, not documented": set(browserworker.__all__) - set(listed),
    }


def test_every_name_resolves_and_dir_shows_exactly_them() -> None:
    """Each name of ``__all__`` imports (``from browserworker import NAME``) and is in
    ``dir(browserworker)``; and the module's public names are ``__all__``, no more (as httpx
    tests its own): nothing public is reachable but unlisted."""
    for name in browserworker.__all__:
        assert getattr(browserworker, name) is not None, name
        assert name in dir(browserworker), name
    public = {
        name
        for name in dir(browserworker)
        if not name.startswith("_") and not isinstance(getattr(browserworker, name), ModuleType)
    }
    assert public | {"__version__"} == set(browserworker.__all__)
    namespace: dict[str, object] = {}
    exec("from browserworker import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(browserworker.__all__)


def test_import_browserworker_is_light() -> None:
    """``import browserworker`` (and reading its version and errors) loads neither Playwright nor
    a database driver: commands that only read the store stay quick."""
    code = (
        "import sys, browserworker\n"
        "browserworker.__version__, browserworker.UsageError, browserworker.InjectedFault\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'playwright', 'psycopg', 'psycopg_pool'}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('browserworker')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    heavy, ours = done.stdout.splitlines()
    assert heavy == "[]", heavy
    assert ours == "['browserworker', 'browserworker.errors', 'browserworker.logs']", ours


@pytest.mark.parametrize("face", FACES)
def test_each_face_names_only_what_is_there_and_the_page_names_only_its_names(face: str) -> None:
    """A subpackage's ``__all__`` names only what resolves, each once; the names docs/api.md
    lists under it are in that ``__all__``."""
    module = importlib.import_module(face)
    names = list(module.__all__)
    assert len(names) == len(set(names)), face
    for name in names:
        assert hasattr(module, name), f"{face}.{name}"
    listed = _sections()[face]
    assert listed, f"docs/api.md has no names under {face}"
    assert set(listed) <= set(names), set(listed) - set(names)


def test_every_exception_a_user_can_meet_is_exported_from_errors_and_documented() -> None:
    """Walking every module: each exception class the package defines is exported by
    ``browserworker`` (the same class), defined in ``browserworker.errors``, and has its row in
    docs/api.md with its exit code; unless it is private (``_Name``), never leaves the code that
    raises it (:data:`NEVER_MET`, each with its reason), or belongs to the demo shop's own face."""
    defined = _defined_exceptions()
    assert set(NEVER_MET) <= set(defined), set(NEVER_MET) - set(defined)  # the list is not stale
    rows = _exception_rows()
    met = {}
    for qualified, cls in defined.items():
        module = qualified.rsplit(".", 1)[0]
        if cls.__name__.startswith("_") or qualified in NEVER_MET:
            continue
        if module.startswith(SANDBOX):
            assert cls.__name__ in importlib.import_module(module).__all__, qualified
            continue
        met[cls.__name__] = cls
    assert len(met) >= 18, sorted(met)
    for name, cls in met.items():
        assert name in browserworker.__all__, f"{name} ({cls.__module__}) is not exported"
        assert getattr(browserworker, name) is cls, name
        assert cls.__module__ == "browserworker.errors", f"{name} is defined in {cls.__module__}"
        assert name in rows, f"{name} has no row in docs/api.md's exceptions"
        is_a, code = rows[name][1].strip("`"), rows[name][2]
        assert is_a == cls.__mro__[1].__name__, (name, is_a)
        expected = str(cls.exit_code) if issubclass(cls, BrowserworkerError) else "none"
        assert code == expected, (name, code, expected)
    exported = {
        n
        for n in browserworker.__all__
        if inspect.isclass(v := getattr(browserworker, n)) and issubclass(v, BaseException)
    }
    assert exported == set(met), exported ^ set(met)


def test_moved_exceptions_are_still_importable_where_they_were_used() -> None:
    """The exceptions that moved to ``browserworker.errors`` are the same classes where code and
    tests import them from."""
    from browserworker import _faults, errors, prove, recording
    from browserworker.ops._backup import DatabaseInUse
    from browserworker.runtime._login_sessions import SessionKeyError

    assert DatabaseInUse is errors.DatabaseInUse and issubclass(DatabaseInUse, UsageError)
    assert SessionKeyError is errors.SessionKeyError and issubclass(SessionKeyError, UsageError)
    assert recording.ReplayError is errors.ReplayError
    assert prove.InjectedFault is _faults.InjectedFault is errors.InjectedFault
    assert issubclass(errors.GroupSpoiled, errors.StoreError)
    assert issubclass(errors.InjectedFault, RuntimeError) and not issubclass(errors.InjectedFault, BrowserworkerError)


def test_errors_is_the_bottom_layer() -> None:
    """``browserworker/errors.py`` imports nothing of the package (every layer imports it)."""
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("browserworker"), ast.dump(node)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("browserworker") for a in node.names)


def test_the_version_is_the_package_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """``__version__`` is ``pyproject.toml``'s version, read from the installed package's
    metadata (not written in the code)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert browserworker.__version__ == pyproject == importlib.metadata.version("browserworker")

    monkeypatch.delitem(vars(browserworker), "__version__", raising=False)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: f"{name}-from-metadata")
    assert browserworker.__version__ == "browserworker-from-metadata"


def test_settings_come_from_the_environment_where_settings_are_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ApprovalSettings.from_env`` reads the two variables (unset or empty: 24 h and 10 s); a
    value that is not a number of seconds is a UsageError naming its variable. An ``Engine``
    not given ``approvals=`` reads them when it is made; given them, it reads nothing."""
    from browserworker import ApprovalSettings, BrowserSettings, Engine, open_store

    assert ApprovalSettings.from_env({}) == ApprovalSettings(ttl=86400.0, hold=10.0)
    assert ApprovalSettings.from_env({"BROWSERWORKER_APPROVAL_TTL": "", "BROWSERWORKER_APPROVAL_HOLD": "0"}) == (
        ApprovalSettings(ttl=86400.0, hold=0.0)
    )
    assert ApprovalSettings.from_env({"BROWSERWORKER_APPROVAL_TTL": "60.5"}).ttl == 60.5
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(UsageError, match=f"BROWSERWORKER_APPROVAL_HOLD must be .*{bad!r}"):
            ApprovalSettings.from_env({"BROWSERWORKER_APPROVAL_HOLD": bad})

    monkeypatch.setenv("BROWSERWORKER_APPROVAL_HOLD", "0")
    monkeypatch.setenv("BROWSERWORKER_APPROVAL_TTL", "120")
    store = open_store(tmp_path / "bw.db")
    try:
        assert Engine(store, browser=BrowserSettings()).approvals == ApprovalSettings(ttl=120.0, hold=0.0)
        mine = ApprovalSettings(hold=3.0)
        monkeypatch.setenv("BROWSERWORKER_APPROVAL_HOLD", "not read")
        assert Engine(store, browser=BrowserSettings(), approvals=mine).approvals is mine
    finally:
        store.close()


def test_login_session_settings_come_from_the_environment_where_settings_are_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SessionSettings.from_env`` reads the sealing key and the maximum age (unset or empty:
    None); an ``Engine`` not given ``sessions=`` reads them when it is made, given them it reads
    nothing; the run's login code reads no environment."""
    from browserworker import BrowserSettings, Engine, open_store
    from browserworker.runtime import SessionSettings

    assert SessionSettings.from_env({}) == SessionSettings(key=None, max_age=None)
    assert SessionSettings.from_env({"BROWSERWORKER_SESSION_KEY": " k ", "BROWSERWORKER_SESSION_MAX_AGE": "60"}) == (
        SessionSettings(key="k", max_age=60.0)
    )
    with pytest.raises(UsageError, match="BROWSERWORKER_SESSION_MAX_AGE must be"):
        SessionSettings.from_env({"BROWSERWORKER_SESSION_MAX_AGE": "a week"})
    monkeypatch.setenv("BROWSERWORKER_SESSION_MAX_AGE", "90")
    store = open_store(tmp_path / "bw.db")
    try:
        assert Engine(store, browser=BrowserSettings()).sessions == SessionSettings(max_age=90.0)
        mine = SessionSettings(max_age=5.0)
        monkeypatch.setenv("BROWSERWORKER_SESSION_MAX_AGE", "not read")
        assert Engine(store, browser=BrowserSettings(), sessions=mine).sessions is mine
    finally:
        store.close()


def test_the_gate_and_the_run_loop_read_no_environment() -> None:
    """No module of the gate, and no module of the runtime but its settings and the browser's
    discovery, reads ``os.environ`` or ``os.getenv``: their settings come with the run."""
    readers = []
    paths = sorted((PACKAGE / "gate").glob("*.py")) + [
        p for p in sorted((PACKAGE / "runtime").glob("*.py")) if p.name not in ("_settings.py", "_browser.py")
    ]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
                readers.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                readers.append(f"{path.name}:{node.lineno}")
    assert not readers, readers


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


def test_all_is_complete_and_importable() -> None:
    """Every public name is in __all__ and every name in __all__ exists."""
    public = {n for n in vars(browserworker) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(browserworker.__all__)
    for name in browserworker.__all__:
        assert hasattr(browserworker, name), name
