"""The PostgreSQL dialect: :class:`PostgresConnector` and :class:`PostgresStore`.

Many hosts, one database. psycopg 3 and its connection pool; every object in a schema of
the store's own (``browserworker`` unless ``--db-schema`` says otherwise); numbered
migrations under ``sql/postgres/`` applied on first use (or by ``browserworker migrate``),
under an advisory lock so two hosts starting together migrate once.

**Concurrency.** Writers are not serialised here, so the fences (see
:mod:`~browserworker.store.manager`) take row locks: ``{share_run}`` is ``FOR SHARE``,
``{lock_row}`` ``FOR UPDATE``, and a claim reads the next run ``FOR UPDATE SKIP LOCKED``
(two claimers never wait on each other nor read "empty" because the other won).

**One clock.** Every lease decision (is a lease expired, has it the dispatch margin left:
claims, heartbeats, intents, dispatch commits, reclaims) is judged in its statement by the
database's ``clock_timestamp()`` (the ``{clock}`` fragment), never by a host's clock, and
not at the moment the call began (a worker paused between the two changes nothing).
:meth:`PostgresConnector.now`, the time a call stores (a claim's expiry is ``now + ttl``)
and the windows of reads, is the database's clock as this process sees it: read from the
database, then carried on this process's monotonic clock, read again every minute. A host
whose clock is minutes off therefore stores and judges the same times as any other.

**A network between.** Every failure of the database (a refused or lost connection, a
timeout) is a :class:`~browserworker.errors.StoreError`; a broken connection goes back to
the pool, which opens new ones with backoff. Connections carry TCP keep-alives and a TCP
user timeout, so a partition ends a blocked call in seconds instead of hanging it; a call whose
peer acknowledges but never answers is cut at a deadline (:mod:`.postgres_watchdog`); and the
server ends a session that sits idle inside a transaction (a frozen worker) so its row locks
do not outlive it. A connection the server closed (a restart) is seen before it is handed out,
and the pool is refilled at once.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ...errors import GroupSpoiled, StoreError, StoreUnavailable
from ..connector import Row
from ..shared import SQLStore
from ._conninfo import (
    DEFAULT_POOL,
    DEFAULT_SCHEMA,
    ENV_POOL,
    ENV_SCHEMA,
    connect_failed,
    conninfo,
    pool_size,
    redact_url,
    schema_name,
)
from ._queries import DB_NOW, QUERIES, Deferred, Tx, batched_rows, each, flush_before
from ._schema import SCHEMA_VERSION, migrate, require_schema, schema_version
from ._watchdog import Watchdog

__all__ = [
    "DEFAULT_POOL",
    "DEFAULT_SCHEMA",
    "ENV_POOL",
    "ENV_SCHEMA",
    "SCHEMA_VERSION",
    "PostgresConnector",
    "PostgresStore",
]

# A bare group runs a batch's calls of a method as one statement (postgres_batch.sql): each
# joins the calls' rows to the rows they change, by primary key. The planner, which takes an
# index probe for a disk read, would rather hash a whole table (a seq scan of runs, or of its
# queued runs) than probe it for a few dozen rows, until the table is large: in the group's
# transaction it joins by nested loop (an index probe a call; no statement of a worker's batch
# needs a hash or a merge join), one round trip with the BEGIN.
_BEGIN_BARE = "BEGIN; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
_CLOCK_EVERY = 60.0  # seconds between readings of the database's clock
# how far the host's monotonic clock may drift from the database's, a second: a new reading of
# the clock replaces the one held only if it is at least as tight once that drift is counted
_CLOCK_DRIFT = 1e-4
# the server's side: a session idle inside a transaction (its client frozen or cut off) is
# ended, releasing its locks; no statement runs forever
_SESSION = ("SET idle_in_transaction_session_timeout = '5s'", "SET statement_timeout = '30s'")
# how long the pool retries a lost connection (backing off 1, 2, 4 s...) before it starts over
# (_try_again). Left to itself it would double its pauses for five minutes, so that a worker
# whose database came back after an outage of N seconds would notice up to N seconds late.
_RECONNECT_FOR = 10.0
# seconds a call may go unanswered before its connection is cut (postgres_watchdog): longer
# than statement_timeout, so only a call whose server never answers is (a stalled peer, a link
# that acknowledges and forwards nothing, which the TCP user timeout does not see)
_CALL_DEADLINE = 45.0


def _try_again(pool: Any) -> None:
    """The pool gave up reconnecting a connection (after ``_RECONNECT_FOR``): start over at once,
    with a fresh backoff, rather than when the next call comes (a call already waiting would
    wait out its whole timeout: the pool grows only for a new one)."""
    if not pool.closed:
        pool.check()  # a pool without connections grows here


def _closed_by_server(conn: Any, errors: type[Exception]) -> bool:
    """True if the server closed ``conn`` (a restart, a terminated backend, a cut link). An idle
    connection has nothing to read (no round trip is needed to see that); if it has, it is the
    server's goodbye, or a message a live connection answers past."""
    if conn.closed or conn.broken:
        return True
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if not readable:
        return False
    try:
        conn.execute("")
    except errors:
        return True
    return False


