"""The page as an agent reads it: an accessibility-style snapshot whose elements carry refs.

Like Playwright MCP's snapshot, each line is ``- role "name" [ref=eN]``, nested as the page
nests them. A ref names an element for the next tool call; for the journal (and a flow exported
from the session) each ref also has a *selector* that finds the same element again on a fresh
page: its ``#id``, its ``[name=...]``, its role and accessible name, or else its path.

The page is read as it is shown: the elements of open shadow roots where their hosts are, an
editor (``contenteditable``) as a textbox, a select with its options, and each frame shown
under its ``iframe`` line (another origin's too); a ref inside a frame is reached, and its
selector journaled, through the frame's element (``iframe... >> internal:control=enter-frame >> ...``).

Refs are numbered across the session (a new snapshot never reuses an old number), and each
snapshot takes the refs of the one before it away: a ref of an older snapshot is *stale*. The
values of password fields, and of fields a secret was typed into, are never in a snapshot.

What ``extract`` reads (the text of the elements a selector finds) is read here too
(:func:`read_texts`). Both cut what they read in the page, and a snapshot's answer comes back
as one JSON text: what crosses to Python is small and checked once.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Page

from .._redact import SECRET_MARK

__all__ = ["MARK_SECRET", "REF_ATTRIBUTE", "Snapshot", "Target", "read_texts", "take_snapshot"]

REF_ATTRIBUTE = "data-bw-ref"
FRAME_ATTRIBUTE = "data-bw-frame"
ENTER_FRAME = " >> internal:control=enter-frame >> "
"""What goes between a frame element's selector and a selector inside its document."""
FRAME_DEPTH = 3
"""Frames within frames read at most (the page's own document is the first)."""
FRAME_WAIT = 2.0
"""Seconds a frame's document may take to be read (a frame still loading is waited for)."""
MARK_SECRET = (
    f"e => {{ e.setAttribute('{SECRET_MARK}', ''); "
    "for (const p of ['color', '-webkit-text-fill-color', 'caret-color']) e.style.setProperty(p, 'transparent', 'important'); }"
)
"""Mark an element a secret was typed into, and make its text transparent: no screenshot shows
it, whoever takes it and however (an approval's is taken by CDP while a request is held)."""

