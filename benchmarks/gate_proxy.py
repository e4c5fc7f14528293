"""A network-level dispatch gate (a loopback HTTP proxy that journals a dispatch before it
forwards it) measured against today's route gate (``context.route("**/*")``).

``python benchmarks/gate_proxy.py [--out PATH] [--cycles N]``: the concurrency benchmark. One
Chromium (launched as the kit launches it, plus ``--proxy-bypass-list=<-loopback>``), asyncio
tasks sharing it, the same short flow (new context, goto a form, fill, click submit, wait for
the result page, close the context) in three setups -- (a) no gate, (b) a route gate:
``context.route("**/*")`` whose handler commits to SQLite for a non-GET request, then
``route.fallback()``, (c) the proxy gate: the context is created with
``proxy={"server": "http://127.0.0.1:PORT"}`` and no route; the proxy commits the same row
before it forwards a non-GET request. First the gate's own cost per request (100 fetch
POST+GET pairs from a live page, one at a time; latency and CPU), then drains at concurrency 1,
4 and 8, in ABBA order (``--cycles`` ABCCBA cycles: 2 drains per setup each); runs/min (first
start to last finish) and CPU seconds per run. CPU is this process (where the route handler and
the proxy run) plus the driver and Chromium, read from /proc (a process's own time and what it
reaped); the target is a separate process and is not counted. About 3 minutes on 2 idle cores
at the default ``--cycles 2``.

``python benchmarks/gate_proxy.py --channels [--trials N] [--out PATH]``: which channels each
gate sees and holds, with one probe page per channel (form POST, fetch, beacon, pagehide
beacon, dedicated, shared and service worker, WebSocket message, ``page.request.post``, a popup
that POSTs as it closes itself), each sending to the target; a landing counts as held when the
gate's journal commit came before the target received it. Shared workers are allowed in this
browser (the kit blocks them). Both modes write their section of the same JSON file.

The proxy speaks plain HTTP/1.1 only. It accepts a ``CONNECT`` tunnel (Chromium sends one for
ws:// through a proxy, Playwright's API client for http:// too) and serves the plain HTTP inside
it; a tunnel that starts TLS (https://, wss://) it cuts off: it cannot see inside, so it could
only refuse it or let its dispatches out unjournaled. Gating HTTPS needs TLS interception: a
local CA the browser trusts (``--ignore-certificate-errors-spki-list`` or the CA in the
profile's NSS store), a certificate minted per host, and the proxy speaking TLS on both sides
-- not built here. The journal commit (WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``, a fenced UPDATE and
an INSERT) runs in one worker thread for each gate, as the kit's store does.

Everything binds 127.0.0.1; Chromium resolves nothing else (``--host-resolver-rules``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import hashlib
import json
import os
import platform
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qs, quote, unquote, urlsplit

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "gate_proxy.json"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
HERMETIC = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
PROXY_LOOPBACK = "--proxy-bypass-list=<-loopback>"  # Chromium bypasses a proxy for loopback by default
SETUPS = ("none", "route", "proxy")
LOOPBACK = frozenset({"127.0.0.1", "localhost"})  # the only hosts the proxy forwards to
LEVELS = {1: 12, 4: 16, 8: 24}  # concurrency -> runs per drain


def is_dispatch(method: str) -> bool:
    """The kit's default rule: any method but GET/HEAD/OPTIONS counts as a dispatch."""
    return method.upper() not in SAFE_METHODS


# -- the target: a separate process, so its CPU is not counted --------------------------------

