"""The status of each GPUPolicy object, written by one worker of the cluster at a time.

Every worker of every replica is a candidate for the Lease `gpu-admission-policy-status` in the server's own
namespace (lease.py, as the budget recount's); the holder alone watches the Namespaces (their names only) and
writes each GPUPolicy's status through the status subresource, naming the resourceVersion it read: what its
watch judged (`observedGeneration`, the Ready condition with the loader's lines where the object is not
served), the effective mode, enforcement and quota of a served policy, and the namespaces that fall to it
now. It recomputes on every change of the policies or the namespaces, at most once every COALESCE_S, and writes
only an object whose status differs; a write that loses a race (409) is tried again once the watch brings the
newer object. `kubectl wait --for=condition=Ready gpupolicy/NAME` reads it, as do Argo CD and Flux.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.admission.base.violation import cut
from webhook.admission.policy.model import PolicySet
from webhook.admission.policy.objects import Verdict
from webhook.server.inventory import KubeNodes, NamedWatch, NodeSource
from webhook.server.lease import Call, Lease
from webhook.server.logs import LOGGER, log
from webhook.server.policy_watch import POLICIES_PATH, PolicyWatch

_log = logging.getLogger(f"{LOGGER}.policies")

STATUS_LEASE = "gpu-admission-policy-status"
COALESCE_S = 1.0  # the least time between two passes: a burst of changes is written together
RESYNC_S = 30.0  # a pass even when nothing was seen to change: a write that failed is tried again
MESSAGE_MAX = 1_000  # characters of the Ready condition's message
NAMESPACES_SHOWN = 10
NAMESPACES_PATH = "/api/v1/namespaces"


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def matched_namespaces(policies: PolicySet, namespaces: Iterable[str]) -> dict[str, list[str]]:
    """The namespaces each served policy is chosen for (`PolicySet.select`), by policy name, sorted."""
    found: dict[str, list[str]] = {}
    for namespace in sorted(namespaces):
        selection = policies.select(namespace)
        if selection.pattern is not None:
            found.setdefault(selection.policy.name, []).append(namespace)
    return found


def status_of(verdict: Verdict, matched: list[str], previous: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The status an object's verdict gives it; the Ready condition's lastTransitionTime is kept from `previous`
    unless the condition's status flips (so an unchanged verdict gives an equal status: nothing is written)."""
    policy = verdict.policy
    status: dict[str, Any] = {"observedGeneration": verdict.generation}
    if policy is not None:
        status["mode"] = policy.sharing.mode.value
        status["enforcement"] = policy.enforcement.value
        status["quota"] = policy.cluster_checks.quota.value
        ready, reason = "True", "Served"
        message = f"serving {len(matched)} namespace{'' if len(matched) == 1 else 's'}"
    else:
        ready, reason = "False", "Invalid"
        message = "; ".join(verdict.problems)
        message = cut(message, MESSAGE_MAX, "…")
        matched = []
    status["matchedNamespaces"] = len(matched)
    status["namespaces"] = matched[:NAMESPACES_SHOWN]
    since = now
    for condition in (previous or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready" and condition.get("status") == ready:
            since = str(condition.get("lastTransitionTime") or now)
    status["conditions"] = [{
        "type": "Ready", "status": ready, "reason": reason, "message": message,
        "observedGeneration": verdict.generation, "lastTransitionTime": since,
    }]  # fmt: skip
    return status


class PolicyStatus:
    """This worker's candidacy for the status Lease and, while it holds it, the Namespace watch and the writes."""

    def __init__(
        self,
        call: Call,
        namespace: str,
        policies: PolicyWatch,
        configuration: Any,
        *,
        lease: Lease | None = None,
        namespace_source: NodeSource | None = None,
        coalesce: float = COALESCE_S,
    ) -> None:
        self._call = call
        self._policies = policies
        self._configuration = configuration
        self._namespace_source = namespace_source
        self.coalesce = coalesce
        self.lease = lease or Lease(call, namespace, STATUS_LEASE)
        self.lease.on_start, self.lease.on_stop = self._lead, self._follow
        self.namespaces: NamedWatch | None = None  # only while this worker holds the Lease
        self.writes = 0  # status writes that succeeded (for /readyz)
        self.last_error = ""
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}  # name -> (resourceVersion written to, status)
        self._wake = threading.Event()
        self._stop = threading.Event()
        policies.listeners.append(self.poke)

    def start(self) -> None:
        self.lease.start()
        threading.Thread(target=self._run, name="gpu-admission-policy-status", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.lease.stop()
        self._follow()

    def poke(self) -> None:
        """Something changed: a pass soon."""
        self._wake.set()

    def details(self) -> dict[str, Any]:
        found: dict[str, Any] = {"leading": self.lease.leading(), "writes": self.writes}
        namespaces = self.namespaces
        if namespaces is not None:
            found["namespaces"] = {"state": namespaces.state(), "objects": len(namespaces.items)}
            if namespaces.last_error:
                found["namespaces"]["lastError"] = namespaces.last_error
        if self.last_error or self.lease.last_error:
            found["lastError"] = self.last_error or self.lease.last_error
        return found

    def _lead(self, _epoch: int) -> None:
        """This worker took the Lease: watch the namespaces (names only) from now on."""
        source = self._namespace_source or KubeNodes(self._configuration, NAMESPACES_PATH, "Namespace")
        watch = NamedWatch(source, "Namespace", lambda _obj: True, self.poke)
        self.namespaces = watch
        watch.start()
        self.poke()

    def _follow(self) -> None:
        watch, self.namespaces = self.namespaces, None
        if watch is not None:
            watch.stop()
        self._written.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(RESYNC_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.write_pass()
            except Exception:  # never let the writer die: the next pass tries again
                _log.exception("GPUPolicy status: unexpected error")
            self._stop.wait(self.coalesce)  # changes that come meanwhile are written together

    def write_pass(self) -> int:
        """Write every status that differs from what it should be, where this worker leads and both watches have
        listed; how many were written."""
        namespaces = self.namespaces
        if namespaces is None or not self.lease.leading() or namespaces.state() != "current":
            return 0
        if self._policies.watch.state() != "current":
            return 0
        held, judged = self._policies.snapshot
        matched = matched_namespaces(judged.policies, list(namespaces.items))
        now, written = now_rfc3339(), 0
        for name, obj in sorted(held.items()):
            verdict = judged.verdicts.get(name)
            if verdict is None:
                continue
            current = obj.get("status") if isinstance(obj.get("status"), Mapping) else None
            wanted = status_of(verdict, matched.get(name, []), current, now)
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if wanted == current or self._written.get(name) == (version, wanted):
                continue  # as it should be, or written already and the watch has not brought it back yet
            if self._write(name, obj, version, wanted, current):
                written += 1
        return written

    def _write(
        self, name: str, obj: dict[str, Any], version: str, wanted: dict[str, Any], current: Mapping[str, Any] | None
    ) -> bool:
        body = {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": version}, "status": wanted}
        try:
            status, _ = self._call("PUT", f"{POLICIES_PATH}/{name}/status", body)
        except Exception as exc:  # the API server unreachable: the next pass tries again
            self.last_error = f"writing the status of GPUPolicy {name}: {exc}"
            return False
        if status in (404, 409):  # deleted or changed meanwhile: the watch brings that, and a pass follows
            return False
        if status != 200:
            error = f"writing the status of GPUPolicy {name}: HTTP {status}"
            if error != self.last_error:
                log(_log, logging.WARNING, f"{error}; trying again", event="policy-status-failed", policy=name)
            self.last_error = error
            return False
        self.last_error = ""
        self.writes += 1
        self._written[name] = (version, wanted)
        ready = wanted["conditions"][0]
        was = next((c.get("status") for c in (current or {}).get("conditions") or [] if isinstance(c, Mapping)
                    and c.get("type") == "Ready"), None)  # fmt: skip
        level = logging.INFO if was != ready["status"] else logging.DEBUG
        log(_log, level, f"GPUPolicy {name} status: Ready {ready['status']} ({ready['reason']}: "
            f"{cut(ready['message'], 200)})", event="policy-status", policy=name,
            generation=wanted["observedGeneration"], ready=ready["status"],
            matched=wanted["matchedNamespaces"])  # fmt: skip
        return True
