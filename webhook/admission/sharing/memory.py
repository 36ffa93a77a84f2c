"""Memory-sliced sharing (`sharing.mode: memory`): a device plugin hands out a share of one GPU's memory and
caps what the container sees. ACK, HAMi and Volcano are its variants (`sharing.backend`); their resources,
units and node labels are memshare.py's tables and arithmetic, which this backend answers the phases from.

A share's GPU budget weight (docs/budgets.md) is the larger of its memory over one GPU's and its compute over
one GPU's, per (v)GPU it holds: ACK GiB of the GPU's whole GiB; HAMi MiB of the memory its device plugin
registers (times deviceMemoryScaling) or percent, and percent of the cores; Volcano the same in units of
gpuMemoryFactor MiB.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from webhook.admission.base.resources import NVIDIA_GPU, GPUModel
from webhook.admission.policy.model import Backend
from webhook.admission.sharing import memshare
from webhook.admission.sharing.backend import (
    DRA_APART,
    WHOLE_GPU,
    LabelRequirement,
    ModeRules,
    NodeDrift,
    QuotaEntry,
    SharingBackend,
    strategy_drift,
)
from webhook.admission.sharing.memshare import BackendSpec, spec_of, units_of

if TYPE_CHECKING:
    from webhook.admission.cluster.nodes import NodeInfo
    from webhook.admission.policy.model import Policy


class MemorySliced(SharingBackend):
    name = "memory"

    def serves(self, policy: Policy, mig_model: GPUModel | None) -> frozenset[str]:
        return memshare.served(policy)

    def holds(self, policy: Policy) -> Callable[[str], bool]:
        return memshare.node_resource(policy).__eq__

    def steered_resource(self, policy: Policy) -> str:
        return memshare.steered_resource(policy)

    def pool_words(self, policy: Policy, served: frozenset[str]) -> tuple[str, str, str]:
        return memshare.pool_words(policy)

    def converts_itself(self, policy: Policy) -> bool:
        return True

    def convert(
        self,
        requests: dict[str, Any],
        limits: dict[str, Any],
        gpu: tuple[str, int | Fraction],
        policy: Policy,
        maximum: int,
        kinds: list[str],
        texts: list[str],
    ) -> None:
        memshare.convert(requests, limits, gpu, policy, maximum, kinds, texts)

    def pod_gpus(
        self, obj: dict[str, Any], spec_path: tuple[str, ...], policy: Policy
    ) -> tuple[int, tuple[tuple[str, str], ...]]:
        return memshare.pod_gpus(obj, spec_path, policy)

    def fraction_advice(
        self, shown: str, value: int | Fraction, policy: Policy, written: str
    ) -> tuple[str, str] | None:
        # too small for one unit of the backend, or the memory unknown
        return memshare.fraction_advice(shown, value, policy)

    def rules(self, policy: Policy) -> ModeRules:
        return ModeRules(counts_memory=True, pod_spread=policy.sharing.backend is Backend.ACK)

    def node_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        return memshare.node_requirements(policy)  # ACK's isolating pools, placement

    def whole_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        return memshare.whole_requirements(policy)

    def multi_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        return memshare.node_requirements(policy, True)

    def node_pool(self, policy: Policy, nodes: Sequence[NodeInfo]) -> tuple[NodeInfo, ...]:
        # the backend's nodes, whatever their labels say (ACK's `share` pools: drift)
        return tuple(n for n in nodes if memshare.node_resource(policy) in n.allocatable)

    def node_drift(self, policy: Policy, node: NodeInfo) -> list[NodeDrift]:
        return strategy_drift(policy, node, "none")

    def layout_drift(self, policy: Policy, node: NodeInfo) -> list[NodeDrift]:
        """The backend's own labels and resources (memshare.node_drift)."""
        return memshare.node_drift(policy, node)

    def describe(self, policy: Policy) -> str:
        sharing = policy.sharing
        placement = f", {sharing.placement}" if sharing.placement else ""
        return f'policy "{policy.name}" (memory slices by {sharing.backend}{placement})'

    def explain_mode(self, policy: Policy) -> str:
        return memshare.describe_mode(policy)

    def native_shape(self, policy: Policy) -> str | None:
        """Compiled (native/memshares.py); under ACK a pod whose memory is spread, or that its pools tell apart
        per pod, is left to the webhook (native/scope.py)."""
        return "memory"

    def explain_share(self, policy: Policy) -> str:
        return memshare.describe_share(policy)

    def unit_weight(self, policy: Policy, resource: str) -> Fraction | None:
        if resource == NVIDIA_GPU and policy.sharing.backend is not Backend.ACK:
            return None  # HAMi's and Volcano's vGPU count: weighed with its memory and cores
        return super().unit_weight(policy, resource)

    def share_weight(self, policy: Policy, amounts: dict[str, Fraction]) -> tuple[Fraction, frozenset[str]]:
        spec = spec_of(policy)
        if spec is None:
            return super().share_weight(policy, amounts)
        held = {k: v for k, v in amounts.items() if k in spec.resources or k == NVIDIA_GPU}
        return (memory_share(spec, policy, held) if held else ZERO), frozenset(held)

    def weight_units(self, policy: Policy) -> list[tuple[str, Fraction, str]]:
        spec = spec_of(policy)
        if spec is None:
            return super().weight_units(policy)
        found: list[tuple[str, Fraction, str]] = []
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
            found.append((spec.count, WHOLE_GPU, "a (v)GPU with all of its memory; a share weighs its memory"))
        if spec.backend is Backend.ACK:
            found.append((NVIDIA_GPU, WHOLE_GPU, "a whole GPU (ACK's exclusive nodes)"))
        return found

    def amount_words(self, policy: Policy, resource: str, count: str, amount: Fraction) -> str | None:
        backend = policy.sharing.backend
        if backend is Backend.ACK and resource == "aliyun.com/gpu-mem":
            return f"{count} GiB of GPU memory"
        if backend is not None and backend is not Backend.ACK and resource != NVIDIA_GPU:
            return f"{resource} {count}"
        if resource == NVIDIA_GPU and backend in (Backend.HAMI, Backend.VOLCANO):
            return f"{count} vGPU{'s' if amount != 1 else ''}"
        return None

    def quota_entry(self, policy: Policy) -> QuotaEntry:
        spec = spec_of(policy)
        if spec is not None and spec.backend is Backend.ACK:
            gpu_mib, unit_mib = units_of(spec, policy)
            if gpu_mib:
                per_gpu = gpu_mib // unit_mib
                return QuotaEntry(
                    spec.memory,
                    Fraction(per_gpu),
                    f"GiB of {per_gpu} per GPU; whole GPUs stay nvidia.com/gpu, which the admin's own entry counts "
                    "apart" + DRA_APART,
                )
        if spec is not None:
            note = f"{spec.title} counts vGPUs, memory and cores apart: the webhook's budget weighs them together"
            return QuotaEntry(None, ZERO, note)
        return super().quota_entry(policy)

    def not_per_unit(self, policy: Policy) -> dict[str, str]:
        spec = spec_of(policy)
        if spec is None or spec.backend is Backend.ACK:
            return {}
        why = (
            f"{spec.title} weighs a share as the larger of its memory and cores, per vGPU; a transformation only "
            "adds per unit: its memory alone is counted there"
        )
        return {resource: why for resource in (spec.count, spec.cores) if resource is not None}


