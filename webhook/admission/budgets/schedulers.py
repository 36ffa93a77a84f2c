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

from webhook.admission.base.equivalents import format_gpus
from webhook.admission.budgets.budget import units
from webhook.admission.policy.model import DEFAULT_POLICY, Check, Policy, PolicySet
from webhook.admission.sharing.registry import backend_of

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
        not_per_unit = backend_of(policy).not_per_unit(policy)
        for resource, weight, _ in units(policy):
            if resource in not_per_unit:
                left_out.append(
                    f"{resource} (policy {policy.name}): {not_per_unit[resource]}, and "
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
    """The policy's one native entry, as its sharing backend says (`quota_entry`)."""
    entry = backend_of(policy).quota_entry(policy)
    resource = "requests." + entry.resource if entry.resource is not None else None
    return NativeQuota(policy.name, policy.namespaces, resource, entry.per_gpu, entry.note)


def native_quota_object(quota: NativeQuota, namespace: str, gpus: Fraction, name: str) -> dict[str, Any]:
    """The ResourceQuota that holds `gpus` GPUs of `quota`'s entry in `namespace`."""
    assert quota.entry is not None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": {quota.entry: quota.hard(gpus)}},
    }
