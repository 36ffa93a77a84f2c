"""YAML as kubectl and Helm read it: go-yaml v2's scalar types (through sigs.k8s.io/yaml), for reading and writing.

PyYAML reads YAML 1.1 its own way, and the two disagree on plain (unquoted) scalars: go-yaml reads `y`, `n`,
`1e3`, `0o17` and `08` as a boolean or a number where PyYAML keeps a string, and PyYAML reads `12:30:00` as
the number 45000 and `=` as a special value where go-yaml keeps strings. `check` reads manifests with
`Loader` (what kubectl would send) and writes them with `Dumper`, which quotes every string that go-yaml would
not read back as a string: a Helm post-renderer's output must mean what its input meant.

go-yaml v2 (resolve.go): null `~ null Null NULL` and empty; booleans `y Y yes Yes YES n N no No NO true True
TRUE false False FALSE on On ON off Off OFF`; `.inf .nan` and their cases and signs; and, for text starting with
a digit, `+`, `-` or `.`: its underscores removed, an int64 (`strconv.ParseInt(s, 0, 64)`: decimal, `0x`, `0o`,
`0b`, and a leading `0` for octal), else a uint64, else a float matching `[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)
([eE][-+]?[0-9]+)?` (text starting with `.` is read by `strconv.ParseFloat` as it is), else a string.
Timestamps stay strings, as go-yaml keeps them when decoding into an untyped value.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_TAG = "tag:yaml.org,2002:"
_NUMBER_TAG = "tag:gpu-admission.io,2026:go-number"  # resolved to int, float or str by go-yaml's rules
_TRUE = frozenset({"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
_FALSE = frozenset({"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_SPECIAL_FLOATS = {
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
}
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DECIMAL_FLOAT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")  # what ParseFloat reads here
_BASES = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}
_DIGITS = {16: frozenset("0123456789abcdefABCDEF"), 10: frozenset("0123456789"), 8: frozenset("01234567"),
           2: frozenset("01")}  # fmt: skip


def _go_integer(plain: str) -> int | None:
    """`strconv.ParseInt(plain, 0, 64)`, else `ParseUint(plain, 0, 64)`: the value, or None."""
    signed = plain[:1] in ("+", "-")
    body = plain[1:] if signed else plain
    base = _BASES.get(body[:2])
    if base is not None:
        digits = body[2:]
    elif body[:1] == "0" and len(body) > 1:
        base, digits = 8, body[1:]  # a leading 0 is octal in Go
    else:
        base, digits = 10, body
    if not digits or not set(digits) <= _DIGITS[base]:
        return None
    value = int(digits, base) * (-1 if plain[:1] == "-" else 1)
    if -(2**63) <= value < 2**63 or (not signed and 0 <= value < 2**64):
        return value
    return None


def go_scalar(text: str) -> Any:
    """A plain (unquoted) scalar as go-yaml v2 reads it: None, a bool, an int, a float or the text itself."""
    if text in _NULL:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text]
    first = text[:1]
    if first == ".":
        if "_" not in text and _DECIMAL_FLOAT.fullmatch(text):
            return float(text)
        return text
    if first not in "+-0123456789" or not first:
        return text
    plain = text.replace("_", "")
    integer = _go_integer(plain)
    if integer is not None:
        return integer
    if _GO_FLOAT.fullmatch(plain):
        value = float(plain)
        if not math.isinf(value):  # ParseFloat's range error: go-yaml keeps the text
            return value
    return text


class Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loading with go-yaml v2's plain scalars (see the module's docstring)."""


Loader.yaml_implicit_resolvers = {}  # PyYAML's own YAML 1.1 set: sexagesimal numbers, `=`, timestamps...
Loader.add_implicit_resolver(_TAG + "null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
Loader.add_implicit_resolver(_TAG + "bool", re.compile("^(?:" + "|".join(_TRUE | _FALSE) + ")$"), list("yYnNtTfFoO"))
Loader.add_implicit_resolver(_NUMBER_TAG, re.compile(r"^[-+.0-9]"), list("-+.0123456789"))
Loader.add_implicit_resolver(_TAG + "merge", re.compile(r"^(?:<<)$"), ["<"])
Loader.add_constructor(_TAG + "bool", lambda loader, node: loader.construct_scalar(node) in _TRUE)
Loader.add_constructor(_NUMBER_TAG, lambda loader, node: go_scalar(loader.construct_scalar(node)))


def _represent_str(dumper: Any, text: str) -> Any:
    """Double-quoted where go-yaml would read the plain text as something else; PyYAML decides the rest."""
    style = '"' if type(go_scalar(text)) is not str else None
    return dumper.represent_scalar(_TAG + "str", text, style=style)


class Dumper(_BaseDumper):  # type: ignore[misc, valid-type]
    """Safe dumping whose strings go-yaml reads back as strings, each value written out where it is.

    No anchors and aliases: a value that appears twice in an object (the env entries that mutation gives
    every container, or what a manifest's own anchors made shared) is written twice, as `kubectl get -o yaml`
    would show it.
    """

    def ignore_aliases(self, data: Any) -> bool:
        return True


Dumper.add_representer(str, _represent_str)
