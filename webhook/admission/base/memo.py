"""A bounded memo for pure functions of small, very repetitive inputs on the hot path.

Resource names and quantity texts repeat in nearly every review (`nvidia.com/gpu`, `"1"`). A lookup here is
a plain dict subscript, several times cheaper than a call through `functools.lru_cache`. Two bounds keep
hostile input from growing it without limit: the number of keys (a review with thousands of distinct names),
and the length of a key that is kept (the webhook sees objects before the API server validates them, so a
"name" may be megabytes long: such keys are worked out every time and not held).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Longer than any valid Kubernetes resource name (a 253-character DNS prefix, "/", a 63-character name).
MAX_KEY_LENGTH = 317


class BoundedMemo(dict[K, V]):
    """`memo[key]` is `compute(key)`, remembered; everything is forgotten once `limit` keys are held, and a
    string key longer than `max_key_length` is never held."""

    __slots__ = ("compute", "limit", "max_key_length")

    def __init__(self, compute: Callable[[K], V], limit: int = 4096, max_key_length: int = MAX_KEY_LENGTH) -> None:
        super().__init__()
        self.compute = compute
        self.limit = limit
        self.max_key_length = max_key_length

    def __missing__(self, key: K) -> V:
        if isinstance(key, str) and len(key) > self.max_key_length:
            return self.compute(key)
        if len(self) >= self.limit:
            self.clear()
        value = self[key] = self.compute(key)
        return value
