"""CEL text: literals, and the engine's sentences turned into string concatenation.

A sentence is filled with slots (`slot("n")`, text no sentence holds otherwise) where the engine fills values;
`fill` turns the result into CEL that concatenates the literal parts with the expressions for the slots, so the
API server writes the sentence the engine writes, from the one template in validate.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from webhook.admission.base.quantity import NANO

_SLOT = re.compile(r"@@([a-z]+)@@")


def slot(key: str) -> str:
    """A placeholder for a sentence's changing part (lowercase letters only)."""
    return f"@@{key}@@"


def lit(text: str) -> str:
    """`text` as a CEL string literal (single quotes: the sentences quote names with double quotes)."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{escaped}'"


def strings(items: Iterable[str]) -> str:
    """A CEL list of string literals."""
    return "[" + ", ".join(lit(item) for item in items) + "]"


def fill(text: str, exprs: Mapping[str, str]) -> str:
    """`text` with each slot replaced by its CEL expression (a string), as one CEL concatenation."""
    parts: list[str] = []
    position = 0
    for match in _SLOT.finditer(text):
        if match.start() > position:
            parts.append(lit(text[position : match.start()]))
        parts.append(f"({exprs[match.group(1)]})")
        position = match.end()
    if position < len(text) or not parts:
        parts.append(lit(text[position:]))
    return " + ".join(parts)


def jsonpatch(op: str, path: str, value: str | None = None) -> str:
    """One JSON Patch operation as a MutatingAdmissionPolicy's `jsonPatch.expression` builds it."""
    tail = f", value: {value}" if value is not None else ""
    return f"JSONPatch{{op: {lit(op)}, path: {path}{tail}}}"


def any_of(terms: Iterable[str]) -> str:
    joined = " || ".join(f"({term})" for term in terms)
    return joined or "false"


def all_of(terms: Iterable[str]) -> str:
    joined = " && ".join(f"({term})" for term in terms)
    return joined or "true"


def bind(expression: str, name: str, body: str) -> str:
    """`body` with `name` bound to `expression` (evaluated once): a one-element list mapped."""
    return f"[{expression}].map({name}, {body})[0]"


def nanos(quantity: str) -> str:
    """The CEL int of nanos in the quantity string `quantity`, a value in (0, 1) (the API server rounds a finer one
    up to 1n): its approximate float times 10^9, rounded, whose error is far below half a nano."""
    return f"int(quantity({quantity}).asApproximateFloat() * {float(NANO)} + 0.5)"
