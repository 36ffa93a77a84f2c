"""Kubernetes' CEL, as the API server evaluates admission policies, on the `cel` package (common-expression-
language: cel-go's semantics): the Kubernetes libraries the native policies use, written once here.

- quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go): `quantity(s)`, `isQuantity(s)`, and on a
  quantity `isInteger()` (as Go's `AsInt64()`: a whole int64 held at a scale of zero or more, so not `1000m`),
  `asInteger()` (an error where it is not), `compareTo(q)`, `asApproximateFloat()` (a float64 near the value:
  Go multiplies the mantissa by a power of ten, here the nearest float, both far closer than the native
  policies need: they round a fraction's nanos);
  parsed with the project's resource.Quantity parser (checked against the Go grammar in test_quantity.py);
- lists library (lists.go): `indexOf`, `lastIndexOf`, `sum`, `max`, `min` (of strings too); strings extension
  (cel-go ext/strings.go): `join`, `replace` (every occurrence), `split` (Go's strings.Split: a separator
  that is not there gives the string whole) and `substring(start, end)` (code points, within the string);
- `jsonpatch.escapeKey` (the MutatingAdmissionPolicy's JSON Patch library: `~` -> `~0`, `/` -> `~1`);
- sets library (cel-go ext/sets.go, Kubernetes 1.29+): `sets.contains(list, sublist)` (every element of the
  sublist in the list; an empty one is), `sets.intersects(list, other)`, read as `sets__NAME` (the same scanner);
- `JSONPatch{op: ..., path: ..., value: ...}`: written as the map the MAP turns it into (field names quoted),
  by a scanner that skips string literals;
- `variables.NAME` read as the top-level `variables__NAME` (the same scanner), so that each variable is
  converted to a CEL value once, when it is set, and not again with every variable after it.
Expressions are compiled once and cached.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import cache
from typing import Any

import cel

from webhook.admission.base.quantity import QuantityError, parse_quantity

INT64_MAX = 2**63 - 1
_TAG = "k8s.quantity"


def _quantity(text: Any) -> dict[str, str]:
    if type(text) is not str:
        raise ValueError(f"quantity() takes a string, not {type(text).__name__}")
    parse_quantity(text)  # raises on a string that is no quantity
    return {_TAG: text}


def _value(q: Any) -> Fraction:
    if type(q) is not dict or _TAG not in q:
        raise ValueError("not a quantity")
    return Fraction(parse_quantity(q[_TAG]))


def _is_quantity(text: Any) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return type(text) is str


# The suffixes of resource.Quantity: decimal SI and binary SI, as (base, exponent).
_SUFFIXES = {
    **{suffix: (10, exponent) for suffix, exponent in zip("num", (-9, -6, -3), strict=True)},
    "": (10, 0),
    **{suffix: (10, exponent) for suffix, exponent in zip("kMGTPE", range(3, 19, 3), strict=True)},
    **{suffix + "i": (2, exponent) for suffix, exponent in zip("KMGTPE", range(10, 61, 10), strict=True)},
}
_PARTS = re.compile(r"[+-]?0*(\d*)(?:\.(\d*))?(.*)", re.DOTALL)


def _is_integer(q: Any) -> bool:
    """Go's `Quantity.AsInt64()` succeeding on the quantity parsed from its text (quantity.go's ParseQuantity):
    only a value held as an int64 mantissa with a scale of zero or more is one. So `1000m`, `1.0` and a
    value of more than 18 digits are not, though whole: ParseQuantity keeps the scale as written (`1000m`: 1000
    at scale -3) or, past 18 digits, an arbitrary-precision decimal, and AsInt64 refuses both. The API server
    sends the pod's own quantities in canonical form, where this is the same as being whole."""
    value = _value(q)  # raises on a string that is no quantity
    text = q[_TAG]
    if value == 0 and set(text.lstrip("+-")) <= {"0"}:
        return True  # "0", or zeros alone: parsed as zero at scale 0
    parts = _PARTS.fullmatch(text)
    assert parts is not None
    num, denom, suffix = parts[1] or "0", parts[2] or "", parts[3]
    base, exponent = _SUFFIXES[suffix] if suffix in _SUFFIXES else (10, int(suffix[1:]))  # else e3, E-3
    mantissa, scale = 1, exponent
    if base == 2:
        if exponent < 0 or denom:
            return False  # the arbitrary-precision path
        mantissa, scale = 1 << exponent, 0
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        precision = 18 - len(num + denom)
    scale -= len(denom)
    if precision < 0 or scale < -9:
        return False
    amount = int(num + denom) * mantissa
    if amount > INT64_MAX or scale < 0:
        return False
    return amount * 10**scale <= INT64_MAX


