"""JSON Pointer escaping, and the copy-on-write editor that builds the mutated object.

The patch itself is written by mutation, which knows exactly what it changed (mutate.py); the rules it follows
are the API server's (evanphx/json-patch): `add` into a missing map fails, and `replace` or `remove` of a
missing key fails, so a missing parent is added whole, with its content. The editor copies only the maps and
lists on an edited path: the rest of the result is the very objects of the original, so building it costs
what the change costs, not what the object costs (this runs on every admission review).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

Path = tuple[str | int, ...]


@lru_cache(maxsize=4096)  # the same few resource names, in every review
def escape_token(token: str | int) -> str:
    """JSON Pointer escaping (RFC 6901): `~` is `~0`, `/` is `~1`: `nvidia.com/gpu` is `nvidia.com~1gpu`."""
    return str(token).replace("~", "~0").replace("/", "~1")


def pointer(path: Path) -> str:
    return "".join("/" + escape_token(token) for token in path)


class ObjectEditor:
    """A copy-on-write view of `original`: only the maps and lists on an edited path are copied."""

    def __init__(self, original: dict[str, Any]) -> None:
        self.root: dict[str, Any] = dict(original)
        self._owned: dict[Path, Any] = {(): self.root}  # path -> the copy that this editor owns

    def _node(self, path: Path) -> Any:
        """The container at `path`, copied on first write so the original is never changed."""
        node = self._owned.get(path)
        if node is None:
            parent = self._node(path[:-1])
            node = parent[path[-1]]
            node = dict(node) if isinstance(node, dict) else list(node)
            parent[path[-1]] = self._owned[path] = node
        return node

    def ensure_map(self, path: Path) -> Any:
        """The map at `path`, created (with its missing parents) where absent or null.

        List indexes on the way (a container's index) must exist; only maps are created.
        """
        node = self._owned.get(path)
        if node is not None:
            return node
        parent = self._node(path[:-1]) if isinstance(path[-1], int) else self.ensure_map(path[:-1])
        if isinstance(parent, dict) and parent.get(path[-1]) is None:
            parent[path[-1]] = self._owned[path] = {}
        return self._node(path)

    def set(self, path: Path, value: Any) -> None:
        self.ensure_map(path[:-1])[path[-1]] = value

    def put(self, path: Path, value: Any) -> None:
        """Set `path`, whose parent exists (a container at its index)."""
        self._node(path[:-1])[path[-1]] = value
