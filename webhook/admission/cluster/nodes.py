"""What the webhook knows of the cluster's nodes: an immutable snapshot that the pure core reads.

The server keeps it up to date with a list + watch of Nodes (`webhook.server.inventory`) and hands the
engine the latest snapshot, or None while it has none that it trusts (before the first list, or while the
watch has been broken too long): the cluster checks are then skipped, never failed closed. The CLI builds one
from a single list (`--cluster`). Nothing here does I/O.

Per node only what admission needs is kept, so that 5,000 nodes stay small: the allocatable amount of every
managed GPU resource, GPU feature discovery's labels, and the GPU kinds HAMi or Volcano's vGPU device plugin
registers in an annotation.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.resources import ACK_MEMORY, MIG_PREFIX, is_managed, mig_profile_of

if TYPE_CHECKING:
    from webhook.admission.cluster.devices import DraDevices

_T = TypeVar("_T")

MEMORY_TOLERANCE = Fraction(2, 100)  # NVML reports a little less than the nominal size: not drift
STALE_AFTER_S = 120.0  # a watch broken this long: the snapshot may be wrong, and the checks are skipped

# GPU feature discovery's labels that admission reads (NVIDIA/k8s-device-plugin, GFD). Checked at the source,
# NVIDIA/k8s-device-plugin internal/lm/resource.go: `<resource>.product` (the model, spaces as "-", "-SHARED"
# appended when replicated and not renamed), `.count`, `.replicas` (0: sharing off, 1: not replicated, N: N
# replicas per GPU) and `.memory` (MiB, from NVML) for `nvidia.com/gpu` and for each `nvidia.com/mig-<profile>`
# under the mixed strategy; internal/lm/mig-strategy.go: `nvidia.com/mig.strategy` (none, single, mixed).
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
# none | time-slicing | mps: internal/lm/resource.go, baseLabeler (`none` unless more than 1 replica); device
# plugins older than the label set none, which never counts as drift.
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"  # none | single | mixed (internal/lm/mig-strategy.go)
GI_SLICES_LABEL = "nvidia.com/gpu.slices.gi"  # a MIG slice's GPU instance slices, under the single strategy
SHARED_STRATEGIES = ("mps", "time-slicing")  # the values of STRATEGY_LABEL on sliced nodes, sorted
GFD_LABELS = frozenset({PRODUCT_LABEL, MEMORY_LABEL, COUNT_LABEL, REPLICAS_LABEL, STRATEGY_LABEL, MIG_STRATEGY_LABEL})
# ACK's GPU sharing labels (memshare.py): the pool's sharing mode (cgpu, core_mem, share, ...) and placement.
ACK_SCHEDULE_LABEL = "ack.node.gpu.schedule"
ACK_PLACEMENT_LABEL = "ack.node.gpu.placement"
MEMORY_SLICE_LABELS = frozenset({ACK_SCHEDULE_LABEL, ACK_PLACEMENT_LABEL})
# What a node advertises beside the managed resources that admission reads: ACK's GPUs on a shared node (its
# aliyun.com/gpu-mem is the memory of all of them).
ACK_COUNT = "aliyun.com/gpu-count"
NODE_ONLY_RESOURCES = frozenset({ACK_COUNT})
# The vGPU device plugins register each node's GPUs in a node annotation, for their schedulers:
# - HAMi (Project-HAMi/HAMi, docs "Protocol design" and pkg/util DecodeNodeDevices): `hami.io/node-nvidia-register`,
#   a JSON array of {"id", "count", "devmem" (MiB times the device plugin's deviceMemoryScaling: pkg/device-plugin/
#   nvidiadevice/nvinternal/plugin/register.go, getAPIDevices), "devcore", "type" ("NVIDIA-" and NVML's name), ...},
#   or in older releases `id,count,devmem,devcore,type,numa,health` entries each ended by ":".
# - Volcano's vGPU (Project-HAMi/volcano-vgpu-device-plugin pkg/util/util.go EncodeNodeDevices and
#   pkg/plugin/register.go ConvertDeviceInfo at 4fb76ba16a17; read by volcano-sh/volcano
#   pkg/scheduler/api/devices/nvidia/vgpu/utils.go decodeNodeDevices at ed72c7c815a9):
#   `volcano.sh/node-vgpu-register`, `id,count,devmem,type,health,mode` entries each ended by ":" (`mode`
#   since the dynamic MIG release; five fields before), devmem in units of the device plugin's gpuMemoryFactor
#   MiB (NVML's MiB divided by it, rounded down).
# Only the distinct (type, amount) pairs are kept, how many GPUs register each, and which plugin registered them
# (the tuple's class and an attribute of it, interned, so that a node holds no field more): what drift compares
# with gpu.model/memoryMiB through the policy's deviceMemoryScaling or gpuMemoryFactor (memshare.registered_mib),
# and what the fits check places a container's vGPUs on (one GPU each, clustercheck.py).
HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
VOLCANO_REGISTER_ANNOTATION = "volcano.sh/node-vgpu-register"
HAMI, VOLCANO = "hami", "volcano"  # NodeInfo.registrar: the Backend values (policy.Backend) of the two plugins


class Registered(tuple[tuple[str, int], ...]):
    """The distinct (type, amount) pairs of the GPUs a device plugin registers, sorted; the class says whose
    (`registrar`), `gpus` how many GPUs register each pair (in its order). Equal only to the same pairs and
    counts of the same registrar (a plain tuple has neither): a node whose GPUs pass from one device plugin to
    the other, or that registers one GPU more, has changed, though the pairs may be the same."""

    __slots__ = ()
    registrar = ""
    gpus: tuple[int, ...] = ()  # set once, by registered_devices (the subclasses' instances have a __dict__)

    def __eq__(self, other: object) -> bool:
        return (
            tuple.__eq__(self, other) is True
            and getattr(other, "registrar", "") == self.registrar
            and getattr(other, "gpus", ()) == self.gpus
        )

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((self.registrar, tuple(self), self.gpus))

    def per_gpu(self) -> tuple[tuple[int, int], ...]:
        """(amount, GPUs of that amount), the most first: what a container's vGPUs can be placed on."""
        found: dict[int, int] = {}
        for (_, amount), gpus in zip(self, self.gpus, strict=True):
            found[amount] = found.get(amount, 0) + gpus
        return tuple(sorted(found.items(), reverse=True))


