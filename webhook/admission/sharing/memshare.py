"""Memory-sliced sharing (`sharing.mode: memory`): a device plugin hands out a share of one GPU's memory and
caps what the container sees, and `nvidia.com/gpu: f` becomes that backend's resources for f of the memory.

Each backend, checked at its source:
- ack, Alibaba Cloud ACK's GPU sharing (AliyunContainerService/gpushare-scheduler-extender pkg/utils/const.go:
  `aliyun.com/gpu-mem` and `aliyun.com/gpu-count`; gpushare-device-plugin's default memory unit GiB; ACK's
  "labels used by ACK to control GPUs"): a container asks for `aliyun.com/gpu-mem` in whole GiB. The extender
  places a pod's memory, the sum over its containers (pkg/utils/pod.go GetGPUMemoryFromPodResource), on one
  GPU (pkg/cache/nodeinfo.go allocateGPUID); ACK's multi-GPU sharing spreads it over the GPUs that the pod
  label `aliyun.com/gpu-count` names, an equal whole number of GiB from each (N GiB over M GPUs: N/M each,
  all on one node). On nodes `aliyun.com/gpu-count` is the number of GPUs beside their total memory: never a
  container's resource. A node's `ack.node.gpu.schedule` says how it shares: `cgpu` (memory capped, compute
  shared), `core_mem` (both capped), `mps` (memory capped, MPS with cGPU) and `share` (nothing capped: the
  container sees the whole GPU); `default` or no label is exclusive scheduling, whole GPUs as `nvidia.com/gpu`
  (a node serves one mode: the other modes' resources are 0 there). Shares are steered to the pools that cap
  memory, or every shared pool under `isolation: none`; whole GPUs (`nvidia.com/gpu: N`, left as written) to
  the exclusive pool. `ack.node.gpu.placement` is `binpack` (the default) or `spread`.
- hami, Project-HAMi (its device plugin config: `nvidia.com/gpu` counts vGPUs, `nvidia.com/gpumem` is MiB per
  vGPU, `nvidia.com/gpumem-percentage` percent of one GPU's memory, `nvidia.com/gpucores` percent of its
  compute; pkg/device/nvidia/device.go Fit: cores 100 is a GPU of its own, "Coresreq=100 indicates it want this
  card exclusively"): a fraction is one vGPU with MiB and percent; whole GPUs are N vGPUs of 100% memory and
  100 cores. Placement is the pod annotations `hami.io/node-scheduler-policy` and `hami.io/gpu-scheduler-policy`.
  Its device plugin registers each GPU's memory times `deviceMemoryScaling` (pkg/device-plugin/nvidiadevice/
  nvinternal/plugin/register.go, getAPIDevices, at 4707fb02c91c), and its scheduler divides that among the
  vGPUs: above 1 it is virtual memory (CUDA_OVERSUBSCRIBE, host memory behind what the device lacks), and a
  fraction f is f of it (`sharing.deviceMemoryScaling`), as `nvidia.com/gpumem-percentage` is.
- volcano, Volcano's vGPU (volcano-sh/volcano pkg/scheduler/api/devices/nvidia/vgpu, and the vgpu device
  plugin's config: `volcano.sh/vgpu-number`, `volcano.sh/vgpu-memory`, `volcano.sh/vgpu-memory-percentage`,
  `volcano.sh/vgpu-cores`; the same cores-100 rule): as HAMi, under its own names. One unit of
  `volcano.sh/vgpu-memory` is `gpuMemoryFactor` MiB (Project-HAMi/volcano-vgpu-device-plugin at 4fb76ba16a17:
  pkg/plugin/register.go registers NVML's MiB divided by it, pkg/plugin/server.go sets the container's
  CUDA_DEVICE_MEMORY_LIMIT to the units times it): `sharing.gpuMemoryFactor`. Binpack or spread is the
  scheduler's `deviceshare.SchedulePolicy`, one value for the whole scheduler: no pod can ask for it, so a
  policy cannot set it (the loader says so).

Amounts are rounded down to the backend's unit, so the shares of one GPU never add up to more than it has; a
fraction too small for one unit is refused with the smallest that works. Pure data and functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import ceil
from typing import Any

from webhook.admission.base.patch import pointer
from webhook.admission.base.podspec import asks_some, section_bodies
from webhook.admission.base.quantity import format_fraction, quantity_or_none
from webhook.admission.base.resources import (
    ACK_MEMORY,
    HAMI_CORES,
    HAMI_MEMORY,
    HAMI_MEMORY_PERCENT,
    MEMORY_SLICE_RESOURCES,
    NVIDIA_GPU,
    VOLCANO_CORES,
    VOLCANO_MEMORY,
    VOLCANO_MEMORY_PERCENT,
    VOLCANO_NUMBER,
)
from webhook.admission.cluster.nodes import (
    ACK_COUNT,
    ACK_PLACEMENT_LABEL,
    ACK_SCHEDULE_LABEL,
    MEMORY_TOLERANCE,
    VOLCANO,
    NodeInfo,
)
from webhook.admission.policy.model import Backend, Mode, Placement, Policy
from webhook.admission.sharing.backend import NodeDrift

ACK_ISOLATED = ("cgpu", "core_mem", "mps")  # the shared modes that cap a container's memory, sorted
ACK_SHARED = ("cgpu", "core_mem", "mps", "share")  # every shared mode: `share` caps nothing
ACK_SHARE_ONLY = "share"
ACK_COMPUTE_ALLOCATED = "core_mem"  # compute allocated too: ACK's multi-GPU sharing is not served there
HAMI_NODE_POLICY = "hami.io/node-scheduler-policy"
HAMI_GPU_POLICY = "hami.io/gpu-scheduler-policy"
WHOLE = "100"  # percent: all of one GPU's memory, and its compute to itself


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One backend's resources and units."""

    backend: Backend
    title: str  # for messages
    count: str | None  # the resource that counts (v)GPUs; None: ACK, one GPU per container
    memory: str  # the memory of one (v)GPU, in `unit_mib` (Volcano's: the policy's gpuMemoryFactor, units_of)
    unit_mib: int
    unit: str  # "GiB", "MiB"
    percent: str | None  # the memory of one (v)GPU in percent of the GPU
    cores: str | None  # percent of one GPU's compute

    @property
    def containers_only(self) -> bool:
        """Whether its scheduler counts only the containers' vGPUs: Volcano's reads no init container's
        (ExtractResourceRequest)."""
        return self.backend is Backend.VOLCANO

    @property
    def spreads_pods(self) -> bool:
        """Whether its scheduler reads a pod as a whole: ACK places a pod's memory, the sum over its containers,
        on the GPUs its pod label `aliyun.com/gpu-count` names (ack_pod)."""
        return self.backend is Backend.ACK

    @property
    def spread_label(self) -> str | None:
        """The pod label that names the GPUs a pod's memory spreads over (spreads_pods), which is no container's
        resource: ACK's `aliyun.com/gpu-count`; None elsewhere."""
        return ACK_COUNT if self.spreads_pods else None

    @property
    def counts_one_by_default(self) -> bool:
        """Whether a container asking memory or percent without a count holds one vGPU, and `nvidia.com/gpu`
        beside counts as whole GPUs: Volcano's vGPU device plugin (its defaultGPUNum; held)."""
        return self.backend is Backend.VOLCANO

    @property
    def resources(self) -> frozenset[str]:
        """Every resource of this backend that a container may hold."""
        return frozenset(name for name in (self.count, self.memory, self.percent, self.cores) if name)


