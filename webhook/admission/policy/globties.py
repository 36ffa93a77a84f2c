"""Ties between the namespace globs of different policies: a namespace that two globs match equally
specifically, so that file order decides (for `policy lint`). The automata are globs.py's; selection itself
is `model.PolicySet.select`, which confirms each tie found.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from webhook.admission.policy.globs import (
    NAMESPACE_ALPHABET,
    NAMESPACE_MAX_LENGTH,
    GlobToken,
    Machine,
    first_name,
    step_table,
    tokenize,
)
from webhook.admission.policy.model import Policy, PolicySet


@dataclass(frozen=True, slots=True)
class GlobTie:
    """Globs of different policies that match some namespace equally specifically: file order decides."""

    example: str  # a namespace they tie for
    globs: tuple[tuple[str, Policy], ...]  # winner (earliest in file order) first


def glob_ties(policy_set: PolicySet) -> list[GlobTie]:
    """Every tie between globs of different policies, each with an example namespace.

    For each pair of globs with equal literal counts, search for a valid namespace name that both match
    while no exact name and no more specific glob claims it (`common_namespace`), then confirm it with
    `PolicySet.ties`, the selection itself. Exact where `common_namespace` is: no tie is missed or invented.

    A directory may hold thousands of globs, so each glob is analysed once (`_GlobShape`), and the search runs
    only for pairs whose fixed heads, tails and lengths let them match one name, found through an index of
    their literal heads and tails rather than by trying every pair; shadows that cannot match such a name are
    left out of the search. Neither changes a result: what is left out could not have matched.
    """
    globs = policy_set.ranked_globs
    shapes = [_GlobShape.of(glob.pattern) for glob in globs]
    everything = _AffixIndexes(shapes)
    exact = _ExactNames(policy_set.exact_names)
    found: dict[frozenset[str], GlobTie] = {}
    start = 0
    while start < len(globs):  # blocks of equal literal counts, most literal first: only they can tie
        end = start
        while end < len(globs) and globs[end].negative_literals == globs[start].negative_literals:
            end += 1
        block = _AffixIndexes(shapes[start:end])
        for a_index in range(start, end):
            a, a_policy = shapes[a_index], globs[a_index].policy
            rivals = sorted(
                start + offset
                for offset in block.overlapping(a)
                if start + offset > a_index
                and globs[start + offset].policy is not a_policy
                and a.may_share(shapes[start + offset])
            )
            if not rivals:
                continue
            more_specific = [index for index in everything.overlapping(a) if index < start]
            more_specific = [index for index in more_specific if a.may_share(shapes[index])]
            for b_index in rivals:
                b = shapes[b_index]
                shadows = [shapes[index].machine for index in more_specific if b.may_share(shapes[index])]
                shadows += exact.machines(a, b)
                example = first_name([a.machine, b.machine, *shadows], 2)
                if example is None:
                    continue
                tied = tuple(policy_set.ties(example))
                if len({id(policy) for _, policy in tied}) < 2:
                    continue
                found.setdefault(frozenset(pattern for pattern, _ in tied), GlobTie(example, tied))
        start = end
    return list(found.values())


_ANY = frozenset(NAMESPACE_ALPHABET)


def _chars(token: GlobToken) -> frozenset[str]:
    """The characters one position may hold: a "?" (the only other string token is "*") any."""
    return _ANY if isinstance(token, str) else token


@dataclass(frozen=True, slots=True)
class _GlobShape:
    """One glob as `glob_ties` needs it, worked out once: its automaton, and bounds on the names it matches
    that rule most pairs out without a search."""

    pattern: str
    machine: Machine
    head: tuple[frozenset[str], ...]  # the characters each position before the first "*" may hold
    tail: tuple[frozenset[str], ...]  # the same after the last "*", last position first
    min_length: int
    max_length: int | None  # None: a "*" makes it unbounded
    literal_head: str  # the leading characters that must match literally: the index's key
    literal_tail: str  # the trailing ones, last first (so that tails compare as heads do)

    @staticmethod
    def of(pattern: str) -> _GlobShape:
        tokens = tokenize(pattern)
        fixed = [_chars(token) for token in tokens if token != "*"]  # one character each
        if "*" in tokens:
            first, last = tokens.index("*"), len(tokens) - 1 - tokens[::-1].index("*")
            head = [_chars(token) for token in tokens[:first]]
            tail = [_chars(token) for token in tokens[last + 1 :]]
            max_length = None
        else:
            head, tail, max_length = fixed, fixed, len(fixed)
        return _GlobShape(
            pattern=pattern,
            machine=step_table(tokens),
            head=tuple(head),
            tail=tuple(reversed(tail)),
            min_length=len(fixed),
            max_length=max_length,
            literal_head=_literal(head),
            literal_tail=_literal(tail[::-1]),
        )

    def may_share(self, other: _GlobShape) -> bool:
        """False when no name matches both (certain); True when one may."""
        longest = min((n for n in (self.max_length, other.max_length) if n is not None), default=NAMESPACE_MAX_LENGTH)
        if max(self.min_length, other.min_length) > min(longest, NAMESPACE_MAX_LENGTH):
            return False
        # A name both match holds, at each fixed position from either end, a character both globs allow there.
        heads = zip(self.head, other.head, strict=False)  # the shorter fixed part bounds what is known
        tails = zip(self.tail, other.tail, strict=False)
        return all(mine & theirs for mine, theirs in heads) and all(mine & theirs for mine, theirs in tails)


class _AffixIndexes:
    """Globs (by position in the list given) indexed by their literal heads and by their literal tails."""

    def __init__(self, shapes: Sequence[_GlobShape]) -> None:
        self._heads = _AffixIndex([shape.literal_head for shape in shapes])
        self._tails = _AffixIndex([shape.literal_tail for shape in shapes])

    def overlapping(self, shape: _GlobShape) -> list[int]:
        """The globs whose literal head, or whose literal tail, agrees with `shape`'s, from whichever index names
        fewer: every glob that may match a name `shape` matches (itself included), and some that cannot
        (`may_share` tells)."""
        if self._heads.count(shape.literal_head) <= self._tails.count(shape.literal_tail):
            return self._heads.compatible(shape.literal_head)
        return self._tails.compatible(shape.literal_tail)


class _AffixIndex:
    """Globs by a literal affix (a head, or a tail reversed to read as one). Two globs match a common name only
    if one's affix is a prefix of the other's: found by bisection and look-ups, not by trying every glob."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._order = sorted(range(len(keys)), key=keys.__getitem__)
        self._sorted = [keys[index] for index in self._order]
        self._by_key: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            self._by_key.setdefault(key, []).append(index)

    def _extending(self, key: str) -> tuple[int, int]:
        """The range of `_sorted` that starts with `key` (names and globs hold no character near U+10FFFF)."""
        return bisect.bisect_left(self._sorted, key), bisect.bisect_left(self._sorted, key + "\U0010ffff")

    def count(self, key: str) -> int:
        low, high = self._extending(key)
        return high - low + sum(len(self._by_key.get(key[:end], ())) for end in range(len(key)))

    def compatible(self, key: str) -> list[int]:
        """Every glob whose affix extends `key` or is a shorter prefix of it."""
        low, high = self._extending(key)
        found = self._order[low:high]
        for end in range(len(key)):
            found += self._by_key.get(key[:end], ())
        return found


