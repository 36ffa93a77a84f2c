"""The namespace policy model and how a namespace picks its policy.

Policies are immutable: the server swaps a whole `PolicySet` on reload, so a review always sees one
consistent set. Parsing YAML into these classes lives in `loader`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction


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
    # Derived values that the hot path reuses (e.g. env hints per fraction); not part of the policy's identity.
    memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

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
        """`gpu.memoryMiB`, else the model's nominal memory, else unknown."""
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


@dataclass(frozen=True, slots=True)
class PolicySet:
    """An immutable, validated set of policies, in file-name then document order."""

    policies: tuple[Policy, ...] = ()
    _exact: dict[str, Policy] = field(default_factory=dict, repr=False, compare=False)
    _globs: tuple[tuple[int, int, str, Policy], ...] = field(default=(), repr=False, compare=False)

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
        """Exact name first, then the glob with the most literal characters (file order breaks ties)."""
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

    def for_namespace(self, namespace: str) -> Policy:
        return self.select(namespace).policy

    def ties(self, namespace: str) -> list[tuple[str, Policy]]:
        """Other globs that match `namespace` exactly as specifically as the winner (for `policy lint`)."""
        if namespace in self._exact:
            return []
        matching = [g for g in self._globs if fnmatch.fnmatchcase(namespace, g[2])]
        if not matching:
            return []
        best = matching[0][0]
        return [(g[2], g[3]) for g in matching if g[0] == best]
