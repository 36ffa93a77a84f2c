"""The policy file's fields in one declarative place: names, types, choices, bounds and defaults.

The loader takes its field lists and numeric bounds from these tables, `webhook.admission.policy.schema` turns
them into the JSON Schema that editors read and `webhook.admission.policy.crd` into the GPUPolicy CRD's schema,
so a field added here reaches all three (and a field the loader knows but these tables do not fails
tests/test_policy_schema.py and tests/test_policy_crd.py). Rules that tie one field to another (memoryFraction
only where GPUs are shared, migProfile only under mig, ...) stay in the loader's code; the schema states the
same rules as conditions, and the test checks both on every policy in the test suite. Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

from webhook.admission.base.resources import GPU_MODELS, MIG_PROFILE_PATTERN
from webhook.admission.policy.model import (
    DEFAULT_FRAMEWORK_ENV,
    DEFAULT_MAX_PER_CONTAINER,
    DEFAULT_MAX_PER_POD,
    DEFAULT_SHARED_RESOURCE,
    FRAMEWORKS,
    Backend,
    Check,
    Enforcement,
    Fractional,
    Isolation,
    MigStrategy,
    Mode,
    Placement,
)

API_VERSION = "gpu-admission.io/v1"
KIND = "GPUPolicy"
# Kubernetes' DNS subdomain (metadata.name, which the loader checks with it too) and MIG profile names.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MIG_PROFILE = MIG_PROFILE_PATTERN
MAX_MEMORY_SCALING = 100  # deviceMemoryScaling: HAMi sets no bound; a hundred times a GPU's memory is none


@dataclass(frozen=True, slots=True)
class Field:
    """One key of a policy document.

    `kind` is the value's JSON type: "string", "integer", "number", "boolean", "array" (of `items`) or
    "object" (of `fields`). `choices` are the allowed strings (of the value, or of an array's items).
    """

    name: str
    kind: str
    description: str
    required: bool = False
    const: str | None = None
    choices: tuple[str, ...] = ()
    minimum: int | None = None  # integers: the smallest allowed
    above: Fraction | None = None  # numbers: greater than this
    at_most: Fraction | None = None  # numbers: at most this
    pattern: str | None = None
    max_length: int | None = None
    items: str | None = None  # an array's item type
    min_items: int | None = None
    unique: bool = False
    default: Any = None
    fields: tuple[Field, ...] = ()  # an object's fields, or an array's items' when `items` is "object"
    alternatives: tuple[Any, ...] = ()  # values accepted besides the typed ones, e.g. "auto"


def _values(kind: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in kind)


METADATA = (
    Field(
        "name", "string", "The policy's unique name (a Kubernetes DNS subdomain), shown in messages and metrics.",
        required=True, pattern=DNS_SUBDOMAIN, max_length=253,
    ),
)  # fmt: skip

SHARING = (
    Field(
        "mode", "string", "How one GPU is handed out: whole (exclusive), as time-sliced or MPS replicas, as MIG "
        "slices, or as memory-isolated slices of a device plugin (memory).", choices=_values(Mode),
        default=Mode.EXCLUSIVE.value,
    ),
    Field(
        "replicas", "integer", "time-slicing and mps: the device plugin's replicas per GPU (required there); auto: "
        "taken from the nodes' nvidia.com/gpu.replicas label.", minimum=2, alternatives=("auto",),
    ),
    Field(
        "resourceName", "string", "time-slicing and mps: the shared resource the device plugin advertises.",
        default=DEFAULT_SHARED_RESOURCE,
    ),
    Field(
        "migProfile", "string", "mig: the MIG profile one GPU becomes, e.g. 1g.10gb (required there).",
        pattern=MIG_PROFILE,
    ),
    Field(
        "migProfiles", "array", "mig: the profiles the nodes' MIG layout offers (mig-parted's config); fractions "
        "become only these, and migProfile must be one of them. Default: every profile of gpu.model.",
        items="string", min_items=1, unique=True,
    ),
    Field(
        "migStrategy", "string", "mig: how the device plugin advertises slices: mixed as nvidia.com/mig-<profile>, "
        "single as nvidia.com/gpu.", choices=_values(MigStrategy), default=MigStrategy.MIXED.value,
    ),
    Field(
        "backend", "string", "memory: the device plugin that slices the GPU's memory (required there): ack "
        "(aliyun.com/gpu-mem), hami (nvidia.com/gpumem) or volcano (volcano.sh/vgpu-memory).",
        choices=_values(Backend),
    ),
    Field(
        "placement", "string", "memory: binpack (fill one GPU before the next) or spread (one pod per GPU where "
        "possible), in the form the backend reads; the backend's default when absent. Not for volcano.",
        choices=_values(Placement),
    ),
    Field(
        "isolation", "string", "memory, backend ack: required (pods run only on node pools that cap a share's "
        "memory, ack.node.gpu.schedule cgpu, core_mem or mps) or none (share pools too, where the container sees "
        "the whole GPU and keeps to its share itself).", choices=_values(Isolation),
        default=Isolation.REQUIRED.value,
    ),
    Field(
        "gpuMemoryFactor", "integer", "volcano: the vGPU device plugin's gpuMemoryFactor, the MiB in one unit of "
        "volcano.sh/vgpu-memory (fractions are converted to whole units).", minimum=1, default=1,
    ),
    Field(
        "deviceMemoryScaling", "number", "hami: HAMi's deviceMemoryScaling, the memory its device plugin registers "
        "per GPU in multiples of the GPU's memory (above 1: virtual memory); fractions are of that memory.",
        above=Fraction(0), at_most=Fraction(MAX_MEMORY_SCALING), default=1,
    ),
)  # fmt: skip

GPU = (
    Field(
        "model",
        "string",
        "The GPU model of the namespace's nodes; auto: taken from the nodes' product label.",
        choices=tuple(GPU_MODELS),
        alternatives=("auto",),
    ),
    Field("memoryMiB", "integer", "The GPU's memory in MiB, for a model not listed.", minimum=1),
)

LIMITS = (
    Field(
        "maxPerContainer", "integer", "The most GPUs one container may hold (1 in shared modes, else "
        f"{DEFAULT_MAX_PER_CONTAINER}).", minimum=1,
    ),
    Field("maxPerPod", "integer", "The most GPUs one pod may hold.", minimum=1, default=DEFAULT_MAX_PER_POD),
)  # fmt: skip

DEVICE_CLASSES = (
    Field(
        "gpu", "array", "DRA DeviceClasses whose devices are whole GPUs, besides NVIDIA's gpu.nvidia.com: claims and "
        "deviceclass.resource.kubernetes.io/<class> resources asking for them count against the limits.",
        items="string", min_items=1, unique=True, pattern=DNS_SUBDOMAIN,
    ),
    Field(
        "mig", "array", "DRA DeviceClasses whose devices are MIG slices, besides NVIDIA's mig.nvidia.com: counted "
        "like gpu, with MIG's per-container maximum and profiles.",
        items="string", min_items=1, unique=True, pattern=DNS_SUBDOMAIN,
    ),
)  # fmt: skip

_CHECK_LEVEL = "deny: a violation (enforcement decides); warn: an admission warning; off."

NODE_SHAPE = (
    Field("name", "string", "The node shape's name, shown in messages.", required=True),
    Field(
        "allocatable", "object", "The GPU resources one node of the pool holds, e.g. nvidia.com/gpu: 8.",
        required=True,
    ),
    Field("labels", "object", "The GPU feature discovery labels the pool's nodes carry."),
)  # fmt: skip

CLUSTER = (
    Field("fits", "string", "Each container and the pod must fit on the largest node. " + _CHECK_LEVEL,
          choices=_values(Check), default=Check.WARN.value, alternatives=(False,)),
    Field("offered", "string", "A mapped or converted resource must be advertised by some node. " + _CHECK_LEVEL,
          choices=_values(Check), default=Check.WARN.value, alternatives=(False,)),
    Field("drift", "string", "The policy's sharing and GPU must match what the nodes say. " + _CHECK_LEVEL,
          choices=_values(Check), default=Check.WARN.value, alternatives=(False,)),
    Field("quota", "string", "The namespace's ResourceQuota GPU entries (requests.nvidia.com/gpu) as a budget in "
          "GPU-equivalents on every route: deny refuses past it (enforcement decides); warn admits with a warning; "
          "off.", choices=_values(Check), default=Check.DENY.value, alternatives=(False,)),
    Field("assumeNodes", "array", "Node shapes the inventory cannot see yet (pools that scale from zero).",
          items="object", fields=NODE_SHAPE),
)  # fmt: skip

SPEC = (
    Field(
        "namespaces", "array", "Namespace names and globs (* ? [a-z]) this policy applies to; the most specific "
        "wins.", required=True, items="string", min_items=1, unique=True,
    ),
    Field(
        "enforcement", "string", "enforce: deny; warn: admit with warnings; audit: admit, log and count only.",
        choices=_values(Enforcement), default=Enforcement.ENFORCE.value,
    ),
    Field("sharing", "object", "How the namespace's GPUs are shared.", fields=SHARING),
    Field("gpu", "object", "The namespace's GPU: a known model, or its memory.", fields=GPU),
    Field("limits", "object", "How many GPUs a container and a pod may hold.", fields=LIMITS),
    Field(
        "fractional", "string", "What a fractional nvidia.com/gpu (0.5) becomes: denied (reject), one shared "
        "replica (shared), or the smallest MIG slice that holds it (mig).", choices=_values(Fractional),
        default=Fractional.REJECT.value,
    ),
    Field(
        "memoryFraction", "number", "time-slicing and mps: each replica's share of the GPU's memory, passed to "
        "frameworks through their environment variables.", above=Fraction(0), at_most=Fraction(1),
    ),
    Field(
        "frameworkEnv", "array", "The frameworks whose memory-fraction variables are injected; pytorch is opt-in "
        "(per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF: PyTorch releases before the key stop on it).",
        items="string",
        choices=FRAMEWORKS, unique=True, default=DEFAULT_FRAMEWORK_ENV,
    ),
    Field(
        "blockVisibleDevicesOverride", "boolean", "Deny containers that set NVIDIA_VISIBLE_DEVICES without "
        "requesting a GPU.", default=True,
    ),
    Field(
        "trustedSchedulers", "array", "Schedulers (spec.schedulerName) that set NVIDIA_VISIBLE_DEVICES themselves "
        "from a ConfigMap they own, such as kai-scheduler: their pods may take the variable from a ConfigMap key "
        "(never a literal value). Any pod can name a scheduler: list one only where that is acceptable.",
        items="string", unique=True, default=(), pattern=DNS_SUBDOMAIN, max_length=253,
    ),
    Field(
        "steering", "boolean", "Add node affinity that keeps the namespace's GPU pods on nodes whose sharing "
        "matches the policy (GPU feature discovery labels); auto: where the resource name alone does not.",
        default="auto", alternatives=("auto",),
    ),
    Field("cluster", "object", "Checks against the cluster's nodes (the server's node inventory).", fields=CLUSTER),
    Field(
        "deviceClasses", "object", "Dynamic Resource Allocation: the DeviceClasses whose devices are GPUs here, "
        "besides NVIDIA's (gpu.nvidia.com, mig.nvidia.com).", fields=DEVICE_CLASSES,
    ),
)  # fmt: skip

DOCUMENT = (
    Field("apiVersion", "string", "The policy file format's version.", required=True, const=API_VERSION),
    Field("kind", "string", "Always GPUPolicy.", required=True, const=KIND),
    Field("metadata", "object", "The policy's name.", required=True, fields=METADATA),
    Field("spec", "object", "Which namespaces, and the rules for their GPU requests.", required=True, fields=SPEC),
)


def names(fields: tuple[Field, ...]) -> tuple[str, ...]:
    """The keys a section accepts, in documentation order (the loader's unknown-field messages list them)."""
    return tuple(f.name for f in fields)


def lookup(path: str) -> Field:
    """The field at a dotted path such as `spec.limits.maxPerPod`."""
    fields: tuple[Field, ...] = DOCUMENT
    found: Field | None = None
    for part in path.split("."):
        found = next(f for f in fields if f.name == part)
        fields = found.fields
    assert found is not None
    return found


def minimum(path: str) -> int:
    """An integer field's lower bound, for the loader's check."""
    bound = lookup(path).minimum
    assert bound is not None, path
    return bound
