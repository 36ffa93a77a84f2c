"""Replicas of one GPU (`sharing.mode: time-slicing` and `mps`): the device plugin advertises each GPU as
`replicas` shares, renamed (`nvidia.com/gpu.shared`) or keeping the name `nvidia.com/gpu` (renameByDefault:
false), and GPU feature discovery labels the nodes with the strategy and the count. MPS differs in what the
device plugin caps (memory and threads per client, so the env hints say so, and TGI's fraction is not
judged), in refusing more than one replica per container, and in the engines whose flag applies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from webhook.admission.base.envnames import MPS_MEMORY_LIMIT, MPS_THREAD_PERCENTAGE, TGI_FRACTION, whole_percent
from webhook.admission.base.quantity import exact_text, format_fraction
from webhook.admission.base.resources import GPU_CONFIG_STRATEGIES, NVIDIA_GPU, NVIDIA_GPU_SHARED, GPUModel, is_shared
from webhook.admission.cluster.nodes import REPLICAS_LABEL, STRATEGY_LABEL, node_replicas
from webhook.admission.policy.model import Fractional
from webhook.admission.sharing.backend import (
    DRA_APART,
    WHOLE_GPU,
    DeviceKind,
    LabelRequirement,
    ModeRules,
    NodeDrift,
    ProductFit,
    QuotaEntry,
    SharingBackend,
    strategy_drift,
)

if TYPE_CHECKING:
    from webhook.admission.cluster.nodes import NodeInfo
    from webhook.admission.policy.model import Policy, Sharing

# One shared replica per container: N replicas are not N GPUs. The device plugin refuses more than one only
# where its config sets failRequestsGreaterThanOne (its default under MPS, not under time-slicing).
SHARED_MAX_PER_CONTAINER = 1
TGI = "tgi"  # Text Generation Inference's framework hint (its fraction only takes from MPS's capped memory)


def replica_weight(replicas: int | None) -> Fraction:
    """One time-slicing or MPS replica in GPU-equivalents: `replicas` of them share one GPU. Unknown replicas
    (`auto` with no node to read them from): a whole GPU, the most a replica can be."""
    return Fraction(1, replicas) if replicas else WHOLE_GPU


def replica_words(count: str, amount: Fraction, replicas: int | None) -> str:
    """`2 replicas of 4`: a container's replicas for people."""
    of = f" of {replicas}" if replicas else ""
    return f"{count} replica{'s' if amount != 1 else ''}{of}"


