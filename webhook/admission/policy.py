"""The namespace policy model and how a namespace picks its policy.

Policies are immutable: the server swaps a whole `PolicySet` on reload, so a review always sees one
consistent set. Parsing YAML into these classes lives in `loader`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any


class Mode(StrEnum):
    EXCLUSIVE = "exclusive"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"

    @property
    def is_shared(self) -> bool:
        """Time-slicing and MPS hand out replicas of one GPU (the device plugin's `.shared` resource)."""
        return self in (Mode.TIME_SLICING, Mode.MPS)


class Enforcement(StrEnum):
    ENFORCE = "enforce"  # deny
    WARN = "warn"  # admit, tell the user
    AUDIT = "audit"  # admit silently; log and count


class Fractional(StrEnum):
    REJECT = "reject"
    SHARED = "shared"
    MIG = "mig"


FRAMEWORKS = ("jax", "tensorflow", "cupy", "tgi", "generic", "pytorch")
DEFAULT_FRAMEWORK_ENV = ("jax", "tensorflow", "cupy", "tgi", "generic")
DEFAULT_SHARED_RESOURCE = "nvidia.com/gpu.shared"
DEFAULT_MAX_PER_CONTAINER = 8
DEFAULT_MAX_PER_POD = 8
# The device plugin's sharing config sets failRequestsGreaterThanOne: a container gets one replica.
SHARED_MAX_PER_CONTAINER = 1


@dataclass(frozen=True, slots=True)
class Sharing:
    mode: Mode = Mode.EXCLUSIVE
    replicas: int | None = None
    resource_name: str = DEFAULT_SHARED_RESOURCE
    mig_profile: str | None = None


@dataclass(frozen=True, slots=True)
class GPU:
    model: str | None = None
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    max_per_container: int | None = None  # None: the mode's default (1 when shared, else 8)
    max_per_pod: int = DEFAULT_MAX_PER_POD


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    namespaces: tuple[str, ...] = ("*",)
    enforcement: Enforcement = Enforcement.ENFORCE
    sharing: Sharing = field(default_factory=Sharing)
    gpu: GPU = field(default_factory=GPU)
    limits: Limits = field(default_factory=Limits)
    fractional: Fractional = Fractional.REJECT
    memory_fraction: Fraction | None = None
    framework_env: tuple[str, ...] = DEFAULT_FRAMEWORK_ENV
    block_visible_devices_override: bool = True
    source: str = "<built-in>"  # "policies/x.yaml#0", for messages
    # Derived values that the hot path reuses (see `derived`); not part of the policy's identity.
    memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def derived(self, key: str, compute: Callable[[Policy], Any]) -> Any:
        """`compute(self)`, worked out once per policy: what a policy means for mutation, validation, env hints."""
        value = self.memo.get(key)
        if value is None:
            value = self.memo[key] = compute(self)
        return value

    @property
    def max_per_container(self) -> int:
        if self.limits.max_per_container is not None:
            return self.limits.max_per_container
        return SHARED_MAX_PER_CONTAINER if self.sharing.mode.is_shared else DEFAULT_MAX_PER_CONTAINER

    @property
    def shared_fraction(self) -> Fraction | None:
        """The memory fraction a shared container may use: `memoryFraction`, else 1/replicas."""
        if self.memory_fraction is not None:
            return self.memory_fraction
        if self.sharing.mode.is_shared and self.sharing.replicas:
            return Fraction(1, self.sharing.replicas)
        return None

    @property
    def gpu_memory_mib(self) -> int | None:
        """`gpu.memoryMiB`, else the model's memory (resources.GPU_MODELS), else unknown."""
        if self.gpu.memory_mib is not None:
            return self.gpu.memory_mib
        if self.gpu.model is not None:
            from webhook.admission.resources import GPU_MODELS

            model = GPU_MODELS.get(self.gpu.model)
            return model.memory_mib if model else None
        return None


DEFAULT_POLICY = Policy(name="built-in-default", source="<built-in defaults>")


@dataclass(frozen=True, slots=True)
class Selection:
    """Which policy a namespace gets, and why (for `policy explain` and logs)."""

    policy: Policy
    pattern: str | None  # the namespaces entry that won; None for the built-in defaults
    reason: str


def _literal_chars(pattern: str) -> int:
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


SELECTION_MEMO_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class PolicySet:
    """An immutable, validated set of policies, in file-name then document order."""

    policies: tuple[Policy, ...] = ()
    _exact: dict[str, Policy] = field(default_factory=dict, repr=False, compare=False)
    _globs: tuple[tuple[int, int, str, Policy], ...] = field(default=(), repr=False, compare=False)
    _selections: dict[str, Selection] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact: dict[str, Policy] = {}
        globs: list[tuple[int, int, str, Policy]] = []
        for order, policy in enumerate(self.policies):
            for pattern in policy.namespaces:
                if is_glob(pattern):
                    globs.append((-_literal_chars(pattern), order, pattern, policy))
                else:
                    exact.setdefault(pattern, policy)
        globs.sort(key=lambda g: (g[0], g[1]))
        object.__setattr__(self, "_exact", exact)
        object.__setattr__(self, "_globs", tuple(globs))

    def select(self, namespace: str) -> Selection:
        """Exact name first, then the glob with the most literal characters (file order breaks ties).

        Memoized per namespace: a cluster has few namespaces, and with many glob policies the first review
        in a namespace pays for the search (a set is immutable, so the answer never changes).
        """
        selection = self._selections.get(namespace)
        if selection is None:
            if len(self._selections) >= SELECTION_MEMO_SIZE:
                self._selections.clear()
            selection = self._selections[namespace] = self._search(namespace)
        return selection

    def _search(self, namespace: str) -> Selection:
        policy = self._exact.get(namespace)
        if policy is not None:
            return Selection(policy, namespace, f"exact name {namespace!r} in {policy.source}")
        for negative_literals, _, pattern, policy in self._globs:
            if fnmatch.fnmatchcase(namespace, pattern):
                return Selection(
                    policy,
                    pattern,
                    f"glob {pattern!r} ({-negative_literals} literal characters) in {policy.source}",
                )
        return Selection(DEFAULT_POLICY, None, "no policy matches; built-in defaults apply")

    def selection_order(self) -> list[tuple[str, Policy, int | None]]:
        """Every namespaces entry in the order `select` tries them, with its literal count: exact names
        (None) first, then globs, most literal characters first, file order on ties (for `policy lint`)."""
        exact: list[tuple[str, Policy, int | None]] = [
            (name, policy, None) for name, policy in sorted(self._exact.items())
        ]
        return exact + [(pattern, policy, -negative) for negative, _, pattern, policy in self._globs]

    def for_namespace(self, namespace: str) -> Policy:
        return self.select(namespace).policy

    def ties(self, namespace: str) -> list[tuple[str, Policy]]:
        """The globs that match `namespace` exactly as specifically as the winner, the winner first (for
        `policy lint` and `policy explain`): more than one means file order decided. Empty for exact names."""
        if namespace in self._exact:
            return []
        matching = [g for g in self._globs if fnmatch.fnmatchcase(namespace, g[2])]
        if not matching:
            return []
        best = matching[0][0]
        return [(g[2], g[3]) for g in matching if g[0] == best]


# --- Namespace globs: validation and static tie analysis (for the loader and `policy lint`) ---------------

NAMESPACE_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-"  # letters first: examples read like words
NAMESPACE_MAX_LENGTH = 63  # a DNS-1123 label
_ALNUM = frozenset(NAMESPACE_ALPHABET[:-1])


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
                raise ValueError(f'has "{bad}" in a character class, which no namespace name can contain')
            chars = frozenset(c for c in NAMESPACE_ALPHABET if fnmatch.fnmatchcase(c, pattern[i : end + 1]))
            if not chars:
                raise ValueError(f'has a character class "{pattern[i : end + 1]}" that matches no character')
            tokens.append(chars)
            i = end + 1
        elif ch in NAMESPACE_ALPHABET:
            tokens.append(frozenset(ch))
            i += 1
        else:
            raise ValueError(f'contains "{ch}", which no namespace name can contain')
    if common_namespace((tokens,)) is None:
        raise ValueError(
            "matches no valid namespace name (names are 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return tuple(tokens)


def _step_table(tokens: Sequence[GlobToken]) -> tuple[dict[tuple[str, int], int], int, int]:
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
    machines = [_step_table(tokens) for tokens in (*required, *avoided)]
    n_required = len(required)
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
    """
    globs = policy_set._globs
    parsed = {pattern: parse_glob(pattern) for _, _, pattern, _ in globs}
    found: dict[frozenset[str], GlobTie] = {}
    for a_index, (a_key, _, a_pattern, a_policy) in enumerate(globs):
        for b_key, _, b_pattern, b_policy in globs[a_index + 1 :]:
            if b_key != a_key or b_policy is a_policy:
                continue
            shadows = [parsed[pattern] for key, _, pattern, _ in globs if key < a_key]
            shadows += [
                tuple(frozenset(c) for c in name)
                for name in policy_set._exact
                if fnmatch.fnmatchcase(name, a_pattern) and fnmatch.fnmatchcase(name, b_pattern)
            ]
            example = common_namespace((parsed[a_pattern], parsed[b_pattern]), shadows)
            if example is None:
                continue
            tied = tuple(policy_set.ties(example))
            if len({id(policy) for _, policy in tied}) < 2:
                continue
            found.setdefault(frozenset(pattern for pattern, _ in tied), GlobTie(example, tied))
    return list(found.values())
