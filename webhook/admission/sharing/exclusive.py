"""Whole GPUs (`sharing.mode: exclusive`): `nvidia.com/gpu` is a whole device, on nodes that share none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from webhook.admission.base.resources import NVIDIA_GPU, GPUModel
from webhook.admission.cluster.nodes import GI_SLICES_LABEL, SHARED_STRATEGIES, STRATEGY_LABEL
from webhook.admission.sharing.backend import (
    LabelRequirement,
    ModeRules,
    NodeDrift,
    ProductFit,
    SharingBackend,
    strategy_drift,
)

if TYPE_CHECKING:
    from webhook.admission.cluster.nodes import NodeInfo
    from webhook.admission.policy.model import Policy


class Exclusive(SharingBackend):
    name = "exclusive"

    def serves(self, policy: Policy, mig_model: GPUModel | None) -> frozenset[str]:
        return frozenset({NVIDIA_GPU})

    def pool_words(self, policy: Policy, served: frozenset[str]) -> tuple[str, str, str]:
        return "whole GPUs (mode exclusive)", f"{NVIDIA_GPU} instead", f"ask for {NVIDIA_GPU}"

    def rules(self, policy: Policy) -> ModeRules:
        return ModeRules(exclusive=True)

    def node_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        # Not `mig.strategy notin (single)`: whole-GPU nodes carry `single` too where that is the cluster's
        # strategy (the GPU Operator's default), and such pods would never schedule.
        return ((STRATEGY_LABEL, "NotIn", SHARED_STRATEGIES), (GI_SLICES_LABEL, "DoesNotExist", ()))

    def product_rule(self, policy: Policy, product_label: str) -> str | None:
        return f"{product_label} neither ending in -SHARED nor holding -MIG-"

    def product_fit(self, policy: Policy) -> ProductFit:
        return ProductFit(not_ends=("-SHARED",), not_holds=("-MIG-",))

    def steering_advice(self) -> str:
        return "remove it, or use a namespace whose policy shares GPUs"

    def drops_single_strategy(self) -> bool:
        return True

    def node_drift(self, policy: Policy, node: NodeInfo) -> list[NodeDrift]:
        return strategy_drift(policy, node, "none")

    def describe(self, policy: Policy) -> str:
        return f'policy "{policy.name}" ({policy.sharing.mode}: whole GPUs)'

    def explain_mode(self, policy: Policy) -> str:
        return "exclusive: whole GPUs"

    def native_shape(self, policy: Policy) -> str | None:
        return "whole"
