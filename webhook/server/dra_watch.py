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

from webhook.admission.cluster.nodes import STALE_AFTER_S
from webhook.admission.cluster.slices import class_info, slice_info
from webhook.server.inventory import BACKOFF_S, WATCH_TIMEOUT_S, KubeNodes, NodeInventory
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.dra")

KINDS: dict[str, tuple[str, Callable[[Any], tuple[str, Any] | None]]] = {
    "ResourceSlice": ("/apis/resource.k8s.io/v1/resourceslices", slice_info),
    "DeviceClass": ("/apis/resource.k8s.io/v1/deviceclasses", class_info),
}


class DRAWatch(NodeInventory):
    """One kind's objects by name, kept by a daemon thread; `on_change` after every change."""

    def __init__(
        self,
        source: Any,
        kind: str,
        on_change: Callable[[], None],
        *,
        stale_after: float = STALE_AFTER_S,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT_S,
        backoff: tuple[float, float] = BACKOFF_S,
    ) -> None:
        super().__init__(source, stale_after=stale_after, watch_timeout=watch_timeout, backoff=backoff)
        self.kind = self.what = kind
        self._parse = KINDS[kind][1]
        self._on_change = on_change
        self.items: dict[str, Any] = {}
        self._listed = False

    @staticmethod
    def watching(configuration: Any, kind: str, on_change: Callable[[], None], stale_after: float) -> DRAWatch:
        return DRAWatch(KubeNodes(configuration, KINDS[kind][0], kind), kind, on_change, stale_after=stale_after)

    def state(self) -> str:
        """listing (first list under way), off (failing before any list), current, or stale."""
        broken = self._broken_since
        if not self._listed:
            return "off" if broken is not None else "listing"
        return "stale" if broken is not None and self._clock() - broken > self.stale_after else "current"

    def _list(self) -> None:
        items: dict[str, Any] = {}
        token: str | None = None
        while True:
            page = self._source.list_page(token)
            for item in page.get("items") or []:
                found = self._parse(item)
                if found is not None:
                    items[found[0]] = found[1]
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                break
        self.items = items
        self._version = str(metadata.get("resourceVersion") or "")
        self.lists += 1
        self._listed = True
        self._healthy()
        self._on_change()
        log(
            _log,
            logging.INFO,
            f"{self.kind} watch: listed {len(items)}",
            event="dra-listed",
            kind=self.kind,
            objects=len(items),
        )

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        metadata = found if isinstance(found := obj.get("metadata"), dict) else {}
        name = metadata.get("name")
        if not isinstance(name, str):
            return
        found = self._parse(obj) if kind != "DELETED" else None
        if found is None:
            if self.items.pop(name, None) is not None:
                self._on_change()
        elif self.items.get(name) != found[1]:
            self.items[name] = found[1]
            self._on_change()
