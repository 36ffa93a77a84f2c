"""The GPU budget in the configuration of the schedulers people run beside the webhook, rendered from the
policies so that a Kueue ClusterQueue, the API server's own quota and this webhook count the same thing.

- Kueue: its Configuration's `resources.transformations` turn each served resource into one output resource,
  `gpu-admission.io/gpu-equivalents`, in an integer unit of 1/L GPU, L the least common multiple of every
  weight's denominator (1/7 is no finite decimal, and a Kueue quantity must be exact). A ClusterQueue's
  nominalQuota of N GPUs is then N x L of it. A transformation is linear and global: a resource that weighs
  differently in two namespaces' policies, or whose weight is not per unit (a HAMi or Volcano vGPU count, their
  cores, which the webhook weighs as the larger of memory and cores), is left out and said.
- The native ResourceQuota: where one resource carries a namespace's whole budget (time-slicing and MPS as
  `nvidia.com/gpu.shared`, one offered MIG profile, ACK's GiB), the API server can hold it itself, race-free:
  `requests.nvidia.com/gpu.shared: 4` for one GPU at 4 replicas.
Pure: the CLI (`gpu-webhook policy render`) prints what this returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import floor, lcm
from typing import Any

from webhook.admission import weights
from webhook.admission.base.resources import NVIDIA_GPU, mig_resource
from webhook.admission.budget import format_gpus
from webhook.admission.policy.model import DEFAULT_POLICY, Backend, Check, Fractional, Mode, Policy, PolicySet
from webhook.admission.sharing.memshare import spec_of, units_of

KUEUE_API_VERSION = "config.kueue.x-k8s.io/v1beta1"
OUTPUT = "gpu-admission.io/gpu-equivalents"


@dataclass(frozen=True, slots=True)
class KueueRendering:
    """Kueue's Configuration with the transformations, its unit (one output is 1/`unit` GPU), and why any
    served resource was left out."""

    configuration: dict[str, Any]
    unit: int
    left_out: tuple[str, ...]

    def quota_for(self, gpus: Fraction) -> Fraction:
        """The ClusterQueue nominalQuota of OUTPUT for `gpus` GPUs."""
        return gpus * self.unit


def applied(policies: PolicySet) -> list[Policy]:
    """The policies a namespace can get: the set's, and the built-in defaults unless a policy covers `*`."""
    found = [p for p in policies.policies if p.cluster_checks.quota is not Check.OFF]
    if not any("*" in p.namespaces for p in policies.policies):
        found.append(DEFAULT_POLICY)
    return found


def kueue(policies: PolicySet) -> KueueRendering:
    """The transformations that count every served resource in GPU-equivalents."""
    seen: dict[str, dict[Fraction, list[str]]] = {}
    left_out: list[str] = []
    blocked: set[str] = set()  # a resource some policy cannot weigh per unit: left out everywhere
    for policy in applied(policies):
        spec = spec_of(policy)
        for resource, weight, _ in weights.units(policy):
            if spec is not None and spec.backend is not Backend.ACK and resource in (spec.count, spec.cores):
                left_out.append(
                    f"{resource} (policy {policy.name}): {spec.title} weighs a share as the larger of its memory and "
                    "cores, per vGPU; a transformation only adds per unit: its memory alone is counted there, and "
                    f"{resource} is left to Kueue as it is, in every namespace"
                )
                blocked.add(resource)
                continue
            seen.setdefault(resource, {}).setdefault(weight, []).append(policy.name)
    transformations: list[dict[str, Any]] = []
    kept: dict[str, Fraction] = {}
    for resource in sorted(seen):
        found = seen[resource]
        if resource in blocked:
            continue
        if len(found) > 1:
            shown = "; ".join(f"{format_gpus(w)} GPU in {', '.join(names)}" for w, names in found.items())
            left_out.append(
                f"{resource}: weighs differently by namespace ({shown}); Kueue's transformations are cluster-wide"
            )
            continue
        kept[resource] = next(iter(found))
    unit = lcm(*(w.denominator for w in kept.values())) if kept else 1
    for resource, weight in kept.items():
        transformations.append({"input": resource, "strategy": "Replace", "outputs": {OUTPUT: str(int(weight * unit))}})
    configuration = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Configuration",
        "resources": {"transformations": transformations},
    }
    return KueueRendering(configuration, unit, tuple(dict.fromkeys(left_out)))


