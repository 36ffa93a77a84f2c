"""The watches behind GPU budgets: every Pod that holds GPUs, and every ResourceQuota with a GPU entry.

Both are list + watches of the node inventory's kind (inventory.py: pages, watch from the list's version with
bookmarks, relist on 410, backoff), cluster-wide, kept by a daemon thread: the quotas in every worker, the pods
only in the worker that holds the recount Lease. They are sized for 100,000 pods: a pod that holds no GPU costs
nothing here (it is dropped as it is read), and one that does is kept as a `HeldPod` (its name, its
GPU-equivalents and what a quota's scopes read of it) under its namespace and UID, equal values held once, with
each namespace's sums per scope kept as pods change (a recount reads them, never the pods). A ResourceQuota
without a GPU entry is dropped the same way.

Neither decides anything: the ledger (ledger.py) is what a reservation reads. The pods are what the recount
(budgets.py) writes into the records; the quotas say which namespaces have a budget and how large it is.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.admission.budgets.budget import has_ended
from webhook.admission.cluster.nodes import STALE_AFTER_S
from webhook.admission.cluster.quota import GpuQuota, gpu_quota
from webhook.server.inventory import BACKOFF_S, WATCH_TIMEOUT_S, KubeNodes, NodeInventory, NodeSource
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.budgets")

PODS_PATH = "/api/v1/pods"
YOUNG_S = 5.0  # a pod added this recently, announced by no reservation, may still be in a worker's hold (ledger.py)
QUOTAS_PATH = "/api/v1/resourcequotas"


@dataclass(frozen=True, slots=True)
class HeldPod:
    """What a budget needs of one live GPU pod: enough to count it against a quota, nothing more."""

    name: str
    gpus: Fraction  # GPU-equivalents (budget.pod_ask's total)
    scope: tuple[tuple[str, Any], ...]  # the pod's fields a quota's scopes read (ledger.scope_of)


@dataclass(frozen=True, slots=True)
class Sum:
    """GPU-equivalents of a namespace's live pods whose scope fields are the same, and how many pods they are."""

    gpus: Fraction
    pods: int

    def plus(self, pod: HeldPod, sign: int = 1) -> Sum:
        return Sum(self.gpus + sign * pod.gpus, self.pods + sign)


def sums_of(pods: Iterable[HeldPod]) -> dict[tuple[tuple[str, Any], ...], Sum]:
    """The sum per scope of `pods`."""
    found: dict[tuple[tuple[str, Any], ...], Sum] = {}
    for pod in pods:
        found[pod.scope] = found.get(pod.scope, NOTHING).plus(pod)
    return found


NOTHING = Sum(Fraction(0), 0)


# A pod's GPU-equivalents and scope fields, or None for a pod that holds no GPU (budgets.py makes it from the
# namespace's policy and budget.pod_ask).
AskOf = Callable[[dict[str, Any]], tuple[Fraction, tuple[tuple[str, Any], ...]] | None]


