"""GPU budgets in the running server: reservation in /validate, and the keeper that releases and adopts.

A Pod CREATE that /validate allows, in a namespace whose ResourceQuota has a GPU entry (the quota watch says
which), is reserved in the namespace's ledger record (ledger.py) before the answer goes back: read the record,
judge the pod with `budget.judge` against the GPU-equivalents the record holds for each quota, write the record
back naming the version read; a lost race reads again and judges again. The API server has set the pod's UID
and final name by then (mutating webhooks run before either exists), so a reservation is per UID and a review
sent twice (the API server retries on a timeout) is answered the same without a second entry. A dry run is
judged on the record as it is and writes nothing. A refusal is the engine's own (`evaluate(..., budget=)`),
so the policy's enforcement and `cluster.quota: warn` decide it as they decide every other line.

The keeper, a thread per worker, keeps the ledger true to the pods:
- a pod the watch sees deleted or ended: its entry is removed (within a fraction of a second);
- an entry whose pod the watch does not hold, older than the grace (`--budget-grace`): a GET of the pod
  confirms it is gone (refused after this webhook allowed it, by a later admission step such as the API
  server's own quota plugin, or deleted while the watch was down), then it is removed; only a confirmed absence
  removes an entry;
- a live GPU pod of a budgeted namespace that the ledger misses (created before the budget existed, or while
  the webhook was off): added.
Every worker of every replica does this; the compare-and-swap makes them agree, and a change already made by
another is a read that writes nothing.

When the ledger cannot be read or written in time (the API server unreachable, RBAC missing, the record edited
by hand), a GPU pod of a budgeted namespace is refused under `cluster.quota: deny` with a line that says so,
and admitted with a warning under `warn`: never a traceback, never a wait past the webhook's timeout.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from webhook.admission.base.equivalents import format_gpus
from webhook.admission.base.podspec import POD_SPEC_PATHS, mentions_gpu
from webhook.admission.base.violation import WARNING_PREFIX, cut
from webhook.admission.budgets.budget import Usage, has_ended, judge, pod_ask
from webhook.admission.cluster.nodes import STALE_AFTER_S
from webhook.admission.cluster.quota import GpuQuota
from webhook.admission.dra.podclaims import ClaimsView
from webhook.admission.engine import Decision
from webhook.admission.policy.model import Check, Enforcement, Policy, PolicySet
from webhook.admission.review import AdmissionRequest
from webhook.server import GRACE_S, metrics
from webhook.server.budget_watch import PodWatch, QuotaWatch
from webhook.server.ledger import (
    ConfigMaps,
    Entry,
    Ledger,
    LedgerUnavailable,
    LedgerView,
    Record,
    Scope,
    record_name,
    scope_of,
)
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.budgets")

SWEEP_S = 2.0  # seconds between the keeper's looks at every record (releases of deleted pods do not wait)
FIRST_LIST_WAIT_S = 2.0  # a review in a worker's first seconds waits this long for the ResourceQuotas' list
LIVE_RECHECK_S = 60.0  # a pod a GET found alive is not asked about again for this long
GETS_PER_SWEEP = 50  # at most this many pod GETs a sweep: a large backlog is worked through over several
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
    """One worker's budget watches, ledger and keeper."""

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
    ) -> None:
        self.namespace = namespace
        self._policies = policies
        self._claims = claims
        self.grace = grace
        self.sweep_every = sweep
        self.quotas = QuotaWatch.watching(configuration, stale_after)
        self.view = LedgerView.watching(configuration, namespace, stale_after)
        self.pods = PodWatch.watching(configuration, self.ask_of, self.gone, stale_after)
        self.ledger = Ledger(ConfigMaps(configuration, namespace), self.view)
        self._gone: deque[tuple[str, str]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._alive_until: dict[str, float] = {}  # pod UID -> until when a GET's "still there" holds
        self._shown: set[tuple[str, str]] = set()  # (namespace, quota) gauges set, to zero those that go

    # ------------------------------------------------------------------------------------ the threads

    def start(self) -> None:
        for watch in (self.quotas, self.view, self.pods):
            watch.start()
        threading.Thread(target=self._keep, name="gpu-admission-budgets", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for watch in (self.quotas, self.view, self.pods):
            watch.stop()

    def details(self) -> dict[str, Any]:
        """For /readyz: each watch's state and size (and its last error), and the ledger's namespace."""
        found: dict[str, Any] = {
            "ledgerNamespace": self.namespace,
            "resourceQuotas": {"state": self.quotas.state(), "budgeted": len(self.quotas.held)},
            "pods": {"state": self.pods.state(), "holdingGpus": self.pods.count()},
            "ledger": {"state": self.view.state(), "records": len(self.view.records)},
        }
        for part, watch in (("resourceQuotas", self.quotas), ("pods", self.pods), ("ledger", self.view)):
            if watch.last_error:
                found[part]["lastError"] = watch.last_error
        return found

    # ------------------------------------------------------------------------------------ the pod watch's hooks

    def ask_of(self, pod: dict[str, Any]) -> tuple[Fraction, Scope] | None:
        """A watched pod's GPU-equivalents under its namespace's policy now, and its scope fields."""
        return held_gpus(pod, self._policies(), self._claims())

    def gone(self, namespace: str, uid: str) -> None:
        """A pod of a budgeted namespace was deleted or ended: its entry, if the ledger holds one, goes (on the
        keeper's thread, which reads its copy of the record first: a pod it does not hold costs no call). Queued
        whether or not the copy holds it now: an adoption may be writing it this moment."""
        if namespace in self.quotas.held or namespace in self.view.records:
            self._gone.append((namespace, uid))
            self._wake.set()

    # ------------------------------------------------------------------------------------ reservation

    def may_hold(self, namespace: str) -> bool:
        """Whether a pod of `namespace` may be counted: the namespace has a GPU quota, or the quotas are not
        listed yet (then `admit` waits for them, and refuses under `deny` if they still are not). Elsewhere the
        engine works out no ask: budgets cost nothing. Where RBAC forbids listing ResourceQuotas (the watch is
        `off`), no namespace is known to have a budget: GPU pods are admitted as before budgets existed, and
        /readyz and the log say why, rather than every GPU pod of the cluster being refused."""
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
        outcome = [decision]

        def edit(record: Record) -> dict[str, Entry] | None:
            if writes and uid in record.entries:
                outcome[0] = decision  # reserved already: the API server sent this review again
                return None
            counted = self._with_running(record)
            usages = [Usage(quota, counted.used(quota)) for quota in quotas]
            outcome[0] = decision if judge(ask, usages, name, pod) is None else rejudge(usages)
            if not writes or not outcome[0].allowed:
                return None
            entry = Entry(name, ask.total, scope_of(pod), time.time())
            return {**counted.entries, str(uid): entry}

        try:
            if writes:
                self.ledger.change(namespace, edit)
            else:
                edit(self.ledger.latest(namespace))
        except LedgerUnavailable as exc:
            return self._unchecked(decision, policy, check, namespace, name, ask.total, str(exc))
        return outcome[0]

    def _with_running(self, record: Record) -> Record:
        """`record` with the running GPU pods of its namespace that it misses (created before the quota, or while
        the webhook was off), as the sweep would adopt them: counted from the first reservation on, and written
        with it. Only while the pod watch is current; a pod it still holds though just deleted counts a moment
        longer (never fewer pods than run)."""
        if self.pods.state() != "current":
            return record
        live = self.pods.held.get(record.namespace) or {}
        missing = [(uid, held) for uid, held in list(live.items()) if uid not in record.entries]
        if not missing:
            return record
        now = time.time()
        adopted = {uid: Entry(held.name, held.gpus, held.scope, now) for uid, held in missing}
        return Record(record.namespace, record.version, {**record.entries, **adopted})

    def _quotas(self, namespace: str, pod: dict[str, Any]) -> list[GpuQuota]:
        """The GPU quotas that count `pod`; LedgerUnavailable while they are not known yet."""
        if not self.quotas.listed.is_set() and not self.quotas.list_error:
            self.quotas.listed.wait(FIRST_LIST_WAIT_S)  # a worker just started: its first list is under way
        if self.quotas.state() == "listing":
            why = f": {self.quotas.list_error}" if self.quotas.list_error else ""
            raise LedgerUnavailable(f"the webhook has not listed the cluster's ResourceQuotas yet{why}")
        return [quota for quota in self.quotas.quotas(namespace) if quota.counts(pod)]

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
                self.release_gone()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.sweep_every
                    self.sweep()
            except LedgerUnavailable as exc:
                log(_log, logging.WARNING, f"budget keeper: {exc}; trying again", event="budget-keeper-failed")
            except Exception:  # never let the keeper die: the next round tries again
                _log.exception("budget keeper: unexpected error")

    def release_gone(self) -> None:
        """Remove the entries of the pods the watch saw deleted or ended."""
        by_namespace: dict[str, set[str]] = {}
        while self._gone:
            namespace, uid = self._gone.popleft()
            by_namespace.setdefault(namespace, set()).add(uid)
        for namespace, uids in by_namespace.items():
            self._release(namespace, uids, "deleted or ended")

    def _release(self, namespace: str, uids: set[str], why: str) -> None:
        removed: list[str] = []

        def edit(record: Record) -> dict[str, Entry] | None:
            removed[:] = sorted(uids & record.entries.keys())
            if not removed:
                return None  # not there (any more): another worker or replica was first
            return {uid: entry for uid, entry in record.entries.items() if uid not in uids}

        self.ledger.change(namespace, edit)
        if removed:
            log(_log, logging.INFO, f"budget of {namespace}: released {len(removed)} ({why})",
                event="budget-released", namespace=namespace, pods=removed[:20], why=why)  # fmt: skip

    def sweep(self) -> None:
        """Release the entries whose pods are confirmed gone, adopt the live pods the ledger misses, publish the
        gauges. Only with every watch current: a watch that is listing or broken cannot say what is missing."""
        if not all(watch.state() == "current" for watch in (self.quotas, self.view, self.pods)):
            return
        self._release_missing()
        self._adopt()
        self.publish()

    def _release_missing(self) -> None:
        now, clock = time.time(), time.monotonic()
        self._alive_until = {uid: until for uid, until in self._alive_until.items() if until > clock}
        asked = 0
        for namespace, record in list(self.view.records.items()):
            held = self.pods.held.get(namespace) or {}
            gone: set[str] = set()
            for uid, entry in record.entries.items():
                if uid in held or now - entry.at < self.grace or uid in self._alive_until:
                    continue
                if asked >= GETS_PER_SWEEP:
                    break
                asked += 1
                if self._confirmed_gone(namespace, entry.pod, uid):
                    gone.add(uid)
                else:
                    self._alive_until[uid] = clock + LIVE_RECHECK_S
            if gone:
                self._release(namespace, gone, f"not created, or gone, {self.grace:g} s after its reservation")

    def _confirmed_gone(self, namespace: str, name: str, uid: str) -> bool:
        """A GET of the pod: gone when there is none of that name, or one with another UID, or one that ended."""
        status, body = self.ledger.api.get_pod(namespace, name)
        if status == 404:
            return True
        if status != 200 or not isinstance(body, dict):
            raise LedgerUnavailable(f"reading pod {namespace}/{name}: HTTP {status}")
        metadata = body.get("metadata") or {}
        return metadata.get("uid") != uid or has_ended(body)

    def _adopt(self) -> None:
        policies = self._policies()
        for namespace in list(self.quotas.held):
            if policies.for_namespace(namespace).cluster_checks.quota is Check.OFF:
                continue
            live = self.pods.held.get(namespace) or {}
            record = self.view.records.get(namespace)
            missing = {uid: pod for uid, pod in list(live.items()) if record is None or uid not in record.entries}
            if not missing:
                continue

            added: list[str] = []

            def edit(
                current: Record, missing: dict[str, Any] = missing, added: list[str] = added
            ) -> dict[str, Entry] | None:
                new = {
                    uid: Entry(pod.name, pod.gpus, pod.scope, time.time())
                    for uid, pod in missing.items()
                    if uid not in current.entries
                }
                added[:] = sorted(entry.pod for entry in new.values())
                return {**current.entries, **new} if new else None

            self.ledger.change(namespace, edit)
            if added:
                log(_log, logging.INFO, f"budget of {namespace}: adopted {len(added)} running GPU pods",
                    event="budget-adopted", namespace=namespace, pods=added[:20])  # fmt: skip

    def publish(self) -> None:
        """The used and hard GPU-equivalents of every GPU quota, as gauges."""
        values: dict[tuple[str, str], tuple[float, float]] = {}
        for namespace, quotas in list(self.quotas.held.items()):
            record = self.view.records.get(namespace) or Record(namespace, "")
            for quota in list(quotas.values()):
                values[namespace, quota.name] = (float(record.used(quota)), float(quota.hard))
        metrics.set_budgets(values, self._shown)
