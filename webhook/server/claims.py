"""The DRA cache: a list + watch of ResourceClaims and one of ResourceClaimTemplates, for counting a pod's claims.

A pod's GPU total counts the devices of the claims and templates it names (webhook/admission/dra/podclaims.py,
`pod_claims`), so each worker keeps what counting needs of every claim and template of the cluster: per
namespace and name, a `ClaimSummary` (the (request, DeviceClass, count) tuple and what a review reads of it,
worked out here once instead of on every review; a request's selectors only where it has some, each distinct
text read once). Nothing else of the object is kept, and equal summaries are
held once (the claims made from one template are alike), so 100,000 claims cost about 11 MB (bench/dra.py,
docs/performance.md).

The protocol and its failures are the node inventory's (inventory.py: pages, watch from the list's version,
relist on 410, backoff). Unlike the node snapshot, the maps are changed in place (a dict's set and pop are
atomic under the GIL; a relist swaps in a new map): copying 100,000 entries on every event would cost more than
the events. A claim's spec is immutable, so an entry read before the watch broke is still right: a stale cache
is read all the same, and a name it does not hold is a miss, counted (`gpu_admission_dra_cache_misses_total`)
and logged, never a denial.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from webhook.admission.cluster.nodes import STALE_AFTER_S
from webhook.admission.dra.podclaims import ClaimSummary, Devices, summary_of
from webhook.server import metrics
from webhook.server.inventory import (
    BACKOFF_S,
    WATCH_TIMEOUT_S,
    KubeNodes,
    NodeInventory,
    NodeSource,
)
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.claims")

API_VERSION = "resource.k8s.io/v1"
PATHS = {
    "ResourceClaim": "/apis/resource.k8s.io/v1/resourceclaims",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
}


class ClaimCache(NodeInventory):
    """One kind's (ResourceClaim or ResourceClaimTemplate) entries, kept by a daemon thread."""

    def __init__(
        self,
        source: NodeSource,
        kind: str,
        *,
        stale_after: float = STALE_AFTER_S,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT_S,
        backoff: tuple[float, float] = BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(source, stale_after=stale_after, watch_timeout=watch_timeout, backoff=backoff, clock=clock)
        self.kind = kind
        self.what = kind
        # namespace -> name -> summary (ClaimsCache reads it): changed in place by the watch, swapped by a list
        self.held: dict[str, dict[str, ClaimSummary]] = {}
        self._shared: dict[ClaimSummary, ClaimSummary] = {}  # each distinct summary once
        self._listed = False

    def get(self, namespace: str, name: str) -> Devices | None:
        """What a claim or template asks for (its summary's devices), or None where it is not held."""
        held = self.held.get(namespace)
        summary = held.get(name) if held is not None else None
        return summary.devices if summary is not None else None

    def __len__(self) -> int:
        return sum(len(names) for names in list(self.held.values()))

    def state(self) -> str:
        """listing (no list yet), current, or stale (the watch broken for longer than `stale_after`)."""
        if not self._listed:
            return "listing"
        broken = self._broken_since
        return "stale" if broken is not None and self._clock() - broken > self.stale_after else "current"

    def _entry(self, obj: Any) -> tuple[str, str, ClaimSummary] | None:
        """(namespace, name, devices) of a listed or watched object; list items carry no kind: it is known."""
        if not isinstance(obj, dict):
            return None
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return None
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            return None
        summary = summary_of({"apiVersion": API_VERSION, "kind": self.kind, "spec": obj.get("spec")})
        if summary is None:
            return None
        summary = self._shared.setdefault(summary, summary)
        return sys.intern(namespace), name, summary

    def _list(self) -> None:
        held: dict[str, dict[str, ClaimSummary]] = {}
        count = 0
        for item in self._paged():
            entry = self._entry(item)
            if entry is not None:
                held.setdefault(entry[0], {})[entry[1]] = entry[2]
                count += 1
        self._shared = {summary: summary for names in held.values() for summary in names.values()}
        self.held = held
        self._version = self._listed_version
        self.lists += 1
        self._listed = True
        self._healthy()
        log(
            _log,
            logging.INFO,
            f"{self.kind} cache: listed {count}",
            event="dra-cache-listed",
            kind=self.kind,
            objects=count,
        )

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        entry = self._entry(obj)
        if entry is None:
            return
        namespace, name, summary = entry
        if kind == "DELETED":
            names = self.held.get(namespace)
            if names is not None:
                names.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.held.setdefault(namespace, {})[name] = summary


class ClaimsCache:
    """The `ClaimsView` the engine reads in a server: both kinds' caches; a miss is counted and logged."""

    def __init__(self, claims: ClaimCache, templates: ClaimCache) -> None:
        self.caches = {"ResourceClaim": claims, "ResourceClaimTemplate": templates}

    @staticmethod
    def watching(configuration: Any, stale_after: float = STALE_AFTER_S) -> ClaimsCache:
        """The caches over the API (one list + watch per kind, started by `start`)."""
        kinds = [
            ClaimCache(KubeNodes(configuration, PATHS[kind], kind), kind, stale_after=stale_after) for kind in PATHS
        ]
        return ClaimsCache(*kinds)

    def start(self) -> None:
        for cache in self.caches.values():
            cache.start()

    def stop(self) -> None:
        for cache in self.caches.values():
            cache.stop()

    def claim(self, kind: str, namespace: str, name: str) -> ClaimSummary | None:
        cache = self.caches[kind]
        held = cache.held.get(namespace)
        found = held.get(name) if held is not None else None
        if found is None:
            state = cache.state()
            metrics.count_dra_cache_miss(kind, state)
            log(
                _log,
                logging.WARNING,
                f'{kind} "{namespace}/{name}" is not in the DRA cache ({state}): its devices are not counted',
                event="dra-cache-miss",
                kind=kind,
                namespace=namespace,
                name=name,
                state=state,
            )
        return found

    def details(self) -> dict[str, Any]:
        """For /readyz: each cache's state and size."""
        return {kind: {"state": cache.state(), "objects": len(cache)} for kind, cache in self.caches.items()}
