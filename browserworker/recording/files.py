"""The recording format on disk, and reading it back.

::

    recordings/NAME/
      meta.json          flow (name, file, hash), run id, redacted inputs, secret field names,
                         tool versions, time, the network segments, verifier self-tests
      journal.json       the run, every attempt (state, request key, fingerprint, result),
                         every decision; redacted
      network/NNNN-STEP[.PHASE].har
                         one HAR 1.2 file per segment: a step, a verifier self-test
                         ("verify_before" / "verify_after") or the time between steps;
                         each written when its segment ends, so a crash keeps them all
      bodies/SHA.EXT     response bodies, content-addressed (HAR ``content._file``)
      trace/NNNN-STEP.zip  with ``--trace``: a Playwright trace (with screenshots) per step

Every file is redacted before it is written (see :mod:`.redact`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from .._redact import Redactor
from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import APIResponse

    from ..gate import ApiCall

__all__ = [
    "FORMAT",
    "NO_SOCKETS",
    "Ledger",
    "Recording",
    "RecordingWriter",
    "Segment",
    "api_har_entry",
    "recording_path",
    "write_json",
]

FORMAT = "browserworker-recording/1"
DEFAULT_DIR = "recordings"
VERIFY_PHASES = ("verify_before", "verify_after")
NO_SOCKETS = (
    "a recording holds none of a socket's messages, so a replay cannot answer it (prove a flow whose "
    "pages use a socket against the site, with chaos)"
)
"""Why a replay refuses a WebSocket (and a recording says so as it records one)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_EXT = {
    "text/html": "html",
    "application/json": "json",
    "text/javascript": "js",
    "application/javascript": "js",
    "text/css": "css",
    "text/plain": "txt",
    "image/svg+xml": "svg",
    "application/xml": "xml",
    "text/xml": "xml",
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def recording_path(name: str | os.PathLike[str], base: Path | None = None) -> Path:
    """``NAME`` → ``recordings/NAME`` (under ``base``, default the current directory); a path stays a path."""
    text = os.fspath(name)
    if os.sep in text or "/" in text or text.startswith("."):
        return Path(text)
    if not _NAME.fullmatch(text):
        raise UsageError(f"invalid recording name {text!r}: use letters, digits, '.', '_' or '-' (or give a path)")
    return (base or Path.cwd()) / DEFAULT_DIR / text


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a temp file renamed over the target), sorted and indented for diffs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True, ensure_ascii=False, default=str)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _ext(mime: str | None) -> str:
    return _EXT.get((mime or "").split(";")[0].strip().lower(), "bin")


def _is_text(mime: str | None) -> bool:
    kind = (mime or "").split(";")[0].strip().lower()
    return kind.startswith("text/") or kind.endswith(("json", "javascript", "xml", "+json", "+xml"))


@dataclass(frozen=True)
class Segment:
    """Where a HAR segment belongs: a step's attempt, a verifier self-test, or between steps."""

    number: int
    phase: str  # "step", "verify_before", "verify_after", "between"
    step: str | None
    kind: str | None  # "action" / "effect"
    attempt: int | None
    pass_no: int
    dispatches: int = 0  # for verifier self-tests: dispatches of the step recorded before it

    @property
    def file_name(self) -> str:
        label = self.step or "between"
        suffix = "" if self.phase in ("step", "between") else f".{self.phase}"
        return f"{self.number:04d}-{label}{suffix}.har"

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.number,
            "phase": self.phase,
            "step": self.step,
            "kind": self.kind,
            "attempt": self.attempt,
            "pass": self.pass_no,
            "dispatches": self.dispatches,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Segment:
        return cls(
            number=int(data["segment"]),
            phase=str(data["phase"]),
            step=data.get("step"),
            kind=data.get("kind"),
            attempt=data.get("attempt"),
            pass_no=int(data.get("pass") or 1),
            dispatches=int(data.get("dispatches") or 0),
        )


_DROP_ENTRY = (
    "_monotonicTime",
    "_frameref",
    "_securityDetails",
    "_serverPort",
    "serverIPAddress",
    "pageref",
    "connection",
)


