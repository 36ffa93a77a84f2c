"""The budget ledger: one ConfigMap per budgeted namespace, in the webhook's own namespace, changed only by
compare-and-swap.

Why a record in the API server: every worker of every replica admits pods into the same namespace at once, and
a count kept in one process cannot stop two others from each admitting the last share. The API server's own
quota admission plugin solves the same problem the same way: read the record, decide, write it back naming the
resourceVersion that was read; a write that lost the race gets 409 Conflict, reads again and decides again. So
the budget holds whatever the number of workers and replicas, and survives restarts.

The record `gpu-budget-<namespace>` holds what a quota's use is made of, and nothing that grows with the
namespace: the recount of its live GPU pods (`sum.N`: GPU-equivalents and a pod count per distinct set of the
fields a quota's scopes read; written by the one worker that holds the recount Lease, budgets.py), and the
reservations not yet counted there (one key per pod UID: its name, its GPU-equivalents as a fraction, "1/4", its
scope fields, when it was written). A reservation is added before its pod exists; the recount folds it into the
sums once its pod watch sees the pod. It also holds the workers' holds (`Hold`: room a worker may give to pods
without a write per pod, counted in full; holds.py) and the few young pods the recount left to them
(`deferred`). A record in the per-pod form (every counted pod an entry) reads as reservations, and the first
recount folds them in.

Within a process, the edits that threads bring for one namespace while a write is under way are written together
by the next write (group commit). Every call has a bounded timeout and the CAS loop a bounded number of attempts
and time: the webhook answers within the API server's 5 s whatever the API server does (`LedgerUnavailable`
says why it could not).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.admission.cluster.quota import GpuQuota, matches
from webhook.server.budget_watch import HeldPod, Sum, Watched, sums_of
from webhook.server.inventory import KubeNodes, NodeSource
from webhook.server.logs import LOGGER

_log = logging.getLogger(f"{LOGGER}.ledger")

LEDGER_LABEL = "gpu-admission.io/budget-ledger"  # "true" on every record: the ledger watch selects on it
NAMESPACE_LABEL = "gpu-admission.io/budget-namespace"  # the namespace a record counts
RECORD_PREFIX = "gpu-budget-"
SUM_PREFIX = "sum."  # the data keys of the recount, one per distinct scope
RECOUNT_KEY = "recount"  # when the recount was last written
HOLD_PREFIX = "hold."  # the data keys of the workers' holds, one per worker and scope
DEFERRED_KEY = "deferred"  # the young pods the sums leave to the holds that admitted them
CONNECT_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 2.0
CAS_DEADLINE_S = 3.0  # a reservation's whole CAS loop: within the webhook's 5 s timeoutSeconds
CREDENTIALS_S = 30.0  # the bearer token is read again this often (and at once after a 401)
CAS_ATTEMPTS = 24  # 16 creates racing for one namespace through 4 processes settle in a handful each

Scope = tuple[tuple[str, Any], ...]  # the pod's fields a quota's scopes read, as (field, value) pairs


class LedgerUnavailable(Exception):
    """The record could not be read or written: one line saying why (unreachable, refused, too many races)."""


def record_name(namespace: str) -> str:
    return RECORD_PREFIX + namespace


# What a ResourceQuota's scopes read of a pod (quota.matches, after the API server's podMatchesScopeFunc): its
# priority class, and whether it is Terminating, BestEffort (its cpu and memory alone decide: a pod that asks
# only for GPUs is BestEffort) and CrossNamespacePodAffinity. An entry keeps them, so that a quota created after
# the pod was admitted counts it as its scopes say, and `pod_of` makes a pod that matches as the original did.
_PREDICATES = (
    ("terminating", "Terminating"),
    ("bestEffort", "BestEffort"),
    ("crossNamespace", "CrossNamespacePodAffinity"),
)


def scope_of(pod: dict[str, Any]) -> Scope:
    """What quota scopes read of `pod`, as (field, value) pairs (only those that hold)."""
    spec = pod.get("spec")
    found: list[tuple[str, Any]] = []
    priority = spec.get("priorityClassName") if isinstance(spec, dict) else None
    if isinstance(priority, str) and priority:
        found.append(("priorityClassName", priority))
    found += [(name, True) for name, scope in _PREDICATES if matches((scope, "Exists", ()), pod)]
    return tuple(found)


def pod_of(namespace: str, name: str, scope: Scope) -> dict[str, Any]:
    """A pod that every quota scope matches as it matched the pod an entry was made from."""
    held = dict(scope)
    spec: dict[str, Any] = {}
    if held.get("priorityClassName"):
        spec["priorityClassName"] = held["priorityClassName"]
    if held.get("terminating"):
        spec["activeDeadlineSeconds"] = 0
    if held.get("crossNamespace"):
        spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"namespaces": ["*"]}]}}
    status = {"qosClass": "BestEffort" if held.get("bestEffort") else "Burstable"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec,
            "status": status}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Entry:
    """One counted pod."""

    pod: str  # its name
    gpus: Fraction  # GPU-equivalents
    scope: Scope
    at: float  # when the entry was written (Unix time): the grace for a pod that never appears runs from it

    def text(self) -> str:
        return _entry_text(self)

    @staticmethod
    def parse(text: Any) -> Entry | None:
        """An entry from its data value, or None for one that is not (edited by hand: ignored, never fatal)."""
        return _parse_entry(text) if isinstance(text, str) else None

    @staticmethod
    def _parse(text: str) -> Entry | None:
        try:
            value = json.loads(text)
            gpus, scope = Fraction(str(value["gpus"])), tuple((value.get("scope") or {}).items())
            # Held once each: the few distinct shares and scopes, and the names the pod watch holds too.
            gpus, scope = _SHARED.setdefault(gpus, gpus), _SHARED.setdefault(scope, scope)
            return Entry(sys.intern(str(value["pod"])), gpus, scope, float(value["at"]))
        except (ValueError, TypeError, KeyError, AttributeError, ZeroDivisionError):
            return None


_SHARED: dict[Any, Any] = {}  # each distinct share and scope of every record, once


# Every write renders, and every worker's watch parses, the whole record: the reservations it carried before are
# most of it, so each text is rendered and parsed once (the latest 8,192 held: about 2 MB).
@functools.lru_cache(maxsize=8_192)
def _entry_text(entry: Entry) -> str:
    value: dict[str, Any] = {"pod": entry.pod, "gpus": _fraction_text(entry.gpus), "at": round(entry.at, 3)}
    if entry.scope:
        value["scope"] = dict(entry.scope)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=8_192)
def _parse_entry(text: str) -> Entry | None:
    return Entry._parse(text)


def _fraction_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


@dataclass(frozen=True, slots=True)
class Hold:
    """GPU-equivalents that one worker may give to pods of one scope without writing the record, until `until`.

    Counted in full by every quota that its scope selects, like a reservation, so whatever the worker admits
    from it is counted before the pod exists. The worker writes the pods it admitted from it as reservations
    (its flush, a few times a second), shrinking it by as much: a pod is in the hold, a reservation or the sums.
    `recalled` is when another worker, short of room, asked for it back; the holder then gives back what is
    left. A hold whose worker stopped without giving it back is dropped by the recount once every pod it may
    have admitted is surely counted in the sums (`Record.recount`)."""

    holder: str  # the worker: host name and process id
    gpus: Fraction  # not given to any pod yet, as the holder last wrote it
    scope: Scope
    until: float  # the holder admits from it only before this (Unix time), less HOLD_MARGIN_S
    recalled: float = 0.0  # when another worker asked for it back (Unix time; 0: never)
    # Its worker gone, the recount's fence before it is dropped: "pending" once it ran out long enough ago that
    # all its pods exist; then the record's resourceVersion after that write, which the pod watch must reach.
    ended: str = ""

    def key(self) -> str:
        return hold_key(self.holder, self.scope)

    def text(self) -> str:
        # In an entry's form (`pod` empty, an `at` never reached), as a sum is: a worker still running the
        # per-pod code during a rolling update counts it and never looks its "pod" up.
        value: dict[str, Any] = {"pod": "", "gpus": _fraction_text(self.gpus), "at": SUM_AT,
                                 "holder": self.holder, "until": round(self.until, 3)}  # fmt: skip
        if self.scope:
            value["scope"] = dict(self.scope)
        if self.recalled:
            value["recalled"] = round(self.recalled, 3)
        if self.ended:
            value["ended"] = self.ended
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def parse(text: Any) -> Hold | None:
        """A hold from its data value, or None for one that is not. One rewritten by older code (no `until`)
        reads as expired: the recount drops it once its pods are surely counted."""
        entry = Entry.parse(text)
        if entry is None:
            return None
        try:
            value = json.loads(text)
            until, recalled = float(value.get("until", 0.0)), float(value.get("recalled", 0.0))
            ended = str(value.get("ended") or "")
            return Hold(str(value.get("holder") or ""), entry.gpus, entry.scope, until, recalled, ended)
        except (ValueError, TypeError, AttributeError):
            return None


def hold_key(holder: str, scope: Scope) -> str:
    """The data key of `holder`'s hold for pods of `scope` (a ConfigMap key: letters, digits, '-', '_', '.')."""
    digest = hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in holder)[:200]
    return f"{HOLD_PREFIX}{safe}.{digest}"


