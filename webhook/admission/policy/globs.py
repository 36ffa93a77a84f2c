"""Namespace globs: how specific one is, whether any namespace can match it, and the automata that search for
a name two globs both match. Selection itself, the rule a review runs, is `model.PolicySet.select`; the
search for ties between policies (for `policy lint`) is globties.py.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence


def literal_chars(pattern: str) -> int:
    """How specific a glob is: the characters that must match literally."""
    count, i = 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch in "*?":
            i += 1
        elif ch == "[":
            end = pattern.find("]", i + 2)
            if end == -1:  # fnmatch treats an unclosed "[" literally
                count, i = count + 1, i + 1
            else:
                i = end + 1
        else:
            count, i = count + 1, i + 1
    return count


def is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


NAMESPACE_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-"  # letters first: examples read like words
NAMESPACE_MAX_LENGTH = 63  # a DNS-1123 label
_ALNUM = frozenset(NAMESPACE_ALPHABET[:-1])


def quote(text: str) -> str:
    """`text` for a message: quoted and escaped as JSON, so the message stays one line whatever `text` holds
    (newlines, NUL), and shown as written: characters that are not printable (C1 controls such as a one-byte
    CSI, line and paragraph separators, bidirectional overrides) are escaped too."""
    quoted = json.dumps(text, ensure_ascii=False)
    if quoted.isprintable():
        return quoted
    return "".join(char if char.isprintable() else json.dumps(char)[1:-1] for char in quoted)


def is_namespace_name(name: str) -> bool:
    """A valid namespace name: a DNS-1123 label (1-63 lowercase letters, digits, '-'; alphanumeric ends)."""
    return (
        0 < len(name) <= NAMESPACE_MAX_LENGTH
        and all(c in NAMESPACE_ALPHABET for c in name)
        and name[0] in _ALNUM
        and name[-1] in _ALNUM
    )


# A glob as tokens: "*", "?", or the set of namespace characters that one position matches.
GlobToken = str | frozenset[str]


def parse_glob(pattern: str) -> tuple[GlobToken, ...]:
    """`pattern` as tokens, or ValueError saying (for people) why no namespace could ever match it.

    Character classes are resolved by `fnmatch` itself, so the tokens mean exactly what selection does.
    """
    tokens = tokenize(pattern)
    # Most globs match an obvious name (a letter or digit where they can, "a" for a wildcard): no search then.
    guess = "".join("a" if token in ("*", "?") else min(token, key=NAMESPACE_ALPHABET.index) for token in tokens)
    if not is_namespace_name(guess) and common_namespace((tokens,)) is None:
        raise ValueError(
            "matches no valid namespace name (names are 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return tokens


def tokenize(pattern: str) -> tuple[GlobToken, ...]:
    """`pattern` as tokens, or ValueError for a character or class that no namespace name can hold."""
    tokens: list[GlobToken] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch in "*?":
            if not (ch == "*" and tokens and tokens[-1] == "*"):  # "**" is "*"
                tokens.append(ch)
            i += 1
        elif ch == "[":
            start = i + 2 if pattern[i + 1 : i + 2] == "!" else i + 1
            end = pattern.find("]", start)
            if end == start:
                raise ValueError('has an empty character class "[]"')
            if end == -1:
                raise ValueError('has a "[" without a closing "]"')
            body = pattern[start:end]
            bad = next((c for c in body if c not in NAMESPACE_ALPHABET), None)
            if bad is not None:
                raise ValueError(f"has {quote(bad)} in a character class, which no namespace name can contain")
            chars = frozenset(c for c in NAMESPACE_ALPHABET if fnmatch.fnmatchcase(c, pattern[i : end + 1]))
            if not chars:
                raise ValueError(f"has a character class {quote(pattern[i : end + 1])} that matches no character")
            tokens.append(chars)
            i = end + 1
        elif ch in NAMESPACE_ALPHABET:
            tokens.append(frozenset(ch))
            i += 1
        else:
            raise ValueError(f"contains {quote(ch)}, which no namespace name can contain")
    return tuple(tokens)


def glob_regex(pattern: str) -> str:
    """`pattern` as an anchored RE2 regular expression that matches the namespace names `fnmatch` matches (the
    native policies select namespaces with CEL's `matches()`); ValueError where no name can hold a character."""
    parts = ["^"]
    for token in tokenize(pattern):
        if token == "*":
            parts.append(".*")
        elif token == "?":
            parts.append(".")
        elif len(token) == 1:
            parts.append(next(iter(token)))  # letters, digits and '-': literal in a regular expression
        else:
            chars = sorted(token, key=NAMESPACE_ALPHABET.index)
            dash = "-" if "-" in chars else ""
            parts.append("[" + "".join(c for c in chars if c != "-") + dash + "]")
    parts.append("$")
    return "".join(parts)


# A glob's automaton (see `step_table`): per-character step masks, start bits, accept bit.
Machine = tuple[dict[tuple[str, int], int], int, int]


def step_table(tokens: Sequence[GlobToken]) -> Machine:
    """A glob as a bitmask NFA (bit i: `i` tokens matched): per-character step masks, start and accept bits."""
    n = len(tokens)

    def closure(mask: int) -> int:
        for i in range(n):  # a "*" may match nothing: being before it is being after it
            if mask >> i & 1 and tokens[i] == "*":
                mask |= 1 << (i + 1)
        return mask

    table: dict[tuple[str, int], int] = {}
    for c in NAMESPACE_ALPHABET:
        for i, token in enumerate(tokens):
            if token == "*":
                table[c, i] = closure(1 << i)
            elif token == "?" or c in token:
                table[c, i] = closure(1 << (i + 1))
    return table, closure(1), 1 << n


def common_namespace(
    required: Sequence[Sequence[GlobToken]], avoided: Sequence[Sequence[GlobToken]] = ()
) -> str | None:
    """The shortest (then alphabetically first) valid namespace name that every `required` glob matches
    and no `avoided` glob matches, or None if there is none.

    A breadth-first search over the product of the globs' automata, bounded by the 63-character limit:
    exact, and fast for the handful of short globs a policy directory holds.
    """
    return first_name([step_table(tokens) for tokens in (*required, *avoided)], len(required))


def first_name(machines: Sequence[Machine], n_required: int) -> str | None:
    """`common_namespace` on automata already built: the first `n_required` must accept, the rest must not."""
    start = tuple(m[1] for m in machines)
    # State: each glob's set of positions, and whether the last character was "-" (a name cannot end so).
    frontier: list[tuple[tuple[int, ...], bool, str]] = [(start, False, "")]
    seen: set[tuple[tuple[int, ...], bool]] = set()  # not the start: "" may not begin with "-", "a" may
    for _ in range(NAMESPACE_MAX_LENGTH):
        next_frontier = []
        for masks, _dash, name in frontier:
            for c in NAMESPACE_ALPHABET:
                if not name and c == "-":
                    continue
                stepped = []
                for (table, _, _), mask in zip(machines, masks, strict=True):
                    new = 0
                    while mask:
                        low = mask & -mask
                        new |= table.get((c, low.bit_length() - 1), 0)
                        mask ^= low
                    stepped.append(new)
                if any(stepped[k] == 0 for k in range(n_required)):
                    continue  # a required glob can no longer match
                state = (tuple(stepped), c == "-")
                if state in seen:
                    continue
                seen.add(state)
                candidate = name + c
                accepted = [bool(mask & machine[2]) for mask, machine in zip(stepped, machines, strict=True)]
                if c != "-" and all(accepted[:n_required]) and not any(accepted[n_required:]):
                    return candidate
                next_frontier.append((state[0], state[1], candidate))
        frontier = next_frontier
        if not frontier:
            break
    return None
