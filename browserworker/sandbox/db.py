"""SQLite persistence for the sandbox shop.

The sandbox owns its own database file (stdlib :mod:`sqlite3`, WAL journal,
``synchronous=FULL``) so that everything it accepted survives a killed client
*and* a killed sandbox.  Every public method opens its own short-lived
connection, which keeps :class:`SandboxDB` safe to use from any thread and
from other processes (tests open the same file directly).

Tables:

``orders``
    the shop's orders; ``idempotency_key`` is unique when not NULL.
``faults``
    the fault-injection knobs (JSON-encoded values), persisted so a restarted
    sandbox keeps misbehaving the same way.
``settings``
    misc key/value settings, e.g. the session-signing secret.
``users``
    login accounts (``demo``/``demo`` is seeded).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

__all__ = ["FAULT_KNOBS", "FaultError", "Faults", "Order", "SandboxDB"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    reference TEXT NOT NULL,
    item TEXT NOT NULL,
    quantity INTEGER NOT NULL,
    created_at REAL NOT NULL,
    idempotency_key TEXT NULL
);
CREATE INDEX IF NOT EXISTS orders_by_reference ON orders(reference);
CREATE UNIQUE INDEX IF NOT EXISTS orders_by_idempotency_key
    ON orders(idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS faults (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS users (
    username TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,
    created_at REAL NOT NULL
);
"""

_PBKDF2_ROUNDS = 20_000
_MAX_DELAY = 600.0


class FaultError(ValueError):
    """Raised for an unknown fault knob or a value of the wrong type."""


