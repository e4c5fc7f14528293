"""A page of the console: what each page module declares as its ``PAGE``."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.routing import BaseRoute

__all__ = ["Page"]


@dataclass(frozen=True)
class Page:
    """A page of the console: its name, its title in the nav, its path, its routes."""

    name: str
    title: str
    path: str
    routes: list[BaseRoute] = field(default_factory=list)
    in_nav: bool = True
