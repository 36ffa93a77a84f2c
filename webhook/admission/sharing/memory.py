"""Memory-sliced sharing (`sharing.mode: memory`): a device plugin hands out a share of one GPU's memory and
caps what the container sees. ACK, HAMi and Volcano are its variants (`sharing.backend`); their resources,
units and node labels are memshare.py's tables and arithmetic, which this backend answers the phases from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from webhook.admission.base.resources import GPUModel
from webhook.admission.policy.model import Backend
from webhook.admission.sharing import memshare
from webhook.admission.sharing.backend import LabelRequirement, ModeRules, NodeDrift, SharingBackend, strategy_drift

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

    def explain_share(self, policy: Policy) -> str:
        return memshare.describe_share(policy)