class HamiRegistered(Registered):
    registrar = HAMI  # amounts in MiB times deviceMemoryScaling


class VolcanoRegistered(Registered):
    registrar = VOLCANO  # amounts in units of gpuMemoryFactor MiB


_REGISTERS = ((HAMI_REGISTER_ANNOTATION, HamiRegistered), (VOLCANO_REGISTER_ANNOTATION, VolcanoRegistered))
# The ":"-ended entries of each: (field counts accepted, where the amount is, where the type is).
_ENTRY_LAYOUT = {HAMI: ((7,), 2, 4), VOLCANO: ((5, 6), 2, 3)}
_MAX_AMOUNT_DIGITS = 9  # 999,999,999 MiB per GPU: more is no GPU, and int() of a long text is slow
_MAX_TYPE_LENGTH = 128  # NVML names are a few dozen characters
_DEVICE_SHAPES: dict[tuple[str, tuple[tuple[str, int], ...], tuple[int, ...]], Registered] = {}  # interned, few
# Per-profile MIG labels under the mixed strategy, e.g. `nvidia.com/mig-1g.10gb.count`.
_MIG_LABEL = re.compile(r"^nvidia\.com/mig-[0-9a-z.+-]+\.(count|memory|slices\.ci|slices\.gi|engines\.[a-z]+)$")