@dataclass(frozen=True)
class Order:
    """One row of the ``orders`` table."""

    id: int
    reference: str
    item: str
    quantity: int
    created_at: float
    idempotency_key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Public JSON shape (the idempotency key is not exposed)."""
        return {
            "id": self.id,
            "reference": self.reference,
            "item": self.item,
            "quantity": self.quantity,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class Faults:
    """The fault-injection knobs; defaults mean "behave normally"."""

    delay_before_commit: float = 0.0
    delay_after_commit: float = 0.0
    drop_after_commit: bool = False
    fail_before_commit: bool = False
    fail_after_commit: bool = False
    dedupe: bool = False
    throttle: int = 0
    """Answer order POSTs ``throttle_status`` with ``Retry-After: throttle`` (seconds), not taking them (0: off)."""
    throttle_status: int = 429
    throttle_tag: str | None = None
    """Throttle only the POSTs tagged so (``X-Sandbox-Tag``, :mod:`.visits`); None: any."""
    throttle_times: int | None = None
    """Throttle this many POSTs, then stop (None: until cleared). ``times`` does not count them."""
    times: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """All knobs as a plain dict (the JSON shape of ``/api/faults``)."""
        return asdict(self)


FAULT_KNOBS: tuple[str, ...] = tuple(f.name for f in fields(Faults))
#: Knobs that ``times`` counts down and auto-resets (everything but dedupe/times).
_COUNTED_KNOBS = (
    "delay_before_commit",
    "delay_after_commit",
    "drop_after_commit",
    "fail_before_commit",
    "fail_after_commit",
)
_FLOAT_KNOBS = {"delay_before_commit", "delay_after_commit"}
_BOOL_KNOBS = {"drop_after_commit", "fail_before_commit", "fail_after_commit", "dedupe"}


def validate_fault(name: str, value: Any) -> Any:
    """Return ``value`` normalised for knob ``name`` or raise :class:`FaultError`."""
    if name not in FAULT_KNOBS:
        raise FaultError(f"unknown fault knob {name!r}; known: {', '.join(FAULT_KNOBS)}")
    if name in _FLOAT_KNOBS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FaultError(f"{name} must be a number of seconds")
        if not 0 <= value <= _MAX_DELAY:
            raise FaultError(f"{name} must be between 0 and {_MAX_DELAY:g}")
        return float(value)
    if name in _BOOL_KNOBS:
        if not isinstance(value, bool):
            raise FaultError(f"{name} must be true or false")
        return value
    if name == "throttle":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 86400:
            raise FaultError("throttle must be a whole number of seconds between 0 and 86400 (0: off)")
        return value
    if name == "throttle_tag":
        if value is not None and (not isinstance(value, str) or not value):
            raise FaultError("throttle_tag must be a tag (X-Sandbox-Tag) or null")
        return value
    if name == "throttle_times":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise FaultError("throttle_times must be a positive integer or null")
        return value
    if name == "throttle_status":
        if value not in (429, 503) or isinstance(value, bool):
            raise FaultError("throttle_status must be 429 or 503")
        return value
    # times
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FaultError("times must be a positive integer or null")
    return value


def _hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, _PBKDF2_ROUNDS)
    return f"{salt.hex()}${digest.hex()}"


def _verify_password(password: str, stored: str) -> bool:
    salt_hex, _, digest_hex = stored.partition("$")
    try:
        salt = bytes.fromhex(salt_hex)
    except ValueError:
        return False
    candidate = _hash_password(password, salt).partition("$")[2]
    return hmac.compare_digest(candidate, digest_hex)


def _row_to_order(row: sqlite3.Row | None) -> Order | None:
    if row is None:
        return None
    return Order(
        id=row["id"],
        reference=row["reference"],
        item=row["item"],
        quantity=row["quantity"],
        created_at=row["created_at"],
        idempotency_key=row["idempotency_key"],
    )


class SandboxDB:
    """Thread- and process-safe access to one sandbox database file."""

    def __init__(self, path: str | Path, *, seed_users: bool = True) -> None:
        """Open (creating if needed) the database at ``path`` and seed ``demo``/``demo``."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
        if seed_users:
            self.add_user("demo", "demo", replace_existing=False)

    # -- connections -------------------------------------------------------
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=10000")
            yield conn
        finally:
            conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction taken with ``BEGIN IMMEDIATE`` (serialises writers)."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- settings / users --------------------------------------------------
    def get_setting(self, key: str) -> str | None:
        """Return the value of setting ``key`` or ``None``."""
        with self._connect() as conn:
            row = conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def secret_key(self) -> str:
        """The session-signing secret, created once and kept in the database."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO settings(key, value) VALUES ('session_secret', ?)",
                (secrets.token_urlsafe(32),),
            )
            row = conn.execute("SELECT value FROM settings WHERE key = 'session_secret'").fetchone()
        return str(row["value"])

    def add_user(self, username: str, password: str, *, replace_existing: bool = True) -> None:
        """Create (or, with ``replace_existing``, update) a login account."""
        verb = "INSERT OR REPLACE" if replace_existing else "INSERT OR IGNORE"
        with self._transaction() as conn:
            conn.execute(
                f"{verb} INTO users(username, password_hash, created_at) VALUES (?, ?, ?)",
                (username, _hash_password(password), time.time()),
            )

    def check_user(self, username: str, password: str) -> bool:
        """True when ``username`` exists and ``password`` matches."""
        with self._connect() as conn:
            row = conn.execute("SELECT password_hash FROM users WHERE username = ?", (username,)).fetchone()
        return row is not None and _verify_password(password, row["password_hash"])

    # -- orders ------------------------------------------------------------
    def create_order(
        self,
        item: str,
        quantity: int,
        reference: str,
        *,
        idempotency_key: str | None = None,
        dedupe: bool = False,
    ) -> tuple[Order, bool]:
        """Insert an order and commit; return ``(order, created)``.

        With ``idempotency_key`` an existing order holding that key is returned
        instead of inserting; with ``dedupe`` the oldest order with the same
        ``reference`` is returned instead.  The check and the insert happen in
        one ``BEGIN IMMEDIATE`` transaction, so concurrent duplicates are safe.
        """
        with self._transaction() as conn:
            existing: Order | None = None
            if idempotency_key is not None:
                existing = _row_to_order(
                    conn.execute("SELECT * FROM orders WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
                )
            if existing is None and dedupe:
                existing = _row_to_order(
                    conn.execute(
                        "SELECT * FROM orders WHERE reference = ? ORDER BY id LIMIT 1", (reference,)
                    ).fetchone()
                )
            if existing is not None:
                return existing, False
            created_at = time.time()
            cur = conn.execute(
                "INSERT INTO orders(reference, item, quantity, created_at, idempotency_key) VALUES (?, ?, ?, ?, ?)",
                (reference, item, quantity, created_at, idempotency_key),
            )
            order_id = cur.lastrowid
            assert order_id is not None
        return Order(order_id, reference, item, quantity, created_at, idempotency_key), True

    def get_order(self, order_id: int) -> Order | None:
        """The order with ``order_id`` or ``None``."""
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
        return _row_to_order(row)

    def list_orders(self, reference: str | None = None) -> list[Order]:
        """All orders (oldest first), optionally only those with ``reference``."""
        with self._connect() as conn:
            if reference is None:
                rows = conn.execute("SELECT * FROM orders ORDER BY id").fetchall()
            else:
                rows = conn.execute("SELECT * FROM orders WHERE reference = ? ORDER BY id", (reference,)).fetchall()
        return [o for o in map(_row_to_order, rows) if o is not None]

    def count_orders(self, reference: str | None = None) -> int:
        """Number of orders, optionally only those with ``reference``."""
        return len(self.list_orders(reference))

    def delete_all_orders(self) -> int:
        """Delete every order; return how many were deleted."""
        with self._transaction() as conn:
            return conn.execute("DELETE FROM orders").rowcount

    # -- faults ------------------------------------------------------------
    @staticmethod
    def _read_faults(conn: sqlite3.Connection) -> Faults:
        values = {r["name"]: json.loads(r["value"]) for r in conn.execute("SELECT name, value FROM faults")}
        return Faults(**{k: v for k, v in values.items() if k in FAULT_KNOBS})

    @staticmethod
    def _write_faults(conn: sqlite3.Connection, faults: Faults) -> None:
        conn.execute("DELETE FROM faults")
        conn.executemany(
            "INSERT INTO faults(name, value) VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in faults.to_dict().items()],
        )

    def get_faults(self) -> Faults:
        """The currently persisted knobs."""
        with self._connect() as conn:
            return self._read_faults(conn)

    def set_faults(self, **knobs: Any) -> Faults:
        """Partially update the knobs (validated); return the new full set."""
        clean = {name: validate_fault(name, value) for name, value in knobs.items()}
        with self._transaction() as conn:
            faults = replace(self._read_faults(conn), **clean)
            self._write_faults(conn, faults)
        return faults

    def reset_faults(self) -> Faults:
        """Reset every knob to its default."""
        with self._transaction() as conn:
            self._write_faults(conn, Faults())
        return Faults()

    def consume_faults(self) -> Faults:
        """Snapshot the knobs for one order POST, counting down ``times``.

        When ``times`` is set, this call uses one of the remaining shots; the
        call that uses the last one also resets the counted knobs (everything
        except ``dedupe``).  Returns the knobs that apply to this request.
        """
        with self._transaction() as conn:
            faults = self._read_faults(conn)
            if faults.times is not None:
                if faults.times <= 1:
                    defaults = Faults()
                    remaining = replace(faults, times=None, **{k: getattr(defaults, k) for k in _COUNTED_KNOBS})
                else:
                    remaining = replace(faults, times=faults.times - 1)
                self._write_faults(conn, remaining)
        return faults

    def consume_throttle(self, tag: str | None) -> Faults | None:
        """The knobs if this order POST (tagged ``tag``) is to be throttled, counting down
        ``throttle_times`` (the last one turns the throttle off); None if it is not."""
        with self._transaction() as conn:
            faults = self._read_faults(conn)
            if not faults.throttle or faults.throttle_tag not in (None, tag):
                return None
            if faults.throttle_times is not None:
                left = faults.throttle_times - 1
                self._write_faults(
                    conn, replace(faults, throttle_times=left or None, throttle=faults.throttle if left else 0)
                )
        return faults

    def reset(self) -> None:
        """Delete all orders and reset all faults."""
        self.delete_all_orders()
        self.reset_faults()