_JS = r"""
([first, attr, secretAttr, frameAttr, limit]) => {
  const OPTIONS = 30;  // a select's options listed at most
  const INTERACTIVE = {A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', SUMMARY: 'button'};
  const INPUT_ROLES = {button: 'button', submit: 'button', reset: 'button', image: 'button', checkbox: 'checkbox',
    radio: 'radio', range: 'slider', number: 'spinbutton', search: 'searchbox', file: 'button'};
  const LANDMARK = {H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading',
    FORM: 'form', NAV: 'navigation', MAIN: 'main', TABLE: 'table', TR: 'row', TD: 'cell', TH: 'columnheader',
    UL: 'list', OL: 'list', LI: 'listitem', P: 'paragraph', LABEL: null, IMG: 'img', DIALOG: 'dialog'};
  // the rendered tree: a host's shadow root (open), a slot's assigned elements, else the children
  const kids = (el) => el.shadowRoot ? el.shadowRoot.children
    : el.tagName === 'SLOT' && el.assignedElements().length ? el.assignedElements({flatten: true}) : el.children;
  const roots = [document];  // the document and each open shadow root in it (walk0 adds them)
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
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return 'textbox';  // an editor
    if (el.tagName === 'INPUT') return INPUT_ROLES[(el.type || 'text').toLowerCase()] || 'textbox';
    if (el.tagName === 'A') return el.hasAttribute('href') ? 'link' : null;
    if (el.tagName in INTERACTIVE) return INTERACTIVE[el.tagName];
    if (el.tagName in LANDMARK) return LANDMARK[el.tagName];
    return null;
  };
  // roles not named by their content: a list box is not named by all of its options' text
  const CONTAINERS = ['navigation', 'main', 'form', 'list', 'table', 'row', 'dialog', 'listitem', 'paragraph', 'cell',
    'columnheader', 'listbox', 'menu', 'menubar', 'tablist', 'tree', 'grid', 'radiogroup', 'toolbar', 'group',
    'tabpanel', 'region', 'article', 'complementary', 'banner', 'contentinfo', 'search', 'log', 'feed'];
  // an element's text without what its styles and scripts hold (an inline SVG icon's <style>)
  const textOf = (el) => {
    if (!el.querySelector('style, script')) return el.textContent;
    const copy = el.cloneNode(true);
    copy.querySelectorAll('style, script').forEach((x) => x.remove());
    return copy.textContent;
  };
  const labelOf = (el) => {
    const by = el.getAttribute('aria-labelledby');
    const root = el.getRootNode();  // ids and label[for] are looked up in the element's own tree
    if (by) return clean(by.split(/\s+/).map(id => (root.getElementById(id) || {}).textContent || '').join(' '));
    if (el.getAttribute('aria-label')) return clean(el.getAttribute('aria-label'));
    if (el.id) { const l = root.querySelector('label[for="' + CSS.escape(el.id) + '"]'); if (l) return clean(l.textContent); }
    if (el.isContentEditable) return clean(el.getAttribute('title'));  // an editor: its text is its value
    if (['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName)) { const wrap = el.closest('label'); if (wrap) return clean(wrap.textContent); }
    if (el.tagName === 'INPUT' && ['submit', 'button', 'reset'].includes(el.type)) return clean(el.value);
    if (el.tagName === 'IMG') return clean(el.getAttribute('alt'));
    if (['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName)) return clean(el.getAttribute('placeholder') || el.getAttribute('title') || el.name);
    if (CONTAINERS.includes(roleOf(el))) return '';
    // its text, else what names an icon in it (an image's alt, an aria-label), else its tooltip: a
    // Font Awesome button with only a title ("Delete Record") is named by it, as ARIA names it
    const icon = el.querySelector('img[alt], [aria-label]');
    return clean(textOf(el)) || clean(icon && (icon.getAttribute('alt') || icon.getAttribute('aria-label')))
      || clean(el.getAttribute('title'));
  };
  const actionable = (role) => ['link', 'button', 'textbox', 'searchbox', 'combobox', 'checkbox', 'radio',
    'slider', 'spinbutton', 'switch', 'tab', 'menuitem', 'option', 'form'].includes(role);
  // Playwright's CSS pierces open shadow roots: a selector is unique if it is across all of them,
  // and a path goes from a host on to its shadow root's children with the same ' > '
  const unique = (sel) => {
    try { let n = 0; for (const r of roots) { n += r.querySelectorAll(sel).length; if (n > 1) return false; } return n === 1; }
    catch (e) { return false; }
  };
  const pathOf = (el) => {
    const parts = [];
    for (let e = el; e && e !== document.body && e.nodeType === 1; e = e.parentElement || (e.parentNode || {}).host) {
      let i = 1; for (let s = e.previousElementSibling; s; s = s.previousElementSibling) if (s.tagName === e.tagName) i++;
      parts.unshift(e.tagName.toLowerCase() + ':nth-of-type(' + i + ')');
    }
    return parts.length ? 'body > ' + parts.join(' > ') : 'body';
  };
  const seenNames = {};
  const lines = []; const refs = {}; let n = first; let count = 0;
  const selectorOf = (el, role, name) => {
    if (el.id && unique('#' + CSS.escape(el.id))) return '#' + CSS.escape(el.id);
    const tag = el.tagName.toLowerCase();
    if (el.name) { const s = tag + '[name="' + el.name.replace(/"/g, '\\"') + '"]'; if (unique(s)) return s; }
    const key = role + '|' + name;
    const aria = el.hasAttribute('role') || !el.isContentEditable;  // an editor is a textbox here, not to ARIA
    if (aria && name && seenNames[key] === 1) return 'role=' + role + '[name="' + name.replace(/"/g, '\\"') + '"]';
    const label = el.getAttribute('aria-label');
    if (label) { const s = tag + '[aria-label="' + label.replace(/"/g, '\\"') + '"]'; if (unique(s)) return s; }
    return pathOf(el);
  };
  // the elements with something under them that has a line of its own (a role, a frame, a shadow
  // root): any other element with text is a block of text, read as one line (a price in a div)
  const holds = new Set();
  const walk0 = (el) => {  // count role+name pairs first, so that a role selector is used only when unique
    let any = false;
    for (const c of kids(el)) {
      if (hidden(c)) continue;
      if (c.shadowRoot) roots.push(c.shadowRoot);
      const role = roleOf(c);
      if (role && actionable(role)) { const k = role + '|' + labelOf(c); seenNames[k] = (seenNames[k] || 0) + 1; }
      if (walk0(c)) holds.add(c);
      if (role || holds.has(c) || c.shadowRoot || ['IFRAME', 'FRAME', 'SLOT'].includes(c.tagName)) any = true;
    }
    return any;
  };
  walk0(document.body);
  for (const r of roots) for (const a of [attr, frameAttr]) for (const el of r.querySelectorAll('[' + a + ']')) el.removeAttribute(a);
  const frames = [];  // each frame element shown: the lines of its document go after its own line
  // what walk reads: the rendered tree's nodes, text nodes too (a text where it sits among elements)
  const nodes = (el) => el.shadowRoot ? el.shadowRoot.childNodes
    : el.tagName === 'SLOT' && el.assignedNodes().length ? el.assignedNodes({flatten: true}) : el.childNodes || el.children;
  // lines of text have a budget of their own: a long article never crowds out what can be acted on
  let said = 0, unsaid = 0;
  const say = (depth, t) => { if (said < limit) { lines.push('  '.repeat(depth) + '- text: ' + t); said++; } else unsaid++; };
  // a plain element the page makes clickable (a "div button": its own click handler or pointer)
  const clickable = (el) => el.hasAttribute('onclick') || (getComputedStyle(el).cursor === 'pointer'
    && !(el.parentElement && getComputedStyle(el.parentElement).cursor === 'pointer'));
  // ``quiet``: the text under here names an element already listed (a label's, a heading's): only
  // what can be acted on is listed under it
  const walk = (el, depth, quiet) => {
    for (const c of nodes(el)) {
      if (count >= limit) return;
      if (c.nodeType === 3) { const t = quiet ? '' : clean(c.textContent); if (t) say(depth, t); continue; }
      if (c.nodeType !== 1) continue;
      if (c.tagName === 'LABEL' && c.control && !quiet && !hidden(c)) {
        const box = c.control;
        if ((box.type === 'checkbox' || box.type === 'radio') && hidden(box)) {
          // a styled checkbox or radio: its input hidden, its label what a person clicks; listed
          // as the input, named by the label (check and click go through the label)
          const name = clean(c.innerText);
          const ref = 'e' + (n++);
          box.setAttribute(attr, ref);
          lines.push('  '.repeat(depth) + '- ' + box.type + (name ? ' "' + name.replace(/"/g, "'") + '"' : '')
            + (box.disabled ? ' [disabled]' : '') + (box.checked ? ' [checked]' : '') + ' [ref=' + ref + ']'); count++;
          refs[ref] = {selector: selectorOf(box, box.type, name), role: box.type, name, tag: 'input', type: box.type,
            field: box.name || box.id || '', secret: false};
          walk(c, depth + 1, true);  // a link in it ("the terms"): its text is the box's name
          continue;
        }
        walk(c, depth, true);  // its text names its control
        continue;
      }
      if (hidden(c) || ['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(c.tagName)) continue;
      if (c.tagName === 'IFRAME' || c.tagName === 'FRAME') {
        const box = c.getBoundingClientRect();
        if (!box.width || !box.height) continue;  // a frame nobody sees (a tracker's)
        const name = clean(c.getAttribute('title') || c.name);
        c.setAttribute(frameAttr, String(frames.length));
        lines.push('  '.repeat(depth) + '- iframe' + (name ? ' "' + name.replace(/"/g, "'") + '"' : '')); count++;
        frames.push({at: lines.length - 1, depth, selector: selectorOf(c, 'iframe', '')});
        continue;
      }
      const role = roleOf(c);
      if (!role) {  // a block of text: a line for each line the page shows of it
        const texts = quiet || holds.has(c) ? [] : (c.innerText || '').split('\n').map(clean);
        if (!holds.has(c) && texts.some(t => t) && clickable(c)) {
          const name = clean(texts.join(' ')), ref = 'e' + (n++);
          c.setAttribute(attr, ref);
          lines.push('  '.repeat(depth) + '- generic "' + name.replace(/"/g, "'") + '" [cursor=pointer] [ref=' + ref + ']'); count++;
          refs[ref] = {selector: selectorOf(c, 'generic', name), role: 'generic', name, tag: c.tagName.toLowerCase(),
            type: '', field: '', secret: false};
          continue;
        }
        for (const t of texts) if (t) say(depth, t);
        if (holds.has(c)) walk(c, depth, quiet);
        continue;
      }
      const name = labelOf(c);
      if (quiet && !actionable(role)) { walk(c, depth, quiet); continue; }  // its text said already
      let line = '  '.repeat(depth) + '- ' + role + (name && role !== 'paragraph' && role !== 'cell' ? ' "' + name.replace(/"/g, "'") + '"' : '');
      if (/^H[1-6]$/.test(c.tagName)) line += ' [level=' + c.tagName[1] + ']';
      if (c.disabled) line += ' [disabled]';
      if (c.type === 'file') line += ' [file]';
      if (c.type === 'checkbox' || c.type === 'radio') line += c.checked ? ' [checked]' : '';
      if (c.getAttribute('aria-invalid') === 'true') line += ' [invalid]';
      if (actionable(role)) {
        const ref = 'e' + (n++);
        c.setAttribute(attr, ref);
        line += ' [ref=' + ref + ']';
        refs[ref] = {selector: selectorOf(c, role, name), role, name, tag: c.tagName.toLowerCase(),
          type: (c.type || '').toLowerCase(), field: c.name || c.id || '', secret: c.type === 'password' || c.hasAttribute(secretAttr)};
      }
      if (c.type === 'file' && c.files.length) line += ': ' + [...c.files].map(f => f.name).join(', ');
      if (c.tagName === 'SELECT') {  // its choices: what select may be given (by label or value)
        const chosen = [...c.selectedOptions].map(o => clean(o.label)).join(', ');
        lines.push(line + (chosen ? ': ' + chosen : '')); count++;
        const options = [...c.options];
        for (const o of options.slice(0, OPTIONS)) {
          lines.push('  '.repeat(depth + 1) + '- option "' + clean(o.label).replace(/"/g, "'") + '"'
            + (o.selected ? ' [selected]' : '') + (o.disabled ? ' [disabled]' : '')); count++;
        }
        if (options.length > OPTIONS) { lines.push('  '.repeat(depth + 1) + '- (' + (options.length - OPTIONS) + ' more options)'); count++; }
        continue;
      }
      if (role === 'textbox' || role === 'searchbox' || role === 'spinbutton' || role === 'combobox') {
        const value = c.isContentEditable ? c.textContent : c.value;
        const v = (c.type === 'password' || c.hasAttribute(secretAttr)) ? (value ? '***' : '') : clean(value);
        if (v) line += ': ' + v;
      } else if (['paragraph', 'cell', 'columnheader', 'listitem', 'alert', 'status'].includes(role)) {
        const t = clean(c.textContent);
        if (t && !c.querySelector('a,button,input,select,textarea')) { line += ': ' + t; lines.push(line); count++; continue; }
        if (role === 'paragraph') { walk(c, depth, quiet); continue; }
      }
      lines.push(line); count++;
      if (!['link', 'button', 'combobox', 'textbox'].includes(role)) walk(c, depth + 1, quiet || (!!name && !CONTAINERS.includes(role)));
    }
  };
  walk(document.body.isContentEditable ? {children: [document.body]} : document.body, 0, false);  // an editor's frame
  if (unsaid) lines.push('- (' + unsaid + ' more lines of text not shown: extract reads them)');
  return {lines, refs, frames, next: n, count, truncated: count >= limit, title: document.title};
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
    """One snapshot: its text (URL, title, then the element lines) and what its refs name;
    ``live`` holds the selector that reaches a ref's element now, for each ref inside a frame
    (one of the page's own is ``[data-bw-ref="eN"]``)."""

    url: str
    title: str
    text: str
    refs: dict[str, Target]
    next_ref: int
    truncated: bool
    live: dict[str, str] = field(default_factory=dict)


@dataclass
class _Read:
    """What the snapshot script read of one document (and of the frames in it, spliced in)."""

    lines: list[str]
    refs: dict[str, Target]
    live: dict[str, str]
    next_ref: int
    count: int
    truncated: bool
    title: str


async def take_snapshot(page: Page, first_ref: int, *, limit: int = 600) -> Snapshot:
    """Snapshot ``page``, numbering its refs from ``first_ref`` (refs of earlier snapshots go stale).

    The elements of open shadow roots are read where they are shown; so are those of each frame
    shown (an ``iframe`` line, its document's lines under it), its refs reached through it
    (``iframe... >> internal:control=enter-frame >> ...``), to :data:`FRAME_DEPTH` frames deep.
    A frame that cannot be read (gone, or still loading after :data:`FRAME_WAIT` seconds) is
    said to be so."""
    read = await _read(page.main_frame, first_ref, limit, "", 0)
    head = [f"- Page URL: {page.url}", f"- Page Title: {read.title}", "- Page Snapshot:"]
    if read.truncated:
        read.lines.append(f"- (snapshot cut at {limit} elements)")
    return Snapshot(
        page.url, read.title, "\n".join(head + read.lines), read.refs, read.next_ref, read.truncated, read.live
    )


_AS_TEXT = f"args => JSON.stringify(({_JS.strip()})(args))"
"""The snapshot script with its answer sent as one JSON text (see :func:`_evaluated`)."""

_FIELDS = {"lines": list, "refs": dict, "frames": list, "next": int, "count": int, "truncated": bool, "title": str}


async def _evaluated(frame: Frame, args: list[Any]) -> dict[str, Any]:
    """What the snapshot script reads of ``frame``'s document.

    Its answer comes back as one JSON text: Playwright's client checks each value of an object an
    evaluation returns, one by one, in Python (a page of 600 elements took 25-30 ms of CPU for
    that, against under 2 ms to parse the text). A page whose own script broke its ``JSON`` (a
    library that gives arrays a ``toJSON``, or replaced ``JSON.stringify``) gets the script run
    again with its answer as an object (an error of the script itself is raised by that run)."""
    try:
        text = await frame.evaluate(_AS_TEXT, args)
        data = json.loads(text) if isinstance(text, str) else None
    except (PlaywrightError, ValueError):  # the page's JSON threw, or wrote what is not JSON
        data = None
    if isinstance(data, dict) and all(isinstance(data.get(k), kind) for k, kind in _FIELDS.items()):
        return data
    answer: dict[str, Any] = await frame.evaluate(_JS, args)
    return answer


async def _read(frame: Frame, first_ref: int, limit: int, prefix: str, depth: int) -> _Read:
    data = await _evaluated(frame, [first_ref, REF_ATTRIBUTE, SECRET_MARK, FRAME_ATTRIBUTE, limit])
    refs = {ref: Target.of(dict(t, selector=prefix + t["selector"])) for ref, t in data["refs"].items()}
    live = {ref: f'{prefix}[{REF_ATTRIBUTE}="{ref}"]' for ref in refs} if prefix else {}
    read = _Read(
        list(data["lines"]),
        refs,
        live,
        int(data["next"]),
        int(data["count"]),
        bool(data["truncated"]),
        str(data["title"]),
    )
    shown: list[dict[str, Any]] = data["frames"]
    if not shown:
        return read
    inside: dict[int, list[str]] = {}  # the line of a frame element: the lines read inside it
    children = frame.child_frames
    marks = await asyncio.gather(*(_mark_of(child) for child in children))  # round trips at once, not one by one
    for child, mark in zip(children, marks, strict=True):
        if mark is None or not 0 <= mark < len(shown):
            continue
        at, indent = shown[mark]["at"], "  " * (shown[mark]["depth"] + 1)
        if depth + 1 >= FRAME_DEPTH or read.count >= limit:
            inside[at] = [f"{indent}- (frame not read: {'too deep' if read.count < limit else 'snapshot full'})"]
            continue
        enter = prefix + shown[mark]["selector"] + ENTER_FRAME
        try:
            async with asyncio.timeout(FRAME_WAIT):
                sub = await _read(child, read.next_ref, limit - read.count, enter, depth + 1)
        except Exception as exc:  # gone, navigating, or never loading
            reason = "still loading" if isinstance(exc, TimeoutError) else str(exc).splitlines()[0][:120]
            inside[at] = [f"{indent}- (frame not read: {reason})"]
            continue
        inside[at] = [indent + line for line in sub.lines]
        read.refs.update(sub.refs)
        read.live.update(sub.live)
        read.next_ref, read.count = sub.next_ref, read.count + sub.count
        read.truncated = read.truncated or sub.truncated
    read.lines = [out for i, line in enumerate(read.lines) for out in (line, *inside.get(i, ()))]
    return read


READ_MOST = 50
"""The most elements whose text :func:`read_texts` reads."""

_TEXTS = (
    "(els, [most, kept]) => "
    "[els.slice(0, most).map(e => String(e.innerText ?? e.textContent ?? '').slice(0, kept)), els.length]"
)


async def read_texts(page: Page, selector: str, kept: int) -> tuple[list[str], int]:
    """The text of the first :data:`READ_MOST` elements ``selector`` finds, in their order, each
    cut at ``kept`` characters, and how many it finds. Both cuts are made in the page: a table of
    thousands of rows sends no more than that."""
    texts, found = await page.locator(selector).evaluate_all(_TEXTS, [READ_MOST, kept])
    return [str(t) for t in texts], int(found)


async def _mark_of(frame: Frame) -> int | None:
    """The number the snapshot script gave ``frame``'s element in its parent's document, if any."""
    try:
        element = await frame.frame_element()
        try:
            mark = await element.get_attribute(FRAME_ATTRIBUTE)
        finally:
            await element.dispose()
    except Exception:  # detached meanwhile
        return None
    return int(mark) if mark is not None and mark.isdigit() else None
