"""A single-page app on loopback, built the way real ones are (Gradio's, for one): its document is
a shell; after its load it waits a moment, then imports its parts (each answered slowly), draws
its form, opens two server-sent event streams it keeps open, and draws a session id at random
that it sends with every post, in one stream's query and in the other's path. It keeps what was typed in ``localStorage``
with its own state (a word). It counts the orders it gets by reference. Standard library only."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["SpaTarget"]

_SHELL = b"""<!doctype html><title>shop</title><body>Loading...<script type=module src=/app.js></script>"""

_APP = b"""
const sid = Math.random().toString(36).substring(2);
const post = (path, data) => fetch(path, {method: 'POST', headers: {'content-type': 'application/json'},
  body: JSON.stringify({...data, sid})});
addEventListener('load', () => setTimeout(async () => {
  window.building = true;
  await Promise.all([1, 2, 3, 4].map((n) => import('/part.js?n=' + n)));
  document.body.innerHTML = '<label>Item <input id=item></label> <label>Reference <input id=ref></label>'
    + ' <button id=go>Order</button> <p id=out></p>';
  // a stream with the session id in its path, first; then one with it in its query
  fetch('/heartbeat/' + sid).then(() => new EventSource('/events?sid=' + sid));
  localStorage.setItem('history', JSON.stringify({view: 'markdown', last: null}));
  item.addEventListener('input', () => post('/preview', {item: item.value}));
  ref.addEventListener('change', () => localStorage.setItem('history', JSON.stringify({view: 'markdown', last: ref.value})));
  go.onclick = async () => {
    const answer = await post('/order', {item: item.value, ref: ref.value});
    out.textContent = (await answer.json()).status;
  };
}, 100));
"""

PART_DELAY = 0.3
"""Seconds each part takes to answer: they are on their way when the step that opened the page returns."""


class SpaTarget:
    """``with SpaTarget() as target: target.url``; ``target.orders`` counts orders by reference."""

    def __init__(self) -> None:
        self.orders: Counter[str] = Counter()
        self.previews = 0
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/":
                    self._send(200, "text/html; charset=utf-8", _SHELL)
                elif path == "/app.js":
                    self._send(200, "text/javascript", _APP)
                elif path == "/part.js":
                    time.sleep(PART_DELAY)
                    self._send(200, "text/javascript", b"export const part = 1;")
                elif path == "/events" or path.startswith("/heartbeat/"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.end_headers()
                    try:
                        self.wfile.write(b"data: hello\n\n")
                        self.wfile.flush()
                        for _ in range(300):  # kept open (30 s at most), as a live page's stream is
                            time.sleep(0.1)
                            self.wfile.write(b": ping\n\n")
                            self.wfile.flush()
                    except OSError:
                        pass
                    self.close_connection = True
                elif path.startswith("/orders/"):
                    ref = path.removeprefix("/orders/")
                    if target.orders[ref]:
                        self._send(200, "application/json", json.dumps({"ref": ref}).encode())
                    else:
                        self._send(404, "application/json", b'{"detail": "not found"}')
                else:
                    self._send(404, "text/plain", b"not found")

            def do_POST(self) -> None:
                data = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/preview":
                    target.previews += 1
                    self._send(200, "application/json", b'{"ok": true}')
                elif self.path == "/order":
                    target.orders[str(data.get("ref"))] += 1
                    self._send(200, "application/json", b'{"status": "placed"}')
                else:
                    self._send(404, "text/plain", b"not found")

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SpaTarget:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