@dataclass(frozen=True, slots=True)
class Record:
    """One namespace's ledger as read: the recount of its live GPU pods (a sum per distinct scope), the
    reservations still in flight (by pod UID), and the resourceVersion a write must name."""

    namespace: str
    version: str  # "" where the ConfigMap does not exist yet
    entries: dict[str, Entry] = field(default_factory=dict)  # reservations not yet folded into the recount
    sums: dict[Scope, Sum] = field(default_factory=dict)  # the recount, by scope
    recounted: float = 0.0  # when the recount was last written (Unix time; 0: never)
    epoch: int = 0  # the recount Lease's transitions when it was written: an older holder's recount is refused
    seen: str = ""  # the resourceVersion of the pod watch the recount was made from: an older watch's is refused
    holds: dict[str, Hold] = field(default_factory=dict)  # the workers' holds, by data key
    deferred: frozenset[str] = frozenset()  # young live pods the sums leave to the holds that admitted them

    def used(self, quota: GpuQuota) -> Fraction:
        """The GPU-equivalents `quota` counts in this ledger: the recount's sums and the reservations it selects."""
        counts: dict[Scope, bool] = {}

        def selected(scope: Scope) -> bool:
            if scope not in counts:
                counts[scope] = quota.counts(pod_of(self.namespace, "", scope))
            return counts[scope]

        summed = sum((each.gpus for scope, each in self.sums.items() if selected(scope)), Fraction(0))
        held = sum((hold.gpus for hold in self.holds.values() if selected(hold.scope)), Fraction(0))
        reserved = sum((entry.gpus for entry in self.entries.values() if selected(entry.scope)), Fraction(0))
        return summed + held + reserved

    def held(self, quota: GpuQuota) -> Fraction:
        """The GPU-equivalents of the holds that `quota` counts."""
        return sum(
            (h.gpus for h in self.holds.values() if quota.counts(pod_of(self.namespace, "", h.scope))), Fraction(0)
        )

    def pods(self) -> int:
        """The pods this record counts: the recount's and the reservations in flight."""
        return sum(each.pods for each in self.sums.values()) + len(self.entries)

    def reserved(self, uid: str, entry: Entry) -> Record:
        """This record with one more reservation."""
        return dataclasses.replace(self, entries={**self.entries, uid: entry})

    def later_than(self, epoch: int, seen: str) -> bool:
        """Whether this record's recount is later than one made under Lease `epoch` from a pod watch at
        resourceVersion `seen`, which must then not be written over it: a holder deposed while paused, whose
        watch may stand before the one the record was recounted from, or may even have read on past the new
        holder's list, would undo a fold (a live pod counted nowhere). Versions compare as the API server's
        numbers; a watch whose version is unknown never writes over a record that names one."""
        if self.epoch > epoch:
            return True
        if not self.seen:
            return False
        if not (seen.isdigit() and self.seen.isdigit()):
            return not seen
        return int(seen) < int(self.seen)

    def recount(
        self,
        live: Mapping[str, HeldPod],
        released: Collection[str],
        now: float,
        epoch: int = 0,
        sums: Mapping[Scope, Sum] | None = None,
        young: Mapping[str, str] | None = None,
        holds_end: float = 0.0,
        watched: str = "",
    ) -> Record | None:
        """The record recounted from `live` (every live GPU pod of the namespace, by UID, as a current pod watch
        holds them; `sums`, where given, their sums as the watch keeps them, so that a recount costs the
        reservations in flight and not the namespace's pods): a reservation whose pod is among them is folded in
        (it is counted in the sums now), and those in `released` (seen deleted or ended, or confirmed gone) go.
        None where that changes nothing. Reservations whose pods the watch has not seen yet stay: a pod is
        counted once, either as a reservation, in a hold or in the sums, never in neither while it lives.

        `young`: the live pods the watch saw created lately, each with the resourceVersion it was created at. One
        that no reservation announced and that the last recount did not count (it is in `deferred`, or was
        created after the watch version that recount was made from, or there was none) is left out of the sums
        (`deferred`), where a hold of its scope is in the record: a worker admitted it from its hold, which
        counts it until the worker writes it as a reservation, folded in here then. A pod older than that, or of
        a scope no hold holds, is counted whoever admitted it (one created while the webhook was off, too).

        A hold whose worker is gone (it ran out before `holds_end`: its until, plus the grace in which a create
        may still complete, plus the time a pod stays young) goes in three steps, so that every pod it gave is
        counted in the sums first: marked ended; then fenced at the version of the record that mark was written
        in (every pod it gave was created before it); then dropped by a recount whose pod watch holds every event
        up to it (`watched`: the version of `live`), and which counts every young pod rather than guess which hold
        gave it."""
        entries = {uid: e for uid, e in self.entries.items() if uid not in live and uid not in released}
        holds: dict[str, Hold] = {}
        dropping = False
        for key, hold in self.holds.items():
            if hold.until >= holds_end:
                holds[key] = hold
            elif not hold.ended:
                holds[key] = dataclasses.replace(hold, ended="pending")
            else:
                fence = self.version if hold.ended == "pending" else hold.ended
                if fence.isdigit() and watched.isdigit() and int(watched) >= int(fence):
                    dropping = True
                else:
                    holds[key] = dataclasses.replace(hold, ended=fence)
        held = {hold.scope for hold in holds.values()}  # a pod of another scope was given room by no hold
        deferred = frozenset(
            uid
            for uid, created in (young or {}).items()
            if not dropping
            and uid in live
            and live[uid].scope in held
            and uid not in self.entries
            and (uid in self.deferred or not self.seen or _after(created, self.seen))
        )
        counted = dict(sums) if sums is not None else sums_of(live.values())
        for uid in deferred:
            pod = live[uid]
            left = counted[pod.scope].plus(pod, -1)
            if left.pods:
                counted[pod.scope] = left
            else:
                del counted[pod.scope]
        if (
            counted == self.sums
            and entries == self.entries
            and epoch == self.epoch
            and deferred == self.deferred
            and holds == self.holds
        ):
            return None
        return Record(self.namespace, self.version, entries, counted, now, epoch, self.seen, holds, deferred)

    def holding(self, key: str, hold: Hold | None, admitted: Mapping[str, Entry]) -> Record:
        """This record with a worker's hold of data key `key` set to `hold` (None: given back), and the pods it
        admitted from it counted elsewhere: one the recount saw and left to the hold (`deferred`) goes into the
        sums, as the next recount would count it; any other becomes a reservation (one reserved already, by a
        review the API server sent again to another worker, stays as it is)."""
        holds = {k: h for k, h in self.holds.items() if k != key}
        if hold is not None:
            holds[key] = hold
        entries, sums, deferred = dict(self.entries), self.sums, self.deferred
        for uid, entry in admitted.items():
            if uid in entries:
                continue
            if uid in deferred:
                sums = dict(sums) if sums is self.sums else sums
                pod = HeldPod(entry.pod, entry.gpus, entry.scope)
                sums[entry.scope] = sums.get(entry.scope, Sum(Fraction(0), 0)).plus(pod)
                deferred = deferred - {uid}
            else:
                entries[uid] = entry
        return dataclasses.replace(self, entries=entries, sums=sums, holds=holds, deferred=deferred)

    @staticmethod
    def of(obj: dict[str, Any]) -> Record | None:
        """The record of a ConfigMap, or None for one that is not a ledger record. A record in the per-pod
        form (every counted pod an entry) reads as reservations: the next recount folds them in."""
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return None
        labels = metadata.get("labels") or {}
        namespace = labels.get(NAMESPACE_LABEL) if isinstance(labels, dict) else None
        if not isinstance(namespace, str) or metadata.get("name") != record_name(namespace):
            return None
        data = obj.get("data") or {}
        entries: dict[str, Entry] = {}
        sums: dict[Scope, Sum] = {}
        holds: dict[str, Hold] = {}
        deferred: frozenset[str] = frozenset()
        recounted, epoch, seen = 0.0, 0, ""
        for key, text in data.items() if isinstance(data, dict) else ():
            if key == RECOUNT_KEY:
                recounted, epoch, seen = _recount_meta(text)
            elif key.startswith(SUM_PREFIX):
                found = _parse_sum(text)
                if found is not None:
                    sums[found[0]] = found[1]
            elif key.startswith(HOLD_PREFIX):
                hold = Hold.parse(text)
                if hold is not None:
                    holds[key] = hold
            elif key == DEFERRED_KEY:
                deferred = _parse_deferred(text)
            else:
                entry = Entry.parse(text)
                if entry is not None:
                    entries[sys.intern(key)] = entry
        version = str(metadata.get("resourceVersion") or "")
        return Record(namespace, version, entries, sums, recounted, epoch, seen, holds, deferred)

    def configmap(self, own_namespace: str) -> dict[str, Any]:
        """The ConfigMap holding this record, to write over the one read (naming its resourceVersion)."""
        metadata: dict[str, Any] = {
            "name": record_name(self.namespace),
            "namespace": own_namespace,
            "labels": {
                "app.kubernetes.io/name": "gpu-admission",
                LEDGER_LABEL: "true",
                NAMESPACE_LABEL: self.namespace,
            },
            "annotations": {
                "gpu-admission.io/about": "the GPU budget ledger of this namespace: the GPU-equivalents of its live "
                "pods by scope (sum.*), and the reservations not yet counted there (pod UIDs); written by the "
                "webhook only (docs/budgets.md)",
            },
        }
        if self.version:
            metadata["resourceVersion"] = self.version
        data = {uid: entry.text() for uid, entry in sorted(self.entries.items())}
        ordered = sorted(self.sums.items(), key=lambda item: json.dumps(item[0]))
        for index, (scope, each) in enumerate(ordered):
            data[f"{SUM_PREFIX}{index}"] = _sum_text(scope, each)
        if self.recounted:
            data[RECOUNT_KEY] = json.dumps({"at": round(self.recounted, 3), "epoch": self.epoch, "seen": self.seen})
        for key, hold in sorted(self.holds.items()):
            data[key] = hold.text()
        if self.deferred:
            data[DEFERRED_KEY] = json.dumps(sorted(self.deferred), separators=(",", ":"))
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


