"""Registries of named methods (topology families, mixing rules, estimators, datasets, models).

A registry maps a name to an object and fails on unknown names with a "did you mean" hint,
so a typo in SQL, the CLI or the Python API always gets the same helpful message.
"""

from __future__ import annotations

import difflib
from typing import Generic, Iterator, TypeVar

from .errors import UnknownNameError, ValidationError

T = TypeVar("T")


def suggest(name: str, choices: list[str]) -> str:
    """Return ' (did you mean 'x'?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=1, cutoff=0.5)
    if not close:
        return ""
    original = next(c for c in choices if c.lower() == close[0])
    return f" (did you mean '{original}'?)"


def user_key(kind: str, name: object, builtin: tuple[str, ...], registry: "Registry",
             replace: bool) -> str:
    """The registry key of a user's own ``kind`` (model, dataset) called ``name``: a word of
    letters, digits and underscores, not a built-in's name, and not taken unless ``replace``."""
    key = name.strip().lower() if isinstance(name, str) else ""
    if not key or not (key[0].isalpha() or key[0] == "_") \
            or not key.replace("_", "a").isalnum() or not key.isascii():
        raise ValidationError(f"a {kind} name is a word of letters, digits and underscores "
                              f"(not starting with a digit), got {name!r}")
    if key in builtin:
        raise ValidationError(f"'{key}' is a built-in {kind} and cannot be replaced; register "
                              f"yours under another name")
    if key in registry and not replace:
        raise ValidationError(f"{kind} '{key}' is already registered; pass replace=True to "
                              f"replace it")
    return key


#: Registrations made in this process, in any registry (see :func:`registrations`).
_registrations = 0


def registrations() -> int:
    """How many registrations this process has made in any registry: a number that changes
    whenever what a name stands for may have (the plan cache's check)."""
    return _registrations


class Registry(Generic[T]):
    """A name -> object table for one kind of pluggable method."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T | None = None, *, replace: bool = False):
        """Register ``obj`` under ``name``; usable as a decorator when ``obj`` is omitted."""

        def add(item: T) -> T:
            global _registrations
            key = name.lower()
            if key in self._items and not replace:
                raise ValidationError(f"{self.kind} '{name}' is already registered")
            self._items[key] = item
            _registrations += 1
            return item

        if obj is None:
            return add
        return add(obj)

    def get(self, name: str) -> T:
        key = str(name).lower()
        try:
            return self._items[key]
        except KeyError:
            known = self.names()
            raise UnknownNameError(
                f"unknown {self.kind} '{name}'{suggest(str(name), known)}; "
                f"known: {', '.join(known)}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, T]]:
        return [(k, self._items[k]) for k in self.names()]