FORM = (
    "<!doctype html><title>order</title><form method=post action='/submit'>"
    "<input id=item name=item><button id=go>submit</button></form>"
)
RESULT = "<!doctype html><title>done</title><h1 id=result>ordered {item}</h1>"
_GO = '<button id=go onclick="go()">go</button>'
PROBES: dict[str, str] = {
    "form POST": "<form method=post action='/land?key={key}'><input name=k value='{key}'>"
    "<button id=go>go</button></form>",
    "fetch POST": _GO + "<script>function go(){{fetch('/land?key={key}',{{method:'POST',body:'x'}})}}</script>",
    "sendBeacon (live page)": _GO + "<script>function go(){{navigator.sendBeacon('/land?key={key}','x')}}</script>",
    "sendBeacon on pagehide": "<a id=go href='/done' onclick=\"window.addEventListener('pagehide',"
    "()=>navigator.sendBeacon('/land?key={key}','x'))\">go</a>",
    "dedicated Worker POST": _GO + "<script>function go(){{new Worker('/worker.js?key={key}')}}</script>",
    "SharedWorker POST": _GO + "<script>function go(){{new SharedWorker('/worker.js?key={key}')}}</script>",
    "ServiceWorker POST": _GO + "<script>function go(){{navigator.serviceWorker.register('/worker.js?key={key}')}}"
    "</script>",
    "WebSocket message": _GO + "<script>const ws=new WebSocket('ws://'+location.host+'/ws?key={key}');"
    "ws.onopen=()=>document.title='open';function go(){{ws.send('land:{key}')}}</script>",
    "page.request.post": "<p>the API request context</p>",
    "popup: keepalive POST, closes itself": _GO + "<script>function go(){{window.open('/closer?key={key}')}}</script>",
}
_EXTRA = {
    "/closer": "<script>fetch('/land?key={key}',{{method:'POST',body:'x',keepalive:true}});window.close()</script>",
    "/done": "<p>done</p>",
}
_WORKER_JS = "fetch('/land?key={key}', {{method: 'POST', body: 'x'}})"
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class _Target(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # head and body in one write (flushed after each request) ...
    disable_nagle_algorithm = True  # ... sent at once: no wait for the client's delayed ACK
    landings: ClassVar[list[dict[str, Any]]] = []
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: str, ctype: str = "text/html") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _land(self, key: str, channel: str) -> None:
        with self.lock:
            self.landings.append(
                {"key": key, "channel": channel, "at": time.time(), "journal": self.headers.get("x-gate-journal")}
            )

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        key = query.get("key", "")
        if parts.path == "/form":
            return self._send(200, FORM)
        if parts.path == "/ws" and self.headers.get("upgrade", "").lower() == "websocket":
            return self._websocket()
        if parts.path.startswith("/probe/"):
            name = unquote(parts.path[7:])
            return self._send(200, PROBES[name].format(key=key))
        if parts.path in _EXTRA:
            return self._send(200, _EXTRA[parts.path].format(key=key))
        if parts.path == "/worker.js":
            return self._send(200, _WORKER_JS.format(key=key), "text/javascript")
        if parts.path == "/_log":
            with self.lock:
                return self._send(200, json.dumps(self.landings), "application/json")
        return self._send(404, "not found")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        parts = urlsplit(self.path)
        if parts.path == "/submit":
            item = parse_qs(body.decode()).get("item", ["?"])[0]
            return self._send(200, RESULT.format(item=item))
        if parts.path == "/land":
            self._land(parse_qs(parts.query).get("key", [""])[0], "http")
            return self._send(200, "landed")
        return self._send(404, "not found")

    def _websocket(self) -> None:
        accept = base64.b64encode(hashlib.sha1((self.headers["sec-websocket-key"] + _WS_GUID).encode()).digest())
        self.send_response(101)
        self.send_header("upgrade", "websocket")
        self.send_header("connection", "Upgrade")
        self.send_header("sec-websocket-accept", accept.decode())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while True:
            frame = _read_frame(self.rfile.read)
            if frame is None or frame[0] == 8:
                return
            opcode, payload = frame
            if opcode == 1 and payload.startswith(b"land:"):
                self._land(payload[5:].decode(), "websocket")


def _read_frame(read: Any) -> tuple[int, bytes] | None:
    """One WebSocket frame, unmasked: (opcode, payload); None at EOF."""
    head = read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = struct.unpack("!H", read(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", read(8))[0]
    mask = read(4) if head[1] & 0x80 else b"\0\0\0\0"
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(read(length)))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a browser resetting a kept-alive connection as its context closes


def serve_target() -> None:
    server = _Server(("127.0.0.1", 0), _Target)
    print(server.server_port, flush=True)
    server.serve_forever()


class Target:
    """The target server in a child process."""

    def __enter__(self) -> Target:  # noqa: PYI034
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve-target"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait()

    def landings(self, key: str) -> list[dict[str, Any]]:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.url}/_log", timeout=5) as reply:
            return [row for row in json.load(reply) if row["key"] == key]


# -- the journal: what the gate commits before a dispatch leaves ------------------------------


