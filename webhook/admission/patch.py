"""JSON Pointer tokens (RFC 6901) for the patches that mutation writes.

The patch itself is written by mutation, which knows exactly what it changed (mutate.py); the rules it follows
are the API server's (evanphx/json-patch): `add` into a missing map fails, and `replace` or `remove` of a
missing key fails, so a missing parent is added whole, with its content.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from webhook.admission.memo import BoundedMemo

Path = tuple[str | int, ...]


def _escape(token: str | int) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


# JSON Pointer escaping (RFC 6901): `~` is `~0`, `/` is `~1`: `nvidia.com/gpu` is `nvidia.com~1gpu`. The same
# few resource names are escaped in every review, so memoized.
escape_token: Callable[[str | int], str] = BoundedMemo(_escape).__getitem__


_INDEX_TOKENS = tuple(str(i) for i in range(1024))


def index_token(index: int) -> str:
    """A list index as a pointer token; formatting ints is a large share of building a patch, so the
    common ones are made once."""
    return _INDEX_TOKENS[index] if index < 1024 else str(index)


def index_tokens(start: int, stop: int) -> Sequence[str]:
    """The tokens of indexes `start` to `stop - 1`: the paths of entries appended to a list."""
    return _INDEX_TOKENS[start:stop] if stop <= 1024 else [str(i) for i in range(start, stop)]


def pointer(path: Path) -> str:
    return "".join("/" + escape_token(token) for token in path)