# A sum is written in an entry's form, so that a worker still running the per-pod code during a rolling update
# counts it as the pods it stands for: `pod` empty, and an `at` that code never reaches, so that it never looks
# the "pod" up to release it.
SUM_AT = 4_102_444_800.0  # 2100-01-01


def _sum_text(scope: Scope, each: Sum) -> str:
    value: dict[str, Any] = {"pod": "", "gpus": _fraction_text(each.gpus), "pods": each.pods, "at": SUM_AT}
    if scope:
        value["scope"] = dict(scope)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _parse_sum(text: Any) -> tuple[Scope, Sum] | None:
    entry = Entry.parse(text)
    if entry is None:
        return None
    try:
        pods = int(json.loads(text).get("pods", 0))
    except (ValueError, TypeError, AttributeError):
        return None
    return entry.scope, Sum(entry.gpus, max(pods, 0))


def _parse_deferred(text: Any) -> frozenset[str]:
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return frozenset()
    if not isinstance(value, list):
        return frozenset()
    return frozenset(sys.intern(uid) for uid in value if isinstance(uid, str))


def _after(version: str, seen: str) -> bool:
    """Whether resourceVersion `version` is later than `seen` (as the API server's numbers); where either is
    unknown, no: the pod is counted at once, never left out on a guess."""
    return version.isdigit() and seen.isdigit() and int(version) > int(seen)


