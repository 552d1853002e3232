"""Copy-on-access collections: an episode's database shares the pristine records it never touches.

Why: a fresh environment used to validate the whole database again (retail: every user,
product and order; about 2 ms for the synthetic data, 23 ms for tau2's), and with many
episodes in flight the tens of thousands of objects per copy also made the cyclic garbage
collector walk an ever larger heap, so that copies cost 2-3x more than in isolation. An
episode touches a handful of records, so :class:`CopyOnAccessDict` starts out holding the
pristine (validated once, never mutated) records and swaps in a private copy of a record the
first time any Python-level access hands it out (``d[k]``, ``get``, ``values``, ``items``,
``pop``, ``setdefault``, iteration followed by ``d[k]``, ``dict(d)``, ``copy``,
``deepcopy``, pickling). Code that mutates what it got therefore always mutates its own
copy, and the pristine records stay as they were for every other episode.

Reading the raw storage without claiming (C-level serialisation such as pydantic's
``model_dump``, ``==``, :func:`peek_items`) sees pristine and private records side by side,
which is exactly the episode's current state.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterator, Mapping, TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: Makes the private copy of a pristine record: (key, pristine value) -> independent value.
Copier = Callable[[Any, Any], Any]


class CopyOnAccessDict(dict):
    """A dict whose pristine values are replaced by private copies the first time they are handed out."""

    __slots__ = ("_owned", "_copier", "pristine_digests")

    def __init__(
        self, pristine: Mapping[Any, Any], copier: Copier, pristine_digests: dict[Any, str] | None = None
    ) -> None:
        super().__init__(pristine)  # shallow: the values are the shared pristine records
        self._owned: set[Any] = set()
        self._copier = copier
        #: state digests of the pristine records by key, shared by every dict over the same
        #: pristine records (see :func:`flatscore.domains.environment.record_digests`)
        self.pristine_digests: dict[Any, str] = pristine_digests if pristine_digests is not None else {}

    # -- claiming ------------------------------------------------------------------------
    def _claim(self, key: Any) -> Any:
        """The private value under ``key`` (copied from the pristine one on first access)."""
        value = dict.__getitem__(self, key)
        if key not in self._owned:
            value = self._copier(key, value)
            dict.__setitem__(self, key, value)
            self._owned.add(key)
        return value

    def claimed(self) -> frozenset[Any]:
        """Keys whose value is private to this dict (copied or set); the rest are pristine."""
        return frozenset(self._owned)

    # -- reads that hand values out ---------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        return self._claim(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self._claim(key) if dict.__contains__(self, key) else default

    def __iter__(self) -> Iterator[Any]:
        # Overriding __iter__ also makes dict(d), {**d} and dict.update(d) take the slow path
        # (keys() then d[k]), which claims, instead of copying the raw pristine values.
        return dict.__iter__(self)

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        return (self._claim(key) for key in list(dict.keys(self)))

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        return ((key, self._claim(key)) for key in list(dict.keys(self)))

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._claim(key)
        self[key] = default
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        if not dict.__contains__(self, key):
            return dict.pop(self, key, *default)
        value = self._claim(key)
        dict.__delitem__(self, key)
        self._owned.discard(key)
        return value

    def popitem(self) -> tuple[Any, Any]:
        key = next(reversed(dict.keys(self)))
        return key, self.pop(key)

    def copy(self) -> dict[Any, Any]:
        return dict(self.items())

    # -- writes -------------------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._owned.add(key)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self._owned.discard(key)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> "CopyOnAccessDict":  # type: ignore[override]
        self.update(other)
        return self

    def __or__(self, other: Any) -> dict[Any, Any]:  # type: ignore[override]
        merged = self.copy()
        merged.update(other)
        return merged

    def clear(self) -> None:
        dict.clear(self)
        self._owned.clear()

    # -- copying and pickling: the result is a plain dict of independent values ---------------
    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}

    def __copy__(self) -> dict[Any, Any]:
        return self.copy()

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self.copy(),))


def peek_items(mapping: Mapping[K, V]) -> Iterator[tuple[K, V]]:
    """Items of a dict without claiming them: for read-only scans (look-ups by name, e-mail).

    Why: a scan that only compares fields would otherwise copy every record it passes. What
    it yields may be a record shared by every episode, so the caller must not mutate it (to
    change a record, fetch it again with ``mapping[key]``).
    """
    if isinstance(mapping, dict):
        return iter(dict.items(mapping))
    return iter(mapping.items())


def peek_values(mapping: Mapping[K, V]) -> Iterator[V]:
    """Values without claiming them; read-only, as for :func:`peek_items`."""
    if isinstance(mapping, dict):
        return iter(dict.values(mapping))
    return iter(mapping.values())