class Replicas(SharingBackend):
    """Time-slicing: replicas that share a GPU's time, nothing capped."""

    name = "time-slicing"
    engines: frozenset[str] = frozenset({"vllm", "sglang", "trtllm"})

    def serves(self, policy: Policy, mig_model: GPUModel | None) -> frozenset[str]:
        return frozenset({NVIDIA_GPU, policy.sharing.resource_name})

    def holds(self, policy: Policy) -> Callable[[str], bool]:
        return policy.sharing.resource_name.__eq__

    def steered_resource(self, policy: Policy) -> str:
        return policy.sharing.resource_name

    def shared_resource(self, sharing: Sharing) -> str | None:
        return sharing.resource_name

    def replica_resource(self, sharing: Sharing) -> str | None:
        return NVIDIA_GPU if sharing.resource_name == NVIDIA_GPU else None

    def mapping_target(self, sharing: Sharing) -> str | None:
        return sharing.resource_name

    def default_per_container(self, device: DeviceKind) -> int:
        return SHARED_MAX_PER_CONTAINER if device == "replica" else super().default_per_container(device)

    def share(self, policy: Policy) -> Fraction | None:
        replicas = policy.sharing.replicas
        return Fraction(1, replicas) if replicas else None

    def pool_words(self, policy: Policy, served: frozenset[str]) -> tuple[str, str, str]:
        sharing = policy.sharing
        name = sharing.resource_name
        if name == NVIDIA_GPU:
            return f"{sharing.mode} replicas as {NVIDIA_GPU}", f"{NVIDIA_GPU} instead", f"ask for {NVIDIA_GPU}"
        return (
            f"{sharing.mode} replicas ({name})",
            f"{NVIDIA_GPU}: 1 (it becomes {name}: 1) or {name}",
            f"ask for {NVIDIA_GPU}: 1",
        )

    def offer(self, policy: Policy) -> str:
        mode = policy.sharing.mode
        where = f'policy "{policy.name}"'
        share = self.share(policy)
        replica = f"one of {policy.sharing.replicas} {mode} shares" if policy.sharing.replicas else f"a {mode} share"
        if policy.sharing.resource_name == NVIDIA_GPU:  # the device plugin keeps the name: no renaming
            what = f"is {replica} of a GPU under {where}"
        else:
            what = f"{where} turns into {replica} of a GPU ({policy.sharing.resource_name})"
        if share is not None and policy.fractional is Fractional.SHARED:
            return (
                f"request {format_fraction(share)} or less (up to one replica's share), or {NVIDIA_GPU}: 1, which "
                f"{what}"
            )
        return f"request {NVIDIA_GPU}: 1, which {what}"

    def short_offer(self, policy: Policy) -> str:
        share = self.share(policy)
        if share is not None and policy.fractional is Fractional.SHARED:
            return f"ask for {format_fraction(share)} or less, or {NVIDIA_GPU}: 1"
        return f"ask for {NVIDIA_GPU}: 1 instead"

    def maps_to_shared(self, policy: Policy) -> bool:
        return True

    def rules(self, policy: Policy) -> ModeRules:
        explicit = policy.limits.max_per_container
        return ModeRules(
            one_shared_replica=self.max_per_container(policy, "replica") == 1 and explicit is None,
            unshared_classes=True,
        )

    def many_replicas(self, policy: Policy, n: int | Fraction | str) -> str:
        """What becomes of a request for `n` > 1 shared replicas, as the device plugin (NVIDIA/k8s-device-plugin)
        does it: internal/rm/rm.go ValidateRequest fails it only where the sharing config's
        `failRequestsGreaterThanOne` is true. The plugin leaves that unset (false) for time-slicing, and so does
        the GPU Operator's documented config; api/config/v1/config.go sets it true for MPS unless the config
        says otherwise. Unset, the replicas are handed out, spread over the node's GPUs where it can (its
        `distributed` allocation policy) and on one GPU where it cannot, each still shared with other pods."""
        return (
            f"{n} {policy.sharing.mode} replicas are not {n} GPUs: the device plugin hands them out "
            "(failRequestsGreaterThanOne is off by default), on one GPU or several, each still shared with other pods"
        )

    def node_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        sharing = policy.sharing
        if sharing.resource_name not in (NVIDIA_GPU, NVIDIA_GPU_SHARED):
            return ()  # a MIG slice's replicas: labelled under its own resource name, not steered
        return ((STRATEGY_LABEL, "In", (str(sharing.mode),)), (REPLICAS_LABEL, "In", (str(sharing.replicas),)))

    def product_rule(self, policy: Policy, product_label: str) -> str | None:
        return f"{product_label} ending in -SHARED" if policy.sharing.resource_name == NVIDIA_GPU else None

    def product_fit(self, policy: Policy) -> ProductFit:
        return ProductFit(ends="-SHARED") if policy.sharing.resource_name == NVIDIA_GPU else ProductFit()

    def node_pool(self, policy: Policy, nodes: Sequence[NodeInfo]) -> tuple[NodeInfo, ...]:
        return tuple(n for n in nodes if NVIDIA_GPU in n.allocatable and node_replicas(n) > 1)

    def node_drift(self, policy: Policy, node: NodeInfo) -> list[NodeDrift]:
        sharing = policy.sharing
        found: list[NodeDrift] = []
        fixed = sharing.replicas if not policy.cluster_checks.auto_replicas else None
        replicas = node_replicas(node)
        if fixed and REPLICAS_LABEL in node.labels and replicas != fixed:
            found.append(
                (
                    "sharing.replicas",
                    str(replicas),
                    str(sharing.replicas),
                    f"each pod is told it has 1/{sharing.replicas} of a GPU, but the GPU is shared "
                    + (f"{replicas} ways" if replicas > 1 else "by none"),
                    f"set sharing.replicas: {replicas} (or auto), or change the device plugin's sharing config"
                    if replicas > 1
                    else "set replicas in the device plugin's sharing config, or use mode exclusive",
                )
            )
        return found + strategy_drift(policy, node, str(sharing.mode))

    def gpu_config_strategy(self) -> str | None:
        return GPU_CONFIG_STRATEGIES[self.name]

    def config_mismatch(self, policy: Policy) -> tuple[str, str]:
        mode = policy.sharing.mode
        return f'policy "{policy.name}" shares GPUs by {mode}', f"use strategy {self.gpu_config_strategy()}"

    def not_offered(self, policy: Policy, resource: str) -> tuple[str, str, str] | None:
        if resource != policy.sharing.resource_name:
            return None
        return (
            f", which the policy maps {NVIDIA_GPU} to",
            "check the device plugin's sharing config (replicas, renameByDefault) or set sharing.resourceName",
            "check the device plugin config",
        )

    def engine_flags(self) -> frozenset[str]:
        return self.engines

    def describe(self, policy: Policy) -> str:
        sharing = policy.sharing
        return f'policy "{policy.name}" ({sharing.mode}, {sharing.replicas} replicas)'

    def explain_mode(self, policy: Policy) -> str:
        sharing = policy.sharing
        return f"{sharing.mode}: {sharing.replicas} replicas per GPU as {sharing.resource_name}"

    def native_shape(self, policy: Policy) -> str | None:
        return "shared" if policy.sharing.resource_name == NVIDIA_GPU_SHARED else None

    def native_gap(self) -> tuple[str, str]:
        return (
            "shared replicas under another sharing.resourceName",
            f"only {NVIDIA_GPU_SHARED} is compiled; a kept {NVIDIA_GPU} converts fractions in place",
        )

    def explain_share(self, policy: Policy) -> str:
        sharing, share = policy.sharing, self.share(policy)
        if share is None:
            return super().explain_share(policy)
        text = f"one {sharing.resource_name} is 1/{sharing.replicas} of a GPU ({sharing.mode})"
        if policy.fractional is Fractional.SHARED:
            text += f"; nvidia.com/gpu up to {exact_text(share)} becomes one, more is denied"
        return text

    def unit_weight(self, policy: Policy, resource: str) -> Fraction | None:
        sharing = policy.sharing
        if resource == sharing.resource_name or (is_shared(resource) and resource.startswith("nvidia.com/")):
            return replica_weight(sharing.replicas)
        return super().unit_weight(policy, resource)

    def weight_units(self, policy: Policy) -> list[tuple[str, Fraction, str]]:
        sharing = policy.sharing
        return [(sharing.resource_name, replica_weight(sharing.replicas), _replica_text(policy))]

    def amount_words(self, policy: Policy, resource: str, count: str, amount: Fraction) -> str | None:
        sharing = policy.sharing
        return replica_words(count, amount, sharing.replicas) if resource == sharing.resource_name else None

    def quota_entry(self, policy: Policy) -> QuotaEntry:
        sharing = policy.sharing
        if sharing.resource_name == NVIDIA_GPU:
            return QuotaEntry(
                None,
                Fraction(0),
                "replicas keep the name nvidia.com/gpu: the API server already counts each as one nvidia.com/gpu, so "
                "the admin's own entry is in replicas (write N x replicas for N GPUs)",
            )
        if not sharing.replicas:
            return QuotaEntry(
                None, Fraction(0), "replicas auto: the nodes say how many; render again with replicas set"
            )
        return QuotaEntry(
            sharing.resource_name, Fraction(sharing.replicas), f"{sharing.replicas} replicas per GPU" + DRA_APART
        )

    def kept_name_units(self, policy: Policy) -> str:
        return "time-slicing replicas"


