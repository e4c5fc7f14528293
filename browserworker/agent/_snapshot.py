"""The page as an agent reads it: an accessibility-style snapshot whose elements carry refs.

Like Playwright MCP's snapshot, each line is ``- role "name" [ref=eN]``, nested as the page
nests them. A ref names an element for the next tool call; for the journal (and a flow exported
from the session) each ref also has a *selector* that finds the same element again on a fresh
page: its ``#id``, its ``[name=...]``, its role and accessible name, or else its path.

Refs are numbered across the session (a new snapshot never reuses an old number), and each
snapshot takes the refs of the one before it away: a ref of an older snapshot is *stale*. The
values of password fields, and of fields a secret was typed into, are never in a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playwright.async_api import Page

from .._redact import SECRET_MARK

__all__ = ["MARK_SECRET", "REF_ATTRIBUTE", "Snapshot", "Target", "take_snapshot"]

REF_ATTRIBUTE = "data-bw-ref"
MARK_SECRET = (
    f"e => {{ e.setAttribute('{SECRET_MARK}', ''); "
    "for (const p of ['color', '-webkit-text-fill-color', 'caret-color']) e.style.setProperty(p, 'transparent', 'important'); }"
)
"""Mark an element a secret was typed into, and make its text transparent: no screenshot shows
it, whoever takes it and however (an approval's is taken by CDP while a request is held)."""

_JS = r"""
([first, attr, secretAttr, limit]) => {
  const INTERACTIVE = {A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', SUMMARY: 'button'};
  const INPUT_ROLES = {button: 'button', submit: 'button', reset: 'button', image: 'button', checkbox: 'checkbox',
    radio: 'radio', range: 'slider', number: 'spinbutton', search: 'searchbox'};
  const LANDMARK = {H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading',
    FORM: 'form', NAV: 'navigation', MAIN: 'main', TABLE: 'table', TR: 'row', TD: 'cell', TH: 'columnheader',
    UL: 'list', OL: 'list', LI: 'listitem', P: 'paragraph', LABEL: null, IMG: 'img', DIALOG: 'dialog'};
  for (const el of document.querySelectorAll('[' + attr + ']')) el.removeAttribute(attr);
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim().slice(0, 160);
  const hidden = (el) => {
    if (el.hidden || el.getAttribute('aria-hidden') === 'true') return true;
    if (el.tagName === 'INPUT' && el.type === 'hidden') return true;
    const st = getComputedStyle(el);
    return st.display === 'none' || st.visibility === 'hidden';
  };
  const roleOf = (el) => {
    const r = el.getAttribute('role');
    if (r) return r;
    if (el.tagName === 'INPUT') return INPUT_ROLES[(el.type || 'text').toLowerCase()] || 'textbox';
    if (el.tagName === 'A') return el.hasAttribute('href') ? 'link' : null;
    if (el.tagName in INTERACTIVE) return INTERACTIVE[el.tagName];
    if (el.tagName in LANDMARK) return LANDMARK[el.tagName];
    return null;
  };
  const CONTAINERS = ['navigation', 'main', 'form', 'list', 'table', 'row', 'dialog', 'listitem', 'paragraph', 'cell', 'columnheader'];
  const labelOf = (el) => {
    const by = el.getAttribute('aria-labelledby');
    if (by) return clean(by.split(/\s+/).map(id => (document.getElementById(id) || {}).textContent || '').join(' '));
    if (el.getAttribute('aria-label')) return clean(el.getAttribute('aria-label'));
    if (el.id) { const l = document.querySelector('label[for="' + CSS.escape(el.id) + '"]'); if (l) return clean(l.textContent); }
    const wrap = el.closest('label'); if (wrap && wrap !== el) return clean(wrap.textContent);
    if (el.tagName === 'INPUT' && ['submit', 'button', 'reset'].includes(el.type)) return clean(el.value);
    if (el.tagName === 'IMG') return clean(el.getAttribute('alt'));
    if (['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName)) return clean(el.getAttribute('placeholder') || el.getAttribute('title') || el.name);
    if (CONTAINERS.includes(roleOf(el))) return '';
    return clean(el.textContent || el.getAttribute('title'));
  };
  const actionable = (role) => ['link', 'button', 'textbox', 'searchbox', 'combobox', 'checkbox', 'radio',
    'slider', 'spinbutton', 'switch', 'tab', 'menuitem', 'option', 'form'].includes(role);
  const unique = (sel) => { try { return document.querySelectorAll(sel).length === 1; } catch (e) { return false; } };
  const pathOf = (el) => {
    const parts = [];
    for (let e = el; e && e !== document.body && e.nodeType === 1; e = e.parentElement) {
      let i = 1; for (let s = e.previousElementSibling; s; s = s.previousElementSibling) if (s.tagName === e.tagName) i++;
      parts.unshift(e.tagName.toLowerCase() + ':nth-of-type(' + i + ')');
    }
    return 'body > ' + parts.join(' > ');
  };
  const seenNames = {};
  const lines = []; const refs = {}; let n = first; let count = 0;
  const selectorOf = (el, role, name) => {
    if (el.id && unique('#' + CSS.escape(el.id))) return '#' + CSS.escape(el.id);
    const tag = el.tagName.toLowerCase();
    if (el.name) { const s = tag + '[name="' + el.name.replace(/"/g, '\\"') + '"]'; if (unique(s)) return s; }
    const key = role + '|' + name;
    if (name && seenNames[key] === 1) return 'role=' + role + '[name="' + name.replace(/"/g, '\\"') + '"]';
    return pathOf(el);
  };
  const walk0 = (el) => {  // count role+name pairs first, so that a role selector is used only when unique
    for (const c of el.children) {
      if (hidden(c)) continue;
      const role = roleOf(c);
      if (role && actionable(role)) { const k = role + '|' + labelOf(c); seenNames[k] = (seenNames[k] || 0) + 1; }
      walk0(c);
    }
  };
  walk0(document.body);
  const walk = (el, depth) => {
    for (const c of el.children) {
      if (count >= limit) return;
      if (hidden(c) || ['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(c.tagName)) continue;
      const role = roleOf(c);
      if (!role) { walk(c, depth); continue; }
      const name = labelOf(c);
      let line = '  '.repeat(depth) + '- ' + role + (name && role !== 'paragraph' && role !== 'cell' ? ' "' + name.replace(/"/g, "'") + '"' : '');
      if (/^H[1-6]$/.test(c.tagName)) line += ' [level=' + c.tagName[1] + ']';
      if (c.disabled) line += ' [disabled]';
      if (c.type === 'checkbox' || c.type === 'radio') line += c.checked ? ' [checked]' : '';
      if (c.getAttribute('aria-invalid') === 'true') line += ' [invalid]';
      if (actionable(role)) {
        const ref = 'e' + (n++);
        c.setAttribute(attr, ref);
        line += ' [ref=' + ref + ']';
        refs[ref] = {selector: selectorOf(c, role, name), role, name, tag: c.tagName.toLowerCase(),
          type: (c.type || '').toLowerCase(), field: c.name || c.id || '', secret: c.type === 'password' || c.hasAttribute(secretAttr)};
      }
      if (role === 'textbox' || role === 'searchbox' || role === 'spinbutton' || role === 'combobox') {
        const v = (c.type === 'password' || c.hasAttribute(secretAttr)) ? (c.value ? '***' : '') : clean(c.value);
        if (v) line += ': ' + v;
      } else if (['paragraph', 'cell', 'columnheader', 'listitem', 'alert', 'status'].includes(role)) {
        const t = clean(c.textContent);
        if (t && !c.querySelector('a,button,input,select,textarea')) { line += ': ' + t; lines.push(line); count++; continue; }
        if (role === 'paragraph') { walk(c, depth); continue; }
      }
      lines.push(line); count++;
      if (role !== 'link' && role !== 'button' && role !== 'combobox') walk(c, depth + 1);
    }
  };
  walk(document.body, 0);
  return {lines, refs, next: n, truncated: count >= limit, title: document.title};
}
"""


@dataclass(frozen=True)
class Target:
    """What a ref named: a selector that finds it again, its role, accessible name, tag and
    type, the field name a value typed into it may be called by, and whether it is secret."""

    selector: str
    role: str = ""
    name: str = ""
    tag: str = ""
    type: str = ""
    field: str = ""
    secret: bool = False

    @classmethod
    def of(cls, data: dict[str, Any]) -> Target:
        return cls(**{k: data[k] for k in ("selector", "role", "name", "tag", "type", "field", "secret") if k in data})

    def to_dict(self) -> dict[str, Any]:
        return {
            "selector": self.selector,
            "role": self.role,
            "name": self.name,
            "tag": self.tag,
            "type": self.type,
            "field": self.field,
            "secret": self.secret,
        }


@dataclass(frozen=True)
class Snapshot:
    """One snapshot: its text (URL, title, then the element lines) and what its refs name."""

    url: str
    title: str
    text: str
    refs: dict[str, Target]
    next_ref: int
    truncated: bool


async def take_snapshot(page: Page, first_ref: int, *, limit: int = 600) -> Snapshot:
    """Snapshot ``page``, numbering its refs from ``first_ref`` (refs of earlier snapshots go stale)."""
    data = await page.evaluate(_JS, [first_ref, REF_ATTRIBUTE, SECRET_MARK, limit])
    title = str(data["title"])
    refs = {ref: Target.of(t) for ref, t in data["refs"].items()}
    head = [f"- Page URL: {page.url}", f"- Page Title: {title}", "- Page Snapshot:"]
    body = list(data["lines"])
    if data["truncated"]:
        body.append(f"- (snapshot cut at {limit} elements)")
    return Snapshot(page.url, title, "\n".join(head + body), refs, int(data["next"]), bool(data["truncated"]))
