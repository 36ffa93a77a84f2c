"""JSON Pointers (RFC 6901) for the patches that mutation writes.

The patch itself is written by mutation (mutate.py), which sets each part it changed whole; the rules it
follows are the API server's (evanphx/json-patch): `add` into a missing map fails, and `replace` of a missing
key fails, so a part that is not there is added and one that is there is replaced.
"""

from __future__ import annotations

Path = tuple[str | int, ...]


def escape_token(token: str | int) -> str:
    """`~` is `~0` and `/` is `~1`: the annotation `gpu-admission.io/policy` is `gpu-admission.io~1policy`."""
    return str(token).replace("~", "~0").replace("/", "~1")


_INDEX_TOKENS = tuple(str(i) for i in range(1024))


def index_token(index: int) -> str:
    """A list index as a pointer token (a container's); the common ones are made once, not per review."""
    return _INDEX_TOKENS[index] if index < 1024 else str(index)


def pointer(path: Path) -> str:
    return "".join("/" + escape_token(token) for token in path)
