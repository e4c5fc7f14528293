"""A loopback TCP relay a test can cut, to break the network between a client and a server.

::

    relay = TcpRelay(("127.0.0.1", cluster.port))     # listens on 127.0.0.1:relay.port at once
    url = cluster.url("chaos", port=relay.port)       # clients connect through the relay
    relay.cut()                    # "reset": every open connection gets a RST, new ones are reset on arrival
    relay.cut("blackhole")         # a partition: sockets stay open, nothing is forwarded, nothing accepted
    relay.restore()                # forward again (blackholed bytes and queued connections go through)
    relay.close()

``reset`` closes both ends of every relayed connection with ``SO_LINGER`` 0 (an RST, not a FIN): the
client's next read fails at once (psycopg: ``OperationalError``) and the server's backend ends. While
cut, a new connection is accepted and reset at once (the port stays ours, so nothing can take it
between ``cut`` and ``restore``): to the client that is a connect failure.

``blackhole`` stops reading and writing every relayed socket and stops accepting: the bytes wait in
kernel buffers, new connections wait in the listen backlog (their TCP handshake completes, the
database's greeting never comes), so clients hang until their own timeouts, as behind a network
partition. ``restore`` resumes everything where it stopped, as when a partition heals before TCP gives
up.

One thread runs a :mod:`selectors` loop over every socket; :meth:`cut` and :meth:`restore` are run by
that loop and return once they took effect.
"""

from __future__ import annotations

import queue
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

CUT_MODES = ("reset", "blackhole")
_CHUNK = 65536
_MAX_BUFFER = 1 << 20


@dataclass(eq=False)
class _Pair:
    """One relayed connection: the accepted client socket and our socket to the target."""

    client: socket.socket
    upstream: socket.socket
    to_client: bytearray = field(default_factory=bytearray)
    to_upstream: bytearray = field(default_factory=bytearray)

    def peer(self, sock: socket.socket) -> tuple[socket.socket, bytearray]:
        """The other socket and the buffer of bytes waiting to be written to it."""
        return (self.upstream, self.to_upstream) if sock is self.client else (self.client, self.to_client)

    def outbox(self, sock: socket.socket) -> bytearray:
        """The bytes waiting to be written to ``sock``."""
        return self.to_client if sock is self.client else self.to_upstream