def _recount_meta(text: Any) -> tuple[float, int, str]:
    """(when, the Lease epoch, the pod watch's resourceVersion) of a record's last recount; (0, 0, "") where
    unreadable."""
    try:
        value = json.loads(text)
        return float(value["at"]), int(value.get("epoch", 0)), str(value.get("seen") or "")
    except (ValueError, TypeError, KeyError, AttributeError):
        return 0.0, 0, ""


class ConfigMaps:
    """The API calls of the ledger: its ConfigMaps in the webhook's namespace, and a pod's GET. Raw JSON."""

    def __init__(self, configuration: Any, own_namespace: str) -> None:
        from kubernetes import client

        configuration.retries = False  # the CAS loop retries, within its deadline
        self._client = client.ApiClient(configuration)
        self._headers: dict[str, str] = {}
        self._credentials_at = -CREDENTIALS_S
        self.namespace = own_namespace
        self.path = f"/api/v1/namespaces/{own_namespace}/configmaps"

    def call(self, method: str, path: str, body: Any = None, timeout: float = READ_TIMEOUT_S) -> tuple[int, Any]:
        """(HTTP status, decoded body); LedgerUnavailable where the API server cannot be reached in time.

        Straight through the client's connection pool (its TLS, proxy and client certificate settings) with the
        client's own credentials (a bearer token refreshed as the client refreshes it): the client's generic
        request path walks the body to serialize it, which cost more than the write itself."""
        from urllib3 import Timeout
        from urllib3.exceptions import HTTPError

        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, separators=(",", ":")).encode()
        for fresh in (False, True):  # a 401 with credentials read a while ago: read them again, once
            headers.update(self._credentials(fresh))
            url = self._client.configuration.host + path
            try:
                response = self._client.rest_client.pool_manager.request(
                    method, url, body=data, headers=headers, retries=False,
                    timeout=Timeout(connect=CONNECT_TIMEOUT_S, read=max(timeout, 0.05)),
                )  # fmt: skip
            except (HTTPError, OSError) as exc:
                raise LedgerUnavailable(f"cannot reach the API server: {_first_line(exc)}") from None
            if response.status != 401 or fresh:
                break
        try:
            return response.status, json.loads(response.data) if response.data else {}
        except ValueError:
            return response.status, {}

    def _credentials(self, fresh: bool) -> dict[str, str]:
        """The authorization header, as the client makes it (its refresh hook re-reads a rotated token or runs
        an exec plugin): made again every CREDENTIALS_S, or at once when `fresh`, not at every call (the hook
        costs more than a reservation's own work)."""
        now = time.monotonic()
        if fresh or now - self._credentials_at > CREDENTIALS_S:
            headers: dict[str, str] = {}
            self._client.update_params_for_auth(headers, [], ["BearerToken"], "", "GET", None)
            self._headers, self._credentials_at = headers, now
        return self._headers

    def get_pod(self, namespace: str, name: str) -> tuple[int, Any]:
        return self.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _refused(status: int, body: Any, doing: str) -> LedgerUnavailable:
    message = body.get("message", "") if isinstance(body, dict) else ""
    return LedgerUnavailable(f"{doing}: HTTP {status} {message}".strip())


