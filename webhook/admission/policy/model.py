"""The namespace policy model and how a namespace picks its policy.

Policies are immutable: the server swaps a whole `PolicySet` on reload, so a review always sees one
consistent set. Parsing YAML into these classes lives in `loader`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any, NamedTuple, TypeVar

from webhook.admission.policy.globs import is_glob, literal_chars


class Mode(StrEnum):
    EXCLUSIVE = "exclusive"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"
    MEMORY = "memory"  # memory-isolated slices of one GPU, by a device plugin (sharing.backend; memshare.py)


class MigStrategy(StrEnum):
    """How the device plugin advertises MIG slices (its `migStrategy`): `mixed` as `nvidia.com/mig-<profile>`,
    `single` as `nvidia.com/gpu` on nodes whose GPUs are all cut into one profile."""

    MIXED = "mixed"
    SINGLE = "single"


class Backend(StrEnum):
    """`sharing.backend` under mode memory: whose device plugin slices a GPU's memory and caps what a container
    sees (memshare.py holds each one's resources and units)."""

    ACK = "ack"  # Alibaba Cloud ACK's GPU sharing (cGPU): aliyun.com/gpu-mem in GiB
    HAMI = "hami"  # Project-HAMi: nvidia.com/gpu with nvidia.com/gpumem (MiB) and nvidia.com/gpucores (%)
    VOLCANO = "volcano"  # Volcano's vGPU: volcano.sh/vgpu-number, -memory (MiB), -cores (%)


class Placement(StrEnum):
    """`sharing.placement` under mode memory: fill one GPU before the next, or one pod per GPU where possible."""

    BINPACK = "binpack"
    SPREAD = "spread"


class Isolation(StrEnum):
    """`sharing.isolation` under `backend: ack`: whether a share's memory must be capped (ACK's node pools
    `ack.node.gpu.schedule` cgpu, core_mem and mps cap it; share does not, the container sees the whole GPU)."""

    REQUIRED = "required"  # the default: only the pools that cap a container's memory
    NONE = "none"  # any shared pool, share included: the application keeps to its share itself


class Steering(StrEnum):
    """`spec.steering`: whether the webhook adds node affinity that keeps GPU pods on the matching pool."""

    AUTO = "auto"  # where the resource name alone does not: see `loader._resolve_steering`
    ON = "true"
    OFF = "false"


class Enforcement(StrEnum):
    ENFORCE = "enforce"  # deny
    WARN = "warn"  # admit, tell the user
    AUDIT = "audit"  # admit silently; log and count


class Fractional(StrEnum):
    REJECT = "reject"
    SHARED = "shared"
    MIG = "mig"


_T = TypeVar("_T")

FRAMEWORKS = ("jax", "tensorflow", "cupy", "tgi", "generic", "pytorch")
DEFAULT_FRAMEWORK_ENV = ("jax", "tensorflow", "cupy", "tgi", "generic")
DEFAULT_SHARED_RESOURCE = "nvidia.com/gpu.shared"
# What a container may hold of anything where neither the policy nor its mode says less (the sharing backends'
# `max_per_container`, which hold the modes' own defaults).
DEFAULT_MAX_PER_CONTAINER = 8
DEFAULT_MAX_PER_POD = 8


@dataclass(frozen=True, slots=True)
class Sharing:
    mode: Mode = Mode.EXCLUSIVE
    replicas: int | None = None
    resource_name: str = DEFAULT_SHARED_RESOURCE
    mig_profile: str | None = None
    # The profiles the nodes' MIG layout offers (mig-parted's config); None: every profile of gpu.model.
    mig_profiles: tuple[str, ...] | None = None
    mig_strategy: MigStrategy = MigStrategy.MIXED
    backend: Backend | None = None  # mode memory: whose device plugin slices the memory (required there)
    placement: Placement | None = None  # mode memory: binpack or spread; None: the backend's own default
    # backend volcano: the vGPU device plugin's gpuMemoryFactor, the MiB in one unit of volcano.sh/vgpu-memory
    gpu_memory_factor: int = 1
    # backend hami: HAMi's deviceMemoryScaling, what its device plugin registers per GPU (and its scheduler
    # divides among the vGPUs) in multiples of the GPU's memory; above 1, virtual memory (memshare.py)
    device_memory_scaling: Fraction = Fraction(1)
    isolation: Isolation | None = None  # backend ack: required (None: the default) or none

    @property
    def isolates(self) -> bool:
        """Whether a memory share must be capped where it runs (`isolation` other than `none`)."""
        return self.isolation is not Isolation.NONE


@dataclass(frozen=True, slots=True)
class GPU:
    model: str | None = None
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class DeviceClasses:
    """`spec.deviceClasses`: the DRA DeviceClasses whose devices are GPUs here, besides NVIDIA's own
    (`gpu.nvidia.com`, `mig.nvidia.com`), which always are. Claims and the classes' extended resources
    (`deviceclass.resource.kubernetes.io/<class>`) asking for them count against the limits (dra/claimrules.py,
    dra/podclaims.py)."""

    gpu: tuple[str, ...] = ()  # whole GPUs
    mig: tuple[str, ...] = ()  # MIG devices

    @property
    def gpu_classes(self) -> tuple[str, ...]:
        from webhook.admission.base.resources import NVIDIA_GPU_CLASSES

        return NVIDIA_GPU_CLASSES + tuple(c for c in self.gpu if c not in NVIDIA_GPU_CLASSES)

    @property
    def mig_classes(self) -> tuple[str, ...]:
        from webhook.admission.base.resources import NVIDIA_MIG_CLASSES

        return NVIDIA_MIG_CLASSES + tuple(c for c in self.mig if c not in NVIDIA_MIG_CLASSES)


@dataclass(frozen=True, slots=True)
class Limits:
    max_per_container: int | None = None  # None: the mode's default (SharingBackend.max_per_container)
    max_per_pod: int = DEFAULT_MAX_PER_POD


class Check(StrEnum):
    """What a cluster check does with what it finds (`cluster.fits`, `cluster.offered`, `cluster.drift`)."""

    DENY = "deny"  # a violation: the policy's enforcement decides (deny, warn or audit)
    WARN = "warn"  # an admission warning, whatever the enforcement
    OFF = "off"


@dataclass(frozen=True, slots=True)
class AssumedNode:
    """A node shape the inventory cannot see: an autoscaled pool at zero nodes (`cluster.assumeNodes`)."""

    name: str
    allocatable: tuple[tuple[str, int], ...] = ()  # managed resources, whole amounts
    labels: tuple[tuple[str, str], ...] = ()  # GPU feature discovery labels the pool's nodes will carry


@dataclass(frozen=True, slots=True)
class ClusterChecks:
    """`spec.cluster`, and the `auto` values of `sharing.replicas` and `gpu.model` (taken from the nodes).

    Every node check warns by default: the inventory cannot see a node pool that scales from zero, and denying
    every pod that only such a pool can run would stop the pool from ever scaling up. A policy that lists its
    pools in `assumeNodes` can set `deny`. `quota` (the namespace's GPU budget, budget.py) reads no node: it
    denies by default, since a budget that only warns is no budget.
    """

    fits: Check = Check.WARN
    offered: Check = Check.WARN
    drift: Check = Check.WARN
    quota: Check = Check.DENY
    assume_nodes: tuple[AssumedNode, ...] = ()
    auto_replicas: bool = False
    auto_model: bool = False
    auto: bool = field(init=False, default=False, compare=False)  # either: read on every GPU review

    def __post_init__(self) -> None:
        object.__setattr__(self, "auto", self.auto_replicas or self.auto_model)


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
    # Schedulers (spec.schedulerName) that set NVIDIA_VISIBLE_DEVICES themselves from a ConfigMap they own (KAI
    # Scheduler's GPU sharing): their pods may take the variable from a ConfigMap key. None by default.
    trusted_schedulers: tuple[str, ...] = ()
    # Node affinity for the pool this policy's GPUs are on (steering.py). Built policies and the built-in
    # defaults do not steer; the loader resolves `spec.steering` (auto by default) for the policies it reads.
    steering: bool = False
    cluster_checks: ClusterChecks = field(default_factory=ClusterChecks)
    device_classes: DeviceClasses = field(default_factory=DeviceClasses)
    source: str = "<built-in>"  # "policies/x.yaml#0", for messages
    # Derived values that the hot path reuses (see `derived`); not part of the policy's identity.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def derived(self, key: str, compute: Callable[[Policy], _T]) -> _T:
        """`compute(self)`, worked out once per policy: what a policy means for mutation, validation, env hints."""
        value = self.memo.get(key)
        if value is None:
            value = self.memo[key] = compute(self)
        return value

    @property
    def gpu_memory_mib(self) -> int | None:
        """`gpu.memoryMiB`, else the model's memory (resources.GPU_MODELS), else unknown."""
        if self.gpu.memory_mib is not None:
            return self.gpu.memory_mib
        if self.gpu.model is not None:
            from webhook.admission.base.resources import GPU_MODELS

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


SELECTION_MEMO_SIZE = 10_000


class RankedGlob(NamedTuple):
    """A namespaces glob where `PolicySet.select` tries it: most literal characters first, file order next."""

    negative_literals: int  # minus its literal characters, so that the most specific sorts first
    order: int  # its policy's place in file order
    pattern: str
    policy: Policy


@dataclass(frozen=True, slots=True)
class PolicySet:
    """An immutable, validated set of policies, in file-name then document order."""

    policies: tuple[Policy, ...] = ()
    # The policy files read, as messages name them, those without policies too: `policy lint` tells "no files"
    # from "files that hold no policies".
    files: tuple[str, ...] = field(default=(), compare=False)
    _exact: dict[str, Policy] = field(default_factory=dict, repr=False, compare=False)
    _globs: tuple[RankedGlob, ...] = field(default=(), repr=False, compare=False)
    _selections: dict[str, Selection] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact: dict[str, Policy] = {}
        globs: list[RankedGlob] = []
        for order, policy in enumerate(self.policies):
            for pattern in policy.namespaces:
                if is_glob(pattern):
                    globs.append(RankedGlob(-literal_chars(pattern), order, pattern, policy))
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

    @property
    def ranked_globs(self) -> tuple[RankedGlob, ...]:
        """Every namespaces glob in the order `select` tries them (for `globties.glob_ties`)."""
        return self._globs

    @property
    def exact_names(self) -> Collection[str]:
        """Every namespaces entry that is a name, not a glob."""
        return self._exact.keys()

    def for_namespace(self, namespace: str) -> Policy:
        return (self._selections.get(namespace) or self.select(namespace)).policy  # a call fewer, once selected

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