def registered_devices(text: Any, kind: type[Registered] = HamiRegistered) -> Registered:
    """A register annotation's text -> the distinct (type, amount) of the node's GPUs, sorted, with how many
    GPUs (entries) register each; empty for anything else (a value that is not one of the encodings reads as
    no GPUs, never an error). `kind` says whose: HAMi's (JSON, or its older entries; amounts in MiB) or
    Volcano's (entries; amounts in gpuMemoryFactor units). Each entry is one GPU, healthy or not (a GPU
    that is unhealthy now comes back, as a cordoned node does). Interned: 5,000 nodes of a few GPU kinds and
    counts hold a few tuples."""
    registrar = kind.registrar
    if not isinstance(text, str) or not text.strip():
        return _EMPTY
    found: dict[tuple[str, int], int] = {}
    if registrar == HAMI and text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: brackets nested thousands deep
            return _EMPTY
        for item in items if isinstance(items, list) else ():
            name = item.get("type") if isinstance(item, dict) else None
            amount = item.get("devmem") if isinstance(item, dict) else None
            if _is_type(name) and type(amount) is int and 0 < amount < 10**_MAX_AMOUNT_DIGITS:
                found[(name, amount)] = found.get((name, amount), 0) + 1
    else:
        counts, amount_at, type_at = _ENTRY_LAYOUT[registrar]
        for entry in text.split(":"):
            fields = entry.split(",")
            if len(fields) in counts:
                amount_text, name = fields[amount_at], fields[type_at]
                if _is_amount(amount_text) and _is_type(name) and int(amount_text) > 0:
                    pair = (name, int(amount_text))
                    found[pair] = found.get(pair, 0) + 1
    if not found:
        return _EMPTY
    pairs = tuple(sorted((sys.intern(name), amount) for name, amount in found))
    gpus = tuple(found[pair] for pair in pairs)
    interned = _DEVICE_SHAPES.get((registrar, pairs, gpus))
    if interned is None:
        interned = kind(pairs)
        interned.gpus = gpus
        if len(_DEVICE_SHAPES) < 1024:
            _DEVICE_SHAPES[(registrar, pairs, gpus)] = interned
    return interned


_EMPTY = Registered()


def _is_amount(text: str) -> bool:
    """ASCII digits only (`str.isdigit` takes "²", which int() refuses), and few of them."""
    return 0 < len(text) <= _MAX_AMOUNT_DIGITS and text.isascii() and text.isdigit()


def _is_type(kind: Any) -> TypeGuard[str]:
    return isinstance(kind, str) and 0 < len(kind) <= _MAX_TYPE_LENGTH and kind.isprintable()


def registered(annotations: Mapping[str, Any]) -> Registered:
    """The GPUs a node's annotations register (HAMi's first, where a node somehow has both); empty where none."""
    for annotation, kind in _REGISTERS:
        devices = registered_devices(annotations.get(annotation), kind)
        if devices:
            return devices
    return _EMPTY


def per_container(allocatable: Mapping[str, int], resource: str, amount: int) -> int:
    """The most of `resource` one container can get on a node advertising `amount` of it: the amount, but for
    ACK's aliyun.com/gpu-mem, the memory of all the node's GPUs, of which a container gets a share of one
    (gpushare-scheduler-extender pkg/cache/nodeinfo.go: each device holds the total / aliyun.com/gpu-count)."""
    if resource == ACK_MEMORY:
        gpus = allocatable.get(ACK_COUNT, 0)
        return amount // gpus if gpus > 0 else amount
    return amount


def node_replicas(node: NodeInfo) -> int:
    """The replicas GPU feature discovery labels the node's shared GPUs with; 0 where it says none."""
    text = node.labels.get(REPLICAS_LABEL, "")
    return int(text) if text.isdigit() else 0


def mig_counts(node: NodeInfo) -> dict[str, int]:
    """`{profile: count}` from the mixed strategy's `nvidia.com/mig-<profile>.count` labels."""
    counts = {}
    for key, value in node.labels.items():
        if key.startswith(MIG_PREFIX) and key.endswith(".count") and value.isdigit() and int(value) > 0:
            profile = mig_profile_of(key.removesuffix(".count"))
            if profile is not None:
                counts[profile] = int(value)
    return counts


def is_kept_label(key: str) -> bool:
    return key in GFD_LABELS or key in MEMORY_SLICE_LABELS or _MIG_LABEL.match(key) is not None