def _check_connection(pool: Any, conn: Any, psycopg: Any) -> None:
    """The pool's look at a connection before it hands it out: if the server closed it
    (:func:`_closed_by_server`), its idle siblings most likely went with it, so the pool is
    drained and refilled at once, instead of each failing a call in turn (or the pool
    pausing, with its backoff, between one failed check and the next)."""
    if not _closed_by_server(conn, psycopg.Error):
        return
    drain = getattr(pool, "drain", None)  # psycopg_pool >= 3.3
    if drain is not None:
        drain()
    raise psycopg.OperationalError("the server closed this connection")


class PostgresConnector:
    """A :class:`~browserworker.store.connector.Connector` for one schema of one PostgreSQL database.

    ``create=False`` refuses a database where the store's schema does not exist yet
    (read-only commands); otherwise the schema is created and migrated on open.
    ``migrating=False`` opens the schema as it is (see :meth:`_prepare`).
    """

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool: int | None = None,
        create: bool = True,
        migrating: bool = True,
    ) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self.schema = schema_name(schema)
        self._psycopg = psycopg
        self._local = threading.local()
        # a reading of the database's clock: (its time, the monotonic time it was read at, the
        # reading's uncertainty: half its round trip)
        self._clock: tuple[float, float, float] | None = None
        self._clock_lock = threading.Lock()
        self._conninfo = conninfo(url, self.schema)
        self.watchdog = Watchdog(_CALL_DEADLINE)
        self._prepare(create, migrating)
        self.pool = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=pool or pool_size(),
            open=False,
            kwargs={"autocommit": True},
            configure=self._configure,
            timeout=10.0,
            reconnect_timeout=_RECONNECT_FOR,
            reconnect_failed=_try_again,
            check=self._check,
            name=f"browserworker:{self.schema}",
        )
        self.pool.open(wait=False)

    # -- connections --------------------------------------------------------------

    def _configure(self, conn: Any) -> None:
        from psycopg.rows import dict_row

        conn.row_factory = dict_row
        conn.execute(f"SET search_path TO {self.schema}")
        for statement in _SESSION:
            conn.execute(statement)

    def _check(self, conn: Any) -> None:
        _check_connection(self.pool, conn, self._psycopg)

    def _connect(self) -> Any:
        """A connection of its own (migrations, the listener), configured as the pool's are."""
        try:
            conn = self._psycopg.connect(self._conninfo, autocommit=True)
        except self._psycopg.Error as exc:
            raise connect_failed(self.location, exc) from exc
        self._configure(conn)
        return conn

    @contextmanager
    def _borrowed(self) -> Iterator[Any]:
        """The calling thread's group connection, or one from the pool for this call."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        try:
            with self.pool.connection() as conn, self.watchdog.watch(conn):
                self._tick(conn)
                yield conn
        except self._psycopg.Error as exc:
            raise StoreError(f"{self.location}: {str(exc).strip()}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg_pool"):  # PoolTimeout, PoolClosed
                raise StoreError(f"{self.location}: no connection: {exc}") from exc
            raise

    @property
    def location(self) -> str:
        return f"{redact_url(self.url)} (schema {self.schema})"

    #: no file beside a server's database: the key of saved login sessions must come from the
    #: environment (:mod:`browserworker.runtime._login_sessions`)
    session_key_file = None

    # -- the clock ----------------------------------------------------------------

    def _read_clock(self, conn: Any, tries: int = 1) -> None:
        """Read the database's clock (the tightest of ``tries`` readings) and keep the reading
        unless the one held is tighter still: on a loaded host one slow round trip would put
        every timestamp this store writes off by half of it, and two stores' by the sum."""
        best: tuple[float, float, float] | None = None
        for _ in range(tries):
            before = time.monotonic()
            row = conn.execute(f"SELECT {DB_NOW} AS now").fetchone()
            after = time.monotonic()
            if best is None or after - before < 2 * best[2]:
                best = (float(row["now"]), (before + after) / 2, (after - before) / 2)
        assert best is not None
        with self._clock_lock:
            held = self._clock
            if held is None or best[2] <= held[2] + (best[1] - held[1]) * _CLOCK_DRIFT:
                self._clock = best
            else:  # the held reading stays; it is due again later
                self._clock = (held[0] + (best[1] - held[1]), best[1], held[2] + (best[1] - held[1]) * _CLOCK_DRIFT)

    def _tick(self, conn: Any) -> None:
        clock = self._clock
        if clock is None or time.monotonic() - clock[1] > _CLOCK_EVERY:
            self._read_clock(conn)

    def now(self) -> float:
        clock = self._clock
        if clock is None:
            with self._borrowed():
                clock = self._clock
        assert clock is not None
        return clock[0] + (time.monotonic() - clock[1])

    def close(self) -> None:
        self.watchdog.close()
        self.pool.close()

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def group(self, *, isolate: bool = True) -> Iterator[None]:
        """One transaction, one commit, around many store calls (see ``Connector.group``): each
        call a savepoint with ``isolate``; without, the first failing call spoils the group."""
        with self._borrowed() as conn:
            self._execute(conn, "BEGIN" if isolate else _BEGIN_BARE)
            local = self._local
            local.conn, local.isolated, local.lost = conn, isolate, None
            local.deferred = None if isolate else Deferred(conn)
            try:
                yield
            except BaseException:
                local.conn = local.deferred = None
                self._rollback(conn)
                raise
            deferred, local.conn, local.deferred = local.deferred, None, None
            lost = local.lost
            if lost is None and deferred is not None:
                try:
                    deferred.flush()
                except self._psycopg.Error as exc:
                    lost = exc
            if lost is not None:
                self._rollback(conn)
                if isinstance(lost, GroupSpoiled):
                    raise lost
                raise StoreError(f"{self.location}: the batch's transaction was rolled back: {lost}")
            self._execute(conn, "COMMIT", what="commit failed")

    def _execute(self, conn: Any, sql: str, *, what: str = "write failed") -> None:
        try:
            conn.execute(sql)
        except self._psycopg.Error as exc:
            raise StoreError(f"{self.location}: {what}: {str(exc).strip()}") from exc

    def _rollback(self, conn: Any) -> None:
        if conn.broken or conn.closed:
            return
        try:
            conn.execute("ROLLBACK")
        except self._psycopg.Error:  # the connection is gone: the server rolled it back
            pass

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """One store call's writes, atomically (a savepoint inside an isolated group)."""
        grouped = getattr(self._local, "conn", None)
        if grouped is None:
            with self._borrowed() as conn:
                self._execute(conn, "BEGIN")
                try:
                    yield Tx(conn)
                except BaseException as exc:
                    self._rollback(conn)
                    self._reraise(exc)
                    raise
                self._execute(conn, "COMMIT", what="commit failed")
            return
        if self._local.lost is not None:
            raise StoreError(f"{self.location}: the batch's transaction was rolled back: {self._local.lost}")
        if not self._local.isolated:
            try:
                yield Tx(grouped, self._local.deferred)
            except BaseException as exc:
                self._local.lost = GroupSpoiled(f"{self.location}: a call of the batch failed: {exc!r}")
                self._reraise(exc)
                raise
            return
        self._execute(grouped, "SAVEPOINT bw_call")
        try:
            yield Tx(grouped)
        except BaseException as exc:
            try:
                grouped.execute("ROLLBACK TO SAVEPOINT bw_call")
            except self._psycopg.Error as failure:  # the connection is gone: so is the group
                self._local.lost = failure
            self._reraise(exc)
            raise
        self._execute(grouped, "RELEASE SAVEPOINT bw_call")

    def _reraise(self, exc: BaseException) -> None:
        if isinstance(exc, self._psycopg.Error):
            raise StoreError(f"{self.location}: write failed: {str(exc).strip()}") from exc

    # -- reads --------------------------------------------------------------------

    def read(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        with self._borrowed() as conn:
            try:
                flush_before(getattr(self._local, "deferred", None), query)
                return list(conn.execute(QUERIES[query], params).fetchall())
            except self._psycopg.Error as exc:
                raise StoreError(f"{self.location}: read failed: {str(exc).strip()}") from exc

    def read_one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        with self._borrowed() as conn:
            try:
                flush_before(getattr(self._local, "deferred", None), query)
                row: Row | None = conn.execute(QUERIES[query], params).fetchone()
                return row
            except self._psycopg.Error as exc:
                raise StoreError(f"{self.location}: read failed: {str(exc).strip()}") from exc

    def read_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        if len(params) == 1:
            return [self.read_one(query, params[0])]
        with self._borrowed() as conn:
            try:
                flush_before(getattr(self._local, "deferred", None), query)
                batched = batched_rows(conn, query, params)
                if batched is not None:
                    return batched
                return [result.fetchone() for result in each(conn, QUERIES[query], params)]
            except self._psycopg.Error as exc:
                raise StoreError(f"{self.location}: read failed: {str(exc).strip()}") from exc

    # -- schema, integrity, backup ------------------------------------------------

    def _prepare(self, create: bool, migrating: bool) -> None:
        """Create and migrate the schema (``migrating=False``: take it as it is; it must
        exist: the restore, which migrates it under the schema's lock first)."""
        conn = self._connect()
        try:
            if migrating:
                migrate(conn, self.schema, create=create, location=self.location)
            else:
                require_schema(conn, self.schema, self.location)
            self._read_clock(conn, tries=3)
        except self._psycopg.OperationalError as exc:  # the server went away under the migration
            raise StoreUnavailable(f"cannot open the store in {self.location}: {str(exc).strip()}") from exc
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot open the store in {self.location}: {str(exc).strip()}") from exc
        finally:
            conn.close()

    @property
    def schema_version(self) -> int:
        with self._borrowed() as conn:
            return schema_version(conn)

    def integrity_check(self) -> str:
        from ._check import integrity_problems

        with self._borrowed() as conn:
            problems = integrity_problems(conn, self.schema, SCHEMA_VERSION)
        return "; ".join(problems) if problems else "ok"

    def backup(self, dest: str) -> None:
        from ._check import dump

        dump(self._conninfo, self.schema, dest)

    def wakeups(self, queues: Sequence[str]) -> Any:
        from ._listen import Listener

        return Listener(self._connect, self.schema, queues)


class PostgresStore(SQLStore):
    """The shared store over a :class:`PostgresConnector`: ``PostgresStore(url, schema=...)``."""

    connector: PostgresConnector

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool: int | None = None,
        create: bool = True,
        migrating: bool = True,
    ) -> None:
        super().__init__(PostgresConnector(url, schema=schema, pool=pool, create=create, migrating=migrating))
