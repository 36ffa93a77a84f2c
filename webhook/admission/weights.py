"""What one unit of each GPU form weighs in GPU-equivalents, the unit of a namespace's GPU budget.

One function per form, each small, so that each can move into the module of the sharing mode that maps it:
- a whole GPU (`nvidia.com/gpu` where nothing shares it, an ACK whole GPU, a DRA `gpu.nvidia.com` device): 1;
- a time-slicing or MPS replica (`nvidia.com/gpu.shared`, or `nvidia.com/gpu` where the device plugin keeps the
  name): 1/replicas;
- a MIG slice (`nvidia.com/mig-<profile>`, `nvidia.com/gpu` under the single strategy, a `mig.nvidia.com`
  device): its dominant share, the larger of its compute slices over the GPU's and its memory slices over the
  GPU's (resources.GPU_MODELS): on an A100-80GB 1g.10gb is 1/7 (seven fill the compute), 3g.40gb 1/2 (two fill
  the memory);
- a memory share (sharing.mode memory, memshare.py's units): the larger of its memory over one GPU's and its
  compute over one GPU's, per (v)GPU it holds: ACK GiB of the GPU's whole GiB; HAMi MiB of the memory its
  device plugin registers (times deviceMemoryScaling) or percent, and percent of the cores; Volcano the same in
  units of gpuMemoryFactor MiB;
- a DRA claim's devices, by the class the policy counts as GPUs or MIG devices (dra.class_kind), a MIG device
  by the profile its selector names. A GpuConfig that time-slices a claim's GPU shares it among the containers
  and pods of that one claim: the claim still holds the whole GPU, and a shared claim is counted once.

Every weight is an exact Fraction; where the policy cannot say (replicas `auto` offline, no GPU model for a MIG
profile) the form weighs what it could at most: one GPU per device. Refusing on a weight too high is safe;
admitting on one too low would open the route past the budget that this unit exists to close.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.resources import (
    DEVICE_CLASS_PREFIX,
    GPU_MODELS,
    NVIDIA_GPU,
    GPUModel,
    device_class_of,
    is_shared,
    mig_profile_of,
    mig_resource,
)
from webhook.admission.cluster import celselect
from webhook.admission.dra.claimrules import class_kind
from webhook.admission.dra.podclaims import ALL_DEVICES, ClaimSummary
from webhook.admission.policy.model import Backend, Mode, Policy
from webhook.admission.sharing.memshare import BackendSpec, spec_of, units_of

ONE = Fraction(1)
ZERO = Fraction(0)


def whole_gpu() -> Fraction:
    """A GPU held alone: one GPU-equivalent, whichever backend or route hands it out."""
    return ONE


def replica(replicas: int | None) -> Fraction:
    """One time-slicing or MPS replica: `replicas` of them share one GPU. Unknown replicas (`auto` with no
    node to read them from): a whole GPU, the most a replica can be."""
    return Fraction(1, replicas) if replicas else ONE


def mig_slice(profile: str, model: GPUModel | None) -> Fraction:
    """One MIG slice: max(compute slices / the GPU's, memory share of the GPU). Without a known model, the
    largest weight any model in resources.GPU_MODELS gives the profile (1 if none has it)."""
    if model is None:
        known = [mig_slice(profile, m) for m in GPU_MODELS.values() if m.profile(profile) is not None]
        return max(known, default=ONE)
    found = model.profile(profile)
    if found is None:
        return ONE
    compute = max(p.compute_slices for p in model.mig_profiles)
    return max(Fraction(found.compute_slices, compute), found.memory_share)


def mig_model(policy: Policy) -> GPUModel | None:
    """The policy's GPU model, whose profiles the MIG weights read."""
    return GPU_MODELS.get(policy.gpu.model or "")


def memory_share(spec: BackendSpec, policy: Policy, amounts: dict[str, Fraction]) -> Fraction:
    """A memory-sliced share of one container (memshare.py's resources, after mutation): per (v)GPU the larger
    of its memory and its cores over one GPU's, times the (v)GPUs; ACK's `nvidia.com/gpu: N` whole GPUs as N.
    `amounts` holds the container's resources by name (requests, else limits)."""
    if spec.backend is Backend.ACK:
        return ack_share(spec, policy, amounts.get(spec.memory, ZERO)) + amounts.get(NVIDIA_GPU, ZERO)
    return vgpu_share(spec, policy, amounts)


def ack_share(spec: BackendSpec, policy: Policy, gib: Fraction) -> Fraction:
    """`aliyun.com/gpu-mem: N`: N GiB of the GiB one GPU registers (its MiB in whole GiB, as ACK's device plugin
    counts them); spread over several GPUs by the pod label it weighs the same GiB. No known memory: 1."""
    gpu_mib, unit_mib = units_of(spec, policy)
    per_gpu = gpu_mib // unit_mib if gpu_mib else 0
    if not gib:
        return ZERO
    return gib / per_gpu if per_gpu else ONE


def vgpu_share(spec: BackendSpec, policy: Policy, amounts: dict[str, Fraction]) -> Fraction:
    """HAMi and Volcano: (v)GPUs x max(memory of one, cores of one). Memory in the backend's units of what its
    device plugin registers per GPU, or percent; no memory asked is all of it (the backends' default). Volcano's
    vgpu-number defaults to 1 where memory is asked; `nvidia.com/gpu` left beside Volcano's is whole GPUs."""
    assert spec.count is not None and spec.percent is not None and spec.cores is not None
    count = amounts.get(spec.count, ZERO)
    memory, percent, cores = amounts.get(spec.memory, ZERO), amounts.get(spec.percent, ZERO), amounts.get(spec.cores)
    whole = amounts.get(NVIDIA_GPU, ZERO) if spec.backend is Backend.VOLCANO else ZERO
    if spec.backend is Backend.VOLCANO and not count and (memory or percent):
        count = ONE
    if not count:
        return whole
    gpu_mib, unit_mib = units_of(spec, policy)
    per_gpu = Fraction(gpu_mib, unit_mib) if gpu_mib else None
    if memory:
        each = memory / per_gpu if per_gpu else ONE
    elif percent:
        each = percent / 100
    else:
        each = ONE
    if cores is not None:
        each = max(each, cores / 100)
    return count * min(each, ONE) + whole


def device_class(name: str, policy: Policy) -> Fraction:
    """One device of a DeviceClass asked as an extended resource (`deviceclass.resource.kubernetes.io/<class>`):
    a whole GPU for the policy's GPU classes; a MIG device weighs the policy's profile (MIG mode), else 1; 0
    for a class that is no GPU here."""
    kind = class_kind(name, policy)
    if kind == "gpu":
        return whole_gpu()
    if kind == "mig":
        sharing = policy.sharing
        if sharing.mode is Mode.MIG and sharing.mig_profile:
            return mig_slice(sharing.mig_profile, mig_model(policy))
        return ONE
    return ZERO


def claim(summary: ClaimSummary, policy: Policy) -> Fraction:
    """The devices a ResourceClaim or template holds: each request at its heaviest alternative (the allocator
    may pick any), whole GPUs 1, a MIG device its profile where its selector names one (else the policy's
    profile, else 1). allocationMode All takes every matching device of a node, which admission cannot know:
    it weighs `ALL_DEVICES_WEIGHT` (validation refuses such claims in GPU pods anyway)."""
    heaviest: dict[str, Fraction] = {}
    profiles = _selected_profiles(summary)
    for ref, name, count in summary.devices:
        kind = class_kind(name, policy)
        if not kind:
            continue
        if count == ALL_DEVICES:
            weight = Fraction(ALL_DEVICES_WEIGHT)
        elif kind == "gpu":
            weight = count * whole_gpu()
        else:
            profile = profiles.get(ref) or (policy.sharing.mig_profile if policy.sharing.mode is Mode.MIG else None)
            weight = count * (mig_slice(profile, mig_model(policy)) if profile else ONE)
        request = ref.split("/")[0]
        heaviest[request] = max(heaviest.get(request, ZERO), weight)
    return sum(heaviest.values(), ZERO)


# allocationMode All: every matching device of one node, at most the 8 GPUs of the largest GPU nodes.
ALL_DEVICES_WEIGHT = 8


def _selected_profiles(summary: ClaimSummary) -> dict[str, str]:
    """The MIG profile each request (or `request/alternative`) selects by `...profile == '<p>'`."""
    found: dict[str, str] = {}
    for request, alternatives in summary.selected:
        for sub, _, _, selector in alternatives:
            profile = selector.first("profile") if isinstance(selector, celselect.Selector) else ""
            if profile:
                found[f"{request}/{sub}" if sub else request] = profile
    return found


def resource(name: str, policy: Policy) -> Fraction | None:
    """What one unit of a container resource weighs under `policy`, where it weighs alone (None: no GPU, or a
    memory-sliced amount whose weight depends on the container's other amounts; `memory_share` weighs those).
    The one reading of a resource name into its form, for pods, `policy explain` and the schedulers' configs."""
    sharing = policy.sharing
    if name == NVIDIA_GPU:
        if sharing.mode.is_shared and sharing.resource_name == NVIDIA_GPU:
            return replica(sharing.replicas)
        if sharing.is_mig_single:
            return mig_slice(sharing.mig_profile, mig_model(policy)) if sharing.mig_profile else ONE
        if sharing.mode is Mode.MEMORY and sharing.backend is not Backend.ACK:
            return None  # HAMi's vGPU count: weighed with its memory and cores
        return whole_gpu()
    profile = mig_profile_of(name)
    if profile is not None:
        weight = mig_slice(profile, mig_model(policy))
        return weight * replica(sharing.replicas) if is_shared(name) else weight
    if sharing.mode.is_shared and name == sharing.resource_name:
        return replica(sharing.replicas)
    if is_shared(name) and name.startswith("nvidia.com/"):
        return replica(sharing.replicas if sharing.mode.is_shared else None)
    claimed = device_class_of(name)
    if claimed is not None:
        weight = device_class(claimed, policy)
        return weight or None
    return None


def amounts_of(resources: dict[str, Any]) -> dict[str, Fraction]:
    """A container's resource map as exact amounts (malformed values left out: validation says those)."""
    found: dict[str, Fraction] = {}
    for key, raw in resources.items():
        if type(key) is not str:
            continue
        value = quantity_or_none(raw)
        if value is not None and value > 0:
            found[key] = Fraction(value)
    return found


def container(amounts: dict[str, Fraction], policy: Policy) -> dict[str, Fraction]:
    """One container's GPU-equivalents by route ("extended", "deviceclass"): each GPU resource it holds."""
    routes: dict[str, Fraction] = {}
    spec = spec_of(policy)
    if spec is not None:
        held = {k: v for k, v in amounts.items() if k in spec.resources or k == NVIDIA_GPU}
        if held:
            routes["extended"] = memory_share(spec, policy, held)
    for name, value in amounts.items():
        if spec is not None and (name in spec.resources or name == NVIDIA_GPU):
            continue
        weight = resource(name, policy)
        if weight:
            route = "deviceclass" if device_class_of(name) is not None else "extended"
            routes[route] = routes.get(route, ZERO) + value * weight
    return routes


def units(policy: Policy) -> list[tuple[str, Fraction, str]]:
    """What one of each resource the policy's namespace is served weighs: (resource, weight, what it is), for
    `policy explain` and the schedulers' configurations (kueue.py). The memory backends' amounts weigh per unit
    of memory or percent; a share weighs the larger of its memory and cores (`memory_share`)."""
    sharing, found = policy.sharing, []
    spec = spec_of(policy)
    if sharing.mode.is_shared:
        found.append((sharing.resource_name, replica(sharing.replicas), _replica_text(policy)))
    elif sharing.mode is Mode.MIG:
        model = mig_model(policy)
        profiles = sharing.mig_profiles or (
            tuple(model.profile_names()) if model else ((sharing.mig_profile,) if sharing.mig_profile else ())
        )
        if sharing.is_mig_single and sharing.mig_profile:
            found.append((NVIDIA_GPU, mig_slice(sharing.mig_profile, model), f"a {sharing.mig_profile} MIG slice"))
        else:
            found += [(mig_resource(p), mig_slice(p, model), f"a {p} MIG slice") for p in profiles]
            found.append((NVIDIA_GPU, whole_gpu(), "a whole GPU"))
    elif spec is not None:
        gpu_mib, unit_mib = units_of(spec, policy)
        per_gpu = gpu_mib // unit_mib if gpu_mib else None
        unit = spec.unit if unit_mib == spec.unit_mib else f"unit of {unit_mib} MiB"
        if per_gpu:
            found.append((spec.memory, Fraction(1, per_gpu), f"one {unit} of the {per_gpu} one GPU has"))
        if spec.percent:
            found.append((spec.percent, Fraction(1, 100), "one percent of one GPU's memory"))
        if spec.cores:
            found.append((spec.cores, Fraction(1, 100), "one percent of one GPU's compute"))
        if spec.count:
            found.append((spec.count, whole_gpu(), "a (v)GPU with all of its memory; a share weighs its memory"))
        if spec.backend is Backend.ACK:
            found.append((NVIDIA_GPU, whole_gpu(), "a whole GPU (ACK's exclusive nodes)"))
    else:
        found.append((NVIDIA_GPU, whole_gpu(), "a whole GPU"))
    classes = policy.device_classes
    found += [(DEVICE_CLASS_PREFIX + name, whole_gpu(), "a whole GPU (DRA)") for name in classes.gpu_classes]
    for name in classes.mig_classes:
        weight = device_class(name, policy)
        found.append((DEVICE_CLASS_PREFIX + name, weight, "a MIG device (DRA; in a claim, by the profile it selects)"))
    return found


def _replica_text(policy: Policy) -> str:
    replicas = policy.sharing.replicas
    shown = f"a replica of {replicas}" if replicas else "a replica (replicas auto: weighed as a GPU offline)"
    if policy.sharing.resource_name == NVIDIA_GPU:
        shown += (
            "; the API server counts each replica as one nvidia.com/gpu itself, so requests.nvidia.com/gpu: N "
            f"admits N replicas ({_gpus_of_replicas(replicas)}): write N x {replicas or 'replicas'} for N GPUs"
        )
    return shown


def _gpus_of_replicas(replicas: int | None) -> str:
    return f"N/{replicas} GPUs" if replicas else "N/replicas GPUs"
