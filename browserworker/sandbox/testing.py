"""Start a real sandbox process for tests and demos.

>>> sandbox = start_sandbox(tmp_path / "sandbox.db")
>>> sandbox.set_faults(delay_before_commit=1.0, times=1)
>>> ...  # drive a browser at sandbox.url
>>> sandbox.wait_for_orders("REF-1", 1, timeout=5)
>>> sandbox.stop()

Only loopback addresses are ever used.  HTTP helpers use :mod:`urllib` with
proxies disabled, so no environment proxy can intercept loopback traffic.
"""

from __future__ import annotations

import ipaddress
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["SandboxError", "SandboxProcess", "start_sandbox"]

_READY_RE = re.compile(r"sandbox listening on (http://\S+)")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the dir that contains browserworker/
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SandboxError(RuntimeError):
    """The sandbox failed to start, or an ops API call failed."""


def _check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"sandbox only binds loopback addresses, not {host!r}")


class SandboxProcess:
    """A running ``python -m browserworker.sandbox`` subprocess."""

    def __init__(self, process: subprocess.Popen[str], url: str, db_path: Path, output: deque[str]) -> None:
        """Wrap an already-ready process; use :func:`start_sandbox` instead."""
        self.process = process
        self.url = url.rstrip("/")
        self.db_path = db_path
        self._output = output

    # -- lifecycle -----------------------------------------------------------
    @property
    def pid(self) -> int:
        """The sandbox's process id."""
        return self.process.pid

    def alive(self) -> bool:
        """True while the process is running."""
        return self.process.poll() is None

    def output(self) -> str:
        """The last lines the process wrote (stdout and stderr)."""
        return "".join(self._output)

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; return the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the process (simulates a crashed sandbox)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def __enter__(self) -> SandboxProcess:
        """Use as a context manager that stops the process on exit."""
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop the process."""
        self.stop()

    # -- ops API -------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        """Call the sandbox's JSON API; return the decoded body (raise on HTTP errors)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise SandboxError(f"{method} {path} -> {exc.code}: {detail}") from exc

    def logins(self, user: str) -> int:
        """How many times ``user`` logged in successfully (``GET /api/logins``)."""
        return int(self.request("GET", "/api/logins")["users"].get(user, {}).get("logins", 0))

    def revoke_sessions(self, user: str) -> None:
        """Sign ``user`` out on the server's side: every session cookie issued so far stops working."""
        self.request("POST", f"/api/sessions/revoke?user={urllib.parse.quote(user, safe='')}")

    def add_user(self, username: str, password: str) -> None:
        """Create (or update) a login account."""
        from .db import SandboxDB

        SandboxDB(self.db_path, seed_users=False).add_user(username, password)

    def orders(self, reference: str | None = None) -> list[dict[str, Any]]:
        """Orders from ``GET /api/orders`` (optionally filtered by exact reference)."""
        query = "" if reference is None else "?" + urllib.parse.urlencode({"reference": reference})
        orders: list[dict[str, Any]] = self.request("GET", "/api/orders" + query)["orders"]
        return orders

    def faults(self) -> dict[str, Any]:
        """The current fault knobs."""
        faults: dict[str, Any] = self.request("GET", "/api/faults")
        return faults

    def set_faults(self, **knobs: Any) -> dict[str, Any]:
        """Partially update the fault knobs; return the full new set."""
        faults: dict[str, Any] = self.request("PUT", "/api/faults", knobs)
        return faults

    def clear_faults(self) -> dict[str, Any]:
        """Reset every fault knob."""
        faults: dict[str, Any] = self.request("DELETE", "/api/faults")
        return faults

    def reset(self) -> None:
        """Delete all orders and reset the faults."""
        self.request("POST", "/api/reset")

    def inflight(self) -> dict[str, int]:
        """``{"inflight": N, "received": M}`` for order-creating POSTs."""
        counts: dict[str, int] = self.request("GET", "/api/inflight")
        return counts

    def visits(self, tag: str | None = None) -> dict[str, Any]:
        """What ``/api/visits`` reports (:mod:`browserworker.sandbox.visits`): every tag's, or ``tag``'s
        (its visits, ``most_visits_at_once``, ``most_requests_at_once``, its requests)."""
        report: dict[str, Any] = self.request("GET", "/api/visits")["tags"]
        if tag is None:
            return report
        found: dict[str, Any] = report.get(
            tag, {"visits": {}, "most_visits_at_once": 0, "most_requests_at_once": 0, "requests": []}
        )
        return found

    def clear_visits(self) -> None:
        """Forget the tagged requests seen so far."""
        self.request("DELETE", "/api/visits")

    def wait_for_inflight(self, n: int, timeout: float = 5.0, interval: float = 0.02) -> dict[str, int]:
        """Poll until at least ``n`` order POSTs are in flight; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            counts = self.inflight()
            if counts["inflight"] >= n:
                return counts
            if time.monotonic() >= deadline:
                raise TimeoutError(f"expected >= {n} in-flight order POSTs, last saw {counts}")
            time.sleep(interval)

    def wait_for_received(self, n: int, timeout: float = 5.0, interval: float = 0.02) -> dict[str, int]:
        """Poll until at least ``n`` order POSTs were received since start; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            counts = self.inflight()
            if counts["received"] >= n:
                return counts
            if time.monotonic() >= deadline:
                raise TimeoutError(f"expected >= {n} received order POSTs, last saw {counts}")
            time.sleep(interval)

    def wait_for_orders(
        self, reference: str | None, n: int = 1, timeout: float = 5.0, interval: float = 0.05
    ) -> list[dict[str, Any]]:
        """Poll until at least ``n`` orders with ``reference`` exist; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            orders = self.orders(reference)
            if len(orders) >= n:
                return orders
            if time.monotonic() >= deadline:
                raise TimeoutError(f"expected >= {n} orders with reference {reference!r}, found {len(orders)}")
            time.sleep(interval)


def _pump(stream: Any, output: deque[str], lines: queue.Queue[str | None], forward: threading.Event) -> None:
    """Copy the child's output into ``output`` (bounded), and into ``lines`` while
    ``forward`` is set, until EOF."""
    try:
        for line in iter(stream.readline, ""):
            output.append(line)
            if forward.is_set():
                lines.put(line)
    except (OSError, ValueError):  # stream closed under us by stop()
        pass
    finally:
        lines.put(None)


def _child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """``os.environ`` with ``env`` over it, the package's parent first on ``PYTHONPATH``
    (an uninstalled checkout works too) and unbuffered output."""
    child_env = dict(os.environ)
    child_env.update(env or {})
    existing = child_env.get("PYTHONPATH")
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PACKAGE_ROOT), existing]))
    child_env["PYTHONUNBUFFERED"] = "1"
    return child_env


def start_sandbox(
    db_path: str | Path,
    *,
    port: int = 0,
    dedupe: bool = False,
    env: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    timeout: float = 15.0,
) -> SandboxProcess:
    """Start ``python -m browserworker.sandbox`` and wait until it is listening.

    ``env`` is merged over ``os.environ``; the package's parent directory is
    prepended to ``PYTHONPATH`` so an uninstalled checkout works too.  Raises
    :class:`SandboxError` (with the process output) if the ready line does not
    appear within ``timeout`` seconds or the process exits first.
    """
    _check_loopback(host)
    db_path = Path(db_path)
    cmd = [sys.executable, "-m", "browserworker.sandbox", "--host", host, "--port", str(port), "--db", str(db_path)]
    if dedupe:
        cmd.append("--dedupe")
    process = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_child_env(env),
    )
    output: deque[str] = deque(maxlen=500)
    lines: queue.Queue[str | None] = queue.Queue()
    forward = threading.Event()
    forward.set()
    threading.Thread(
        target=_pump, args=(process.stdout, output, lines, forward), daemon=True, name=f"sandbox-output-{process.pid}"
    ).start()
    return _wait_ready(process, cmd, db_path, output, lines, forward, timeout)


def _wait_ready(
    process: subprocess.Popen[str],
    cmd: list[str],
    db_path: Path,
    output: deque[str],
    lines: queue.Queue[str | None],
    forward: threading.Event,
    timeout: float,
) -> SandboxProcess:
    """Wait for the sandbox's ready line; :class:`SandboxError` with its output if it exits or times out first."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(remaining, 0.0)) if remaining > 0 else None
        except queue.Empty:
            line = None
        if line is not None:
            match = _READY_RE.search(line)
            if match:
                forward.clear()
                return SandboxProcess(process, match.group(1), db_path, output)
            continue
        # EOF (the process is exiting) or timeout
        try:
            process.wait(1.0 if remaining > 0 else 0.1)
            reason = "exited before it was ready"
        except subprocess.TimeoutExpired:
            reason = f"was not ready after {timeout:g}s"
            process.kill()
            process.wait(5)
        raise SandboxError(
            f"sandbox {reason} (exit code {process.returncode}); command: {' '.join(cmd)}\n"
            f"--- output ---\n{''.join(output)}"
        )
