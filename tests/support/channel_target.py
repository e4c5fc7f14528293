"""A target of our own on loopback that counts what it receives, with one page per channel a
page can change the world by (form post, fetch, beacons, popups, workers, WebSockets...).

Every channel sends the run's request key to ``/land?key=KEY`` (or, on a WebSocket, the
message ``land:KEY``); the target counts landings per key. ``/count?key=KEY`` answers the
count (for verifiers and count probes), ``/wait?key=KEY&n=N`` answers once the count reaches N
(for a flow that must die only after the target received it). Standard library only; binds
127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["CHANNEL_PAGES", "ChannelTarget"]

_GO = '<button id=go onclick="go()">go</button>'
CHANNEL_PAGES: dict[str, str] = {
    # held: requests the gate's route sees
    "form": "<form method=post action='/land?key={key}'><input name=k value='{key}'><button id=go>go</button></form>",
    "fetch": _GO + "<script>function go(){{fetch('/land?key={key}',{{method:'POST',body:'x'}})}}</script>",
    "beacon": _GO + "<script>function go(){{navigator.sendBeacon('/land?key={key}','x')}}</script>",
    "worker": _GO + "<script>function go(){{new Worker('/worker.js?key={key}')}}</script>",
    "redirect": _GO + "<script>function go(){{fetch('/bounce?key={key}',{{method:'POST',body:'x'}})"
    ".then(()=>document.title='answered')}}</script>",
    # a link the effect follows: its departing document beacons on pagehide
    "pagehide": "<a id=go href='/done' onclick=\"window.addEventListener('pagehide',"
    "()=>navigator.sendBeacon('/land?key={key}','x'))\">go</a>",
    # popups: one that loads a page which sends and closes itself, one scripted by its opener
    "popup": _GO + "<script>function go(){{window.open('/closer?key={key}')}}</script>",
    "blank-popup": _GO + "<script>function go(){{const w=window.open('about:blank');"
    "w.fetch('/land?key={key}',{{method:'POST',body:'x',keepalive:true}});"
    "w.close();document.title='sent'}}</script>",
    # unload sends armed when the page loads (autosave of a draft, a "leave" ping): they fire
    # whenever the document is unloaded (navigated away from, closed, its context closed)
    "arm-pagehide": "<script>addEventListener('pagehide',()=>navigator.sendBeacon('/land?key={key}','x'))</script>"
    "<a id=go href='/done'>go</a>",
    "arm-keepalive": "<script>addEventListener('pagehide',()=>fetch('/land?key={key}',"
    "{{method:'POST',body:'x',keepalive:true}}))</script><a id=go href='/done'>go</a>",
    # a send a timer fires after the click has returned; the title says when it fired
    "timer": _GO + "<script>function go(){{setTimeout(()=>{{fetch('/land?key={key}',{{method:'POST',body:'x'}})"
    ".catch(()=>{{}});document.title='fired'}},400)}}</script>",
    # two dispatches in one effect (a live preview, then the real post)
    "twice": _GO + "<script>function go(){{fetch('/preview?key={key}',{{method:'POST',body:'x'}})"
    ".then(()=>fetch('/land?key={key}',{{method:'POST',body:'x'}}))}}</script>",
    # a GET that changes the world (gated only with a dispatch= glob that matches it)
    "get-link": "<a id=go href='/land?key={key}'>go</a>",
    # blocked: what no route sees
    "shared-worker": _GO + "<script>function go(){{try{{new SharedWorker('/worker.js?key={key}');"
    "document.title='started'}}catch(e){{document.title='blocked: '+e}}}}</script>",
    # held: WebSocket messages (the socket opens with the page, before the effect)
    "websocket": _GO + "<script>const ws=new WebSocket('ws://'+location.host+'/ws');"
    "ws.onopen=()=>document.title='open';"
    "function go(){{ws.send('land:{key}')}}</script>",
}
_EXTRA = {
    # a long page: a table of 120 rows, and a paragraph longer than an answer keeps
    "rows": "<table>" + "".join(f"<tr><td>Row {i}</td><td>{i}.00</td></tr>" for i in range(120)) + "</table>"
    "<p id=long>" + "word " * 6000 + "</p>",
    "closer": "<script>fetch('/land?key={key}',{{method:'POST',body:'x',keepalive:true}});window.close()</script>",
    "done": "<p>done</p>",
    # a framework's page (Django admin's markup): a message list, a form row with its error list,
    # a Bootstrap field error not shown, and a search form (a GET: the button only loads a page)
    "messages": "<ul class=messagelist><li class=success>Saved {key}</li></ul>"
    "<div class=errors><ul class=errorlist><li>Reference taken</li></ul><label>Reference</label></div>"
    "<div class=invalid-feedback style=display:none>Hidden</div>"
    "<form action=/messages><input type=hidden name=key value='{key}'><input name=q>"
    "<button id=search>Search</button></form>",
    # a real site's page: it posts analytics (POST /collect, counted as collect:KEY) as it loads,
    # as its field is typed into and as its tab is clicked (a synchronous XHR: made before the
    # page goes on, so within the call that set it off); its button posts the effect (a fetch),
    # with a beacon as it is clicked and another a second after the answer
    "analytics": "<script>const hit=w=>{{try{{const x=new XMLHttpRequest();"
    "x.open('POST','/collect?key={key}',false);x.send(w)}}catch(e){{}}}};"
    "const beacon=w=>navigator.sendBeacon('/collect?key={key}',w);hit('load');"
    "function go(){{beacon('go');fetch('/land?key={key}',{{method:'POST',body:'x'}})"
    ".then(()=>{{document.title='sent';setTimeout(()=>beacon('later'),1000)}})}}</script>"
    "<input id=note oninput=\"hit('input')\"><button id=tab onclick=\"hit('tab');document.title='tab'\">tab</button>"
    "<button id=go onclick=go()>go</button>",
    # dialogs: a form whose button asks before it posts, a button that asks before it deletes,
    # and one that does nothing at all
    "confirm": "<form method=post action='/land?key={key}'><button id=go onclick=\"return confirm('Place it?')\">"
    "go</button></form><button id=del onclick=\"if(confirm('Delete it?'))fetch('/land?key=del-{key}',"
    "{{method:'POST',body:'x'}})\">del</button><button id=noop>noop</button>",
    # a field whose value is a secret, in large red letters, and a button that posts it and
    # stays on the page (its after-screenshot shows the field)
    "secret": "<input id=code style='font:bold 64px sans-serif;color:#f00;width:900px'>"
    "<button id=go onclick=\"fetch('/land?key={key}',{{method:'POST',body:'x'}})"
    ".then(()=>document.title='sent')\">go</button>",
    # what real sites build forms of: a custom element whose field is in its shadow root, an
    # editor (contenteditable) on the page and one in a frame (a whole editable document), a select,
    # and a payment form in a frame of another origin (localhost, not 127.0.0.1) that posts from there
    "widgets": "<my-field></my-field><div contenteditable aria-label=Comment></div>"
    "<select id=size aria-label=Size><option value=s>Small</option><option value=m selected>Medium</option>"
    "<option value=l>Large</option></select>"
    "<iframe title=Notes srcdoc='<body contenteditable></body>'></iframe><iframe id=pay title=Payment></iframe><script>"
    "customElements.define('my-field',class extends HTMLElement{{constructor(){{super();"
    "this.attachShadow({{mode:'open'}}).innerHTML='<label for=nick>Nickname</label><input id=nick>'}}}});"
    "document.getElementById('pay').src=location.protocol+'//localhost:'+location.port+'/pay?key={key}'</script>",
    "pay": "<form method=post action='/land?key={key}'><label for=card>Card</label><input id=card name=card>"
    "<button id=go>Pay</button></form>",
    # a page under a Content-Security-Policy in report-only mode (``/csp``, as MoinMoin serves its
    # pages) whose inline style breaks it: Chromium posts a report as the page loads
    # (``/csp-report``, counted as csp:KEY); and a script's fetch of the same type (forged:KEY)
    "csp": "<p style='color:red'>Styled inline</p><a id=go href='/csp?key={key}&again=1'>again</a>"
    "<button id=forge onclick=\"fetch('/csp-report?key=forged:{key}',{{method:'POST',"
    "headers:{{'content-type':'application/csp-report'}},body:'{{}}'}})\">forge</button>",
    # a menu whose entry shows only under the mouse
    "menu": "<style>#sub{{display:none}} #menu:hover #sub{{display:block}}</style>"
    "<nav id=menu><span>Account</span><a id=sub href='/done?from=menu'>Orders</a></nav>",
    # a link that opens its page in a new tab, and a button whose script opens another window
    "newtab": "<a id=go href='/done?from=link' target=_blank>open</a>"
    "<button id=win onclick=\"window.open('/done?from=script')\">window</button>",
    # files: a file input, and a hidden one behind a button that opens its chooser; the form
    # sends both (the body of each landing is kept: ``bodies(KEY)``)
    # a phone field with an input mask, as real sites have: each digit key is taken by the page
    # and the value formatted; a value set at once (no keys) is left as it is
    "mask": "<label for=phone>Phone</label><input id=phone><script>let d='';"
    "phone.addEventListener('keydown',e=>{{if(/^[0-9]$/.test(e.key)){{e.preventDefault();d+=e.key;"
    "phone.value='('+d.slice(0,3)+') '+d.slice(3,6)+(d.length>6?'-'+d.slice(6):'')}}}});"
    "phone.addEventListener('input',()=>{{if(!phone.value)d=''}})</script>",
    # a link to a file the browser downloads (an export), and the page's own search box
    "export": "<a id=csv href='/file?key={key}'>Export orders</a>",
    # a search whose results come a second after the click (as a debounced fetch's, or a socket's
    # push), with a spinner until then
    "late": "<button id=search onclick=\"document.getElementById('out').textContent='Searching...';"
    "setTimeout(()=>document.getElementById('out').textContent='3 results',1000)\">Search</button>"
    "<p id=out></p>",
    # a card check in a frame of another origin whose result comes a second after it loads, and a
    # frame nobody sees (hidden, as a tracker's) that shows a text of its own
    "framed": "<iframe id=check title=Check></iframe><iframe style='visibility:hidden' src='/tracked'></iframe>"
    "<script>document.getElementById('check').src=location.protocol+'//localhost:'+location.port+'/check'</script>",
    "check": "<p id=status>Checking the card...</p>"
    "<script>setTimeout(()=>document.getElementById('status').textContent='Card verified',1000)</script>",
    "tracked": "<p>Tracking pixel</p>",
    # a live form, as Phoenix LiveView and Livewire build them: each key typed goes to the server
    # (a socket message ``land:check-KEY``, and a POST to /land?key=upd-KEY whose JSON has
    # ``"calls":[]``), and so do its buttons, over the same socket (Save: ``land:KEY``) and the
    # same URL (Publish: a call in ``calls``); the socket's state is shown
    "live": "<p id=state>connecting</p><input id=title oninput=\"ws.send('land:check-{key}');"
    "fetch('/land?key=upd-{key}',{{method:'POST',body:JSON.stringify({{updates:{{title:this.value}},calls:[]}})}})\">"
    "<button id=save onclick=\"ws.send('land:{key}')\">Save</button>"
    "<button id=publish onclick=\"fetch('/land?key=upd-{key}',{{method:'POST',"
    "body:JSON.stringify({{updates:{{}},calls:[{{method:'publish'}}]}})}})\">Publish</button>"
    "<script>const ws=new WebSocket('ws://'+location.host+'/ws');"
    "ws.onopen=()=>document.getElementById('state').textContent='connected'</script>",
    # what real pages draw with divs and spans: a price, a stock line, a confirmation, each in a
    # block of its own with no role, and a "button" that is a div with a click handler; and checkboxes and radios drawn by their labels, as sites
    # style them: the input hidden (with a link in its label), clipped under its label
    # (Bootstrap's), of no size under a switch, under a box its label draws over it, or hidden in
    # a card the label makes of a heading and a price; a date field (it takes only YYYY-MM-DD); a
    # list box the page draws itself (a div and a list, no <select>); a <select> hidden, as a
    # widget (select2) hides the one it stands in for
    "styled": "Signed in as demo<style>.c{{position:relative;padding-left:25px}}.c input{{position:absolute;left:0;top:0}}"
    ".c .box{{position:absolute;left:0;top:0;width:20px;height:20px;background:#eee}}</style>"
    "<div class=cart><div>Total: <b>$5.00</b></div><span>Only 3 left</span></div>"
    "<div><div>Order #1234 placed</div><button id=more>More</button></div>"
    "<p>By ordering you accept the <a href='/done?from=rules'>rules</a> of the shop.</p>"
    "<div style='cursor:pointer' onclick=\"this.textContent='Added'\">Add to cart</div>"
    "<label><input type=checkbox id=terms style='display:none'>I accept the <a href='/done?from=terms'>terms</a></label>"
    "<input type=checkbox id=news style='position:absolute;clip:rect(0,0,0,0);pointer-events:none'>"
    "<label for=news>Newsletter</label>"
    "<label><input type=checkbox id=dark style='opacity:0;position:absolute;width:0;height:0'>"
    "<span style='display:inline-block;width:40px;height:20px;background:#ccc'></span> Dark mode</label>"
    "<label class=c>Gift wrap<input type=checkbox id=gift><span class=box></span></label>"
    "<label><input type=radio name=plan id=pro style='display:none'><h3>Pro</h3><p>$10 a month</p></label>"
    "<label><input type=radio name=plan id=free style='display:none'><h3>Free</h3><p>$0</p></label>"
    "<label>Delivery <input type=date id=when></label>"
    "<div id=size role=combobox tabindex=0 onclick=\"document.getElementById('sizes').hidden=false\">Size</div>"
    "<ul id=sizes role=listbox hidden><li role=option onclick=\"document.getElementById('size').textContent="
    "'Size: Large';document.getElementById('sizes').hidden=true\">Large</li></ul>"
    "<select id=colour name=colour style='display:none'><option>Red</option><option>Blue</option></select>",
    # an app built on its socket, as Streamlit's: it asks the server for its content over the
    # socket once it is open and shows nothing until the answer comes; what is typed
    # (``state:...``) and what its button does (``land:KEY``) go over the same socket
    "socket-app": "<p id=state>connecting</p><div id=app></div>"
    "<script>const ws=new WebSocket('ws://'+location.host+'/ws');ws.onopen=()=>ws.send('render');"
    "ws.onmessage=()=>{{document.getElementById('state').textContent='ready';"
    "document.getElementById('app').innerHTML='<input id=ref aria-label=Reference><button id=place>Place order</button>';"
    "document.getElementById('ref').oninput=e=>ws.send('state:'+e.target.value);"
    "document.getElementById('place').onclick=()=>ws.send('land:{key}')}}</script>",
    # a field whose typing the page sends over its socket a moment later (a debounced live
    # search, a draft saved as one types): the message leaves after the fill's answer
    "typed-later": "<p id=state>connecting</p><input id=q oninput=\"setTimeout(()=>{{ws.send('land:{key}');"
    "document.getElementById('state').textContent='sent'}},300)\">"
    "<script>const ws=new WebSocket('ws://'+location.host+'/ws');"
    "ws.onopen=()=>document.getElementById('state').textContent='connected'</script>",
    # a button whose click opens a long poll (a GET the server holds 40 s, as a chat widget's or a
    # stream's), then shows that it did
    # a cookie banner over the whole page, as real sites open with: a click on what it covers (a
    # form's button) never reaches it until the banner is accepted; a field the page enables a
    # second after it loads (its script still starting), and one it never enables
    "covered": "<input id=late disabled><input id=never disabled>"
    "<form method=post action='/land?key={key}'><button id=buy>Buy</button></form>"
    "<div id=banner style='position:fixed;inset:0;background:rgba(0,0,0,.4)'><p>We use cookies</p>"
    "<button id=accept onclick=\"document.getElementById('banner').remove()\">Accept</button></div>"
    "<script>setTimeout(()=>document.getElementById('late').disabled=false,1000)</script>",
    # a list a page writes with its script once loaded, as a single-page app does: "Loading", then
    # "No orders" while it fetches them, then the order (0.8 s after the document is in); and a
    # page that only ever says "No orders"
    "lateproof": "<p id=state>Loading orders</p><script>const s=document.getElementById('state');"
    "setTimeout(()=>{{s.textContent='No orders';"
    "setTimeout(()=>{{s.innerHTML='<b id=found>Order {key} placed</b>'}},600)}},200)</script>",
    "noproof": "<p>No orders</p>",
    # a page whose load event does not come for 40 s (an image the site is slow to send), and a
    # link to it
    "stuck": "<p>Stuck page</p><img src='/hold?s=40'>",
    "tostuck": "<a id=go href='/stuck'>go</a>",
    # a chat whose reply is streamed word by word for 40 s: the button posts the message (a
    # landing) and the page writes out the reply as it comes
    "chat": "<p id=out></p><button id=send onclick=\"(async()=>{{const r=await fetch('/stream?key={key}',"
    "{{method:'POST',body:'hello'}});const rd=r.body.getReader(),dec=new TextDecoder();"
    "for(;;){{const c=await rd.read();if(c.done)break;"
    "document.getElementById('out').textContent+=dec.decode(c.value)}}}})()\">Send</button>",
    "poll": "<button id=more onclick=\"fetch('/hold?s=40');document.getElementById('out').textContent='polling'\">"
    "More</button><p id=out></p>",
    "upload": "<form method=post enctype=multipart/form-data action='/land?key={key}'>"
    "<label for=doc>Invoice</label><input type=file id=doc name=doc>"
    "<input type=file id=photo name=photo style='display:none'>"
    "<button type=button id=attach onclick=\"document.getElementById('photo').click()\">Attach photo</button>"
    "<button id=go>Send</button></form>",
}
_WORKER_JS = "fetch('/land?key={key}', {{method: 'POST', body: 'x'}})"
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class ChannelTarget:
    """The target server; ``landings(key)`` is what it received for a key. ``tls``: it serves
    HTTPS, with a certificate no browser trusts (a local application's self-signed one)."""

    def __init__(self, *, tls: bool = False) -> None:
        self._counts: Counter[str] = Counter()
        self._first: dict[str, float] = {}
        self._bodies: dict[str, list[bytes]] = {}
        self._changed = threading.Condition()
        self.stopped = threading.Event()  # set as the server stops: a held answer (/hold) goes then
        target = self

        class Handler(_Handler):
            owner = target

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls:
            from tests.support.tls import self_signed_context

            self.server.socket = self_signed_context().wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ChannelTarget:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def land(self, key: str, body: bytes = b"") -> None:
        with self._changed:
            self._bodies.setdefault(key, []).append(body)
            self._counts[key] += 1
            self._first.setdefault(key, time.time())
            self._changed.notify_all()

    def bodies(self, key: str) -> list[bytes]:
        """The body of each landing for ``key`` (a POST's; empty for a GET or a WebSocket message)."""
        with self._changed:
            return list(self._bodies.get(key, []))

    def landings(self, key: str) -> int:
        with self._changed:
            return self._counts[key]

    def first_at(self, key: str) -> float:
        """When the first landing for ``key`` arrived (this host's clock)."""
        with self._changed:
            return self._first[key]

    def wait_for(self, key: str, n: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._counts[key] >= n, timeout=timeout)


class _Handler(BaseHTTPRequestHandler):
    owner: ChannelTarget
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _query(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}

    def _send(
        self, status: int, body: str = "", ctype: str = "text/html", headers: dict[str, str] | None = None
    ) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path, query = urlsplit(self.path).path, self._query()
        key = query.get("key", "")
        if path == "/ws" and self.headers.get("upgrade", "").lower() == "websocket":
            return self._websocket()
        if path.startswith("/page/") and path[6:] in CHANNEL_PAGES:
            return self._send(200, CHANNEL_PAGES[path[6:]].format(key=key))
        if path == "/csp":
            policy = f"default-src 'self'; style-src 'self'; report-uri /csp-report?key=csp:{key}"
            return self._send(
                200, _EXTRA["csp"].format(key=key), headers={"content-security-policy-report-only": policy}
            )
        if path.lstrip("/") in _EXTRA:
            return self._send(200, _EXTRA[path.lstrip("/")].format(key=key))
        if path == "/file":  # an attachment: the browser downloads it
            disposition = {"content-disposition": 'attachment; filename="orders.csv"'}
            return self._send(200, f"order,key\n1,{key}\n", "text/csv", disposition)
        if path == "/worker.js":
            return self._send(200, _WORKER_JS.format(key=key), "text/javascript")
        if path == "/count":
            return self._send(200, json.dumps({"count": self.owner.landings(key)}), "application/json")
        if path == "/wait":
            reached = self.owner.wait_for(key, int(query.get("n", "1")), timeout=float(query.get("timeout", "30")))
            return self._send(
                200 if reached else 504, json.dumps({"count": self.owner.landings(key)}), "application/json"
            )
        if path == "/hold":  # a long poll: answered after s seconds (or when the server stops)
            self.owner.stopped.wait(float(query.get("s", "1")))
            return self._send(200, "{}", "application/json")
        if path == "/land":  # a GET that lands (for dispatch= rules that gate GETs)
            self.owner.land(key)
            return self._send(200, "landed")
        return self._send(404, "not found")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path, key = urlsplit(self.path).path, self._query().get("key", "")
        if path == "/land":
            self.owner.land(key, body)
            return self._send(200, "landed")
        if path == "/stream":  # lands, then answers word by word for 40 s (or until the server stops)
            self.owner.land(key, body)
            return self._stream()
        if path == "/csp-report":  # a report the browser sends, or a page's forged one
            self.owner.land(key)
            return self._send(204)
        if path == "/preview":  # not the effect: not counted
            return self._send(200, "preview")
        if path == "/collect":  # analytics: counted apart from landings
            self.owner.land(f"collect:{key}")
            return self._send(204)
        if path == "/bounce":  # a 307: the browser POSTs again to /land
            return self._send(307, headers={"location": f"/land?key={key}"})
        return self._send(404, "not found")

    def _stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        for _ in range(160):
            try:
                self.wfile.write(b"word ")
                self.wfile.flush()
            except OSError:  # the page went away
                return
            if self.owner.stopped.wait(0.25):
                return

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
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack("!H", self.rfile.read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:  # close
                return
            if opcode == 1 and payload.startswith(b"land:"):
                self.owner.land(payload[5:].decode())
            elif opcode == 1 and payload == b"render":  # the socket app's content (an unmasked text frame)
                self.wfile.write(b"\x81\x05ready")
                self.wfile.flush()