class Watched(NodeInventory):
    """A cluster-wide list + watch whose entries are kept per namespace and key, in place (as claims.py does)."""

    def __init__(
        self,
        source: NodeSource,
        what: str,
        *,
        stale_after: float = STALE_AFTER_S,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT_S,
        backoff: tuple[float, float] = BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(source, stale_after=stale_after, watch_timeout=watch_timeout, backoff=backoff, clock=clock)
        self.what = what
        self._listed = False
        self.listed = threading.Event()  # set once the first list has completed
        self.list_error = ""  # why the first list has not completed, while it has not

    def state(self) -> str:
        """listing (no list yet), off (the API server forbids the list: RBAC), current, or stale (the watch broken
        for longer than `stale_after`)."""
        if not self._listed:
            return "off" if "HTTP 403" in self.list_error else "listing"
        broken = self._broken_since
        return "stale" if broken is not None and self._clock() - broken > self.stale_after else "current"

    def _broken(self, why: str) -> None:
        super()._broken(why)
        if not self._listed:
            self.list_error = why

    def _list(self) -> None:
        count = 0
        self._begin()
        for item in self._paged():
            if self._keep(item):
                count += 1
        self._version = self._listed_version  # before the new map: a reader of the map then
        self._end()  # of the version gets a version that is never older than the map (PodWatch.version)
        self.lists += 1
        self._listed = True
        self.listed.set()
        self.list_error = ""
        self._healthy()
        log(_log, logging.INFO, f"{self.what} watch: listed {count} kept", event="budget-watch-listed",
            kind=self.what, objects=count)  # fmt: skip

    def _begin(self) -> None:
        """A list starts: collect into a new map (swapped in by `_end`)."""

    def _end(self) -> None:
        """A list ended: swap the new map in."""

    def _keep(self, obj: Any) -> bool:
        """Keep one listed object in the new map; whether it was kept."""
        raise NotImplementedError


class KeyedWatch(Watched):
    """A `Watched` kept as namespace -> key -> value: `_read` says what one object is; a list fills a new map."""

    _listing: dict[str, dict[str, Any]]

    def _read(self, obj: Any) -> tuple[str, str, Any] | None:
        """(namespace, key, the value kept, or None where nothing is), or None to ignore the object."""
        raise NotImplementedError

    def _begin(self) -> None:
        self._listing = {}

    def _keep(self, obj: Any) -> bool:
        found = self._read(obj)
        if found is None or found[2] is None:
            return False
        self._listing.setdefault(found[0], {})[found[1]] = found[2]
        return True


def _identity(obj: Any) -> tuple[str, str, str, dict[str, Any]] | None:
    """(namespace, name, uid, metadata) of a listed or watched object; list items carry no kind: it is known."""
    if not isinstance(obj, dict):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    namespace, name, uid = metadata.get("namespace"), metadata.get("name"), metadata.get("uid")
    if not all(isinstance(value, str) and value for value in (namespace, name, uid)):
        return None
    return namespace, name, uid, metadata  # type: ignore[return-value]


class PodWatch(KeyedWatch):
    """Every live GPU pod of the cluster: namespace -> UID -> HeldPod. `on_gone(namespace, uid)` is called when
    one is deleted or ends (the budget keeper releases it); a relist reports those that went missing."""

    def __init__(
        self,
        source: NodeSource,
        ask_of: AskOf,
        on_gone: Callable[[str, str], None],
        on_seen: Callable[[str], None] = lambda namespace: None,
        **options: Any,
    ) -> None:
        super().__init__(source, "Pod", **options)
        self._ask_of = ask_of
        self._on_gone = on_gone
        self._on_seen = on_seen
        self.held: dict[str, dict[str, HeldPod]] = {}
        # namespace -> scope -> the sum of its held pods, kept as they change: a recount reads it, never the pods
        self.sums: dict[str, dict[tuple[tuple[str, Any], ...], Sum]] = {}
        # `held`, `sums` and the version they are at change together under it, each event whole (`_apply`); a
        # recount reads them under it. Reentrant: `_hold` takes it too.
        self.lock = threading.RLock()
        self._held_version = ""
        self._shared: dict[Any, Any] = {}  # each distinct fraction, scope and HeldPod once
        self._listing: dict[str, dict[str, HeldPod]] = {}
        # namespace -> UID -> (when this watch saw it ADDED, the resourceVersion it was created at), for the pods
        # added within YOUNG_S: the recount may leave such a pod to the worker hold that admitted it (ledger.py)
        self.recent: dict[str, dict[str, tuple[float, str]]] = {}

    @staticmethod
    def watching(
        configuration: Any,
        ask_of: AskOf,
        on_gone: Callable[[str, str], None],
        stale_after: float,
        on_seen: Callable[[str], None] = lambda namespace: None,
    ) -> PodWatch:
        source = KubeNodes(configuration, PODS_PATH, "pod")
        return PodWatch(source, ask_of, on_gone, on_seen, stale_after=stale_after)

    def count(self) -> int:
        return sum(len(pods) for pods in list(self.held.values()))

    def young(self, namespace: str, now: float) -> dict[str, str]:
        """The pods of `namespace` this watch saw created within YOUNG_S of `now` (monotonic), by UID: the
        resourceVersion each was created at. Older ones are forgotten here."""
        with self.lock:
            recent = self.recent.get(namespace)
            if not recent:
                return {}
            for uid, (seen, _) in list(recent.items()):
                if now - seen >= YOUNG_S:
                    del recent[uid]
            if not recent:
                del self.recent[namespace]
            return {uid: version for uid, (_, version) in recent.items()}

    def version(self) -> str:
        """The resourceVersion of `held` and `sums`: every event up to it is held, and none after it. Read under
        the lock with them, it names exactly their moment (a version set before its event was held would let a
        recount claim a pod it does not hold yet, and write over a record that counts it)."""
        with self.lock:
            return self._held_version

    def _apply(self, event: dict[str, Any]) -> None:
        with self.lock:
            super()._apply(event)
            self._held_version = self._version

    def _read(self, obj: Any) -> tuple[str, str, HeldPod | None] | None:
        """(namespace, uid, the pod as held, or None when it holds no GPU or has ended), or None to ignore."""
        found = _identity(obj)
        if found is None:
            return None
        namespace, name, uid, _ = found
        if has_ended(obj):
            return sys.intern(namespace), uid, None
        asked = self._ask_of(obj)
        if asked is None or asked[0] <= 0:
            return sys.intern(namespace), uid, None
        gpus, scope = asked
        # The UID and name interned: the ledger view holds the same strings (ledger.Entry.parse).
        pod = HeldPod(sys.intern(name), self._shared.setdefault(gpus, gpus), self._shared.setdefault(scope, scope))
        return sys.intern(namespace), sys.intern(uid), pod

    def _end(self) -> None:
        sums = {namespace: sums_of(pods.values()) for namespace, pods in self._listing.items()}
        with self.lock:
            before, self.held, self._listing = self.held, self._listing, {}
            self.sums = sums
            self.recent = {}  # a listed pod is not known to be young: the recount counts it at once
            self._held_version = self._listed_version
        for namespace, pods in before.items():  # gone while the watch was down: deleted, or ended
            now = self.held.get(namespace, {})
            for uid in pods.keys() - now.keys():
                self._on_gone(namespace, uid)

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        found = self._read(obj)
        if found is None:
            return
        namespace, uid, pod = found
        if kind == "DELETED" or pod is None:
            self._hold(namespace, uid, None)
            if kind == "DELETED" or has_ended(obj):  # the ledger may hold it though this worker never did
                self._on_gone(namespace, uid)
        elif kind in ("ADDED", "MODIFIED") and self._hold(namespace, uid, pod):
            if kind == "ADDED":
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                with self.lock:
                    self.recent.setdefault(namespace, {})[uid] = (time.monotonic(), version)
            self._on_seen(namespace)

    def _hold(self, namespace: str, uid: str, pod: HeldPod | None) -> bool:
        """Hold `pod` as the namespace's `uid` (None: no more), its scope's sum with it; whether anything changed."""
        with self.lock:
            pods = self.held.setdefault(namespace, {})
            before = pods.get(uid)
            if before == pod:
                return False
            sums = self.sums.setdefault(namespace, {})
            if before is not None:
                del pods[uid]
                left = sums[before.scope].plus(before, -1)
                if left.pods:
                    sums[before.scope] = left
                else:
                    del sums[before.scope]
            if pod is not None:
                pods[uid] = pod
                sums[pod.scope] = sums.get(pod.scope, NOTHING).plus(pod)
            else:
                recent = self.recent.get(namespace)
                if recent is not None:
                    recent.pop(uid, None)
            if not pods:
                del self.held[namespace]
                self.sums.pop(namespace, None)
            return True


class QuotaWatch(KeyedWatch):
    """Every ResourceQuota with a GPU entry: namespace -> name -> GpuQuota (quota.gpu_quota reads them)."""

    def __init__(self, source: NodeSource, on_listed: Callable[[], None] = lambda: None, **options: Any) -> None:
        super().__init__(source, "ResourceQuota", **options)
        self.held: dict[str, dict[str, GpuQuota]] = {}
        self._listing: dict[str, dict[str, GpuQuota]] = {}
        self._on_listed = on_listed

    @staticmethod
    def watching(configuration: Any, stale_after: float, on_listed: Callable[[], None] = lambda: None) -> QuotaWatch:
        source = KubeNodes(configuration, QUOTAS_PATH, "ResourceQuota")
        return QuotaWatch(source, on_listed, stale_after=stale_after)

    def quotas(self, namespace: str) -> tuple[GpuQuota, ...]:
        return tuple((self.held.get(namespace) or {}).values())

    def _read(self, obj: Any) -> tuple[str, str, GpuQuota | None] | None:
        if not isinstance(obj, dict):
            return None
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return None
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            return None
        return sys.intern(namespace), name, gpu_quota({"apiVersion": "v1", "kind": "ResourceQuota", **obj})

    def _end(self) -> None:
        self.held, self._listing = self._listing, {}
        self._on_listed()

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        found = self._read(obj)
        if found is None:
            return
        had = found[0] in self.held
        self._hold(kind, *found)
        if (found[0] in self.held) != had:  # a namespace gained or lost its budget
            self._on_listed()

    def _hold(self, kind: str, namespace: str, name: str, quota: GpuQuota | None) -> None:
        if kind == "DELETED" or quota is None:
            names = self.held.get(namespace)
            if names is not None:
                names.pop(name, None)
                if not names:
                    self.held.pop(namespace, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.held.setdefault(namespace, {})[name] = quota