# An edit of a record: the record to write in its place, or None to write nothing (the decision is the caller's).
Edit = Callable[[Record], Record | None]


@dataclass(eq=False, slots=True)
class _Waiting:
    """One thread's edit, waiting for its write (Ledger.change)."""

    edit: Edit
    deadline: float
    wake: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # this thread writes the next batch
    done: bool = False
    result: Record | None = None
    error: LedgerUnavailable | None = None


class Ledger:
    """Reads and changes records by compare-and-swap; `view` (when given) saves the first read."""

    def __init__(
        self,
        api: ConfigMaps,
        view: LedgerView | None = None,
        *,
        deadline_s: float = CAS_DEADLINE_S,
        attempts: int = CAS_ATTEMPTS,
    ) -> None:
        self.api = api
        self.view = view
        self.deadline_s = deadline_s
        self.attempts = attempts
        self.conflicts = 0  # writes that lost a race and were decided again (for the bench)
        self._queues: dict[str, list[_Waiting]] = {}  # per namespace: the edits waiting for the next write
        self._writing: set[str] = set()  # the namespaces a thread of this process is writing now
        self._queue_lock = threading.Lock()

    def read(self, namespace: str, *, deadline: float | None = None) -> Record:
        """The record as the API server holds it now (a GET)."""
        left = (deadline or time.monotonic() + READ_TIMEOUT_S) - time.monotonic()
        if left <= 0:
            raise LedgerUnavailable("no time left to read the ledger")
        status, body = self.api.call(
            "GET", f"{self.api.path}/{record_name(namespace)}", timeout=min(left, READ_TIMEOUT_S)
        )
        if status == 404:
            return Record(namespace, "")
        if status != 200 or not isinstance(body, dict):
            raise _refused(status, body, f"reading ConfigMap {self.api.namespace}/{record_name(namespace)}")
        record = Record.of(body)
        if record is None:
            raise LedgerUnavailable(
                f"ConfigMap {self.api.namespace}/{record_name(namespace)} is not a budget ledger (its labels were "
                f"changed by hand?): delete it, and the webhook writes it again"
            )
        self._remember(record)
        return record

    def latest(self, namespace: str, *, deadline: float | None = None) -> Record:
        """The view's copy where it has one (a write naming its version fails if it is old), else a GET."""
        return self._cached(namespace) or self.read(namespace, deadline=deadline)

    def _cached(self, namespace: str) -> Record | None:
        """The view's copy of the record, while the view is current; None where it has none."""
        if self.view is not None and self.view.state() == "current":
            return self.view.records.get(namespace)
        return None

    def change(self, namespace: str, edit: Edit, deadline: float | None = None) -> Record:
        """Apply `edit` to the record by compare-and-swap until a write succeeds or `edit` writes nothing;
        returns the record the decision was made on (as written). LedgerUnavailable once out of attempts or time
        (`deadline`, where given, a monotonic time, bounds the time further).

        Group commit: the edits that this process's threads bring for one namespace while a write is under way
        wait, and the next write applies them all, in the order they came, each deciding on the record as the
        ones before it left it: one compare-and-swap for a burst of creates instead of one each. The thread whose
        edit is first writes that batch, then hands the next batch to the first of the threads waiting, so no
        thread writes for others for longer than its own write."""
        me = _Waiting(edit, min(time.monotonic() + self.deadline_s, deadline or float("inf")))
        with self._queue_lock:
            self._queues.setdefault(namespace, []).append(me)
            if namespace not in self._writing:
                self._writing.add(namespace)
                me.lead = True
        if not me.lead:
            me.wake.wait(max(0.0, me.deadline - time.monotonic()))
            with self._queue_lock:
                queue = self._queues.get(namespace) or []
                if not me.wake.is_set() and me in queue:  # no turn within its deadline: it leaves, unwritten
                    queue.remove(me)
                    raise LedgerUnavailable(f"no turn to write the ledger within {self.deadline_s:g} s")
            me.wake.wait(READ_TIMEOUT_S + CONNECT_TIMEOUT_S)  # in a batch being written: bounded by its calls
        if me.lead and not me.done:
            self._commit_next(namespace)
        if me.error is not None:
            raise me.error
        if me.result is None:
            raise LedgerUnavailable(f"no answer from the API server within {self.deadline_s:g} s")
        return me.result

    def _commit_next(self, namespace: str) -> None:
        """Write the batch waiting for `namespace`, then hand the turn to the first thread waiting after it."""
        with self._queue_lock:
            batch = self._queues.pop(namespace, [])
        try:
            self._commit(namespace, batch)
        finally:
            with self._queue_lock:
                waiting = self._queues.get(namespace)
                if waiting:
                    waiting[0].lead = True
                    waiting[0].wake.set()
                else:
                    self._queues.pop(namespace, None)
                    self._writing.discard(namespace)

    def _commit(self, namespace: str, batch: list[_Waiting]) -> None:
        """Decide every edit of `batch` in order on one record and write the outcome once, by compare-and-swap;
        each edit's outcome (the record, or the error that edit alone raised) is left on it."""
        deadline = min(item.deadline for item in batch)
        try:
            record = self._cached(namespace)
            cached = record is not None
            if record is None:
                record = self.read(namespace, deadline=deadline)
            attempt = 0
            while attempt < self.attempts:
                current = record
                for item in batch:
                    item.error = None
                    try:
                        wanted = item.edit(current)
                    except LedgerUnavailable as exc:  # this edit's own refusal: the others go on
                        item.error = exc
                        continue
                    current = wanted if wanted is not None else current
                if current is record and cached:
                    # Nothing to write (a refusal, a review sent again), decided on the view's copy, which may lag
                    # the API server by a watch event (a share given back a moment ago): no compare-and-swap checks
                    # such a decision, so it is made again on the record as the API server holds it.
                    record, cached = self.read(namespace, deadline=deadline), False
                    continue
                written = current if current is record else self._write(record, current, deadline)
                if written is not None:
                    for item in batch:
                        item.result = written
                    return
                self.conflicts += 1
                attempt += 1
                time.sleep(random.uniform(0, 0.002 * attempt))  # spread the racers out
                record, cached = self.read(namespace, deadline=deadline), False
            raise LedgerUnavailable(f"the ledger kept changing under {self.attempts} attempts to write it; retry")
        except LedgerUnavailable as exc:
            for item in batch:
                item.error = item.error or exc
        finally:
            for item in batch:
                item.done = True
                item.wake.set()

    def _write(self, record: Record, wanted: Record, deadline: float) -> Record | None:
        """Write `wanted` over `record` (naming its version); the record written, or None when it lost the race
        (409)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise LedgerUnavailable(f"no answer from the API server within {self.deadline_s:g} s")
        body = dataclasses.replace(wanted, version=record.version).configmap(self.api.namespace)
        name = record_name(record.namespace)
        if record.version:
            status, answer = self.api.call("PUT", f"{self.api.path}/{name}", body, timeout=min(left, READ_TIMEOUT_S))
        else:
            status, answer = self.api.call("POST", self.api.path, body, timeout=min(left, READ_TIMEOUT_S))
        if status == 409 or (status == 404 and record.version):  # changed, or deleted (by hand), since it was read
            return None
        if status not in (200, 201) or not isinstance(answer, dict):
            raise _refused(status, answer, f"writing ConfigMap {self.api.namespace}/{name}")
        written = Record.of(answer) or dataclasses.replace(wanted, version="")
        self._remember(written)
        return written

    def _remember(self, record: Record) -> None:
        if self.view is not None:
            self.view.records[record.namespace] = record


class LedgerView(Watched):
    """Every ledger record, by the namespace it counts: a list + watch of the labelled ConfigMaps."""

    def __init__(self, source: NodeSource, **options: Any) -> None:
        super().__init__(source, "ConfigMap", **options)
        self.records: dict[str, Record] = {}
        self._listing: dict[str, Record] = {}

    @staticmethod
    def watching(configuration: Any, own_namespace: str, stale_after: float) -> LedgerView:
        path = f"/api/v1/namespaces/{own_namespace}/configmaps"
        source = KubeNodes(configuration, path, "ledger ConfigMap", selector=f"{LEDGER_LABEL}=true")
        return LedgerView(source, stale_after=stale_after)

    def _begin(self) -> None:
        self._listing = {}

    def _keep(self, obj: Any) -> bool:
        record = Record.of(obj) if isinstance(obj, dict) else None
        if record is None:
            return False
        self._listing[record.namespace] = record
        return True

    def _end(self) -> None:
        self.records, self._listing = self._listing, {}

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        record = Record.of(obj)
        if record is None:
            return
        if kind == "DELETED":
            self.records.pop(record.namespace, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.records[record.namespace] = record