def _reset(sock: socket.socket) -> None:
    """Close with an RST (linger 0) instead of a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class TcpRelay:
    """Forward 127.0.0.1:``port`` to ``target``; see the module docstring."""

    def __init__(self, target: tuple[str, int], *, port: int = 0, connect_timeout: float = 5) -> None:
        """Listen on 127.0.0.1 (``port`` 0: a free one) and start the relay thread."""
        self.target = target
        self.connect_timeout = connect_timeout
        self.mode = "open"
        """``open``, ``reset`` or ``blackhole``."""
        self.connections = 0
        """Connections accepted and relayed to the target."""
        self.refused = 0
        """Connections reset on arrival (the relay was cut, or the target refused)."""
        self.cuts = 0
        """Open connections ended by ``cut("reset")``."""
        self._pairs: dict[socket.socket, _Pair] = {}
        self._commands: queue.Queue[tuple[Callable[[], None], threading.Event]] = queue.Queue()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._loop, name=f"tcp-relay-{self.port}", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        """Relayed connections open right now."""
        return len({id(p) for p in self._pairs.values()})

    # -- control (any thread) ------------------------------------------------
    def _call(self, fn: Callable[[], None], timeout: float = 10) -> None:
        if self._closed:
            raise RuntimeError("relay is closed")
        done = threading.Event()
        self._commands.put((fn, done))
        self._wake_w.send(b"x")
        if not done.wait(timeout):
            raise TimeoutError("relay thread did not answer")

    def cut(self, mode: str = "reset") -> None:
        """Break the link (``reset`` or ``blackhole``, see the module docstring) until :meth:`restore`."""
        if mode not in CUT_MODES:
            raise ValueError(f"cut mode must be one of {CUT_MODES}, not {mode!r}")
        self._call(lambda: self._set_mode(mode))

    def restore(self) -> None:
        """Forward again; new connections are accepted."""
        self._call(lambda: self._set_mode("open"))

    def close(self) -> None:
        """Reset every connection, stop listening and end the thread."""
        if self._closed:
            return
        self._call(self._shutdown)
        self._closed = True
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        """The relay runs already; leaving the block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the relay."""
        self.close()

    # -- the loop thread -----------------------------------------------------
    def _loop(self) -> None:
        while self._listener.fileno() != -1:
            for key, events in self._sel.select(timeout=1):
                sock = key.fileobj
                if sock is self._wake_r:
                    self._run_commands()
                elif sock is self._listener:
                    self._accept()
                elif sock in self._pairs:  # an earlier event of this round may have closed it
                    self._service(sock, events)
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _run_commands(self) -> None:
        try:
            self._wake_r.recv(4096)
        except BlockingIOError:
            pass
        while not self._commands.empty():
            fn, done = self._commands.get_nowait()
            try:
                fn()
            finally:
                done.set()

    def _set_mode(self, mode: str) -> None:
        self.mode = mode
        if mode == "reset":
            for pair in {id(p): p for p in self._pairs.values()}.values():
                self._drop(pair, abrupt=True)
                self.cuts += 1
        self._listen(mode != "blackhole")
        for sock in list(self._pairs):
            self._update(sock)

    def _listen(self, on: bool) -> None:
        """Accept new connections (or leave them in the backlog)."""
        try:
            self._sel.unregister(self._listener)
        except KeyError:
            pass
        if on:
            self._sel.register(self._listener, selectors.EVENT_READ)

    def _shutdown(self) -> None:
        for pair in {id(p): p for p in self._pairs.values()}.values():
            self._drop(pair, abrupt=True)
        self._listen(False)
        self._listener.close()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self.mode == "reset":
            self.refused += 1
            _reset(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
        except OSError:
            self.refused += 1
            _reset(client)
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(client, upstream)
        self._pairs[client] = self._pairs[upstream] = pair
        self.connections += 1
        for sock in (client, upstream):
            self._sel.register(sock, selectors.EVENT_READ, pair)
            self._update(sock)

    def _update(self, sock: socket.socket) -> None:
        """Register the events ``sock`` waits for now: none while blackholed."""
        pair = self._pairs[sock]
        pending = pair.peer(sock)[1]
        events = 0
        if self.mode == "open":
            events |= selectors.EVENT_READ if len(pending) < _MAX_BUFFER else 0
            events |= selectors.EVENT_WRITE if pair.outbox(sock) else 0
        try:
            self._sel.unregister(sock)
        except KeyError:
            pass
        if events:
            self._sel.register(sock, events, pair)

    def _service(self, sock: socket.socket, events: int) -> None:
        pair = self._pairs[sock]
        try:
            if events & selectors.EVENT_WRITE:
                outbox = pair.outbox(sock)
                del outbox[: sock.send(outbox)]
            if events & selectors.EVENT_READ:
                data = sock.recv(_CHUNK)
                if not data:
                    self._drop(pair, abrupt=False)
                    return
                pair.peer(sock)[1].extend(data)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(pair, abrupt=True)
            return
        self._update(sock)
        self._update(pair.peer(sock)[0])

    def _drop(self, pair: _Pair, *, abrupt: bool) -> None:
        """Close both ends: RST when ``abrupt``, else flush what is pending (best effort) and FIN."""
        for sock in (pair.client, pair.upstream):
            self._pairs.pop(sock, None)
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            if abrupt:
                _reset(sock)
                continue
            try:
                sock.send(pair.outbox(sock))
            except OSError:
                pass
            sock.close()