class Journal:
    """An attempt row and an outbox, committed as the kit commits a dispatch: WAL,
    ``synchronous=FULL``, ``BEGIN IMMEDIATE``, the attempt's ``dispatched_at`` fenced by the
    lease epoch, an outbox row; one thread does the commits (as the kit's store does)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        assert self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("PRAGMA busy_timeout = 5000")
        self.conn.execute("CREATE TABLE attempts (id INTEGER PRIMARY KEY, lease_epoch INTEGER, dispatched_at REAL)")
        self.conn.execute(
            "CREATE TABLE outbox (id INTEGER PRIMARY KEY, attempt_id INTEGER, channel TEXT, "
            "method TEXT, url TEXT, at REAL)"
        )
        self.conn.execute("INSERT INTO attempts (id, lease_epoch) VALUES (1, 1)")
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal")
        self.rows: list[dict[str, Any]] = []

    def _commit(self, channel: str, method: str, url: str) -> int:
        now = time.time()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            cur = self.conn.execute(
                "UPDATE attempts SET dispatched_at = coalesce(dispatched_at, ?) WHERE id = 1 AND lease_epoch = ?",
                (now, 1),
            )
            if cur.rowcount != 1:
                raise RuntimeError("lease lost")
            row = self.conn.execute(
                "INSERT INTO outbox (attempt_id, channel, method, url, at) VALUES (1, ?, ?, ?, ?)",
                (channel, method, url, now),
            ).lastrowid
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.rows.append({"id": row, "channel": channel, "method": method, "url": url, "committed": time.time()})
        return int(row or 0)

    async def commit(self, channel: str, method: str, url: str) -> int:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._commit, channel, method, url)

    def close(self) -> None:
        self.pool.shutdown()
        self.conn.close()


# -- the proxy gate --------------------------------------------------------------------------

_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


class GateProxy:
    """A plain-HTTP/1.1 forward proxy on 127.0.0.1 in a thread of its own (its own event loop).

    A request the rule counts as a dispatch is journaled first, then forwarded on a fresh
    upstream connection (never on a reused one, so a reset keep-alive connection can never
    make it resend a dispatch), with ``x-gate-journal: <outbox id>`` so the target can tell it
    came through the gate. Other requests reuse the client connection's upstream connection.
    A WebSocket upgrade is forwarded without ``Sec-WebSocket-Extensions`` (no compression, so
    frames stay readable) and the page's frames are parsed: each data frame is journaled
    before it is forwarded. A ``CONNECT`` tunnel is accepted; plain HTTP inside it (Chromium
    tunnels ws:// this way, Playwright's API client tunnels http://) is served as above, TLS
    inside it is cut off: the gate cannot read it."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.seen: list[dict[str, Any]] = []
        self.refused: list[str] = []  # CONNECT to TLS, and anything not plain HTTP
        self.tunnels: list[str] = []  # CONNECT tunnels with plain HTTP inside
        self._ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="gate-proxy", daemon=True)
        self.port = 0

    def __enter__(self) -> GateProxy:  # noqa: PYI034
        self.thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer, None, b"")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, origin: str | None, pending: bytes
    ) -> None:
        """Serve one client connection; inside a CONNECT tunnel, ``origin`` is its host:port
        (requests then come in origin-form) and ``pending`` the bytes already read."""
        upstream: tuple[str, asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = pending + await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                pending = b""
                line, *fields = head.decode("latin-1").split("\r\n")[:-2]
                method, target, _version = line.split(" ", 2)
                headers = [tuple(f.split(":", 1)) for f in fields]
                headers = [(k.strip(), v.strip()) for k, v in headers]
                names = {k.lower(): v for k, v in headers}
                if method == "CONNECT" and target.rsplit(":", 1)[0] not in LOOPBACK:
                    self.refused.append(target)  # this benchmark stays on loopback
                    writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    await writer.drain()
                    return
                if method == "CONNECT" and origin is None:
                    # Chromium tunnels ws:// through CONNECT, Playwright's API client tunnels
                    # http:// too: plaintext inside, which the gate reads as it would without the
                    # tunnel. TLS inside (https://, wss://) it cannot read: refused.
                    writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    await writer.drain()
                    first = await reader.readexactly(1)
                    if first == b"\x16":  # a TLS ClientHello
                        self.refused.append(target)
                        return
                    self.tunnels.append(target)
                    return await self._serve(reader, writer, target, first)
                if origin is not None and target.startswith("/"):
                    target = f"http://{origin}{target}"
                parts = urlsplit(target)
                if parts.scheme != "http" or parts.hostname not in LOOPBACK:
                    self.refused.append(target)
                    writer.write(b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    await writer.drain()
                    return
                body = await _read_body(reader, names)
                websocket = names.get("upgrade", "").lower() == "websocket"
                seen = {"method": method, "url": target, "at": time.time(), "journal": None}
                self.seen.append(seen)
                out = [(k, v) for k, v in headers if k.lower() not in _HOP and k.lower() != "content-length"]
                if websocket:
                    out = [(k, v) for k, v in out if k.lower() != "sec-websocket-extensions"]
                    out += [("Connection", "Upgrade"), ("Upgrade", names["upgrade"])]
                fresh = False
                if is_dispatch(method):
                    try:
                        seen["journal"] = await self.journal.commit("proxy", method, target)
                    except Exception:  # noqa: BLE001 - not journaled (lease lost, database locked): never sent
                        writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        await writer.drain()
                        return
                    out.append(("x-gate-journal", str(seen["journal"])))
                    fresh = True
                if body or "content-length" in names or "transfer-encoding" in names:
                    out.append(("Content-Length", str(len(body))))
                hostport = f"{parts.hostname}:{parts.port or 80}"
                if fresh or websocket or upstream is None or upstream[0] != hostport or upstream[1].at_eof():
                    if upstream is not None:
                        upstream[2].close()
                    r, w = await asyncio.open_connection(parts.hostname, parts.port or 80)
                    upstream = (hostport, r, w)
                _, up_r, up_w = upstream
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                up_w.write(
                    f"{method} {path} HTTP/1.1\r\n".encode("latin-1")
                    + "".join(f"{k}: {v}\r\n" for k, v in out).encode("latin-1")
                    + b"\r\n"
                    + body
                )
                await up_w.drain()
                status, keep = await self._relay_response(method, up_r, writer)
                if websocket and status == 101:
                    await self._tunnel_websocket(target, reader, writer, up_r, up_w)
                    return
                if fresh and upstream is not None:
                    upstream[2].close()
                    upstream = None
                if not keep or names.get("connection", names.get("proxy-connection", "")).lower() == "close":
                    return
        finally:
            if upstream is not None:
                upstream[2].close()

    async def _relay_response(
        self, method: str, up_r: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, bool]:
        """Copy one response (after any 1xx but 101) to the client; (status, keep-alive)."""
        while True:
            head = await up_r.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            writer.write(head)
            if status == 101 or status >= 200:
                break
        lines = head.decode("latin-1").split("\r\n")[1:-2]
        names = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines)}
        keep = names.get("connection", "").lower() != "close"
        if status == 101 or method == "HEAD" or status in (204, 304):
            pass
        elif "chunked" in names.get("transfer-encoding", "").lower():
            writer.write(await _read_chunked(up_r))
        elif "content-length" in names:
            writer.write(await up_r.readexactly(int(names["content-length"])))
        else:
            writer.write(await up_r.read())
            keep = False
        await writer.drain()
        return status, keep

    async def _tunnel_websocket(
        self,
        url: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
    ) -> None:
        async def page_to_site() -> None:
            while True:
                head = await reader.readexactly(2)
                length, extra = head[1] & 0x7F, b""
                if length == 126:
                    extra = await reader.readexactly(2)
                    length = struct.unpack("!H", extra)[0]
                elif length == 127:
                    extra = await reader.readexactly(8)
                    length = struct.unpack("!Q", extra)[0]
                mask = await reader.readexactly(4) if head[1] & 0x80 else b""
                payload = await reader.readexactly(length)
                if head[0] & 0x0F in (0, 1, 2):  # data (or its continuation): a message the page sends
                    entry = {"method": "WEBSOCKET", "url": url, "at": time.time(), "journal": None}
                    self.seen.append(entry)
                    entry["journal"] = await self.journal.commit("websocket", "WEBSOCKET", url)
                up_w.write(head + extra + mask + payload)
                await up_w.drain()

        async def site_to_page() -> None:
            while data := await up_r.read(65536):
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.ensure_future(page_to_site()), asyncio.ensure_future(site_to_page())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            up_w.close()