def _replica_text(policy: Policy) -> str:
    """What one replica is, and where the device plugin keeps the name, what the API server counts instead."""
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


class Mps(Replicas):
    """MPS: replicas whose memory and threads the device plugin's control daemon caps per client."""

    name = "mps"
    engines = frozenset({"vllm"})

    def many_replicas(self, policy: Policy, n: int | Fraction | str) -> str:
        return (
            f"{n} MPS replicas are not {n} GPUs, and the device plugin refuses them (its failRequestsGreaterThanOne "
            "is on by default under MPS: the kubelet fails the pod with UnexpectedAdmissionError)"
        )

    def env_hints(self, policy: Policy, fraction: Fraction, memory: int | None) -> tuple[tuple[str, str, str], ...]:
        # The device plugin's MPS control daemon sets every replica's limits itself (NVIDIA/k8s-device-plugin,
        # cmd/mps-control-daemon/mps/daemon.go: `set_default_device_pinned_mem_limit <index> <M>M` with M the
        # GPU's total memory / replicas in MiB, perDevicePinnedDeviceMemoryLimits; and
        # `set_default_active_thread_percentage` 100 / replicas, activeThreadPercentage). A client can only
        # lower them; mutation never passes a fraction above 1/replicas, so these round down to at most theirs.
        if not memory:
            return ()
        limit_mib = int(fraction * memory)
        return (
            ("mps", MPS_MEMORY_LIMIT, f"0={limit_mib}M"),
            ("mps", MPS_THREAD_PERCENTAGE, str(whole_percent(fraction))),
        )

    def frameworks_skipped(self) -> frozenset[str]:
        return frozenset({TGI})

    def judges_variable(self, name: str) -> bool:
        return name != TGI_FRACTION