def nodes_text(count: int) -> str:
    """`1 node`, `3 nodes`: for every message that counts nodes."""
    return f"{count} node{'s' if count != 1 else ''}"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node, as admission sees it."""

    name: str
    allocatable: Mapping[str, int]  # managed resources only, in whole devices (or the resource's unit)
    labels: Mapping[str, str]  # GFD labels only (is_kept_label)
    unschedulable: bool = False  # cordoned: still counted (it comes back), but said so in messages
    devices: tuple[tuple[str, int], ...] = ()  # registered GPUs: distinct (type, amount), `.gpus` of each
    # DRA (slices.merge): (extended resource, DeviceClass) for each resource a class serves from the node's
    # devices; and whether its GPUs or MIG devices are in ResourceSlices (its labels then come from them)
    served: tuple[tuple[str, str], ...] = ()
    sliced: bool = False

    @property
    def registrar(self) -> str:
        """Whose annotation `devices` came from: HAMI (amounts in scaled MiB), VOLCANO (units), "" (none)."""
        return self.devices.registrar if isinstance(self.devices, Registered) else ""

    @staticmethod
    def from_object(node: Any) -> NodeInfo | None:
        """A Node as the API sends it (JSON, camelCase) -> NodeInfo; None when it has no name."""
        if not isinstance(node, dict):
            return None
        metadata = found if isinstance(found := node.get("metadata"), dict) else {}
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            return None
        labels = found if isinstance(found := metadata.get("labels"), dict) else {}
        status = found if isinstance(found := node.get("status"), dict) else {}
        allocatable = found if isinstance(found := status.get("allocatable"), dict) else {}
        spec = found if isinstance(found := node.get("spec"), dict) else {}
        amounts: dict[str, int] = {}
        for resource, raw in allocatable.items():
            if is_managed(resource) or resource in NODE_ONLY_RESOURCES:
                value = quantity_or_none(raw)
                if value is not None and value > 0:
                    amounts[resource] = int(value)
        # Interned: thousands of nodes carry the same few keys and values, held once.
        kept = {
            sys.intern(k): sys.intern(v)
            for k, v in labels.items()
            if isinstance(k, str) and isinstance(v, str) and is_kept_label(k)
        }
        annotations = found if isinstance(found := metadata.get("annotations"), dict) else {}
        return NodeInfo(name, amounts, kept, spec.get("unschedulable") is True, registered(annotations))


@dataclass(frozen=True)
class ClusterView:
    """An immutable snapshot of the nodes. What reviews read is worked out once per snapshot: the largest
    amounts eagerly (the snapshot is built off the hot path), per-policy values on first use (`derived`)."""

    nodes: Mapping[str, NodeInfo]
    # What the view could not read in full, a line each (slices.unread: DeviceClass selectors), for lint
    unread: tuple[str, ...] = field(default=(), compare=False)
    # Each DeviceClass known, with the sharing strategy its own GpuConfig sets ("" none; slices.sharing_of):
    # a claim or an extended resource served by the class gets it (the cluster checks, dra.judge)
    class_sharing: Mapping[str, str] = field(default_factory=dict, compare=False)
    # The nodes' DRA devices and the DeviceClasses (devices.DraDevices), for a claim request's own selectors
    # (clustercheck.claims_fit); None where the view has no slices, and then those selectors are not judged
    dra: DraDevices | None = field(default=None, compare=False)
    _largest: dict[str, tuple[int, str]] = field(default_factory=dict, repr=False, compare=False)
    _derived: dict[tuple[str, int], tuple[object, Any]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for node in self.nodes.values():
            for name, total in node.allocatable.items():
                amount = per_container(node.allocatable, name, total)
                best = self._largest.get(name)
                if best is None or amount > best[0]:
                    self._largest[name] = (amount, node.name)

    @staticmethod
    def of(nodes: Iterable[NodeInfo]) -> ClusterView:
        return ClusterView({node.name: node for node in nodes})

    def largest(self, resource: str) -> tuple[int, str] | None:
        """The most of `resource` any one container can get on one node (per_container), and that node's name;
        None when no node has any."""
        return self._largest.get(resource)

    def resources(self) -> Iterable[str]:
        """Every resource some node advertises."""
        return self._largest.keys()

    def derived(self, key: str, owner: object, compute: Callable[[], _T]) -> _T:
        """`compute()` for `owner` (a policy), worked out once per snapshot. Keyed by identity, and `owner` is
        kept with the value, so that a policy set swapped on reload never reads another policy's entry."""
        entry = self._derived.get((key, id(owner)))
        if entry is None or entry[0] is not owner:
            if len(self._derived) >= 4096:  # policy reloads leave entries behind: a bound, never reached in use
                self._derived.clear()
            entry = self._derived[(key, id(owner))] = (owner, compute())
        value: _T = entry[1]
        return value
