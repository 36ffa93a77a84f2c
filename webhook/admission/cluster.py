"""What the webhook knows of the cluster's nodes: an immutable snapshot that the pure core reads.

The server keeps it up to date with a list + watch of Nodes (`webhook.server.inventory`) and hands the
engine the latest snapshot, or None while it has none that it trusts (before the first list, or while the
watch has been broken too long): the cluster checks are then skipped, never failed closed. The CLI builds one
from a single list (`--cluster`). Nothing here does I/O.

Per node only what admission needs is kept, so that 5,000 nodes stay small: the allocatable amount of every
managed GPU resource, and GPU feature discovery's labels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.quantity import quantity_or_none
from webhook.admission.resources import is_managed

# GPU feature discovery's labels that admission reads (NVIDIA/k8s-device-plugin, GFD).
GFD_LABELS = frozenset(
    {
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.memory",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.replicas",
        "nvidia.com/gpu.sharing-strategy",
        "nvidia.com/mig.strategy",
    }
)
# Per-profile MIG labels under the mixed strategy, e.g. `nvidia.com/mig-1g.10gb.count`.
_MIG_LABEL = re.compile(r"^nvidia\.com/mig-[0-9a-z.+-]+\.(count|memory|slices\.ci|slices\.gi|engines\.[a-z]+)$")


def is_kept_label(key: str) -> bool:
    return key in GFD_LABELS or _MIG_LABEL.match(key) is not None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node, as admission sees it."""

    name: str
    allocatable: Mapping[str, int]  # managed resources only, in whole devices (or the resource's unit)
    labels: Mapping[str, str]  # GFD labels only (is_kept_label)
    unschedulable: bool = False  # cordoned: still counted (it comes back), but said so in messages

    @staticmethod
    def from_object(node: Any) -> NodeInfo | None:
        """A Node as the API sends it (JSON, camelCase) -> NodeInfo; None when it has no name."""
        if not isinstance(node, dict):
            return None
        metadata = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            return None
        labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
        status = node.get("status") if isinstance(node.get("status"), dict) else {}
        allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
        spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
        amounts: dict[str, int] = {}
        for resource, raw in allocatable.items():
            if is_managed(resource):
                value = quantity_or_none(raw)
                if value is not None and value > 0:
                    amounts[resource] = int(value)
        kept = {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str) and is_kept_label(k)}
        return NodeInfo(name, amounts, kept, spec.get("unschedulable") is True)


@dataclass(frozen=True)
class ClusterView:
    """An immutable snapshot of the nodes. Aggregates that reviews read are worked out once per snapshot."""

    nodes: Mapping[str, NodeInfo]
    _largest: dict[str, tuple[int, str]] = field(default_factory=dict, repr=False, compare=False)

    def largest(self, resource: str) -> tuple[int, str] | None:
        """The most of `resource` any one node can hold, and that node's name; None when no node has any."""
        if not self._largest and self.nodes:
            for node in self.nodes.values():
                for name, amount in node.allocatable.items():
                    best = self._largest.get(name)
                    if best is None or amount > best[0]:
                        self._largest[name] = (amount, node.name)
        return self._largest.get(resource)

    def offers(self, resource: str) -> bool:
        """Whether any node advertises `resource`."""
        return self.largest(resource) is not None
