"""Child processes of a test: kill one and read what it said, find and wait out a tagged worker."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def sigkill(proc: subprocess.Popen[str]) -> str:
    """SIGKILL a child, reap it, and return what it printed on stderr."""
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    return err


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries ``BW_TEST_TAG=tag`` (the worker, its driver, its Chromium)."""
    needle = f"BW_TEST_TAG={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def wait_until_gone(tag: str, only: set[int] | None = None, timeout: float = 30) -> None:
    """Poll until no process tagged ``tag`` (of ``only``, if given) is alive; fail after ``timeout``."""

    def alive() -> set[int]:
        found = set(tagged_processes(tag))
        return found if only is None else found & only

    deadline = time.monotonic() + timeout
    while (left := alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"still running after {timeout}s: {sorted(left)}"
