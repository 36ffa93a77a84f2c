"""RFC 6902 JSON Patch, as the API server will apply it, and the copy-on-write editor that mutation uses.

The API server applies patches with evanphx/json-patch: `add` into a missing map fails, and `replace` or
`remove` of a missing key fails. `diff` therefore only ever adds keys to maps that exist in the original (a
missing parent is added whole, with its content), replaces or removes keys that exist, and appends to lists by
index. Edits go to a copy-on-write view, so untouched subtrees of the result are the very objects of the
original and `diff` skips them by identity: the patch touches only changed paths, and the cost is
proportional to the change, not to the object (this runs on every admission review).
"""

from __future__ import annotations

from typing import Any

Path = tuple[str | int, ...]


def escape_token(token: str | int) -> str:
    """JSON Pointer escaping (RFC 6901): `~` is `~0`, `/` is `~1`: `nvidia.com/gpu` is `nvidia.com~1gpu`."""
    return str(token).replace("~", "~0").replace("/", "~1")


def pointer(path: Path) -> str:
    return "".join("/" + escape_token(token) for token in path)


class ObjectEditor:
    """A copy-on-write view of `original`: only the maps and lists on an edited path are copied."""

    def __init__(self, original: dict[str, Any]) -> None:
        self.original = original
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

    def get(self, path: Path) -> Any:
        """The current value at `path` (for reading; never copies)."""
        node = self._owned.get(path)
        if node is not None:
            return node
        node = self.root
        for key in path:
            node = node[key]
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

    def remove(self, path: Path) -> None:
        del self._node(path[:-1])[path[-1]]

    def append(self, list_path: Path, value: Any) -> None:
        """Append to the list at `list_path`, creating it (and its parents) where absent or null."""
        parent = self.ensure_map(list_path[:-1])
        if not isinstance(parent.get(list_path[-1]), list):
            parent[list_path[-1]] = self._owned[list_path] = []
        self._node(list_path).append(value)


def diff(original: Any, changed: Any, at: str = "") -> list[dict[str, Any]]:
    """The JSON Patch that turns `original` into `changed` (identical subtrees are skipped by identity)."""
    ops: list[dict[str, Any]] = []
    _diff(original, changed, at, ops)
    return ops


def _child(at: str, key: str | int) -> str:
    if isinstance(key, str) and ("~" in key or "/" in key):
        key = escape_token(key)
    return f"{at}/{key}"


def _diff(original: Any, changed: Any, at: str, ops: list[dict[str, Any]]) -> None:
    if original is changed:
        return
    if isinstance(original, dict) and isinstance(changed, dict):
        for key, value in original.items():
            if key not in changed:
                ops.append({"op": "remove", "path": _child(at, key)})
            elif value is not changed[key]:
                _diff(value, changed[key], _child(at, key), ops)
        for key, value in changed.items():
            if key not in original:
                ops.append({"op": "add", "path": _child(at, key), "value": value})
        return
    if isinstance(original, list) and isinstance(changed, list) and len(changed) >= len(original):
        for index, value in enumerate(original):
            if value is not changed[index]:
                _diff(value, changed[index], _child(at, index), ops)
        for index in range(len(original), len(changed)):
            ops.append({"op": "add", "path": _child(at, index), "value": changed[index]})
        return
    if original == changed and type(original) is type(changed):
        return
    ops.append({"op": "replace", "path": at, "value": changed})