class RecordingWriter:
    """Writes one recording directory: HAR segments, body files, meta and journal (all redacted)."""

    def __init__(self, root: Path, redactor: Redactor) -> None:
        self.root = root
        self.redactor = redactor
        self.segments: list[dict[str, Any]] = []

    def reset(self) -> None:
        """Start from an empty directory (a re-recording replaces the old one)."""
        if self.root.exists():
            for sub in ("network", "bodies", "trace"):
                d = self.root / sub
                if d.is_dir():
                    for f in d.iterdir():
                        f.unlink()
                    d.rmdir()
            for name in ("meta.json", "journal.json"):
                (self.root / name).unlink(missing_ok=True)
        (self.root / "network").mkdir(parents=True, exist_ok=True)

    def _body(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Move a HAR body into ``bodies/`` (redacted); return the HAR ``content`` that points at it."""
        out = {k: v for k, v in content.items() if k not in ("text", "encoding", "_file", "_sha1")}
        text = content.get("text")
        if text is None:
            return out
        mime = content.get("mimeType")
        if content.get("encoding") == "base64":
            raw = base64.b64decode(text)
            if _is_text(mime):
                raw = self.redactor.body(raw.decode("utf-8", errors="replace"), mime).encode()
        else:
            raw = self.redactor.body(text, mime).encode()
        name = f"{hashlib.sha256(raw).hexdigest()[:24]}.{_ext(mime)}"
        path = self.root / "bodies" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(raw)
        out["size"] = len(raw)
        out["_file"] = f"bodies/{name}"
        return out

    def write_segment(
        self, segment: Segment, har: Mapping[str, Any], dispatched: list[tuple[str, str]]
    ) -> dict[str, Any] | None:
        """Redact and write a raw Playwright HAR as ``network/NNNN-...har``; None if it has no entries.

        ``dispatched`` lists the ``(method, url)`` of the requests that passed the dispatch gate
        in this segment; the matching entries are marked ``_browserworker.dispatch``.
        """
        log = har.get("log", {})
        raw_entries = list(log.get("entries") or [])
        if not raw_entries:
            return None
        pending = list(dispatched)
        entries = []
        for index, raw in enumerate(raw_entries):
            entry = {k: v for k, v in raw.items() if k not in _DROP_ENTRY}
            request = raw.get("request", {})
            key = (request.get("method", "GET"), request.get("url", ""))
            dispatch = key in pending
            if dispatch:
                pending.remove(key)
            entry["request"] = self.redactor.har_request(request)
            response = self.redactor.har_response(raw.get("response", {}))
            response["content"] = self._body(response.get("content") or {})
            entry["response"] = response
            entry["_browserworker"] = {"id": f"{segment.number:04d}.{index}", "dispatch": dispatch}
            entries.append(entry)
        out = {
            "log": {
                "version": log.get("version", "1.2"),
                "creator": log.get("creator", {}),
                "browser": log.get("browser", {}),
                "entries": entries,
                "_browserworker": segment.to_dict(),
            }
        }
        write_json(self.root / "network" / segment.file_name, out)
        info = {**segment.to_dict(), "file": f"network/{segment.file_name}", "entries": len(entries)}
        self.segments.append(info)
        return info


async def api_har_entry(call: ApiCall, response: APIResponse | None, error: str | None) -> dict[str, Any]:
    """A HAR entry (raw, redacted when its segment is written) for a ``page.request`` call."""
    request: dict[str, Any] = {
        "method": call.method,
        "url": call.url,
        "httpVersion": "HTTP/1.1",
        "headers": [{"name": k, "value": v} for k, v in call.headers.items()],
        "queryString": [
            {"name": k, "value": v} for k, v in parse_qsl(urlsplit(call.url).query, keep_blank_values=True)
        ],
        "cookies": [],
        "headersSize": -1,
        "bodySize": len(call.body or b""),
    }
    if call.body:
        request["postData"] = {
            "mimeType": call.mime or "application/octet-stream",
            "text": call.body.decode("utf-8", errors="replace"),
        }
    if response is None:
        answer: dict[str, Any] = {
            "status": 0,
            "statusText": "",
            "headers": [],
            "cookies": [],
            "content": {"size": 0, "mimeType": ""},
            "_failureText": error,
        }
    else:
        try:
            body = await response.body()
        except Exception:  # disposed by the caller already: the answer without its body
            body = b""
        headers = [{"name": h["name"], "value": h["value"]} for h in response.headers_array]
        mime = next((h["value"] for h in headers if h["name"].lower() == "content-type"), "")
        answer = {
            "status": response.status,
            "statusText": response.status_text,
            "headers": headers,
            "cookies": [],
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": len(body),
            "content": {
                "size": len(body),
                "mimeType": mime,
                "text": base64.b64encode(body).decode(),
                "encoding": "base64",
            },
        }
    return {
        "startedDateTime": datetime.now(UTC).isoformat(),
        "time": 0,
        "request": request,
        "response": answer,
        "cache": {},
        "timings": {"send": 0, "wait": 0, "receive": 0},
        "_apiRequest": True,
    }


@dataclass
class Recording:
    """A recording directory, read back."""

    root: Path
    meta: dict[str, Any]
    journal: dict[str, Any]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Recording:
        root = Path(path)
        meta_path = root / "meta.json"
        if not meta_path.is_file():
            raise UsageError(f"{root}: not a recording (no meta.json)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != FORMAT:
            raise UsageError(f"{root}: unknown recording format {meta.get('format')!r} (expected {FORMAT})")
        journal_path = root / "journal.json"
        journal = json.loads(journal_path.read_text()) if journal_path.is_file() else {}
        return cls(root=root, meta=meta, journal=journal)

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.root.name)

    @property
    def flow_path(self) -> Path:
        return (self.root / str(self.meta["flow"]["file"])).resolve()

    def segments(self) -> Iterator[tuple[Segment, list[dict[str, Any]]]]:
        """Every HAR segment in recorded order, with its entries."""
        for info in sorted(self.meta.get("segments") or [], key=lambda s: s["segment"]):
            har = json.loads((self.root / info["file"]).read_text())
            yield Segment.from_dict(har["log"]["_browserworker"]), har["log"]["entries"]

    def body(self, content: Mapping[str, Any]) -> bytes:
        """The bytes of a response body (empty when the recording has none)."""
        ref = content.get("_file")
        if ref:
            return (self.root / str(ref)).read_bytes()
        text = content.get("text")
        if text is None:
            return b""
        return base64.b64decode(text) if content.get("encoding") == "base64" else text.encode()

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_file())


class Ledger:
    """What the replayed "server" has answered so far, shared by a crashed replay and its resume.

    One JSON line per served entry, appended (and flushed) *before* the response is given
    to the browser, like a server that commits before it answers.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.served: list[str] = []
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    self.served.append(json.loads(line)["entry"])

    def add(self, entry_id: str) -> None:
        self.served.append(entry_id)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"entry": entry_id}) + "\n")
            fh.flush()

    def count(self, entry_id: str) -> int:
        return self.served.count(entry_id)
