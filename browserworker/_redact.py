"""Redaction: what never reaches a recording, and the same rules for live requests on replay.

Removed at write time, everywhere (HAR entries, body files, ``journal.json``,
``meta.json``, traces):

- cookies (``Cookie`` and ``Set-Cookie`` values, HAR cookie lists), ``Authorization`` and
  ``Proxy-Authorization`` headers;
- form fields, JSON keys, query parameters and headers whose name is secret: the flow's
  ``redact=[...]`` names, its secret inputs (``SecretStr`` or marked ``secret``), the
  password-type fields seen on the recorded pages, and a short default list
  (``password``, ``api_key``, ``access_token``...);
- the values of secret inputs, wherever they appear (response bodies, URLs, results),
  unless a value is too short or also a public input's value: then only its field names
  redact it (a warning in ``meta.json`` says so).

Only names are ever stored (``meta.json`` lists them), never a secret value. A replay
applies the same name rules to its live requests before matching them, so a redacted
recording still matches.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus, urlsplit, urlunsplit

from pydantic import SecretBytes, SecretStr

__all__ = ["DEFAULT_FIELDS", "REDACTED", "SECRET_MARK", "Redactor"]

REDACTED = "[redacted]"

SECRET_MARK = "data-bw-secret"
"""Set on an element a secret value was typed into (an agent's ``fill(..., secret=true)``, a
password field): the screenshots the kit takes with Playwright mask it."""

DEFAULT_FIELDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "client_secret",
        "api_key",
        "apikey",
        "access_token",
        "refresh_token",
        "id_token",
    }
)
"""Field names redacted in every recording, whatever the flow says."""

_AUTH_HEADERS = frozenset({"authorization", "proxy-authorization"})
_MIN_SECRET_VALUE = 4


def _leaves(value: Any) -> list[str]:
    """The strings in an input's value (a list of paths, a nested model), as text."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list | tuple | set):
        return [leaf for v in value for leaf in _leaves(v)]
    return [str(value)]


def _norm(name: str) -> str:
    return name.strip().lower()


