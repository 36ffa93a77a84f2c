"""JSON Pointer tokens (RFC 6901) for the patches that mutation writes.

The patch itself is written by mutation, which knows exactly what it changed (mutate.py); the rules it follows
are the API server's (evanphx/json-patch): `add` into a missing map fails, and `replace` or `remove` of a
missing key fails, so a missing parent is added whole, with its content.
"""

from __future__ import annotations

from functools import lru_cache

Path = tuple[str | int, ...]


@lru_cache(maxsize=4096)  # the same few resource names, in every review
def escape_token(token: str | int) -> str:
    """JSON Pointer escaping (RFC 6901): `~` is `~0`, `/` is `~1`: `nvidia.com/gpu` is `nvidia.com~1gpu`."""
    return str(token).replace("~", "~0").replace("/", "~1")


_INDEX_TOKENS = tuple(str(i) for i in range(1024))


def index_token(index: int) -> str:
    """A list index as a pointer token; formatting ints is a large share of building a patch, so the
    common ones are made once."""
    return _INDEX_TOKENS[index] if index < 1024 else str(index)


def pointer(path: Path) -> str:
    return "".join("/" + escape_token(token) for token in path)