@dataclass(frozen=True, slots=True)
class NativeQuota:
    """For one policy's namespaces: the ResourceQuota entry that holds the budget, or why none can."""

    policy: str
    namespaces: tuple[str, ...]
    entry: str | None  # "requests.nvidia.com/gpu.shared"
    per_gpu: Fraction  # how much of the entry one GPU is
    note: str

    def hard(self, gpus: Fraction) -> str:
        """The entry's value for `gpus` GPUs, rounded down to a whole number (extended resources are whole)."""
        return str(floor(gpus * self.per_gpu))


def native(policies: PolicySet) -> list[NativeQuota]:
    """Per policy, the one native entry that carries the budget, where there is one."""
    return [_native(policy) for policy in applied(policies)]


def _native(policy: Policy) -> NativeQuota:
    sharing = policy.sharing
    names = policy.namespaces

    def one(entry: str, per_gpu: Fraction, note: str) -> NativeQuota:
        return NativeQuota(policy.name, names, "requests." + entry, per_gpu, note)

    def none(note: str) -> NativeQuota:
        return NativeQuota(policy.name, names, None, Fraction(0), note)

    dra = "; DRA claims and deviceclass resources are the webhook's budget alone"
    if sharing.mode.is_shared:
        if sharing.resource_name == NVIDIA_GPU:
            return none(
                "replicas keep the name nvidia.com/gpu: the API server already counts each as one nvidia.com/gpu, so "
                "the admin's own entry is in replicas (write N x replicas for N GPUs)"
            )
        if not sharing.replicas:
            return none("replicas auto: the nodes say how many; render again with replicas set")
        return one(sharing.resource_name, Fraction(sharing.replicas), f"{sharing.replicas} replicas per GPU" + dra)
    if sharing.mode is Mode.MIG and not sharing.is_mig_single:
        profiles = sharing.mig_profiles or ((sharing.mig_profile,) if sharing.mig_profile else ())
        if len(profiles) == 1 and (policy.fractional is not Fractional.MIG or sharing.mig_profiles):
            profile = profiles[0]
            weight = weights.mig_slice(profile, weights.mig_model(policy))
            exact = "" if (1 / weight).denominator == 1 else f" (rounded down: one slice is {format_gpus(weight)} GPU)"
            return one(mig_resource(profile), 1 / weight, f"{profile} slices per GPU{exact}" + dra)
        return none("MIG profiles mix (a fraction becomes the slice that holds it): the webhook's budget judges them")
    spec = spec_of(policy)
    if spec is not None and spec.backend is Backend.ACK:
        gpu_mib, unit_mib = units_of(spec, policy)
        if gpu_mib:
            per_gpu = gpu_mib // unit_mib
            return one(
                spec.memory,
                Fraction(per_gpu),
                f"GiB of {per_gpu} per GPU; whole GPUs stay nvidia.com/gpu, which the admin's own entry counts apart"
                + dra,
            )
    if spec is not None:
        return none(f"{spec.title} counts vGPUs, memory and cores apart: the webhook's budget weighs them together")
    return none("whole GPUs: the admin's own requests.nvidia.com/gpu is the budget" + dra)


def native_quota_object(quota: NativeQuota, namespace: str, gpus: Fraction, name: str) -> dict[str, Any]:
    """The ResourceQuota that holds `gpus` GPUs of `quota`'s entry in `namespace`."""
    assert quota.entry is not None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": {quota.entry: quota.hard(gpus)}},
    }