@dataclass
class Redactor:
    """Redaction rules: secret field names (stored in ``meta.json``) and secret values (never stored)."""

    fields: set[str] = field(default_factory=set)
    values: list[str] = field(default_factory=list)
    trace_values: list[str] = field(default_factory=list)  # also scrubbed from traces (short or public-looking)
    public: set[str] = field(default_factory=set)  # the run's public input values: never taken for secrets
    warnings: list[str] = field(default_factory=list)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def for_run(cls, secret_names: Iterable[str], inputs: Mapping[str, Any]) -> Redactor:
        """Rules for recording a run: the names, plus the values of its secret inputs."""
        names = {_norm(n) for n in secret_names}
        red = cls(fields=set(DEFAULT_FIELDS) | names)
        red.public = {leaf for k, v in inputs.items() if _norm(k) not in red.fields for leaf in _leaves(v)}
        for key, value in inputs.items():
            if _norm(key) not in red.fields or value is None:
                continue
            raw = value.get_secret_value() if isinstance(value, SecretStr | SecretBytes) else value
            text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            if text == REDACTED:
                continue
            red.trace_values.append(text)
            if len(text) < _MIN_SECRET_VALUE:
                red.warnings.append(
                    f"secret input {key!r} is shorter than {_MIN_SECRET_VALUE} characters: it is "
                    "redacted where its field name shows, not searched for elsewhere"
                )
            elif text in red.public:
                red.warnings.append(
                    f"secret input {key!r} has the same value as a public input: it is redacted "
                    "where its field name shows, not searched for elsewhere"
                )
            else:
                red.values.append(text)
        red.values.sort(key=len, reverse=True)
        return red

    @classmethod
    def from_names(cls, names: Iterable[str]) -> Redactor:
        """Rules for a replay: the names a recording lists (it has no secret values)."""
        return cls(fields=set(DEFAULT_FIELDS) | {_norm(n) for n in names})

    def add_values(self, values: Iterable[str]) -> None:
        """More secret values to scrub wherever they show (a browser context's cookies, stored tokens);
        values shorter than 8 characters ("true", "en") are left to the rules by name, and no part
        of the run's public input values (:attr:`public`: a file chosen by its path, its name) is a
        secret."""
        new = {v for v in values if len(v) >= 8 and not any(v in p for p in self.public)} - set(self.values)
        if new:
            self.values.extend(new)
            self.values.sort(key=len, reverse=True)

    def add_fields(self, names: Iterable[str]) -> None:
        self.fields.update(_norm(n) for n in names if n)

    def names(self) -> list[str]:
        """The secret field names, for ``meta.json``."""
        return sorted(self.fields)

    def is_secret(self, name: str) -> bool:
        return _norm(name) in self.fields

    # -- values -----------------------------------------------------------------------

    def scrub(self, text: str, values: Iterable[str] | None = None) -> str:
        """Replace every secret value (raw, URL-, JSON- or HTML-encoded) by ``[redacted]``."""
        for value in self.values if values is None else values:
            for form in {
                value,
                quote(value, safe=""),
                quote_plus(value),
                json.dumps(value)[1:-1],
                html.escape(value, quote=True),
            }:
                if form and form in text:
                    text = text.replace(form, REDACTED)
        return text

    # -- URLs, forms, JSON ------------------------------------------------------------

    def _pairs(self, query: str) -> str:
        """Redact ``name=value`` pairs of a query string or form body, keeping everything else as is."""
        if not query:
            return query
        out = []
        for pair in query.split("&"):
            name, sep, _ = pair.partition("=")
            out.append(f"{name}={quote(REDACTED)}" if sep and self.is_secret(unquote_plus(name)) else pair)
        return "&".join(out)

    def url(self, url: str) -> str:
        """A URL with secret query parameters and secret values redacted."""
        try:
            parts = urlsplit(url)
        except ValueError:
            return self.scrub(url)
        if parts.query:
            url = urlunsplit(parts._replace(query=self._pairs(parts.query)))
        return self.scrub(url)

    def json_data(self, value: Any) -> Any:
        """JSON data with secret keys redacted and secret values scrubbed from every string."""
        if isinstance(value, Mapping):
            return {
                k: (REDACTED if self.is_secret(str(k)) and v is not None else self.json_data(v))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.json_data(v) for v in value]
        if isinstance(value, str):
            return self.url(value) if value.startswith(("http://", "https://")) else self.scrub(value)
        return value

    def body(self, text: str, mime: str | None) -> str:
        """A request or response body: forms and JSON by field name, anything by value."""
        kind = (mime or "").split(";")[0].strip().lower()
        if kind == "application/x-www-form-urlencoded":
            return self.scrub(self._pairs(text))
        if kind.endswith("json") or kind.endswith("+json"):
            try:
                data = json.loads(text)
            except ValueError:
                return self.scrub(text)
            return json.dumps(self.json_data(data), ensure_ascii=False, separators=(",", ":"))
        if kind.startswith("multipart/form-data"):
            return self.scrub(self._multipart(text))
        return self.scrub(text)

    _PART = re.compile(r'(name="([^"]*)"[^\r\n]*\r?\n(?:[^\r\n]+\r?\n)*\r?\n)(.*?)(\r?\n--)', re.S)

    def _multipart(self, text: str) -> str:
        def repl(m: re.Match[str]) -> str:
            return m.group(1) + (REDACTED if self.is_secret(m.group(2)) else m.group(3)) + m.group(4)

        return self._PART.sub(repl, text)

    # -- headers and cookies ------------------------------------------------------------

    @staticmethod
    def cookie_header(value: str) -> str:
        """``a=1; b=2`` → ``a=[redacted]; b=[redacted]`` (names kept)."""
        return "; ".join(
            f"{p.split('=', 1)[0].strip()}={REDACTED}" if "=" in p else p.strip() for p in value.split(";") if p.strip()
        )

    @staticmethod
    def set_cookie(value: str) -> str:
        """``name=value; Path=/; HttpOnly`` → ``name=[redacted]; Path=/; HttpOnly`` (one per line)."""
        lines = []
        for line in value.split("\n"):
            first, sep, attrs = line.partition(";")
            name = first.split("=", 1)[0].strip()
            lines.append(f"{name}={REDACTED}" + (sep + attrs if sep else ""))
        return "\n".join(lines)

    def header(self, name: str, value: str) -> str:
        low = _norm(name)
        if low in _AUTH_HEADERS or self.is_secret(low):
            return REDACTED
        if low == "cookie":
            return self.cookie_header(value)
        if low == "set-cookie":
            return self.set_cookie(value)
        if low in ("referer", "location", "content-location"):
            return self.url(value)
        return self.scrub(value)

    def headers(self, headers: Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
        """HAR ``[{name, value}]`` headers, redacted."""
        return [{"name": h["name"], "value": self.header(h["name"], h["value"])} for h in headers]

    @staticmethod
    def cookies(cookies: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """HAR cookie lists: every value redacted, names and attributes kept."""
        return [{**c, "value": REDACTED} for c in cookies]

    # -- HAR entries --------------------------------------------------------------------

    def har_request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        req = dict(request)
        req["url"] = self.url(req.get("url", ""))
        req["headers"] = self.headers(req.get("headers") or [])
        req["cookies"] = self.cookies(req.get("cookies") or [])
        req["queryString"] = [
            {"name": q["name"], "value": REDACTED if self.is_secret(q["name"]) else self.scrub(q["value"])}
            for q in req.get("queryString") or []
        ]
        post = req.get("postData")
        if post:
            post = dict(post)
            if "text" in post:
                post["text"] = self.body(post["text"], post.get("mimeType"))
            if post.get("params"):
                post["params"] = [
                    {
                        **p,
                        "value": REDACTED if self.is_secret(p.get("name", "")) else self.scrub(str(p.get("value", ""))),
                    }
                    for p in post["params"]
                ]
            req["postData"] = post
        return req

    def har_response(self, response: Mapping[str, Any]) -> dict[str, Any]:
        resp = dict(response)
        resp["headers"] = self.headers(resp.get("headers") or [])
        resp["cookies"] = self.cookies(resp.get("cookies") or [])
        if resp.get("redirectURL"):
            resp["redirectURL"] = self.url(resp["redirectURL"])
        return resp