ZERO = Fraction(0)


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
    return gib / per_gpu if per_gpu else WHOLE_GPU


def vgpu_share(spec: BackendSpec, policy: Policy, amounts: dict[str, Fraction]) -> Fraction:
    """HAMi and Volcano: (v)GPUs x max(memory of one, cores of one). Memory in the backend's units of what its
    device plugin registers per GPU, or percent; no memory asked is all of it (the backends' default). Volcano's
    vgpu-number defaults to 1 where memory is asked; `nvidia.com/gpu` left beside Volcano's is whole GPUs."""
    assert spec.count is not None and spec.percent is not None and spec.cores is not None
    count = amounts.get(spec.count, ZERO)
    memory, percent, cores = amounts.get(spec.memory, ZERO), amounts.get(spec.percent, ZERO), amounts.get(spec.cores)
    whole = amounts.get(NVIDIA_GPU, ZERO) if spec.backend is Backend.VOLCANO else ZERO
    if spec.backend is Backend.VOLCANO and not count and (memory or percent):
        count = WHOLE_GPU
    if not count:
        return whole
    gpu_mib, unit_mib = units_of(spec, policy)
    per_gpu = Fraction(gpu_mib, unit_mib) if gpu_mib else None
    if memory:
        each = memory / per_gpu if per_gpu else WHOLE_GPU
    elif percent:
        each = percent / 100
    else:
        each = WHOLE_GPU
    if cores is not None:
        each = max(each, cores / 100)
    return count * min(each, WHOLE_GPU) + whole