BACKENDS: dict[Backend, BackendSpec] = {
    Backend.ACK: BackendSpec(Backend.ACK, "ACK GPU sharing", None, ACK_MEMORY, 1024, "GiB", None, None),
    Backend.HAMI: BackendSpec(
        Backend.HAMI, "HAMi", NVIDIA_GPU, HAMI_MEMORY, 1, "MiB", HAMI_MEMORY_PERCENT, HAMI_CORES
    ),
    Backend.VOLCANO: BackendSpec(
        Backend.VOLCANO, "Volcano vGPU", VOLCANO_NUMBER, VOLCANO_MEMORY, 1, "MiB", VOLCANO_MEMORY_PERCENT,
        VOLCANO_CORES,
    ),
}  # fmt: skip
# Every backend's resources but `nvidia.com/gpu`: the webhook manages them (resources.is_managed), and a
# namespace's pool rule (validate.py) tells its own backend's from another's.
BACKEND_RESOURCES = MEMORY_SLICE_RESOURCES
_ALL = frozenset(name for spec in BACKENDS.values() for name in spec.resources)
assert _ALL - {NVIDIA_GPU} == BACKEND_RESOURCES


def spec_of(policy: Policy) -> BackendSpec | None:
    """The policy's backend under mode memory; None in every other mode."""
    backend = policy.sharing.backend
    return BACKENDS[backend] if policy.sharing.mode is Mode.MEMORY and backend is not None else None


# --- Units: the memory a fraction is taken of, and one unit of it -------------------------------------------


def units_of(spec: BackendSpec, policy: Policy) -> tuple[int | None, int]:
    """(the MiB a fraction is taken of, the MiB of one unit of `spec.memory`): the GPU's memory, but HAMi's
    as its device plugin registers it (times deviceMemoryScaling, rounded down as it does: what its scheduler
    divides among vGPUs); one GiB for ACK, one MiB for HAMi, gpuMemoryFactor MiB for Volcano. The memory is
    None where the policy does not know it."""
    gpu_mib, sharing = policy.gpu_memory_mib, policy.sharing
    if spec.backend is Backend.HAMI and gpu_mib is not None:
        gpu_mib = int(gpu_mib * sharing.device_memory_scaling)
    return gpu_mib, sharing.gpu_memory_factor if spec.backend is Backend.VOLCANO else spec.unit_mib


def unit_text(spec: BackendSpec, unit_mib: int) -> str:
    """`GiB`, `MiB`, or `units of 10 MiB` (Volcano's gpuMemoryFactor)."""
    return spec.unit if unit_mib == spec.unit_mib else f"units of {unit_mib} MiB"


def memory_text(spec: BackendSpec, policy: Policy, gpu_mib: int) -> str:
    """The memory a fraction is taken of, for messages: `81920 MiB`, or `163840 MiB (81920 MiB x HAMi's
    deviceMemoryScaling 2)`."""
    scaling = policy.sharing.device_memory_scaling
    if spec.backend is not Backend.HAMI or scaling == 1 or policy.gpu_memory_mib is None:
        return f"{gpu_mib} MiB"
    return f"{gpu_mib} MiB ({policy.gpu_memory_mib} MiB x HAMi's deviceMemoryScaling {format_fraction(scaling)})"


def registered_mib(policy: Policy, registrar: str, amount: int) -> Fraction:
    """The GPU memory a node's registered amount (cluster.registered_devices) stands for, read through the
    policy: Volcano's are units of gpuMemoryFactor MiB, HAMi's MiB times deviceMemoryScaling (each 1 unless the
    policy is of that backend, where the loader allows them)."""
    if registrar == VOLCANO:
        return Fraction(amount * policy.sharing.gpu_memory_factor)
    return amount / policy.sharing.device_memory_scaling


# --- Fractions -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Share:
    """What `nvidia.com/gpu: f` becomes: the backend's resources, in order; none where f is below one unit."""

    resources: tuple[tuple[str, str], ...] = ()


