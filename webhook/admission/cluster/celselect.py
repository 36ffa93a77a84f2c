"""A DRA device selector's CEL, read as far as the cluster view and the MIG check need it: one home.

A DeviceClass (`spec.selectors[].cel.expression`) and a claim's request (`exactly.selectors`) pick devices
with CEL over one `device`: `device.driver`, `device.attributes['<domain>'].<name>` (a string, an int, a
bool or a semantic version) and `device.capacity['<domain>'].<name>` (a Quantity). Written from Kubernetes'
DRA CEL environment (staging/src/k8s.io/dynamic-resource-allocation/cel: attributes and capacities grouped
by the domain their qualified name starts with, a name without a domain in the driver's; `semver(...)`,
`quantity(...)`, `compareTo`, `isGreaterThan`, `isLessThan`) and from what NVIDIA/k8s-dra-driver-gpu's
classes and demos write: `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type ==
'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.10gb'`,
`device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0`.

What is read: `&&` conjunctions (parentheses too) of comparisons `==`, `!=`, `<`, `<=`, `>`, `>=` between
`device.driver` or an attribute and a string, int or bool literal (either side), and
`<attribute or capacity>.compareTo(semver('...') | quantity('...')) <op> <int>`, `.isGreaterThan(...)`,
`.isLessThan(...)`. A conjunct beyond that (`||`, `!`, `matches`, `lowerAscii`, `in`, a macro) is not read:
it is kept as text, and taken as true, so that what `matches` says is every device the selector *may*
select, never fewer (the checks never fail closed on a selector they cannot read). An expression that
cannot be split into conjuncts (a top-level `||`, an unterminated string, deeper than `MAX_DEPTH`
parentheses, longer than the API server's 10 Ki characters) is not read at all. A comparison that CEL
would fail on (an attribute the device lacks, a type that does not compare) selects nothing, as the
allocator does. Nothing here raises on any input, and nothing does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.violation import cut

MAX_LENGTH: Final = 10 * 1024  # CELSelectorExpressionMaxLength
MAX_DEPTH: Final = 32  # parentheses around a conjunct; deeper is not read
SHOWN: Final = 100  # characters of an unread conjunct kept for messages

_TOKEN = re.compile(
    r"""(?:
      (?P<str>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
    | (?P<int>\d+)(?![.\w])
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>&&|\|\||==|!=|<=|>=|[<>()\[\].,!?:+\-*/%])
    )""",
    re.VERBOSE,
)
_SPACE = re.compile(r"\s*")
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_SEMVER = re.compile(r"^(\d{1,9})\.(\d{1,9})\.(\d{1,9})$")


@dataclass(frozen=True, slots=True, order=True)
class Semver:
    """A version attribute, or `semver('9.0.0')`: major, minor, patch (a pre-release is not read)."""

    parts: tuple[int, int, int]

    @staticmethod
    def of(text: str) -> Semver | None:
        found = _SEMVER.match(text)
        return Semver((int(found[1]), int(found[2]), int(found[3]))) if found else None


class _Unknown:
    """An attribute whose value is not kept (draslices drops unique ones, a device's uuid): it may match."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = _Unknown()
Value = str | int | bool | Semver | Fraction | _Unknown
Key = tuple[str, str]  # (domain, name)


@dataclass(frozen=True, slots=True)
class Term:
    """One comparison read: `compare(<field>, value) <op> against`, where compare is -1, 0 or 1 (for a plain
    `attribute == 'x'`, against is 0)."""

    field: str  # "driver", "attribute" or "capacity"
    key: Key  # ("", "") for the driver
    value: Value  # a literal: str, int, bool, Semver, or a quantity (Fraction)
    op: str
    against: int = 0

    def holds(self, found: Value | None) -> bool:
        if found is UNKNOWN:
            return True
        if found is None or type(found) is not type(self.value):  # CEL: no such key, or no such overload
            return False
        if isinstance(found, bool) and self.op not in ("==", "!="):
            return False
        sign = (found > self.value) - (found < self.value)  # type: ignore[operator]
        return _compare(sign, self.op, self.against)


def _compare(left: int, op: str, right: int) -> bool:
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    return left >= right


@dataclass(frozen=True, slots=True)
class Selector:
    """Every selector of a class or a request together (all must hold): the comparisons read, and the
    conjuncts not read (shortened), which `matches` takes as true."""

    terms: tuple[Term, ...] = ()
    unread: tuple[str, ...] = ()
    text: str = ""  # a request's selectors as written, joined by ` && ` (`of_request`), for messages; else ""

    @property
    def exact(self) -> bool:
        """Whether every conjunct was read: then `matches` is the selector's own answer, else an upper bound."""
        return not self.unread

    def matches(self, driver: str, attributes: Mapping[Key, Value], capacity: Mapping[Key, Value]) -> bool:
        """Whether a device may be selected (every comparison read holds; those not read are taken as true).
        `attributes` and `capacity` are keyed by (domain, name), the driver's domain for a name without one."""
        for term in self.terms:
            if term.field == "driver":
                found: Value | None = driver
            else:
                found = (attributes if term.field == "attribute" else capacity).get(term.key)
            if not term.holds(found):
                return False
        return True

    def equal_to(self, name: str) -> tuple[str, ...]:
        """The strings an attribute `name` (any domain; "driver" for the driver) must equal: `profile`."""
        return tuple(
            t.value
            for t in self.terms
            if isinstance(t.value, str) and t.op == "==" and t.against == 0 and (t.key[1] or t.field) == name
        )

    def first(self, name: str) -> str:
        found = self.equal_to(name)
        return found[0] if found else ""


ANY: Final = Selector()


def read(expressions: Iterable[object]) -> Selector:
    """Selectors (CEL expressions; anything else is not read) as one Selector: all of them must hold."""
    terms: list[Term] = []
    unread: list[str] = []
    for expression in expressions:
        if not isinstance(expression, str):
            unread.append("(not a string)")
            continue
        found, missed = _read_one(expression)
        terms += found
        unread += missed
    return Selector(tuple(terms), tuple(unread))


def of_selectors(selectors: object) -> Selector:
    """`spec.selectors` of a DeviceClass, or a request's `selectors`, as one Selector (no list: ANY)."""
    if not isinstance(selectors, list):
        return ANY
    expressions: list[object] = []
    for selector in selectors:
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expressions.append(cel.get("expression") if isinstance(cel, dict) else None)
    return read(expressions)


_REQUESTS: dict[tuple[str, ...], Selector] = {}  # a request's selectors, one Selector per distinct text


def of_request(selectors: object) -> Selector | None:
    """A claim request's (or `firstAvailable` alternative's) `selectors`, as one Selector keeping their text;
    None where it has none (any device of its class). Held once per distinct text (the claims made from one
    template, and most claims of a cluster, write the same few), within a bound no cluster reaches."""
    if not isinstance(selectors, list) or not selectors:
        return None
    expressions: list[str] = []
    for selector in selectors:
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        expressions.append(expression if isinstance(expression, str) else "(not a string)")
    key = tuple(expressions)
    found = _REQUESTS.get(key)
    if found is None:
        read_one = of_selectors(selectors)
        found = Selector(read_one.terms, read_one.unread, " && ".join(key))
        if len(_REQUESTS) < 4096:
            _REQUESTS[key] = found
    return found


def _shown(text: str) -> str:
    return cut(" ".join(text.split()), SHOWN)


def _tokens(text: str) -> tuple[list[tuple[str, str]], list[tuple[int, int]]] | None:
    """(kind, text) tokens and their spans; None where the text has something CEL's lexer would read
    otherwise (an unterminated string, a character CEL has no token for)."""
    found: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    position, end = 0, len(text)
    while True:
        position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
        if position >= end:
            break
        token = _TOKEN.match(text, position)
        if token is None or token.lastgroup is None:
            return None
        found.append((token.lastgroup, token.group(token.lastgroup)))
        spans.append((position, token.end()))
        position = token.end()
    return found, spans


def _read_one(expression: str) -> tuple[list[Term], list[str]]:
    if len(expression) > MAX_LENGTH:
        return [], [f"(an expression of {len(expression)} characters)"]
    lexed = _tokens(expression)
    if not lexed or not lexed[0]:
        return [], [_shown(expression) or "(empty)"]
    terms: list[Term] = []
    unread: list[str] = []
    tokens, spans = lexed

    def text(lo: int, hi: int) -> str:
        if lo >= hi:
            return "(empty)"
        return _shown(expression[spans[lo][0] : spans[hi - 1][1]])

    def conjuncts(lo: int, hi: int, depth: int) -> None:
        """Split tokens[lo:hi] on the `&&`s outside parentheses; read each part (a whole part in
        parentheses: once more, one level deeper)."""
        parts: list[tuple[int, int]] = []
        level, start = 0, lo
        for index in range(lo, hi):
            token = tokens[index]
            if token[0] == "op" and token[1] in "([":
                level += 1
            elif token[0] == "op" and token[1] in ")]":
                level -= 1
                if level < 0:
                    unread.append(text(lo, hi))
                    return
            elif level == 0 and token in (("op", "||"), ("op", "?")):
                unread.append(text(lo, hi))  # a disjunction, or a conditional: not split
                return
            elif level == 0 and token == ("op", "&&"):
                parts.append((start, index))
                start = index + 1
        parts.append((start, hi))
        if level != 0 or any(a >= b for a, b in parts):
            unread.append(text(lo, hi))
            return
        for a, b in parts:
            part = tokens[a:b]
            if _enclosed(part):
                if depth >= MAX_DEPTH:
                    unread.append(text(a, b))
                else:
                    conjuncts(a + 1, b - 1, depth + 1)
                continue
            term = _comparison(part)
            if term is not None:
                terms.append(term)
            elif part != [("ident", "true")]:  # `true`: every device
                unread.append(text(a, b))

    conjuncts(0, len(tokens), 0)
    return terms, unread


def _enclosed(part: list[tuple[str, str]]) -> bool:
    """Whether the part is `( ... )` with the first parenthesis closed by the last."""
    if len(part) < 2 or part[0] != ("op", "(") or part[-1] != ("op", ")"):
        return False
    level = 0
    for index, token in enumerate(part):
        if token[0] == "op" and token[1] in "([":
            level += 1
        elif token[0] == "op" and token[1] in ")]":
            level -= 1
            if level == 0 and index < len(part) - 1:
                return False
    return True


def _string(token: tuple[str, str]) -> str | None:
    """A string literal's value (the simple escapes only); None for anything else."""
    kind, text = token
    if kind != "str":
        return None
    body = text[1:-1]
    if "\\" in body:
        if re.search(r"\\[^\\'\"]", body):
            return None  # \n, \x41, \u...: not read
        body = re.sub(r"\\(.)", r"\1", body)
    return body


def _field(tokens: list[tuple[str, str]]) -> tuple[str, Key, int] | None:
    """`device.driver` or `device.attributes['<domain>'].<name>` (or `['<name>']`), `device.capacity[...]...`
    at the start of `tokens`: (field, key, tokens used)."""
    if len(tokens) < 3 or tokens[0] != ("ident", "device") or tokens[1] != ("op", "."):
        return None
    if tokens[2] == ("ident", "driver"):
        return "driver", ("", ""), 3
    if tokens[2] not in (("ident", "attributes"), ("ident", "capacity")) or len(tokens) < 8:
        return None
    domain = _string(tokens[4]) if tokens[3] == ("op", "[") and tokens[5] == ("op", "]") else None
    if domain is None:
        return None
    if tokens[6] == ("op", ".") and tokens[7][0] == "ident":
        name: str | None = tokens[7][1]
        used = 8
    elif tokens[6] == ("op", "[") and len(tokens) > 8 and tokens[8] == ("op", "]"):
        name, used = _string(tokens[7]), 9
    else:
        return None
    if name is None:
        return None
    return ("attribute" if tokens[2][1] == "attributes" else "capacity"), (domain, name), used


def _literal(tokens: list[tuple[str, str]]) -> Value | None:
    """A whole literal: 'text', 12, -1, true, false (a constructor is read by _constructed)."""
    if len(tokens) == 1:
        kind, text = tokens[0]
        if kind == "str":
            return _string(tokens[0])
        if kind == "int":
            return int(text) if len(text) <= 18 else None
        if tokens[0] == ("ident", "true"):
            return True
        if tokens[0] == ("ident", "false"):
            return False
    if len(tokens) == 2 and tokens[0] == ("op", "-") and tokens[1][0] == "int" and len(tokens[1][1]) <= 18:
        return -int(tokens[1][1])
    return None


def _constructed(tokens: list[tuple[str, str]]) -> Value | None:
    """`semver('1.2.3')` or `quantity('40Gi')`, the whole of `tokens`."""
    if len(tokens) != 4 or tokens[1] != ("op", "(") or tokens[3] != ("op", ")"):
        return None
    text = _string(tokens[2])
    if text is None:
        return None
    if tokens[0] == ("ident", "semver"):
        return Semver.of(text)
    if tokens[0] == ("ident", "quantity"):
        amount = quantity_or_none(text)
        return Fraction(amount) if amount is not None else None
    return None


def _comparison(part: list[tuple[str, str]]) -> Term | None:
    field = _field(part)
    if field is not None:
        kind, key, used = field
        rest = part[used:]
        if len(rest) >= 2 and rest[0] == ("op", ".") and rest[1][0] == "ident":
            return _method(kind, key, rest[1][1], rest[2:])
        if kind == "capacity" or not rest or rest[0][0] != "op" or rest[0][1] not in _FLIP:
            return None
        value = _literal(rest[1:])
        return Term(kind, key, value, rest[0][1]) if value is not None else None
    # `'gpu' == device.attributes[...].type`: the literal first
    for index, token in enumerate(part):
        if token[0] == "op" and token[1] in _FLIP:
            value, field = _literal(part[:index]), _field(part[index + 1 :])
            if value is None or field is None or field[2] != len(part) - index - 1 or field[0] == "capacity":
                return None
            return Term(field[0], field[1], value, _FLIP[token[1]])
    return None


def _method(kind: str, key: Key, method: str, rest: list[tuple[str, str]]) -> Term | None:
    """`.compareTo(x) <op> <int>`, `.isGreaterThan(x)`, `.isLessThan(x)` on a version or a quantity."""
    if kind == "driver" or not rest or rest[0] != ("op", "("):
        return None
    level, close = 0, -1
    for index, token in enumerate(rest):
        if token[0] == "op" and token[1] == "(":
            level += 1
        elif token[0] == "op" and token[1] == ")":
            level -= 1
            if level == 0:
                close = index
                break
    if close < 0:
        return None
    value = _constructed(rest[1:close])
    after = rest[close + 1 :]
    if value is None or (kind == "capacity") != isinstance(value, Fraction):
        return None
    if method == "compareTo" and len(after) >= 2 and after[0][0] == "op" and after[0][1] in _FLIP:
        against = _literal(after[1:])
        if type(against) is not int:
            return None
        return Term(kind, key, value, after[0][1], against)
    if after:
        return None
    if method == "isGreaterThan":
        return Term(kind, key, value, ">", 0)
    if method == "isLessThan":
        return Term(kind, key, value, "<", 0)
    return None