async def _read_body(reader: asyncio.StreamReader, names: dict[str, str]) -> bytes:
    if "chunked" in names.get("transfer-encoding", "").lower():
        raw = await _read_chunked(reader)  # de-chunked below: forwarded with a content-length
        body, rest = b"", raw
        while True:
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                return body
            body, rest = body + rest[:size], rest[size + 2 :]
    length = int(names.get("content-length") or 0)
    return await reader.readexactly(length) if length else b""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """The raw bytes of a chunked body, its last chunk and trailers included."""
    out = b""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        out += size_line
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                out += trailer
            return out + b"\r\n"
        out += await reader.readexactly(size + 2)


# -- CPU of this process tree ----------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(exclude: set[int]) -> tuple[float, float]:
    """(CPU seconds of this process, of its descendants) so far: utime+stime, plus what each
    has reaped (cutime+cstime: exited renderers are reaped by Chromium's zygote), skipping the
    ``exclude`` pids and their descendants. From /proc."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15]) / _TICK
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0.0, [c for c in children.get(me, []) if c not in exclude]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack += [c for c in children.get(pid, []) if c not in exclude]
    return times.get(me, 0.0), total


# -- the benchmark ---------------------------------------------------------------------------


async def gated_context(browser: Any, setup: str, proxy: GateProxy, journal: Journal) -> Any:
    """A new context for ``setup``: "none", "route" (a route that journals each dispatch before it
    lets it go) or "proxy" (every request through the gate proxy)."""
    options: dict[str, Any] = {"service_workers": "block"}
    if setup == "proxy":
        options["proxy"] = {"server": proxy.url}
    context = await browser.new_context(**options)
    if setup == "route":

        async def gate(route: Any, request: Any) -> None:
            if is_dispatch(request.method):
                await journal.commit("route", request.method, request.url)
            await route.fallback()

        await context.route("**/*", gate)
    return context


async def one_run(browser: Any, base: str, setup: str, i: int, proxy: GateProxy, journal: Journal) -> None:
    context = await gated_context(browser, setup, proxy, journal)
    page = await context.new_page()
    await page.goto(f"{base}/form")
    await page.fill("#item", f"r{i}")
    await page.click("#go")
    await page.wait_for_selector("#result")
    await context.close()


async def drain(
    browser: Any, base: str, setup: str, n: int, runs: int, proxy: GateProxy, journal: Journal, exclude: set[int]
) -> dict[str, float]:
    queue = list(range(runs))
    before = (len(journal.rows), len(proxy.journal.rows))

    async def lane() -> None:
        while queue:
            await one_run(browser, base, setup, queue.pop(), proxy, journal)

    self0, kids0 = tree_cpu(exclude)
    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(n)))
    span = time.perf_counter() - start
    await asyncio.sleep(0.3)  # let the closed contexts' renderers exit and be reaped
    self1, kids1 = tree_cpu(exclude)
    journaled = {"none": 0, "route": len(journal.rows) - before[0], "proxy": len(proxy.journal.rows) - before[1]}
    assert journaled[setup] == (0 if setup == "none" else runs), (setup, journaled)
    return {
        "runs_per_min": runs / span * 60,
        "cpu_s_per_run": (self1 - self0 + kids1 - kids0) / runs,
        "self_cpu_s_per_run": (self1 - self0) / runs,
        "browser_cpu_s_per_run": (kids1 - kids0) / runs,
        "span_s": span,
        "load_1min": os.getloadavg()[0],
    }


LATENCY_JS = """async ([n, key]) => {
    const post = [], get = [];
    for (let i = 0; i < n; i++) {
        let t = performance.now();
        await fetch('/land?key=' + key, {method: 'POST', body: 'x', cache: 'no-store'});
        post.push(performance.now() - t);
        t = performance.now();
        await fetch('/done?i=' + i, {cache: 'no-store'});
        get.push(performance.now() - t);
    }
    return {post, get};
}"""


async def latency(
    browser: Any, base: str, setup: str, n: int, proxy: GateProxy, journal: Journal, exclude: set[int]
) -> dict[str, float]:
    """The gate's own cost per request: median milliseconds of one fetch POST (a dispatch:
    journaled) and of one fetch GET (passed through) from a live page, one at a time, and the
    CPU milliseconds (this process and the browser) per POST+GET pair."""
    context = await gated_context(browser, setup, proxy, journal)
    page = await context.new_page()
    await page.goto(f"{base}/form")
    self0, kids0 = tree_cpu(exclude)
    times = await page.evaluate(LATENCY_JS, [n, f"latency-{setup}"])
    self1, kids1 = tree_cpu(exclude)
    await context.close()
    return {
        "post_ms": statistics.median(times["post"]),
        "get_ms": statistics.median(times["get"]),
        "cpu_ms_per_pair": (self1 - self0 + kids1 - kids0) / n * 1000,
        "self_cpu_ms_per_pair": (self1 - self0) / n * 1000,
    }


def session_settings(shared_workers: Literal["block", "allow"] = "block") -> Any:
    from browserworker.runtime import BrowserSettings

    settings = BrowserSettings.discover()
    settings.args = [a for a in settings.args if not a.startswith("--host-resolver-rules")] + [HERMETIC, PROXY_LOOPBACK]
    settings.shared_workers = shared_workers
    return settings


async def bench(cycles: int) -> dict[str, Any]:
    from browserworker.runtime import BrowserProcess

    results: dict[str, dict[str, list[dict[str, float]]]] = {s: {str(n): [] for n in LEVELS} for s in SETUPS}
    lat: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, Target() as target, GateProxy(Journal(Path(tmp) / "proxy.db")) as proxy:
        journal = Journal(Path(tmp) / "route.db")
        exclude = {target.proc.pid}
        async with BrowserProcess(session_settings()) as session:
            browser = session.browser
            for setup in SETUPS:  # warm up: the first contexts, the page cache of the binaries
                await drain(browser, target.url, setup, 4, 8, proxy, journal, exclude)
            for rep in range(4):  # per-request cost, ABBA
                for setup in SETUPS if rep % 2 == 0 else SETUPS[::-1]:
                    row = await latency(browser, target.url, setup, 100, proxy, journal, exclude)
                    lat.setdefault(setup, []).append(row)
                    print(
                        f"  latency {setup:5} POST {row['post_ms']:.2f} ms, GET {row['get_ms']:.2f} ms, "
                        f"{row['cpu_ms_per_pair']:.2f} CPU ms per pair",
                        file=sys.stderr,
                        flush=True,
                    )
            for n, runs in LEVELS.items():
                for rep in range(2 * cycles):
                    for setup in SETUPS if rep % 2 == 0 else SETUPS[::-1]:  # ABBA: A B C C B A ...
                        row = await drain(browser, target.url, setup, n, runs, proxy, journal, exclude)
                        results[setup][str(n)].append(row)
                        print(
                            f"  N={n} {setup:5} {row['runs_per_min']:6.0f} runs/min "
                            f"{row['cpu_s_per_run']:.3f} CPU s/run",
                            file=sys.stderr,
                            flush=True,
                        )
        journal.close()
        proxy.journal.close()
    summary: dict[str, Any] = {}
    for setup in SETUPS:
        for n in LEVELS:
            rows = results[setup][str(n)]
            summary.setdefault(setup, {})[str(n)] = {
                key: statistics.median(r[key] for r in rows)
                for key in ("runs_per_min", "cpu_s_per_run", "self_cpu_s_per_run", "browser_cpu_s_per_run")
            }
    return {
        "levels": {str(n): r for n, r in LEVELS.items()},
        "drains_per_cell": 2 * cycles,
        "median": summary,
        "paired": paired(results, cycles),
        "drains": results,
        "per_request": {
            setup: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for setup, rows in lat.items()
        },
        "per_request_runs": lat,
    }


def paired(results: dict[str, dict[str, list[dict[str, float]]]], cycles: int) -> dict[str, Any]:
    """Each setup against no gate within each ABCCBA block (its 2 drains over the 2 drains of
    "none" beside them in time), so a machine whose load changes during the benchmark charges
    it to both sides: the median of those ratios, and their range, per concurrency."""
    out: dict[str, Any] = {}
    for setup in SETUPS[1:]:
        for n in results[setup]:
            ours, base = results[setup][n], results["none"][n]
            cell = {}
            for key in ("runs_per_min", "cpu_s_per_run"):
                ratios = [
                    (ours[2 * c][key] + ours[2 * c + 1][key]) / (base[2 * c][key] + base[2 * c + 1][key])
                    for c in range(cycles)
                ]
                cell[key] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
            out.setdefault(setup, {})[n] = cell
    return out


def print_bench(out: dict[str, Any]) -> None:
    med = out["median"]
    print("\nthe gate's own cost per request: 100 fetch POST+GET pairs from a live page, one at a time (median of 4)")
    print(
        "| setup | one fetch POST (journaled), ms | one fetch GET, ms | CPU ms per POST+GET | of which this process |"
    )
    print("|---|---|---|---|---|")
    for setup, row in out["per_request"].items():
        print(
            f"| {setup} | {row['post_ms']:.2f} | {row['get_ms']:.2f} | {row['cpu_ms_per_pair']:.2f} "
            f"| {row['self_cpu_ms_per_pair']:.2f} |"
        )
    print(
        f"\nthe flow: median of {out['drains_per_cell']} drains per cell (runs per drain: "
        + ", ".join(f"N={n}: {r}" for n, r in out["levels"].items())
        + "); "
        "ratios: the median over ABCCBA blocks of each block's setup/none ratio (range in brackets)"
    )
    print("| N | setup | runs/min | vs none | CPU s/run | vs none | of which this process | browser |")
    print("|---|---|---|---|---|---|---|---|")
    for n in out["levels"]:
        for setup in SETUPS:
            m = med[setup][n]
            ratio = {
                key: "1"
                if setup == "none"
                else "{median:.2f}x ({min:.2f}-{max:.2f})".format(**out["paired"][setup][n][key])
                for key in ("runs_per_min", "cpu_s_per_run")
            }
            print(
                f"| {n} | {setup} | {m['runs_per_min']:.0f} | {ratio['runs_per_min']} | {m['cpu_s_per_run']:.3f} "
                f"| {ratio['cpu_s_per_run']} | {m['self_cpu_s_per_run']:.3f} | {m['browser_cpu_s_per_run']:.3f} |"
            )


# -- the channel probes ----------------------------------------------------------------------


async def probe(
    browser: Any, target: Target, proxy: GateProxy, journal: Journal, gate: str, channel: str, trial: int
) -> dict[str, Any]:
    key = f"{gate}-{list(PROBES).index(channel)}-{trial}-{time.time_ns()}"
    routed: list[str] = []
    socket_routed: list[str] = []
    options: dict[str, Any] = {"service_workers": "allow" if channel == "ServiceWorker POST" else "block"}
    if gate == "proxy":
        options["proxy"] = {"server": proxy.url}
    context = await browser.new_context(**options)
    if gate == "route":

        async def on_route(route: Any, request: Any) -> None:
            if key in request.url and is_dispatch(request.method):
                routed.append(request.url)
                await journal.commit("route", request.method, request.url)
            await route.fallback()

        def on_socket(ws: Any) -> None:
            server = ws.connect_to_server()

            async def forward(message: Any) -> None:
                if key in str(message):
                    socket_routed.append(str(message))
                    await journal.commit("websocket", "WEBSOCKET", ws.url)
                server.send(message)

            def on_message(message: Any) -> None:
                asyncio.ensure_future(forward(message))

            ws.on_message(on_message)

        await context.route("**/*", on_route)
        await context.route_web_socket("**/*", on_socket)
    page = await context.new_page()
    error = None
    try:
        if channel == "page.request.post":
            await page.goto(f"{target.url}/probe/{quote(channel)}")
            reply = await page.request.post(f"{target.url}/land?key={key}", data="x")
            if reply.status != 200:
                error = f"page.request.post answered {reply.status}"
        else:
            await page.goto(f"{target.url}/probe/{quote(channel)}?key={key}")
            if channel == "WebSocket message":
                await page.wait_for_function("document.title == 'open'", timeout=5000)
            await page.click("#go")
            if channel == "sendBeacon on pagehide":
                await page.wait_for_url("**/done", timeout=5000)
    except Exception as exc:  # noqa: BLE001 - a probe that cannot run says so in the table
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    landings: list[dict[str, Any]] = []
    deadline = time.time() + 3
    while time.time() < deadline and not landings:
        await asyncio.sleep(0.1)
        landings = target.landings(key)
    await asyncio.sleep(0.2)
    await context.close()
    seen = [s for s in proxy.seen if key in s["url"] and s["method"] != "GET"]  # the dispatch (or message)
    commits = [row["committed"] for row in (proxy.journal if gate == "proxy" else journal).rows if key in row["url"]]
    journaled_first = bool(landings) and all(any(c <= row["at"] for c in commits) for row in landings)
    return {
        "gate": gate,
        "channel": channel,
        "trial": trial,
        "landed": len(landings),
        "route_saw": bool(routed),
        "route_web_socket_saw": bool(socket_routed),
        "proxy_saw": bool(seen),
        "journaled_first": journaled_first,
        "error": error,
    }


async def channels(trials: int) -> dict[str, Any]:
    from browserworker.runtime import BrowserProcess

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, Target() as target, GateProxy(Journal(Path(tmp) / "proxy.db")) as proxy:
        journal = Journal(Path(tmp) / "route.db")
        async with BrowserProcess(session_settings(shared_workers="allow")) as session:
            for channel in PROBES:
                for gate in ("route", "proxy"):
                    for trial in range(trials):
                        rows.append(await probe(session.browser, target, proxy, journal, gate, channel, trial))
        # a probe of the proxy's limit: what an https:// request through it does
        async with BrowserProcess(session_settings()) as session:
            context = await session.browser.new_context(proxy={"server": proxy.url})
            page = await context.new_page()
            try:
                await page.goto(f"https://127.0.0.1:{target.url.rsplit(':', 1)[1]}/", timeout=5000)
                https = "loaded"
            except Exception as exc:  # noqa: BLE001 - expected: the proxy cuts a TLS tunnel off
                https = str(exc).splitlines()[0]
            await context.close()
        journal.close()
        proxy.journal.close()
    table: dict[str, dict[str, str]] = {}
    for channel in PROBES:
        cell: dict[str, str] = {}
        route = [r for r in rows if r["channel"] == channel and r["gate"] == "route"]
        prox = [r for r in rows if r["channel"] == channel and r["gate"] == "proxy"]
        cell["route: landed"] = f"{sum(r['landed'] > 0 for r in route)}/{len(route)}"
        cell["context.route saw"] = f"{sum(r['route_saw'] for r in route)}/{len(route)}"
        cell["route_web_socket saw"] = f"{sum(r['route_web_socket_saw'] for r in route)}/{len(route)}"
        cell["route gate journaled before target"] = f"{sum(r['journaled_first'] for r in route)}/{len(route)}"
        cell["proxy: landed"] = f"{sum(r['landed'] > 0 for r in prox)}/{len(prox)}"
        cell["proxy saw"] = f"{sum(r['proxy_saw'] for r in prox)}/{len(prox)}"
        cell["proxy journaled before target"] = f"{sum(r['journaled_first'] for r in prox)}/{len(prox)}"
        errors = sorted({r["error"] for r in route + prox if r["error"]})
        if errors:
            cell["errors"] = "; ".join(errors)
        table[channel] = cell
    return {
        "trials": trials,
        "table": table,
        "https_through_proxy": https,
        "refused": sorted(set(proxy.refused)),
        "plain_tunnels": len(proxy.tunnels),
        "probes": rows,
    }


def print_channels(out: dict[str, Any]) -> None:
    cols = [
        "route: landed",
        "context.route saw",
        "route_web_socket saw",
        "route gate journaled before target",
        "proxy: landed",
        "proxy saw",
        "proxy journaled before target",
    ]
    print(f"\n{out['trials']} trials per cell")
    print("| channel | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for channel, cell in out["table"].items():
        print(
            f"| {channel} | "
            + " | ".join(cell[c] for c in cols)
            + " |"
            + (f" {cell['errors']}" if "errors" in cell else "")
        )
    print(
        f"https:// through the proxy: {out['https_through_proxy']}; refused (TLS inside CONNECT): "
        f"{out['refused']}; CONNECT tunnels with plain HTTP inside: {out['plain_tunnels']}"
    )


# -- main ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    loop_s = time.perf_counter() - start
    return {
        "nproc": os.cpu_count(),
        "python_10M_additions_s": round(loop_s, 3),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"JSON results (default {DEFAULT_OUT})")
    parser.add_argument("--channels", action="store_true", help="probe which channels each gate sees")
    parser.add_argument("--cycles", type=int, default=2, help="ABCCBA cycles per concurrency (2 drains each)")
    parser.add_argument("--trials", type=int, default=3, help="trials per channel and gate (--channels)")
    parser.add_argument("--serve-target", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_target:
        return serve_target()
    out_path = args.out or DEFAULT_OUT
    info = machine()
    print(
        f"{info['nproc']} CPUs, 10M Python additions in {info['python_10M_additions_s']} s, "
        f"load {info['load_average_at_start']}",
        file=sys.stderr,
    )
    if args.channels:
        section, result = "channels", asyncio.run(channels(args.trials))
        print_channels(result)
    else:
        section, result = "bench", asyncio.run(bench(args.cycles))
        print_bench(result)
    result["machine"] = info
    try:  # one file holds both sections; a run replaces its own
        whole = json.loads(out_path.read_text())
    except (OSError, ValueError):
        whole = {}
    whole[section] = result
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(whole, indent=1) + "\n")
    print(f"\nwritten to {out_path}")


if __name__ == "__main__":
    main()
