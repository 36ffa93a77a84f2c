"""A bounded memo for pure functions of small, very repetitive inputs on the hot path.

Resource names and quantity texts repeat in nearly every review (`nvidia.com/gpu`, `"1"`). A lookup here is
a plain dict subscript, several times cheaper than a call through `functools.lru_cache`; the bound keeps
hostile input (a review with thousands of distinct names) from growing it without limit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class BoundedMemo(dict):
    """`memo[key]` is `compute(key)`, remembered; everything is forgotten once `limit` keys are held."""

    __slots__ = ("compute", "limit")

    def __init__(self, compute: Callable[[Any], Any], limit: int = 4096) -> None:
        super().__init__()
        self.compute = compute
        self.limit = limit

    def __missing__(self, key: Hashable) -> Any:
        if len(self) >= self.limit:
            self.clear()
        value = self[key] = self.compute(key)
        return value
