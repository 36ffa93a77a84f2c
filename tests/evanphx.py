"""A JSON Patch applier with the API server's semantics (evanphx/json-patch), for checking our patches.

Stricter than RFC 6902 libraries where the API server is: `add` into a missing parent fails, `replace` and
`remove` of a missing key fail, array indexes must be in range (`add` may use len or `-`). The input is never
changed; the patched copy is returned.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    pass


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} does not start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"{path}: missing parent {token!r}")
            node = node[token]
        elif isinstance(node, list):
            index = int(token)
            if not 0 <= index < len(node):
                raise PatchError(f"{path}: index {index} out of range")
            node = node[index]
        else:
            raise PatchError(f"{path}: parent is not a container")
        if node is None:
            raise PatchError(f"{path}: parent {token!r} is null")
    return node


def apply(doc: Any, patch: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in patch:
        path, kind = op["path"], op["op"]
        tokens = _tokens(path)
        if not tokens:
            raise PatchError("operations on the whole document are not used by the webhook")
        parent, key = _parent(doc, tokens, path), tokens[-1]
        if isinstance(parent, dict):
            if kind == "add":
                parent[key] = copy.deepcopy(op["value"])
            elif kind in ("replace", "remove"):
                if key not in parent:
                    raise PatchError(f"{path}: {kind} of a missing key")
                if kind == "replace":
                    parent[key] = copy.deepcopy(op["value"])
                else:
                    del parent[key]
            else:
                raise PatchError(f"unsupported op {kind}")
        elif isinstance(parent, list):
            if kind == "add":
                index = len(parent) if key == "-" else int(key)
                if not 0 <= index <= len(parent):
                    raise PatchError(f"{path}: index out of range")
                parent.insert(index, copy.deepcopy(op["value"]))
            else:
                index = int(key)
                if not 0 <= index < len(parent):
                    raise PatchError(f"{path}: index out of range")
                if kind == "replace":
                    parent[index] = copy.deepcopy(op["value"])
                elif kind == "remove":
                    del parent[index]
                else:
                    raise PatchError(f"unsupported op {kind}")
        else:
            raise PatchError(f"{path}: parent is not a container")
    return doc