def share(spec: BackendSpec, fraction: int | Fraction, gpu_mib: int, unit_mib: int) -> Share:
    """f of a GPU of `gpu_mib` MiB, rounded down to the backend's units of `unit_mib` (whole GiB for ACK, MiB
    for HAMi, gpuMemoryFactor MiB for Volcano) and whole percent of compute (HAMi and Volcano)."""
    units = int(fraction * gpu_mib // unit_mib)
    cores = int(fraction * 100) if spec.cores else 1
    if units < 1 or cores < 1:
        return Share()
    if spec.backend is Backend.ACK:
        resources: tuple[tuple[str, str], ...] = ((spec.memory, str(units)),)
    else:
        assert spec.count is not None and spec.cores is not None
        resources = ((spec.count, "1"), (spec.memory, str(units)), (spec.cores, str(cores)))
    return Share(resources)


def smallest(spec: BackendSpec, gpu_mib: int, unit_mib: int) -> Fraction:
    """The smallest fraction, in at most four decimals, that gives one unit of memory (and 1% of compute)."""
    least = max(Fraction(unit_mib, gpu_mib), Fraction(1, 100) if spec.cores else Fraction(0))
    return Fraction(ceil(least * 10_000), 10_000)


def whole(spec: BackendSpec, count: Any) -> tuple[tuple[str, str], ...] | None:
    """`nvidia.com/gpu: N` in the backend's own way, or None where it stays as written (ACK: exclusive nodes
    advertise `nvidia.com/gpu`)."""
    if spec.backend is Backend.ACK:
        return None
    assert spec.count is not None and spec.percent is not None and spec.cores is not None
    return ((spec.count, count), (spec.percent, WHOLE), (spec.cores, WHOLE))


# --- Mutation (called by mutate.py) -------------------------------------------------------------------------


def convert(
    requests: dict[str, Any],
    limits: dict[str, Any],
    gpu: tuple[Any, int | Fraction],
    policy: Policy,
    maximum: int,
    kinds: list[str],
    texts: list[str],
) -> None:
    """`nvidia.com/gpu` (text, value) into the backend's resources, in both maps that hold it. A container that
    already holds one of them (written in the backend's own resources, or converted before) is left alone."""
    spec = spec_of(policy)
    if spec is None or any(name in BACKEND_RESOURCES for name in (*requests, *limits)):
        return
    gpu_mib, unit_mib = units_of(spec, policy)
    text, value = gpu
    if 0 < value < 1:
        if gpu_mib is None:
            return  # validation explains
        converted = share(spec, Fraction(value), gpu_mib, unit_mib)
        if not converted.resources:
            return  # too small: validation names the smallest that works
        _replace(requests, limits, converted.resources)
        kinds.append("memory-share")
        # The count (1 vGPU) is left out, or said as "1" where it keeps the name: within a warning's 120 characters.
        got = ", ".join(f"{name} {amount}" for name, amount in converted.resources if name != spec.count)
        kept = "1 with " if spec.count == NVIDIA_GPU else ""
        texts.append(f"{NVIDIA_GPU} {format_fraction(Fraction(value))} became {kept}{got}")
    elif value >= 1 and value.denominator == 1 and value <= maximum:
        resources = whole(spec, text)
        if resources is None:
            return
        _replace(requests, limits, resources)
        kinds.append("memory-whole")
        texts.append(f"{NVIDIA_GPU} {value} became {spec.count} {value}, whole (memory and cores 100%)")


def _replace(requests: dict[str, Any], limits: dict[str, Any], resources: tuple[tuple[str, str], ...]) -> None:
    for resource_map in (requests, limits):
        if NVIDIA_GPU in resource_map:
            del resource_map[NVIDIA_GPU]
            resource_map.update(resources)


def place(
    obj: dict[str, Any], spec_path: tuple[str, ...], policy: Policy
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """HAMi's placement: its scheduler reads binpack or spread from the pod's annotations. Returns the object with
    them set on the pod (a workload's template) where a container holds a HAMi vGPU, and the patch that sets
    them; the object itself and no patch where nothing changes."""
    placement = policy.sharing.placement
    if placement is None or policy.sharing.backend is not Backend.HAMI or not _holds_vgpu(obj, spec_path):
        return obj, []
    meta_path = (*spec_path[:-1], "metadata")
    root = node = dict(obj)
    for key in meta_path[:-1]:
        child = node.get(key)
        if type(child) is not dict:
            return obj, []
        node[key] = node = dict(child)
    metadata = node.get("metadata")
    if metadata is not None and type(metadata) is not dict:
        return obj, []
    annotations = (metadata or {}).get("annotations")
    if annotations is not None and type(annotations) is not dict:
        return obj, []
    wanted = placement_annotations(policy)
    missing = {key: value for key, value in wanted.items() if (annotations or {}).get(key) != value}
    if not missing:
        return obj, []
    at = pointer(meta_path)
    if metadata is None:
        patch = [{"op": "add", "path": at, "value": {"annotations": missing}}]
    elif annotations is None:
        patch = [{"op": "add", "path": at + "/annotations", "value": missing}]
    else:
        patch = [
            {"op": "replace" if key in annotations else "add", "path": pointer((*meta_path, "annotations", key)),
             "value": value}
            for key, value in missing.items()
        ]  # fmt: skip
    node["metadata"] = {**(metadata or {}), "annotations": {**(annotations or {}), **missing}}
    return root, patch


def placement_annotations(policy: Policy) -> dict[str, str]:
    """The pod annotations HAMi's scheduler reads the policy's placement from (none without one, or under
    another backend); the native policies write the same."""
    placement = policy.sharing.placement
    if placement is None or policy.sharing.backend is not Backend.HAMI:
        return {}
    return {HAMI_NODE_POLICY: str(placement), HAMI_GPU_POLICY: str(placement)}


def _holds_vgpu(obj: dict[str, Any], spec_path: tuple[str, ...]) -> bool:
    node: Any = obj
    for key in spec_path:
        node = node.get(key) if type(node) is dict else None
    if type(node) is not dict:
        return False
    return asks_some(section_bodies(node, ("containers", "initContainers")), (NVIDIA_GPU,), ("limits",))


def placement_text(placement: Placement) -> str:
    return f"{HAMI_NODE_POLICY} and {HAMI_GPU_POLICY} {placement}"


# --- Steering (steering.py reads these) ---------------------------------------------------------------------


def node_requirements(policy: Policy, multi: bool = False) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """The node labels (key, operator, values) a memory policy's shares need: ACK's shared pools that cap
    memory (every shared pool under `isolation: none`), and its placement label (a node without one packs:
    binpack is ACK's default). `multi`: a share spread over several GPUs (pod_gpus), which ACK serves only
    where compute is shared (its multi-GPU sharing: not `core_mem`). HAMi and Volcano schedule onto their own
    nodes themselves: nothing."""
    if policy.sharing.backend is not Backend.ACK:
        return ()
    pools: tuple[str, ...] = ACK_ISOLATED if policy.sharing.isolates else ACK_SHARED
    if multi:
        pools = tuple(pool for pool in pools if pool != ACK_COMPUTE_ALLOCATED)
    wanted: list[tuple[str, str, tuple[str, ...]]] = [(ACK_SCHEDULE_LABEL, "In", pools)]
    placement = policy.sharing.placement
    if placement is Placement.SPREAD:
        wanted.append((ACK_PLACEMENT_LABEL, "In", (Placement.SPREAD.value,)))
    elif placement is Placement.BINPACK:
        wanted.append((ACK_PLACEMENT_LABEL, "NotIn", (Placement.SPREAD.value,)))
    return tuple(wanted)


def whole_requirements(policy: Policy) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """The node labels a memory policy's whole GPUs (`nvidia.com/gpu: N`, no share beside them) need: ACK's
    exclusive pool, every node not labelled with a shared mode (`default`, or no label: ACK's default). HAMi's
    and Volcano's whole GPUs are vGPUs of their own nodes: nothing."""
    if policy.sharing.backend is not Backend.ACK:
        return ()
    return ((ACK_SCHEDULE_LABEL, "NotIn", ACK_SHARED),)


def steered_resource(policy: Policy) -> str:
    """The resource whose holders are steered under mode memory."""
    spec = spec_of(policy)
    return spec.memory if spec is not None else NVIDIA_GPU


# --- Validation (validate.py calls these) -------------------------------------------------------------------


def served(policy: Policy) -> frozenset[str]:
    """The pool of a memory namespace: the backend's resources, and `nvidia.com/gpu` (converted, or ACK's
    whole GPUs)."""
    spec = spec_of(policy)
    return frozenset({NVIDIA_GPU, *(spec.resources if spec else ())})


def pool_words(policy: Policy) -> tuple[str, str, str]:
    """What the pool is, what to request instead of another pool's resource, and that in short."""
    spec = spec_of(policy)
    assert spec is not None
    names = ", ".join(sorted(spec.resources - {NVIDIA_GPU}))
    return (
        f"{spec.title} memory slices ({names})",
        f"{NVIDIA_GPU}: <fraction> (it becomes {spec.memory}) or those",
        f"ask for {NVIDIA_GPU}: <fraction>",
    )


def fraction_advice(shown: str, value: int | Fraction, policy: Policy) -> tuple[str, str]:
    """Why `nvidia.com/gpu: f` stayed a fraction under mode memory (validation refuses it, as the API server
    would): too small for one unit, or the GPU's memory unknown."""
    spec = spec_of(policy)
    assert spec is not None
    gpu_mib, unit_mib = units_of(spec, policy)
    where = f'policy "{policy.name}"'
    if gpu_mib is None:
        return (
            f"{NVIDIA_GPU} {shown} is fractional, and {where} does not know the GPU's memory to take a share of "
            f"(gpu.model auto, and no node says it yet); request {spec.memory} directly, or whole GPUs",
            f"{NVIDIA_GPU} {shown}: the GPU's memory is unknown here; ask for {spec.memory}",
        )
    if value > 1 and spec.backend is Backend.ACK:
        gpus = ceil(value)
        each = int(value * gpu_mib / gpus) // spec.unit_mib
        return (
            ack_past_one_line(shown, format_fraction(Fraction(value)), str(gpus), str(each), str(each * gpus), policy),
            f"{NVIDIA_GPU} {shown}: ask for whole GPUs, or {spec.memory} {each * gpus} over {gpus} GPUs",
        )
    if value > 1:
        return (
            f"{NVIDIA_GPU} {shown} is fractional and more than one GPU: {spec.title} gives one GPU's memory per "
            f"share ({where}); request a fraction below 1 or a whole number of GPUs",
            f"{NVIDIA_GPU} {shown}: ask for a fraction below 1 or whole GPUs",
        )
    if share(
        spec, value, gpu_mib, unit_mib
    ).resources:  # it would convert: the container holds the backend's own resources
        instead = f"{NVIDIA_GPU}: 1 with {spec.memory}" if spec.count == NVIDIA_GPU else f"{spec.memory} alone"
        return (
            f"{NVIDIA_GPU} {shown} is fractional beside {spec.title}'s own resources, which the webhook leaves as "
            f"written ({where}); request the fraction alone (it becomes {spec.memory}), or {instead}",
            f"{NVIDIA_GPU} {shown} beside {spec.memory}: ask for one of them",
        )
    least = format_fraction(smallest(spec, gpu_mib, unit_mib))
    one = f"1 {spec.unit}" if unit_mib == spec.unit_mib else f"1 unit of {unit_mib} MiB"
    unit = f"{one} of the GPU's {memory_text(spec, policy, gpu_mib)}" + (" and 1% of its compute" if spec.cores else "")
    return (
        f"{NVIDIA_GPU} {shown} is less than one unit of {spec.title} ({unit}, {where}); request {least} or more",
        f"{NVIDIA_GPU} {shown} is below one {spec.unit if unit_mib == spec.unit_mib else 'unit'} share; ask for "
        f"{least} or more",
    )


def ack_past_one_line(shown: str, held: str, gpus: str, each: str, total: str, policy: Policy) -> str:
    """ACK's advice for `nvidia.com/gpu` past one GPU that is not whole (fraction_advice): the same memory in its
    own form, `gpus` GPUs (the value rounded up) of `each` GiB (the value's share of each, rounded down), `total`
    in all; `held` the value as format_fraction writes it (template: the native policies fill it too)."""
    spec = spec_of(policy)
    assert spec is not None
    return (
        f'{NVIDIA_GPU} {shown} is fractional and more than one GPU (policy "{policy.name}"); request a whole '
        f"number of GPUs, or {held} GPUs' memory in ACK's own form: {spec.memory}: {total} with the pod label "
        f'{ACK_COUNT}: "{gpus}" ({each} GiB of each of {gpus} GPUs)'
    )


@dataclass(slots=True)
class Held:
    """What one container holds of its backend, in GPUs' worth of memory, and the problems with it."""

    worth: Fraction
    problems: list[tuple[str, str]]


def _amount(limits: dict[str, Any], name: str) -> int:
    value = quantity_or_none(limits[name]) if name in limits else None
    return int(value) if value is not None and value.denominator == 1 and value > 0 else 0


def held(limits: dict[str, Any], policy: Policy, gpus: int = 1) -> Held:
    """A container's backend resources (after mutation, in whole numbers; the other rules explain the rest)
    as GPUs' worth of memory, and each amount that no GPU can give. `gpus`: ACK, the GPUs its pod's memory
    spreads over (pod_gpus)."""
    spec = spec_of(policy)
    assert spec is not None
    gpu_mib, unit_mib = units_of(spec, policy)
    problems: list[tuple[str, str]] = []
    model = policy.gpu.model or "GPU"
    memory = _amount(limits, spec.memory)
    if spec.backend is Backend.ACK and ACK_COUNT in limits:
        problems.append((count_request_line(policy.name), f"{ACK_COUNT} is no request; set it as a pod label"))
    if spec.backend is Backend.ACK and gpus > 1 and gpu_mib is not None:
        most = gpus * (gpu_mib // unit_mib)
        if memory > most:
            problems.append((
                over_spread_line(str(memory), str(gpus), str(most), model, policy.name),
                f"{spec.memory} {memory}: more than {gpus} GPUs' memory; ask for at most {most}",
            ))  # fmt: skip
    elif gpu_mib is not None and memory * unit_mib > gpu_mib:
        problems.append(over_one_gpu(spec, policy, memory))
    for name in (spec.percent, spec.cores):
        if name and _amount(limits, name) > 100:
            problems.append(over_percent(name, _amount(limits, name), policy))
    if spec.backend is Backend.ACK:
        if memory and _amount(limits, NVIDIA_GPU):
            return Held(Fraction(0), problems)  # no node serves both (ack_modes): no GPUs' worth to weigh
        worth = Fraction(memory * unit_mib, gpu_mib) if gpu_mib else Fraction(0)
        return Held(worth + _amount(limits, NVIDIA_GPU), problems)
    assert spec.count is not None and spec.percent is not None
    count = _amount(limits, spec.count)
    if spec.counts_one_by_default:
        if not count and (memory or _amount(limits, spec.percent)):
            count = 1  # the vGPU device plugin's defaultGPUNum
        count_whole = _amount(limits, NVIDIA_GPU)  # left as written (over the maximum): counted as whole GPUs
    else:
        count_whole = 0
    if memory and gpu_mib:
        each = Fraction(memory * unit_mib, gpu_mib)
    elif _amount(limits, spec.percent):
        each = Fraction(_amount(limits, spec.percent), 100)
    else:
        each = Fraction(1)  # no memory asked: the backend's default is all of it
    return Held(count * min(each, Fraction(1)) + count_whole, problems)


def over_spread_line(memory: str, gpus: str, most: str, model: str, policy: str) -> str:
    """ACK: a container's memory over the memory of the GPUs its pod label spreads it over (template: the native
    policies fill it)."""
    return (
        f"{ACK_MEMORY} {memory} (GiB) is more than the memory of the {gpus} GPUs that the pod label {ACK_COUNT} "
        f'spreads it over ({most} GiB of {model}s, policy "{policy}"); request at most {most}, or name more GPUs '
        "in the label"
    )


def count_request_line(policy: str) -> str:
    """ACK: `aliyun.com/gpu-count` among a container's limits (template: the native policies say it too)."""
    return (
        f"{ACK_COUNT} is a node's number of GPUs, not a container's request: ACK reads the GPUs a pod's memory "
        f'spreads over from the pod label {ACK_COUNT} (policy "{policy}"); remove it from resources and set the '
        f'label, such as {ACK_COUNT}: "2"'
    )


def over_one_gpu(spec: BackendSpec, policy: Policy, memory: int | str) -> tuple[str, str]:
    """(line, short) for a container's `spec.memory` of `memory` (the native policies fill it in CEL) that is
    more than one GPU's memory; call where the policy knows that memory."""
    gpu_mib, unit_mib = units_of(spec, policy)
    assert gpu_mib is not None
    most, unit = gpu_mib // unit_mib, unit_text(spec, unit_mib)
    scaling = policy.sharing.device_memory_scaling
    registered = (
        f" as HAMi registers it: {policy.gpu_memory_mib} MiB x deviceMemoryScaling {format_fraction(scaling)}"
        if spec.backend is Backend.HAMI and scaling != 1
        else ""
    )
    return (
        f"{spec.memory} {memory} ({unit}) is more than one {policy.gpu.model or 'GPU'}'s memory ({most} {unit}"
        f'{registered}): {spec.title} gives each share the memory of one GPU (policy "{policy.name}"); request at '
        f"most {most}, or whole GPUs as {NVIDIA_GPU}: N",
        f"{spec.memory} {memory}: more than one GPU's memory; ask for at most {most}",
    )


def over_percent(name: str, amount: int | str, policy: Policy) -> tuple[str, str]:
    """(line, short) for a percent of one GPU (its memory or compute) over 100 (the native policies fill it)."""
    return (
        f'{name} {amount} is more than 100 percent of one GPU (policy "{policy.name}"); request at most 100',
        f"{name} {amount}: more than 100 percent; ask for at most 100",
    )


def node_amounts(limits: dict[str, Any], policy: Policy, gpus: int = 1) -> dict[str, int | Fraction]:
    """A container's amounts of one GPU that a node must hold on one of its GPUs, for the cluster's fits check:
    ACK's aliyun.com/gpu-mem (GiB; nodes advertise all their GPUs' and aliyun.com/gpu-count, cluster/nodes.py), the
    share of each of the `gpus` its pod spreads over; a Volcano vGPU's memory where no `volcano.sh/vgpu-number`
    counts it (one vGPU). The cluster checks place HAMi's and Volcano's vGPUs on the GPUs their device plugins
    register (`vgpus`, clustercheck.py): this hands them the containers that the GPU counts do not."""
    spec = spec_of(policy)
    if spec is None or not limits:
        return {}
    if spec.backend is Backend.ACK:
        amount = _amount(limits, ACK_MEMORY)
        return {ACK_MEMORY: amount if gpus == 1 else Fraction(amount, gpus)} if amount else {}
    if spec.backend is Backend.VOLCANO and spec.count not in limits:
        amount = _amount(limits, spec.memory)
        return {spec.memory: amount} if amount else {}
    return {}


Lines = tuple[tuple[str, str], ...]  # (line, short) of each problem


def pod_gpus(
    obj: dict[str, Any], spec_path: tuple[str, ...], policy: Policy
) -> tuple[int, tuple[tuple[str, str], ...]]:
    """ACK: the GPUs a pod's memory spreads over, its label aliyun.com/gpu-count (the pod template's in a
    workload; 1 without it), and the problem with a label that is no whole number of GPUs (then 1). 1 and
    nothing under the other backends."""
    if policy.sharing.backend is not Backend.ACK:
        return _ONE_GPU
    parent: Any = obj
    for key in spec_path[:-1]:
        parent = parent.get(key) if type(parent) is dict else None
    metadata = parent.get("metadata") if type(parent) is dict else None
    labels = metadata.get("labels") if type(metadata) is dict else None
    raw = labels.get(ACK_COUNT) if type(labels) is dict else None
    if raw is None:
        return _ONE_GPU
    if type(raw) is str and raw.isascii() and raw.isdigit() and len(raw) <= MOST_LABEL_DIGITS and int(raw) >= 1:
        return int(raw), ()
    shown = str(raw)[:SHOWN_LABEL]
    return 1, ((
        label_not_number_line(shown, policy.name),
        f'label {ACK_COUNT} "{shown}": not a number of GPUs; set one such as "2"',
    ),)  # fmt: skip


SHOWN_LABEL = 20  # the characters of a label value that no number that a line shows
MOST_LABEL_DIGITS = 6  # the longest label value pod_gpus reads as a number


def label_not_number_line(shown: str, policy: str) -> str:
    """ACK: the pod label aliyun.com/gpu-count is no whole number of GPUs (`shown`: its first SHOWN_LABEL
    characters); template: the native policies say it too."""
    return (
        f'label {ACK_COUNT} "{shown}" is not a whole number of GPUs: ACK spreads the pod\'s {ACK_MEMORY} over '
        f'that many GPUs of one node (policy "{policy}"); set a number such as "2", or remove it'
    )


_ONE_GPU: tuple[int, Lines] = (1, ())


def ack_modes(holders: list[tuple[str, dict[str, Any]]], policy: Policy) -> list[tuple[str, str]]:
    """ACK: a pod whose containers (init containers too, by name with their limits) hold both shares and whole
    GPUs, which no node serves together: a node runs one `ack.node.gpu.schedule` mode, and ACK sets the other
    modes' resources to 0 there ("labels used by ACK to control GPUs"). One container holding both is named
    with its amounts; otherwise the first container of each kind."""
    if policy.sharing.backend is not Backend.ACK:
        return []
    shares = [(name, limits) for name, limits in holders if ACK_MEMORY in limits and _amount(limits, ACK_MEMORY)]
    both = next((held for held in shares if NVIDIA_GPU in held[1] and _amount(held[1], NVIDIA_GPU)), None)
    if both is not None:
        name, limits = both
        memory, gpus = _amount(limits, ACK_MEMORY), _amount(limits, NVIDIA_GPU)
        return [(
            both_modes_line(name, str(memory), str(gpus), policy.name),
            f"{ACK_MEMORY} {memory} beside whole {NVIDIA_GPU} {gpus} in one container: no ACK node serves both",
        )]  # fmt: skip
    whole = [name for name, limits in holders if _amount(limits, NVIDIA_GPU)]
    if not shares or not whole:
        return []
    return [(
        two_modes_line(shares[0][0], whole[0], policy.name),
        f"{ACK_MEMORY} beside whole {NVIDIA_GPU}: no ACK node serves both; split the pod",
    )]  # fmt: skip


def _modes_why(policy: str) -> str:
    return (
        f"which no ACK node serves together: a node runs one {ACK_SCHEDULE_LABEL} mode, shares or whole GPUs "
        f'(policy "{policy}")'
    )


def both_modes_line(name: str, memory: str, gpus: str, policy: str) -> str:
    """ACK: one container holds a share and whole GPUs (template: the native policies say it too)."""
    return (
        f'container "{name}" holds {ACK_MEMORY} {memory} and whole {NVIDIA_GPU} {gpus}, {_modes_why(policy)}; '
        f"request {ACK_MEMORY} alone (more than one GPU's memory with the pod label {ACK_COUNT}) or whole "
        f"{NVIDIA_GPU} alone, or split the pod"
    )


def two_modes_line(share: str, whole: str, policy: str) -> str:
    """ACK: one container holds a share, another whole GPUs, the first of each named (template: the native
    policies say it too)."""
    return (
        f'holds {ACK_MEMORY} (container "{share}") and whole {NVIDIA_GPU} (container "{whole}"), '
        f"{_modes_why(policy)}; ask for shares in every container or whole GPUs in every one, or split the pod"
    )


def _spread_over(total: int, gib: int) -> int | None:
    """The fewest GPUs of `gib` GiB that take `total` GiB in equal whole GiB, or None (none among the first few,
    or a GPU under 1 GiB, which holds no whole GiB)."""
    if gib < 1:
        return None
    least = -(-total // gib)
    return next((m for m in range(least, min(total, least + 64) + 1) if total % m == 0), None)


def ack_pod(
    gpus: int, containers: list[tuple[str, dict[str, Any]]], maximum: int, policy: Policy
) -> list[tuple[str, str]]:
    """ACK: a pod's aliyun.com/gpu-mem (its containers' limits, by name; init containers are not counted by the
    extender) as the extender places it: all on one GPU, or an equal whole number of GiB from each of the
    `gpus` of its label; the GPUs it touches against the per-pod maximum. A lone container over its GPUs'
    memory is held's line."""
    if policy.sharing.backend is not Backend.ACK or (gpus == 1 and len(containers) < 2):
        return []  # one container on one GPU: held's lines say it all
    amounts = [(name, amount) for name, limits in containers if (amount := _amount(limits, ACK_MEMORY))]
    total = sum(amount for _, amount in amounts)
    if not total:
        return []
    problems: list[tuple[str, str]] = []
    if gpus > maximum:
        problems.append((
            spread_over_maximum_line(str(gpus), maximum, policy.name),
            f"{ACK_COUNT} {gpus}: at most {maximum} GPUs per pod",
        ))  # fmt: skip
    if total % gpus:
        problems.append((
            uneven_spread_line(str(total), str(gpus), policy.name),
            f"{ACK_MEMORY} {total} over {gpus} GPUs: ask for a multiple of {gpus}",
        ))  # fmt: skip
        return problems
    gpu_mib = policy.gpu_memory_mib
    gib = gpu_mib // 1024 if gpu_mib else None
    if gib is None or total // gpus <= gib or len(amounts) == 1:
        return problems
    named = ", ".join(held_entry(name, str(amount)) for name, amount in amounts)
    model = policy.gpu.model or "GPU"
    more = _spread_over(total, gib)
    instead = spread_instead(str(more)) if more and more <= maximum else ""
    if gpus == 1:
        line = one_gpu_total_line(str(total), named, model, gib, policy.name, instead)
    else:
        each, most = str(total // gpus), str(gib * gpus)
        line = spread_total_line(str(total), named, str(gpus), each, most, model, gib, policy.name, instead)
    problems.append((line, f"{ACK_MEMORY} {total} in all: more than {gpus} GPUs' memory; ask for less"))
    return problems


# ACK's pod lines: templates the native policies fill too (each value as text, a CEL slot there)


def _label(gpus: str) -> str:
    return f'the pod label {ACK_COUNT} "{gpus}"'


def spread_over_maximum_line(gpus: str, maximum: int, policy: str) -> str:
    """The pod label spreads the pod's memory over more GPUs than the per-pod maximum."""
    return (
        f"{_label(gpus)} spreads its memory over {gpus} GPUs, more than the per-pod maximum of {maximum} GPUs "
        f'(policy "{policy}"); set at most "{maximum}"'
    )


def uneven_spread_line(total: str, gpus: str, policy: str) -> str:
    """The pod's memory is no multiple of the GPUs its label spreads it over."""
    return (
        f"{ACK_MEMORY} {total} GiB in all over {gpus} GPUs ({_label(gpus)}) is not a whole number of GiB from "
        f'each: ACK takes an equal whole number of GiB from each GPU (policy "{policy}"); request a multiple of '
        f"{gpus} in all"
    )


def held_entry(name: str, amount: str) -> str:
    """One container of those whose memory a pod line adds up."""
    return f'"{name}"={amount}'


def spread_instead(more: str) -> str:
    """The advice to spread the pod's memory over `more` GPUs (within the per-pod maximum)."""
    return f', or spread it with the pod label {ACK_COUNT}: "{more}"'


def one_gpu_total_line(total: str, named: str, model: str, gib: int, policy: str, instead: str) -> str:
    """Several containers' memory, placed on one GPU, over its memory."""
    return (
        f"{ACK_MEMORY} {total} GiB in all (containers {named}) is more than one {model}'s memory ({gib} GiB): "
        f'ACK places a pod\'s memory on one GPU (policy "{policy}"); request at most {gib} in all{instead}'
    )


def spread_total_line(
    total: str, named: str, gpus: str, each: str, most: str, model: str, gib: int, policy: str, instead: str
) -> str:
    """Several containers' memory, spread over the label's GPUs, over each GPU's memory."""
    return (
        f"{ACK_MEMORY} {total} GiB in all (containers {named}) over {gpus} GPUs ({_label(gpus)}) is {each} "
        f'GiB from each, more than one {model}\'s memory ({gib} GiB, policy "{policy}"); request at most '
        f"{most} in all{instead}"
    )


def vgpus(limits: dict[str, Any], policy: Policy) -> tuple[int, int] | None:
    """(vGPUs, each one's memory in the backend's unit) as HAMi's or Volcano's scheduler reads a container's
    limits; the memory 0 where any GPU holds it (a percentage of the GPU, or none asked: all of it, or HAMi's
    defaultMemory, unknown here); None where the container holds no vGPU, or under another backend. Each vGPU
    of a container goes to a GPU of its own, which must have that memory free.
    - HAMi (pkg/device/nvidia/device.go at 4707fb02c91c, GenerateResourceRequests and Fit): `nvidia.com/gpu`
      vGPUs of `nvidia.com/gpumem` MiB each, compared with the MiB the GPU registers; `gpumem-percentage` only
      where no gpumem is asked.
    - Volcano (volcano-sh/volcano pkg/scheduler/api/devices/util.go ExtractResourceRequest and
      nvidia/vgpu/utils.go checkNodeGPUSharingPredicateAndScore at ed72c7c815a9): `volcano.sh/vgpu-number`,
      else 1 where `volcano.sh/vgpu-memory` is asked alone; the memory in units, compared with the units the
      GPU registers, unless `volcano.sh/vgpu-memory-percentage` is asked, which it reads first."""
    spec = spec_of(policy)
    if spec is None or spec.backend is Backend.ACK:
        return None
    assert spec.count is not None and spec.percent is not None
    if spec.backend is Backend.VOLCANO:
        count = _amount(limits, spec.count) if spec.count in limits else int(spec.memory in limits)
        memory = 0 if spec.percent in limits else _amount(limits, spec.memory)
    else:
        count, memory = _amount(limits, spec.count), _amount(limits, spec.memory)
    return (count, memory) if count else None


def worth_text(worth: Fraction | str) -> str:
    """GPUs' worth of memory for people: the worth, or format_fraction's text of it (the native policies fill it)."""
    return f"{worth if isinstance(worth, str) else format_fraction(worth)} GPUs' worth of memory"


# --- For people (`policy lint` and `policy explain`) --------------------------------------------------------


def describe_mode(policy: Policy) -> str:
    """The policy's sharing in a few words: `memory: ack (aliyun.com/gpu-mem in GiB), spread`."""
    spec = spec_of(policy)
    assert spec is not None
    placement = policy.sharing.placement or "the backend's default placement"
    _, unit_mib = units_of(spec, policy)
    scaling = policy.sharing.device_memory_scaling
    scaled = (
        f", deviceMemoryScaling {format_fraction(scaling)}" if spec.backend is Backend.HAMI and scaling != 1 else ""
    )
    return f"memory: {spec.backend} ({spec.memory} in {unit_text(spec, unit_mib)}{scaled}), {placement}"


def describe_share(policy: Policy) -> str:
    """What `nvidia.com/gpu: f` and `N` become here."""
    spec = spec_of(policy)
    assert spec is not None
    gpu_mib, unit_mib = units_of(spec, policy)
    if gpu_mib is None:
        return f"nvidia.com/gpu: f becomes f of the GPU's memory as {spec.memory}, once the nodes say how much"
    example = share(spec, Fraction(1, 4), gpu_mib, unit_mib)
    shown = ", ".join(f"{name} {amount}" for name, amount in example.resources)
    kept = "stays nvidia.com/gpu: N (exclusive nodes)" if whole(spec, "N") is None else "becomes N whole GPUs"
    least = format_fraction(smallest(spec, gpu_mib, unit_mib))
    return f"nvidia.com/gpu 0.25 becomes {shown}; at least {least}; nvidia.com/gpu: N {kept}"


# --- The nodes (checks/policynodes.py, clusterdrift.py and clustercheck.py read these) -----------------------------


def node_resource(policy: Policy) -> str:
    """What a node of the policy's backend advertises: ACK's aliyun.com/gpu-mem, Volcano's vGPUs, HAMi's vGPUs
    (as nvidia.com/gpu: the resource alone does not tell a HAMi node from a plain one)."""
    spec = spec_of(policy)
    assert spec is not None
    return spec.count or spec.memory


def node_drift(policy: Policy, node: NodeInfo) -> list[NodeDrift]:
    """Where an ACK node of the policy's pool disagrees with it: a pool that does not isolate memory, another
    placement, GPUs of another size (aliyun.com/gpu-mem per aliyun.com/gpu-count, whole GiB). HAMi's and
    Volcano's GPUs are compared where GPU feature discovery's are (checks/policynodes.py reads the kinds they register
    in their node annotations, cluster/nodes.py, through registered_mib), and their units by unit_drift: their
    resources alone (Volcano's vGPU memory is a node total) do not say one GPU's memory."""
    sharing = policy.sharing
    if sharing.backend is not Backend.ACK:
        return []
    found: list[NodeDrift] = []
    schedule = node.labels.get(ACK_SCHEDULE_LABEL)
    if schedule == ACK_SHARE_ONLY and sharing.isolates:  # the nodes reach no pool that caps memory (policy_nodes)
        found.append((
            "sharing.isolation", f"{ACK_SCHEDULE_LABEL} {schedule}",
            f"required ({ACK_SCHEDULE_LABEL} {', '.join(ACK_ISOLATED)})",
            "no node of the pool caps a share's memory, so the policy's shares run nowhere",
            f"label the node pool {ACK_SCHEDULE_LABEL}=cgpu (or core_mem, mps), or set sharing.isolation: none",
        ))  # fmt: skip
    placement = node.labels.get(ACK_PLACEMENT_LABEL, Placement.BINPACK.value)
    if sharing.placement is not None and placement != sharing.placement:
        found.append((
            "sharing.placement", f"{ACK_PLACEMENT_LABEL} {placement}", str(sharing.placement),
            f"pods steered to {sharing.placement} nodes cannot run there",
            f"set sharing.placement: {placement}, or label the node pool {ACK_PLACEMENT_LABEL}={sharing.placement}",
        ))  # fmt: skip
    gpus, gib = node.allocatable.get(ACK_COUNT), node.allocatable.get(ACK_MEMORY)
    gpu_mib = policy.gpu_memory_mib
    if gpus and gib and gpu_mib and gib // gpus != gpu_mib // 1024:
        found.append((
            "gpu.memoryMiB" if policy.gpu.memory_mib else "gpu.model", f"{gib // gpus} GiB per GPU",
            f"{gpu_mib} MiB", "each fraction is taken of another GPU's memory",
            f"set gpu.memoryMiB: {gib // gpus * 1024}, or give these nodes' namespaces their own policy",
        ))  # fmt: skip
    return found


def unit_drift(policy: Policy, registrar: str, amount: int, gpu_mib: int, model: str) -> NodeDrift | None:
    """Where a GPU that a node registers (`amount`, by HAMi's or Volcano's device plugin: `registrar`) is not
    the memory of the GPU it is (`gpu_mib`, named `model`: its type, or GPU feature discovery's label) when read
    through the policy's deviceMemoryScaling or gpuMemoryFactor: the device plugin's differs, and every
    fraction is converted to another amount of memory than it means. The device plugin's value as the amount
    says it (the annotation does not carry it): the scaling to two decimals, the factor the roundest whole
    number that registers that amount. None where they agree, or the policy is of another backend."""
    sharing = policy.sharing
    if sharing.mode is not Mode.MEMORY or sharing.backend is None or sharing.backend.value != registrar:
        return None
    read = registered_mib(policy, registrar, amount)
    if abs(read - gpu_mib) <= MEMORY_TOLERANCE * gpu_mib:
        return None
    if sharing.backend is Backend.VOLCANO:
        factor = _roundest(
            Fraction(gpu_mib) * (1 - MEMORY_TOLERANCE) / (amount + 1),
            Fraction(gpu_mib) * (1 + MEMORY_TOLERANCE) / amount,
            Fraction(gpu_mib, amount),
        )
        if factor == sharing.gpu_memory_factor:
            return None
        ratio = format_fraction(Fraction(factor, sharing.gpu_memory_factor))
        return (
            "sharing.gpuMemoryFactor", f"{factor} ({amount} units of {VOLCANO_MEMORY} per {model})",
            str(sharing.gpu_memory_factor),
            f"a unit of {VOLCANO_MEMORY} is {factor} MiB there, so each share gets {ratio} times the memory it means",
            f"set sharing.gpuMemoryFactor: {factor} (the device plugin's gpuMemoryFactor)",
        )  # fmt: skip
    scaling = Fraction(round(Fraction(amount, gpu_mib) * 100), 100)
    if scaling in (0, sharing.device_memory_scaling):
        return None
    shown = format_fraction(scaling)
    return (
        "sharing.deviceMemoryScaling", f"{shown} ({amount} MiB registered per {model})",
        format_fraction(sharing.device_memory_scaling),
        f"HAMi divides {amount} MiB of each GPU there, so each fraction is taken of another amount of memory",
        f"set sharing.deviceMemoryScaling: {shown} (HAMi's deviceMemoryScaling)",
    )  # fmt: skip


def _roundest(low: Fraction, high: Fraction, near: Fraction) -> int:
    """The whole number in [low, high] (at least 1) with the most trailing zeros, nearest `near` among those:
    the gpuMemoryFactor that registers a GPU's memory as so many units (people set 1, 10, 100)."""
    low, high = max(Fraction(1), low), max(Fraction(1), high)
    step = 10 ** max(0, len(str(int(high))) - 1)
    while step > 1 and ceil(low / step) * step > high:
        step //= 10
    first, last = ceil(low / step), int(high // step)
    return max(first, min(last, round(near / step))) * step if first <= last else max(1, round(near))


UNSTEERED = (
    "has backend ack with steering: false: its pods may land on nodes labelled ack.node.gpu.schedule=share, "
    "which do not isolate memory, and placement never reaches ACK (it reads node labels); remove steering: false"
)


def unsteered(policy: Policy) -> bool:
    """An ACK policy that does not steer: `policy lint` warns (UNSTEERED)."""
    return policy.sharing.mode is Mode.MEMORY and policy.sharing.backend is Backend.ACK and not policy.steering
