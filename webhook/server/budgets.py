"""GPU budgets in the running server: the reservation in /validate, the recount, and a worker's start.

A Pod CREATE that /validate allows, in a namespace whose ResourceQuota has a GPU entry (the quota watch says
which), is reserved in the namespace's ledger record (ledger.py) before the answer goes back: read the record,
judge the pod with `budget.judge` against the GPU-equivalents the record holds for each quota, write the record
back with the reservation, naming the version read; a lost race reads again and judges again. The API server has
set the pod's UID and final name by then (mutating webhooks run before either exists), so a reservation is per
UID and a review sent twice (the API server retries on a timeout) is answered the same without a second entry.
A dry run is judged on the record as it is and writes nothing. A refusal is the engine's own
(`evaluate(..., budget=)`), so the policy's enforcement and `cluster.quota: warn` decide it as they decide
every other line.

Where the namespace has room for many more pods, the worker also takes a hold of some of it (holds.py): later
creates that fit in it are answered without a write, and the holds' thread (`_flush_holds`) writes them as
reservations a few times a second, in one write; a worker about to refuse a pod that would fit without the holds
asks them back first (`_recall`).

The recount, by the one worker of the cluster that holds the Lease `gpu-admission-budget-recount` (lease.py;
every other worker holds only the quotas and the records), keeps the records true to the pods:
- its pod watch keeps each namespace's sums as GPU pods come, change and go; a change in a budgeted namespace is
  recounted within RECOUNT_GAP_S: the sums written, the reservations of pods it now holds folded in, those of pods
  it saw go dropped;
- every SWEEP_S, every budgeted namespace is recounted, and a reservation whose pod the watch does not hold,
  older than the grace (`--budget-grace`), is released once a GET confirms the pod gone (refused after this
  webhook allowed it, by a later admission step such as the API server's own quota plugin);
- a live GPU pod that no reservation announced (created before the budget existed, or while the webhook was off)
  is simply counted.
A recount carries the Lease's epoch; one from an earlier holder is never written over a later one's.

A worker takes no review before its ResourceQuotas and records are listed (`wait_listed`, at most the start
wait); past it, a namespace's own quotas are asked for, and where the API server cannot say, the quotas this
replica last knew decide (`KnownQuotas`): a namespace without a GPU quota is never refused for a budget.

When the ledger cannot be read or written in time (the API server unreachable, RBAC missing, the record edited
by hand), a GPU pod of a budgeted namespace is refused under `cluster.quota: deny` with a line that says so,
and admitted with a warning under `warn`: never a traceback, never a wait past the webhook's timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from webhook.admission.base.equivalents import format_gpus
from webhook.admission.base.podspec import POD_SPEC_PATHS, mentions_gpu
from webhook.admission.base.violation import WARNING_PREFIX, cut
from webhook.admission.budgets.budget import Usage, has_ended, judge, pod_ask
from webhook.admission.cluster.nodes import STALE_AFTER_S
from webhook.admission.cluster.quota import GpuQuota, gpu_quota
from webhook.admission.dra.podclaims import ClaimsView
from webhook.admission.engine import Decision
from webhook.admission.policy.model import Check, Enforcement, Policy, PolicySet
from webhook.admission.review import AdmissionRequest
from webhook.server import GRACE_S, metrics
from webhook.server.budget_watch import YOUNG_S, PodWatch, QuotaWatch
from webhook.server.holds import HoldPlan, Holds
from webhook.server.lease import Lease
from webhook.server.ledger import (
    CAS_DEADLINE_S,
    ConfigMaps,
    Entry,
    Ledger,
    LedgerUnavailable,
    LedgerView,
    Record,
    Scope,
    pod_of,
    record_name,
    scope_of,
)
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.budgets")

SWEEP_S = 2.0  # seconds between the keeper's looks at every record (releases of deleted pods do not wait)
RECOUNT_GAP_S = 0.2  # the recount's least pause: the changes of a burst are written together
RELEASED_KEPT_S = 300.0  # a pod seen deleted is remembered this long, for a reservation written before it
RECOUNT_LEASE = "gpu-admission-budget-recount"  # the Lease whose holder recounts every record
RESERVATIONS_WARN = 1_000  # reservations in flight in one record: the recount is behind (log, /readyz)
RESERVATIONS_MAX = 8_000  # ... and at this many (about 880 KB of the 1 MiB a ConfigMap holds), no more are taken
LIVE_RECHECK_S = 60.0  # a pod a GET found alive is not asked about again for this long
GETS_PER_SWEEP = 50  # at most this many pod GETs a sweep: a large backlog is worked through over several
FLUSH_S = 0.2  # how often a worker writes the pods it admitted from its holds (the recount's pace)
RECALL_WAIT_S = 2.0  # a worker short of room waits at most this long for the holds it asked back (0.2 s, usually)
RECALL_LEAST_S = 0.5  # ... and asks them back only with this much of its deadline left
DEFAULT_NAMESPACE = "gpu-admission"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# Decide the pod again with these usages: the engine's evaluate(..., budget=usages) for the review's object.
Rejudge = Callable[[Sequence[Usage]], Decision]


def own_namespace(given: str | None) -> str:
    """Where the ledger records live: `--budget-namespace`, else the pod's own namespace (its service account
    says), else gpu-admission."""
    if given:
        return given
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as file:
            found = file.read().strip()
    except OSError:
        found = ""
    return found or DEFAULT_NAMESPACE


def held_gpus(pod: dict[str, Any], policies: PolicySet, claims: ClaimsView | None) -> tuple[Fraction, Scope] | None:
    """What a watched pod holds, in GPU-equivalents under its namespace's policy, and its scope fields; None for
    a pod that holds no GPU (most: dropped before anything is weighed; budget.pod_ask memoizes the rest per
    container shape, so a list of 100,000 pods weighs each Deployment's once)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not (mentions_gpu(pod, POD_SPEC_PATHS["Pod"]) or spec.get("resourceClaims")):
        return None
    namespace = pod["metadata"]["namespace"]
    total = pod_ask(pod, policies.for_namespace(namespace), claims, namespace).total
    return (total, scope_of(pod)) if total else None


class Budgets:
    """One worker's budget watches, ledger and keeper; and, in the one worker that holds the recount Lease, the
    pod watch and the recount."""

    def __init__(
        self,
        configuration: Any,
        namespace: str,
        policies: Callable[[], PolicySet],
        claims: Callable[[], ClaimsView | None],
        *,
        grace: float = GRACE_S,
        stale_after: float = STALE_AFTER_S,
        sweep: float = SWEEP_S,
        lease: Lease | None = None,
        known: KnownQuotas | None = None,
        holds: bool = True,
    ) -> None:
        self.namespace = namespace
        self._configuration = configuration
        self._policies = policies
        self._claims = claims
        self.grace = grace
        self.sweep_every = sweep
        self.stale_after = stale_after
        self.known = known
        self.quotas = QuotaWatch.watching(configuration, stale_after, on_listed=self._quotas_listed)
        self.view = LedgerView.watching(configuration, namespace, stale_after)
        self.pods: PodWatch | None = None  # only while this worker leads the recount
        self.ledger = Ledger(ConfigMaps(configuration, namespace), self.view)
        self.lease = lease or Lease(self.ledger.api.call, namespace, RECOUNT_LEASE)
        self.lease.on_start, self.lease.on_stop = self._lead, self._follow
        self._dirty: set[str] = set()  # namespaces to recount (the pod watch saw a change)
        self._released: dict[str, dict[str, float]] = {}  # namespace -> UID -> when the watch saw it go
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._alive_until: dict[str, float] = {}  # pod UID -> until when a GET's "still there" holds
        self._shown: set[tuple[str, str]] = set()  # (namespace, quota) gauges set, to zero those that go
        self._warned_full: dict[str, float] = {}  # namespace -> when its reservations in flight were last warned of
        self.holds = Holds(f"{socket.gethostname()}-{os.getpid()}") if holds else None

    # ------------------------------------------------------------------------------------ the threads

    def start(self) -> None:
        for watch in (self.quotas, self.view):
            watch.start()
        self.lease.start()
        threading.Thread(target=self._keep, name="gpu-admission-budgets", daemon=True).start()
        if self.holds is not None:
            threading.Thread(target=self._flush_holds, name="gpu-admission-holds", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.holds is not None:
            self.holds.wake.set()
        for watch in (self.quotas, self.view):
            watch.stop()
        self.lease.stop()  # gives the Lease back: another worker takes the recount over at once
        self._follow()
        if self.holds is not None:  # the room this worker holds goes back to the others
            for namespace in self.holds.namespaces():
                try:
                    self.flush(namespace, give_back=True)
                except LedgerUnavailable as exc:
                    log(_log, logging.WARNING,
                        f"budget of {namespace}: could not give its hold back ({exc}); the recount drops it once it "
                        f"has run out", event="budget-hold-kept", namespace=namespace)  # fmt: skip

    def wait_listed(self, timeout: float, tick: Callable[[], None] = lambda: None) -> bool:
        """Wait (calling `tick` every half second: gunicorn's heartbeat) until the ResourceQuotas and the ledger
        are listed, or cannot be (RBAC), or `timeout` passes; whether they are. A worker calls this before it
        accepts its first review, while the other workers serve."""
        deadline = time.monotonic() + timeout
        while not self.listed() and time.monotonic() < deadline:
            tick()
            self.quotas.listed.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            if self.quotas.listed.is_set():
                self.view.listed.wait(min(0.5, max(0.0, deadline - time.monotonic())))
        return self.listed()

    def listed(self) -> bool:
        return all(watch.state() != "listing" for watch in (self.quotas, self.view))

    def not_ready(self) -> str:
        """Why this worker cannot judge budgets as a listed one would (for /readyz), or ""."""
        if self.quotas.state() == "listing":
            why = f" ({self.quotas.list_error})" if self.quotas.list_error else ""
            return f"GPU budgets: the first list of ResourceQuotas has not completed{why}"
        if self.view.state() == "listing":
            why = f" ({self.view.list_error})" if self.view.list_error else ""
            return f"GPU budgets: the first list of the ledger's ConfigMaps has not completed{why}"
        return ""

    def details(self) -> dict[str, Any]:
        """For /readyz: each watch's state and size (and its last error), the recount's holder, and the ledger's
        namespace."""
        records = list(self.view.records.values())
        found: dict[str, Any] = {
            "ledgerNamespace": self.namespace,
            "resourceQuotas": {"state": self.quotas.state(), "budgeted": len(self.quotas.held)},
            "ledger": {"state": self.view.state(), "records": len(records),
                       "reservationsInFlight": sum(len(record.entries) for record in records)},
            "recount": {"leading": self.lease.leading(), "epoch": self.lease.epoch},
            "holds": {"held": self.holds.count() if self.holds is not None else 0,
                      "inRecords": sum(len(record.holds) for record in records)},
        }  # fmt: skip
        pods = self.pods
        if pods is not None:
            found["pods"] = {"state": pods.state(), "holdingGpus": pods.count()}
        for part, watch in (("resourceQuotas", self.quotas), ("pods", pods), ("ledger", self.view)):
            if watch is not None and watch.last_error:
                found[part]["lastError"] = watch.last_error
        if self.lease.last_error:
            found["recount"]["lastError"] = self.lease.last_error
        full = [record.namespace for record in records if len(record.entries) >= RESERVATIONS_WARN]
        if full:
            found["ledger"]["recountBehind"] = sorted(full)[:20]
        return found

    # ------------------------------------------------------------------------------------ leading the recount

    def _lead(self, epoch: int) -> None:
        """This worker took the recount Lease: watch every GPU pod of the cluster from now on."""
        pods = PodWatch.watching(self._configuration, self.ask_of, self.gone, self.stale_after, on_seen=self.seen)
        self.pods = pods
        pods.start()
        self._wake.set()

    def _follow(self) -> None:
        """This worker no longer holds the Lease: its pod watch goes (the memory with it)."""
        pods, self.pods = self.pods, None
        if pods is not None:
            pods.stop()
        self._dirty.clear()
        self._released.clear()

    # ------------------------------------------------------------------------------------ the pod watch's hooks

    def ask_of(self, pod: dict[str, Any]) -> tuple[Fraction, Scope] | None:
        """A watched pod's GPU-equivalents under its namespace's policy now, and its scope fields."""
        return held_gpus(pod, self._policies(), self._claims())

    def seen(self, namespace: str) -> None:
        """A GPU pod of `namespace` was added or changed: recount it soon."""
        if self._budgeted(namespace):
            self._dirty.add(namespace)
            self._wake.set()

    def gone(self, namespace: str, uid: str) -> None:
        """A pod was deleted or ended: its reservation (if the record still holds one) goes with the next recount,
        and the recount no longer counts it."""
        if self._budgeted(namespace):
            self._released.setdefault(namespace, {})[uid] = time.monotonic()
            self._dirty.add(namespace)
            self._wake.set()

    def _budgeted(self, namespace: str) -> bool:
        """Whether `namespace` has a GPU quota or a record: only then does a pod of it concern the recount."""
        return namespace in self.quotas.held or namespace in self.view.records

    # ------------------------------------------------------------------------------------ reservation

    def may_hold(self, namespace: str) -> bool:
        """Whether a pod of `namespace` may be counted: the namespace has a GPU quota, or the quotas are not
        listed yet (then `admit` asks the API server for the namespace's own). Elsewhere the engine works out no
        ask: budgets cost nothing. Where RBAC forbids listing ResourceQuotas (the watch is `off`), no namespace
        is known to have a budget: GPU pods are admitted as before budgets existed, and /readyz and the log say
        why, rather than every GPU pod of the cluster being refused."""
        return namespace in self.quotas.held or self.quotas.state() == "listing"

    def admit(self, review: AdmissionRequest, decision: Decision, policies: PolicySet, rejudge: Rejudge) -> Decision:
        """The decision for an allowed Pod CREATE once its budget is judged (and, unless a dry run, reserved)."""
        ask = decision.ask
        if ask is None or not ask.total:
            return decision
        namespace = review.engine_namespace
        policy = policies.for_namespace(namespace)
        check = policy.cluster_checks.quota
        if check is Check.OFF:
            return decision
        pod: dict[str, Any] = decision.mutated or review.object or {}
        found = pod.get("metadata")
        metadata: dict[str, Any] = found if isinstance(found, dict) else {}
        name = str(metadata.get("name") or review.name or metadata.get("generateName") or "")
        try:
            quotas = self._quotas(namespace, pod)
        except LedgerUnavailable as exc:
            return self._unchecked(decision, policy, check, namespace, name, ask.total, str(exc))
        if not quotas:
            return decision
        uid = metadata.get("uid")
        writes = not review.dry_run and isinstance(uid, str) and bool(uid)
        scope = scope_of(pod)
        entry = Entry(name, ask.total, scope, time.time())  # the pod's reservation, or its room in a hold
        if writes and self.holds is not None and self.view.state() == "current":
            record = self.view.records.get(namespace)
            if record is not None and self.holds.admit(record, quotas, str(uid), entry):
                metrics.count_budget_admitted("hold")
                return decision  # from this worker's hold: counted there, written with the next flush
        outcome = [decision]
        fits = [True]

        def edit(record: Record) -> Record | None:
            if writes and uid in record.entries:
                outcome[0] = decision  # reserved already: the API server sent this review again
                return None
            usages = [Usage(quota, record.used(quota)) for quota in quotas]
            fits[0] = judge(ask, usages, name, pod) is None
            outcome[0] = decision if fits[0] else rejudge(usages)
            if not writes or not outcome[0].allowed:
                return None
            if len(record.entries) >= RESERVATIONS_MAX:
                raise LedgerUnavailable(
                    f"{len(record.entries)} reservations are waiting to be counted, the most one record holds: the "
                    f"recount has not run (see /readyz)"
                )
            self._warn_if_behind(record)
            return record.reserved(str(uid), entry)

        deadline = time.monotonic() + CAS_DEADLINE_S  # the whole of it, a recall included: within the timeout
        try:
            if writes:
                self.ledger.change(namespace, edit, deadline)
                if outcome[0].allowed:
                    metrics.count_budget_admitted("write")
                if self.holds is not None:
                    if fits[0]:
                        self.holds.want(namespace, scope, ask.total)
                    elif self._recall(namespace, quotas, ask.total, deadline):  # room held by workers: asked back
                        with contextlib.suppress(LedgerUnavailable):  # no time left: the refusal stands
                            self.ledger.change(namespace, edit, deadline)
            else:
                edit(self.ledger.latest(namespace))
                if not outcome[0].allowed:  # decided on the view's copy, which may lag: again on the record as it is
                    edit(self.ledger.read(namespace))
        except LedgerUnavailable as exc:
            return self._unchecked(decision, policy, check, namespace, name, ask.total, str(exc))
        return outcome[0]

    def _recall(self, namespace: str, quotas: Sequence[GpuQuota], gpus: Fraction, deadline: float) -> bool:
        """A pod that does not fit beside the holds, but would without them: ask their workers to give them back,
        and wait (at most RECALL_WAIT_S) until they have. Whether it is worth judging the pod again. Holds asked
        back longer ago than that are not waited for again: their workers are gone, and the recount drops them
        once every pod they gave is counted."""
        if deadline - time.monotonic() < RECALL_LEAST_S:  # no time to wait for them: the refusal stands
            return False
        try:
            return self._ask_back(namespace, quotas, gpus, deadline)
        except LedgerUnavailable:
            return False

    def _ask_back(self, namespace: str, quotas: Sequence[GpuQuota], gpus: Fraction, deadline: float) -> bool:
        """`_recall`'s calls: the record as it is, the holds marked asked back, the wait for them to go."""
        record = self.ledger.read(namespace, deadline=deadline)
        if not record.holds or any(record.used(q) - record.held(q) + gpus > q.hard for q in quotas):
            return False
        now = time.time()
        keys = {
            key
            for key, hold in record.holds.items()
            if (not hold.recalled or now - hold.recalled < RECALL_WAIT_S)
            and any(q.counts(pod_of(namespace, "", hold.scope)) for q in quotas)
        }
        if not keys:
            return False

        def ask_back(current: Record) -> Record | None:
            asked = {key: hold for key, hold in current.holds.items() if key in keys and not hold.recalled}
            marked = {key: dataclasses.replace(hold, recalled=now) for key, hold in asked.items()}
            return dataclasses.replace(current, holds={**current.holds, **marked}) if marked else None

        self.ledger.change(namespace, ask_back, deadline)
        log(_log, logging.INFO, f"budget of {namespace}: asked {len(keys)} worker hold(s) back for a pod that fits "
            f"without them", event="budget-hold-recalled", namespace=namespace)  # fmt: skip
        waited = min(time.monotonic() + RECALL_WAIT_S, deadline - RECALL_LEAST_S / 2)
        while time.monotonic() < waited:
            current = self.view.records.get(namespace)
            if current is None or not keys & current.holds.keys():
                break
            time.sleep(0.01)
        return True

    def _flush_holds(self) -> None:
        """The holds' thread: every FLUSH_S, write what this worker admitted from its holds, renew those in use,
        give back those asked back or idle, and take those that slow creates asked for."""
        holds = self.holds
        assert holds is not None
        while not self._stop.is_set():
            holds.wake.wait(FLUSH_S)
            holds.wake.clear()
            if self._stop.is_set():
                return
            for namespace in holds.due(self.view.records, time.time()):
                try:
                    self.flush(namespace)
                except LedgerUnavailable as exc:
                    log(_log, logging.WARNING, f"budget of {namespace}: writing its hold failed ({exc}); trying again",
                        event="budget-hold-failed", namespace=namespace)  # fmt: skip
                except Exception:  # never let the thread die: the next round tries again
                    _log.exception("budget holds: unexpected error")

    def flush(self, namespace: str, give_back: bool = False) -> None:
        """One compare-and-swap of this worker's holds of `namespace` (all given back where `give_back`)."""
        holds = self.holds
        if holds is None:
            return
        plans: list[HoldPlan] = []
        quotas = self.quotas.quotas(namespace)

        def edit(record: Record) -> Record | None:
            return holds.edit(record, namespace, time.time(), give_back, quotas, plans)

        try:
            written = self.ledger.change(namespace, edit)
        except LedgerUnavailable:
            holds.abandon(plans)
            raise
        holds.settle(plans, written)

    def _warn_if_behind(self, record: Record) -> None:
        """Say (once a minute per namespace) that a record's reservations pile up: the recount is not running."""
        if len(record.entries) < RESERVATIONS_WARN:
            return
        now = time.monotonic()
        if now - self._warned_full.get(record.namespace, -60.0) < 60.0:
            return
        self._warned_full[record.namespace] = now
        log(_log, logging.WARNING,
            f"budget of {record.namespace}: {len(record.entries)} reservations are waiting to be counted (at "
            f"{RESERVATIONS_MAX} the namespace's GPU pods are judged as unchecked); the recount is behind: see "
            f"/readyz's budgets.recount", event="budget-recount-behind", namespace=record.namespace,
            reservations=len(record.entries))  # fmt: skip

    def _quotas(self, namespace: str, pod: dict[str, Any]) -> list[GpuQuota]:
        """The GPU quotas that count `pod`. Before the first list of ResourceQuotas (a worker that could not list
        them in its start wait), the namespace's own are asked for; where the API server cannot say either,
        the quotas this replica last knew decide whether the namespace has a budget (LedgerUnavailable: it
        has one that cannot be checked) or not (none: never refused for a budget it may not have)."""
        if self.quotas.state() != "listing":
            return [quota for quota in self.quotas.quotas(namespace) if quota.counts(pod)]
        try:
            found = self._namespace_quotas(namespace)
        except LedgerUnavailable as exc:
            if self.known is not None and namespace in self.known.read():
                raise LedgerUnavailable(f"the webhook cannot list the namespace's ResourceQuotas: {exc}") from None
            return []
        return [quota for quota in found if quota.counts(pod)]

    def _namespace_quotas(self, namespace: str) -> list[GpuQuota]:
        status, body = self.ledger.api.call("GET", f"/api/v1/namespaces/{namespace}/resourcequotas", timeout=1.0)
        if status != 200 or not isinstance(body, dict):
            raise LedgerUnavailable(f"listing ResourceQuotas of {namespace}: HTTP {status}")
        found = (gpu_quota({"apiVersion": "v1", "kind": "ResourceQuota", **item}) for item in body.get("items") or [])
        return [quota for quota in found if quota is not None]

    def _quotas_listed(self) -> None:
        """The ResourceQuota watch listed or changed: tell this replica's other workers which namespaces have a
        budget (read by a worker that starts while the API server cannot be reached)."""
        if self.known is not None:
            self.known.write(self.quotas.held)

    def _unchecked(
        self, decision: Decision, policy: Policy, check: Check, namespace: str, name: str, gpus: Fraction, why: str
    ) -> Decision:
        """The decision when the budget cannot be checked: refused under `deny` (the policy enforcing), else
        admitted with a warning; logged either way."""
        where = f"ConfigMap {self.namespace}/{record_name(namespace)}"
        refused = check is Check.DENY and policy.enforcement is Enforcement.ENFORCE
        line = (
            f'pod "{cut(name, 63)}": the GPU budget of namespace "{namespace}" cannot be checked ({cut(why, 300)}); '
            f"its {format_gpus(gpus)} GPU-equivalents are "
            + ("refused while they cannot be counted" if refused else "admitted uncounted")
            + f' (policy "{policy.name}", cluster.quota: {check.value}); retry shortly, or ask an admin to check the '
            f"webhook's access to the API server and to {where}"
        )
        log(_log, logging.WARNING, line, event="budget-unchecked", namespace=namespace, pod=name, refused=refused)
        metrics.count_budget_unchecked("refused" if refused else "admitted")
        if refused:
            return dataclasses.replace(
                decision, allowed=False, verdict="deny", violations=[*decision.violations, line], refused_only=False
            )
        short = f"GPU budget of the namespace not checked ({cut(why, 80)}); admitted uncounted"
        return dataclasses.replace(decision, warnings=[*decision.warnings, WARNING_PREFIX + short])

    # ------------------------------------------------------------------------------------ the keeper

    def _keep(self) -> None:
        next_sweep = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(max(0.0, min(next_sweep - time.monotonic(), self.sweep_every)))
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.sweep_every
                    self.sweep()
                else:
                    self.recount_changed()
            except LedgerUnavailable as exc:
                log(_log, logging.WARNING, f"budget keeper: {exc}; trying again", event="budget-keeper-failed")
            except Exception:  # never let the keeper die: the next round tries again
                _log.exception("budget keeper: unexpected error")
            self._stop.wait(RECOUNT_GAP_S)  # changes that come meanwhile are recounted together

    def _recounting(self) -> PodWatch | None:
        """The pod watch, where this worker leads the recount and every watch is current; else None (a watch
        listing or broken cannot say what runs: the recount waits, releases come late, never early)."""
        pods = self.pods
        if pods is None or not self.lease.leading():
            return None
        if not all(watch.state() == "current" for watch in (self.quotas, self.view, pods)):
            return None
        return pods

    def recount_changed(self) -> None:
        """Recount the namespaces whose GPU pods the watch saw change."""
        pods = self._recounting()
        if pods is None:
            return
        dirty: set[str] = set()
        while self._dirty:  # popped one by one: the watch's thread may add meanwhile, and nothing is lost
            dirty.add(self._dirty.pop())
        policies = self._policies()
        for namespace in sorted(dirty):
            if self._keeps(namespace, policies):
                self._recount(pods, namespace, set())

    def sweep(self) -> None:
        """Recount every budgeted namespace (and every one with a record): the pods the watch holds, the
        reservations whose pods are confirmed gone after the grace; publish the gauges (every worker)."""
        pods = self._recounting()
        if pods is not None:
            self._dirty.clear()
            clock = time.monotonic()
            self._alive_until = {uid: until for uid, until in self._alive_until.items() if until > clock}
            for uids in list(self._released.values()):  # in place: the watch's thread adds meanwhile
                for uid, at in list(uids.items()):
                    if clock - at >= RELEASED_KEPT_S:
                        uids.pop(uid, None)
            asked = [0]
            policies = self._policies()
            for namespace in sorted(set(self.quotas.held) | set(self.view.records)):
                if not self._keeps(namespace, policies):
                    continue
                self._recount(pods, namespace, self._confirmed_gone(pods, namespace, asked))
        self.publish()

    def _keeps(self, namespace: str, policies: PolicySet) -> bool:
        """Whether the recount keeps `namespace`'s record: it has one, or a GPU quota under a policy that judges
        budgets (`cluster.quota` not `off`)."""
        if namespace in self.view.records:
            return True
        return self._budgeted(namespace) and policies.for_namespace(namespace).cluster_checks.quota is not Check.OFF

    def _recount(self, pods: PodWatch, namespace: str, confirmed: set[str]) -> None:
        released = set(self._released.get(namespace) or ()) | confirmed
        epoch = self.lease.epoch
        outcome: list[Record] = []

        def edit(record: Record) -> Record | None:
            now = time.time()
            holds_end = now - self.grace - YOUNG_S  # a hold that ran out before: all its pods exist by now
            with pods.lock:  # the sums, the pods they sum and their version, as one moment of the watch
                live, sums = pods.held.get(namespace) or {}, pods.sums.get(namespace) or {}
                seen, young = pods.version(), pods.young(namespace, time.monotonic())
                recounted = record.recount(live, released, now, epoch, sums, young, holds_end, seen)
            if record.later_than(epoch, seen):  # a later holder's, or a later watch's: this one may be behind
                if record.epoch > epoch:
                    self.lease.advance(record.epoch)  # unless the Lease was made anew: then this is the later
                return None
            if recounted is not None:
                recounted = dataclasses.replace(recounted, seen=seen)
            outcome[:] = [record] if recounted is not None else []
            return recounted

        self.ledger.change(namespace, edit)
        if outcome:
            before = outcome[0]
            gone = sorted(uid for uid in before.entries if uid in released)
            if gone:
                why = (
                    "deleted or ended"
                    if not confirmed & set(gone)
                    else (f"not created, or gone, {self.grace:g} s after its reservation")
                )
                log(_log, logging.INFO, f"budget of {namespace}: released {len(gone)} ({why})",
                    event="budget-released", namespace=namespace, pods=gone[:20], why=why)  # fmt: skip

    def _confirmed_gone(self, pods: PodWatch, namespace: str, asked: list[int]) -> set[str]:
        """The reservations of `namespace` whose pods the watch does not hold, older than the grace, that a GET
        confirms gone (refused after this webhook allowed them, or deleted while no watch saw it)."""
        record = self.view.records.get(namespace)
        if record is None:
            return set()
        now, clock = time.time(), time.monotonic()
        held = pods.held.get(namespace) or {}
        gone: set[str] = set()
        for uid, entry in list(record.entries.items()):
            if uid in held or now - entry.at < self.grace or uid in self._alive_until:
                continue
            if asked[0] >= GETS_PER_SWEEP:
                break
            asked[0] += 1
            if self._pod_gone(namespace, entry.pod, uid):
                gone.add(uid)
            else:
                self._alive_until[uid] = clock + LIVE_RECHECK_S
        return gone

    def _pod_gone(self, namespace: str, name: str, uid: str) -> bool:
        """A GET of the pod: gone when there is none of that name, or one with another UID, or one that ended."""
        status, body = self.ledger.api.get_pod(namespace, name)
        if status == 404:
            return True
        if status != 200 or not isinstance(body, dict):
            raise LedgerUnavailable(f"reading pod {namespace}/{name}: HTTP {status}")
        metadata = body.get("metadata") or {}
        return metadata.get("uid") != uid or has_ended(body)

    def publish(self) -> None:
        """The used and hard GPU-equivalents of every GPU quota, as gauges."""
        values: dict[tuple[str, str], tuple[float, float]] = {}
        for namespace, quotas in list(self.quotas.held.items()):
            record = self.view.records.get(namespace) or Record(namespace, "")
            for quota in list(quotas.values()):
                values[namespace, quota.name] = (float(record.used(quota)), float(quota.hard))
        metrics.set_budgets(values, self._shown)


class KnownQuotas:
    """The namespaces with a GPU quota as this replica last listed them, in a file its workers share: a worker
    that starts while the API server cannot be reached judges by it (budgets.py `_quotas`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, held: dict[str, Any]) -> None:
        text = json.dumps(sorted(held))
        try:
            partial = self.path.with_name(f"{self.path.name}.{os.getpid()}")
            partial.write_text(text)
            partial.replace(self.path)
        except OSError as exc:
            _log.debug("writing %s failed: %s", self.path, exc)

    def read(self) -> frozenset[str]:
        try:
            found = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return frozenset()
        return frozenset(name for name in found if isinstance(name, str)) if isinstance(found, list) else frozenset()
