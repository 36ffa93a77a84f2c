"""The list + watch of ResourceSlices and DeviceClasses behind the cluster view's DRA devices.

Each is a cluster-scoped kind kept by name, reduced to what the view needs (webhook/admission/cluster/slices.py);
every change re-publishes the node inventory's view, which merges them into its nodes. The protocol and its
failures are the node inventory's (inventory.py). The view is not trusted while a watch lists for the first
time or has been broken longer than `stale_after` (the checks are skipped, never failed closed on old
devices); a watch that fails before its first list (a cluster without DRA's v1, or no RBAC for it) leaves the
view as the nodes alone make it, as before DRA was read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from webhook.admission.cluster.slices import class_info, slice_info
from webhook.server.inventory import KubeNodes, NamedWatch
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.dra")

KINDS: dict[str, tuple[str, Callable[[Any], tuple[str, Any] | None]]] = {
    "ResourceSlice": ("/apis/resource.k8s.io/v1/resourceslices", slice_info),
    "DeviceClass": ("/apis/resource.k8s.io/v1/deviceclasses", class_info),
}


class DRAWatch(NamedWatch):
    """One kind's objects by name, reduced to what the view needs; `on_change` after every change."""

    def __init__(self, source: Any, kind: str, on_change: Callable[[], None], **options: Any) -> None:
        parse = KINDS[kind][1]

        def keep(obj: Any) -> Any:
            found = parse(obj)
            return found[1] if found is not None else None

        super().__init__(source, kind, keep, on_change, **options)
        self.kind = kind

    @staticmethod
    def watching(configuration: Any, kind: str, on_change: Callable[[], None], stale_after: float) -> DRAWatch:
        return DRAWatch(KubeNodes(configuration, KINDS[kind][0], kind), kind, on_change, stale_after=stale_after)

    def _list(self) -> None:
        super()._list()
        log(_log, logging.INFO, f"{self.kind} watch: listed {len(self.items)}", event="dra-listed", kind=self.kind,
            objects=len(self.items))  # fmt: skip
