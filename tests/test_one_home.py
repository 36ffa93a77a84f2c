"""Rules with one home, held there: a second copy written somewhere else fails here, naming where.

Read with `ast`, so comments and docstrings that mention the rules do not count.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@cache
def sources() -> dict[str, ast.AST]:
    """Every module of the package, parsed once, when a test first asks (not at collection, in every worker)."""
    return {
        path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "webhook").rglob("*.py"))
    }


def _where(found: list[tuple[str, ast.AST]]) -> list[str]:
    return [f"{path}:{getattr(node, 'lineno', '?')}" for path, node in found]


def test_a_message_is_shortened_only_by_violation_cut():
    """`text[:n] + "..."` anywhere but `violation.cut` is a second way to shorten (and a second mark)."""
    found = [
        (path, node)
        for path, tree in sources().items()
        if path != "webhook/admission/base/violation.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and isinstance(node.right, ast.Constant)
        and node.right.value in ("...", "…")
    ]
    assert _where(found) == []


def test_the_per_container_defaults_are_read_only_by_the_backends_default_per_container():
    """Besides the sharing backends' `default_per_container` (`max_per_container` reads it where the policy sets
    no maximum), only the JSON Schema's description of `maxPerContainer` names them."""
    names = {"SHARED_MAX_PER_CONTAINER", "MIG_MAX_PER_CONTAINER", "DEFAULT_MAX_PER_CONTAINER"}
    found = [
        (path, node)
        for path, tree in sources().items()
        if path != "webhook/admission/policy/policyfields.py"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load))
        or (isinstance(node, ast.alias) and node.name in names)
    ]
    inside = {
        id(inner)
        for path, tree in sources().items()
        if path.startswith("webhook/admission/sharing/")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "default_per_container"
        for inner in ast.walk(node)
    }
    imports = {  # the backends' own imports of the default they fall back to
        id(node)
        for path, node in found
        if path.startswith("webhook/admission/sharing/") and isinstance(node, ast.alias)
    }
    assert _where([(path, node) for path, node in found if id(node) not in inside | imports]) == []