def _as_integer(q: Any) -> int:
    if not _is_integer(q):
        raise ValueError("asInteger: not an int64")
    return int(_value(q))


def _approximate(q: Any) -> float:
    return float(_value(q))


def _compare(q: Any, other: Any) -> int:
    a, b = _value(q), _value(other)
    return (a > b) - (a < b)


FUNCTIONS = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "compareTo": _compare,
    "asApproximateFloat": _approximate,
    "indexOf": lambda items, item: items.index(item) if item in items else -1,
    "lastIndexOf": lambda items, item: len(items) - 1 - list(reversed(items)).index(item) if item in items else -1,
    "sum": lambda items: sum(items),
    "max": lambda items: max(items),
    "min": lambda items: min(items),
    "join": lambda items, separator: separator.join(items),
    "replace": lambda text, old, new: text.replace(old, new),
    "split": lambda text, separator: text.split(separator),
    "substring": lambda text, start, end: text[start:end],  # code points; an index out of range: no ACK label's
    "escapeKey": lambda _library, key: key.replace("~", "~0").replace("/", "~1"),
    "sets__contains": lambda items, sublist: all(item in items for item in sublist),
    "sets__intersects": lambda items, other: any(item in items for item in other),
}


def _quoted_fields(source: str, start: int) -> tuple[str, int]:
    """The message literal's body from `start` (just after its `{`) with its field names quoted, and where it
    ends (just after its `}`)."""
    out: list[str] = []
    depth, i, field_start = 0, start, True
    while i < len(source):
        ch = source[i]
        if ch in "'\"":  # a string literal: copied whole
            end = string_end(source, i)
            out.append(source[i:end])
            i, field_start = end, False
            continue
        if source.startswith("JSONPatch{", i):
            inner, i = _quoted_fields(source, i + len("JSONPatch{"))
            out.append("{" + plain(inner) + "}")
            field_start = False
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return "".join(out), i + 1
            depth -= 1
        if depth == 0 and field_start and (ch.isalpha()):
            j = i
            while source[j].isalnum() or source[j] == "_":
                j += 1
            out.append(f"'{source[i:j]}'")
            i, field_start = j, False
            continue
        if depth == 0 and ch == ",":
            field_start = True
        elif not ch.isspace():
            field_start = False
        out.append(ch)
        i += 1
    raise ValueError("unclosed JSONPatch literal")


def string_end(source: str, i: int) -> int:
    """Where the CEL string literal that opens at `source[i]` (a quote) ends: the index after its closing quote."""
    quote, j = source[i], i + 1
    while source[j] != quote:
        j += 2 if source[j] == "\\" else 1
    return j + 1


VARIABLES = "variables."
VARIABLE_PREFIX = "variables__"
SETS, SETS_PREFIX = "sets.", "sets__"  # `sets.contains` as a function of its own (a string's `contains` stays)


# What `plain` rewrites, found by one regular expression instead of a character at a time (the compiled
# expressions run to tens of thousands of characters): a string literal (copied whole), `JSONPatch{`, and
# `variables.` and `sets.` where they start a name.
_PLAIN_TOKENS = re.compile(
    r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|JSONPatch\{|(?<![\w.])variables\.|(?<![\w.])sets\.""", re.DOTALL
)


def plain(source: str) -> str:
    """`source` with every `JSONPatch{...}` written as a map literal, `variables.NAME` as `variables__NAME` and
    `sets.NAME` as `sets__NAME`."""
    out: list[str] = []
    i = 0
    while match := _PLAIN_TOKENS.search(source, i):
        out.append(source[i : match.start()])
        token = match.group()
        if token == "JSONPatch{":
            inner, i = _quoted_fields(source, match.end())
            out.append("{" + plain(inner) + "}")
            continue
        out.append(VARIABLE_PREFIX if token == VARIABLES else SETS_PREFIX if token == SETS else token)
        i = match.end()
    out.append(source[i:])
    return "".join(out)


@cache
def program(source: str) -> Any:
    return cel.compile(plain(source))


def evaluate(source: str, variables: dict[str, Any]) -> Any:
    return Scope(variables).evaluate(source)


class Scope:
    """Variables for several expressions (a policy's conditions, variables, mutations and validations on one
    object): converted to CEL values once, not once per expression; `set` adds or replaces one."""

    def __init__(self, variables: dict[str, Any]) -> None:
        self._context = cel.Context({**variables, "jsonpatch": {}}, FUNCTIONS)

    def set(self, name: str, value: Any) -> None:
        self._context.add_variable(name, value)

    def set_variable(self, name: str, value: Any) -> None:
        """The policy's `variables.NAME`."""
        self._context.add_variable(VARIABLE_PREFIX + name, value)

    def evaluate(self, source: str) -> Any:
        return program(source).execute(self._context)