class _ExactNames:
    """Exact names as shadows of a pair of globs: those both globs match, each glob's matches found once (among
    the names that start with its literal head) and each name's automaton built once."""

    def __init__(self, names: Iterable[str]) -> None:
        self._sorted = sorted(names)
        self._matches: dict[str, frozenset[str]] = {}
        self._machines: dict[str, Machine] = {}

    def _matching(self, shape: _GlobShape) -> frozenset[str]:
        names = self._matches.get(shape.pattern)
        if names is None:
            low = bisect.bisect_left(self._sorted, shape.literal_head)
            high = bisect.bisect_left(self._sorted, shape.literal_head + "\U0010ffff")
            match = re.compile(fnmatch.translate(shape.pattern)).match  # what fnmatchcase runs, compiled once
            names = self._matches[shape.pattern] = frozenset(n for n in self._sorted[low:high] if match(n))
        return names

    def machines(self, a: _GlobShape, b: _GlobShape) -> list[Machine]:
        both = self._matching(a) & self._matching(b)
        for name in both:
            if name not in self._machines:
                self._machines[name] = step_table([frozenset(c) for c in name])
        return [self._machines[name] for name in sorted(both)]


def _literal(sets: Sequence[frozenset[str]]) -> str:
    """The leading run of single characters in `sets`."""
    text = []
    for chars in sets:
        if len(chars) != 1:
            break
        text.append(next(iter(chars)))
    return "".join(text)
