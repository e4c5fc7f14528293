"""Files an agent chooses for a page's file input (the ``upload`` tool).

Only from the directories the server's operator named (``browserworker mcp --files DIR``): an
agent names a file, never reads one, and nothing outside them can be sent from this host. Each
file is journaled with its path, size and SHA-256, so a replay (a takeover, a resumed session)
chooses the very same content, or says that it cannot; a flow exported from the session takes
the paths as an input.

Choosing files sends nothing: the form's submit sends them. A page that uploads a file as soon
as it is chosen (a drag-and-drop uploader) is stopped as any staging call that would send is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from playwright.async_api import Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from ..errors import ToolCallError

__all__ = ["CHOOSER_WAIT", "changed_file", "choose_files", "chosen_files"]

CHOOSER_WAIT = 5.0
"""Seconds a click on an element that is not a file input may take to open a file chooser."""

_IS_FILE_INPUT = "e => e instanceof HTMLInputElement && e.type === 'file'"


def chosen_files(paths: Sequence[str], roots: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Each of ``paths`` as journaled: ``{"path", "size", "sha256"}``, the path resolved (a
    relative one is in the first of ``roots``). Refused (:class:`ToolCallError`) unless every
    one is a regular file inside one of ``roots`` (symbolic links followed first)."""
    if not roots:
        raise ToolCallError(
            "this server lets no file be uploaded: its operator names the directories an agent may "
            "choose files from (browserworker mcp --files DIR)"
        )
    if not paths:
        raise ToolCallError("upload needs at least one path")
    allowed = [Path(root).expanduser().resolve() for root in roots]
    files = []
    for given in paths:
        path = Path(given).expanduser()
        path = (path if path.is_absolute() else allowed[0] / path).resolve()
        if not any(path.is_relative_to(root) for root in allowed):
            where = ", ".join(str(root) for root in allowed)
            raise ToolCallError(f"{given!r} is not in a directory this server uploads from ({where})")
        if not path.is_file():
            raise ToolCallError(f"{given!r} is not a file ({path})")
        try:
            files.append({"path": str(path), "size": path.stat().st_size, "sha256": _digest(path)})
        except OSError as exc:
            raise ToolCallError(f"{given!r} cannot be read: {exc.strerror or exc}") from None
    return files


def changed_file(files: Sequence[dict[str, Any]]) -> str | None:
    """What is wrong with the first of ``files`` (as :func:`chosen_files` gave them) whose content
    is not what it was when it was chosen (gone, or changed); ``None`` if none is."""
    for file in files:
        path = Path(file["path"])
        try:
            digest = _digest(path)
        except OSError as exc:
            return f"{path} cannot be read any more: {exc.strerror or exc}"
        if digest != file["sha256"]:
            return f"{path} has changed since it was chosen (its SHA-256 is not the one journaled)"
    return None


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


async def choose_files(page: Page, selector: str, paths: Sequence[str]) -> None:
    """Choose ``paths`` for the file input ``selector`` names, or for the file chooser that a
    click on it opens (a button or a label in front of a hidden input). Sends nothing by itself."""
    element = page.locator(selector)
    if await element.evaluate(_IS_FILE_INPUT):
        await element.set_input_files(list(paths))
        return
    try:
        async with page.expect_file_chooser(timeout=CHOOSER_WAIT * 1000) as chooser:
            await element.click()
    except PlaywrightTimeout:
        raise ValueError(f"{selector} is not a file input, and a click on it opened no file chooser") from None
    await (await chooser.value).set_files(list(paths))
