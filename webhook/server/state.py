"""What a server process holds: the policies, the certificate, and the engine it calls.

One object, built before gunicorn forks its workers, so every worker starts from the same loaded state;
each worker then keeps it fresh with its own watcher thread, and the arbiter keeps its own copy fresh for the
workers it forks later (`follow`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from webhook.admission.budgets.budget import Usage
from webhook.admission.checks import clusterdrift
from webhook.admission.cluster.nodes import STALE_AFTER_S, ClusterView
from webhook.admission.dra.podclaims import ClaimsView
from webhook.admission.engine import Decision, evaluate
from webhook.admission.policy.model import PolicySet
from webhook.admission.review import AdmissionRequest
from webhook.server import START_WAIT_S, metrics
from webhook.server.budgets import GRACE_S, Budgets, KnownQuotas, Rejudge
from webhook.server.claims import ClaimsCache
from webhook.server.dra_watch import DRAWatch
from webhook.server.inventory import Credentials, KubeNodes, NodeInventory
from webhook.server.logs import LOGGER, log
from webhook.server.policies import PolicyStore
from webhook.server.policy_status import PolicyStatus
from webhook.server.policy_watch import PolicyWatch
from webhook.server.tls import CertStore

_log = logging.getLogger(f"{LOGGER}.watch")

EXPIRY_WARNING_EVERY = 3600.0  # seconds between log lines about a certificate close to expiry


class Evaluate(Protocol):
    """engine.evaluate's signature (customresources.evaluate's in the server): (object, namespace, policies, old,
    cluster, claims), and a Pod's GPU budget where its namespace has one."""

    def __call__(
        self,
        obj: dict[str, Any],
        namespace: str,
        policies: PolicySet,
        old: Any = None,
        nodes: ClusterView | None = None,
        claims: ClaimsView | None = None,
        /,
        *,
        budget: Sequence[Usage] | None = None,
    ) -> Decision: ...


@dataclass
class ServerState:
    policies: PolicyStore
    certificate: CertStore | None = None  # None: TLS is someone else's (unit tests of the Flask app)
    evaluate: Evaluate = evaluate  # injectable so the shell's failure handling can be tested
    policy_interval: float = 1.0  # seconds between looks at the policy directory
    cert_interval: float = 30.0  # seconds between looks at the certificate files
    credentials: Credentials | None = None  # the node inventory's; None or unconfigured: cluster checks off
    cluster_stale_after: float = STALE_AFTER_S
    inventory: NodeInventory | None = None  # this worker's (start_inventory)
    claims: ClaimsCache | None = None  # this worker's DRA claims and templates (start_inventory)
    dra_watches: list[DRAWatch] = field(default_factory=list)  # ResourceSlices, DeviceClasses (start_inventory)
    budget_namespace: str = "gpu-admission"  # where the budget ledger's records live (budgets.own_namespace)
    budget_grace: float = GRACE_S  # seconds before an entry whose pod never appeared is looked up and released
    budget_start_wait: float = START_WAIT_S  # seconds a starting worker waits for its budget lists (wait_listed)
    shared_dir: Path | None = None  # a directory of this server's own that its workers share (serve makes it)
    budgets: Budgets | None = None  # this worker's budget watches, ledger and keeper (start_inventory)
    policy_source: str = "files"  # or "cluster": GPUPolicy objects through the API (start_policies)
    policy_start_wait: float = START_WAIT_S  # seconds a starting worker accepts nothing, waiting for its GPUPolicy list
    policy_watch: PolicyWatch | None = None  # this worker's GPUPolicy watch (start_policies)
    policy_status: PolicyStatus | None = None  # this worker's candidacy to write their status (start_policies)
    _skipping: str = field(default="", repr=False)  # why reviews skip the cluster checks now, once logged
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _expiry_warned: float = field(default=-EXPIRY_WARNING_EVERY, repr=False)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details): policies loaded, certificate valid and further from expiry than its store's
        `unready_before` (7 days unless `serve --unready-before-expiry` says otherwise)."""
        details: dict[str, Any] = {"policies": len(self.policies.current.policies)}
        problems: list[str] = []
        if self.policy_source == "cluster":
            details["policySource"] = "cluster"
            waiting = self.policies_not_ready()
            if waiting:
                problems.append(waiting)
            watch = self.policy_watch
            if watch is not None:
                not_served = watch.not_served()
                if not_served:  # reported per object (their status says why), never a reason to be unready
                    details["policiesNotServed"] = not_served
                if watch.watch.last_error:
                    details["policyWatchError"] = watch.watch.last_error
            if self.policy_status is not None:
                details["policyStatus"] = self.policy_status.details()
        if self.policies.last_error:
            # Not a reason to be unready: the last good set is served. Said so that it is seen.
            details["policyReloadRejected"] = self.policies.last_error
        if self.certificate is not None:
            details["certificateNotAfter"] = self.certificate.not_after.isoformat()
            problem = self.certificate.problem()
            if problem:
                problems.append(problem)
        if self.credentials is not None and self.credentials.configuration is not None:
            details["cluster"] = self.cluster_details()
        waiting = self.budgets.not_ready() if self.budgets is not None else ""
        if waiting:
            problems.append(waiting)
        details["ready"] = not problems
        if problems:
            details["reasons"] = problems
        return not problems, details

    # ---------------------------------------------------------------------------- the node inventory

    def start_inventory(self) -> None:
        """This worker's list + watch of Nodes (after the fork: threads do not survive one)."""
        if self.credentials is None or self.credentials.configuration is None or self.inventory is not None:
            return
        self.inventory = NodeInventory(KubeNodes(self.credentials.configuration), stale_after=self.cluster_stale_after)
        inventory = self.inventory
        self.dra_watches = [
            DRAWatch.watching(self.credentials.configuration, kind, inventory._publish, self.cluster_stale_after)
            for kind in ("ResourceSlice", "DeviceClass")
        ]
        inventory.attach_dra(*self.dra_watches)
        inventory.start()
        for watch in self.dra_watches:
            watch.start()
        self.claims = ClaimsCache.watching(self.credentials.configuration, self.cluster_stale_after)
        self.claims.start()
        self.budgets = Budgets(
            self.credentials.configuration,
            self.budget_namespace,
            lambda: self.policies.current,
            lambda: self.claims,
            grace=self.budget_grace,
            stale_after=self.cluster_stale_after,
            known=KnownQuotas(self.shared_dir / "budgeted-namespaces.json") if self.shared_dir else None,
        )
        self.budgets.start()

    # ---------------------------------------------------------------------------- the cluster's GPUPolicy objects

    def start_policies(self) -> None:
        """This worker's GPUPolicy list + watch and its candidacy to write their status (after the fork)."""
        if self.policy_source != "cluster" or self.policy_watch is not None:
            return
        assert self.credentials is not None and self.credentials.configuration is not None  # serve checks it
        from webhook.server.ledger import ConfigMaps

        configuration = self.credentials.configuration
        self.policy_watch = PolicyWatch(configuration, self.policies)
        self.policy_status = PolicyStatus(
            ConfigMaps(configuration, self.budget_namespace).call, self.budget_namespace, self.policy_watch,
            configuration,
        )  # fmt: skip
        self.policy_watch.start()
        self.policy_status.start()

    def wait_for_policies(self, tick: Callable[[], None]) -> None:
        """Before this worker accepts a connection: its first GPUPolicy list, for at most `policy_start_wait` (the
        other workers serve meanwhile). Past it, it answers the probes (/readyz says why it is not ready) and
        refuses every review with a 503 until the list completes: never the built-in defaults, which would refuse
        or change pods that the cluster's policies admit."""
        watch = self.policy_watch
        if watch is None:
            return
        started = time.monotonic()
        if watch.wait_listed(self.policy_start_wait, tick):
            return
        log(_log, logging.WARNING,
            f"{watch.not_ready()}; not listed after {time.monotonic() - started:.1f} s: answering the probes (not "
            f"ready) and refusing reviews until the list completes", event="policy-start-wait-over")  # fmt: skip

    def policies_not_ready(self) -> str:
        """Why this worker judges no review now ("" where it does): the cluster source not listed yet."""
        watch = self.policy_watch
        if self.policy_source != "cluster":
            return ""
        return watch.not_ready() if watch is not None else "policies: GPUPolicy watch not started"

    def policy_objects(self) -> list[dict[str, Any]]:
        """The GPUPolicy objects a GPUPolicy review is judged among: the watch's, or none (the files source)."""
        return self.policy_watch.objects() if self.policy_watch is not None else []

    def wait_for_budgets(self, tick: Callable[[], None]) -> None:
        """Before this worker accepts reviews: its budget lists, for at most `budget_start_wait` (the other
        workers serve meanwhile, and /readyz of this one says why it waits)."""
        if self.budgets is None:
            return
        started = time.monotonic()
        if self.budgets.wait_listed(self.budget_start_wait, tick):
            return
        log(_log, logging.WARNING,
            f"GPU budgets: not listed after {time.monotonic() - started:.1f} s ({self.budgets.not_ready()}); serving, "
            f"asking the API server for each namespace's ResourceQuotas until the list completes",
            event="budget-start-wait-over")  # fmt: skip

    def rejudge(self, obj: dict[str, Any], review: AdmissionRequest, policies: PolicySet, nodes: Any) -> Rejudge:
        """The engine's decision on a Pod with its budget's usages (a refusal is the engine's, budget.judge's)."""
        old = review.old_object if review.operation == "UPDATE" else None

        def decide(usages: Sequence[Usage]) -> Decision:
            return self.evaluate(obj, review.engine_namespace, policies, old, nodes, self.claims, budget=usages)

        return decide

    def cluster_view(self) -> ClusterView | None:
        """The snapshot a review is judged against; None (checks skipped, counted, logged once) when the
        inventory has none it trusts. Never waits."""
        inventory = self.inventory
        if inventory is None:
            return None
        view = inventory.view()
        if view is None:
            reason = inventory.state()
            metrics.count_cluster_skip(reason)
            if self._skipping != reason:
                self._skipping = reason
                why = (
                    "the first node list has not completed"
                    if reason == "listing"
                    else (
                        f"the node watch has been broken for over {inventory.stale_after:g} s ({inventory.last_error})"
                    )
                )
                log(
                    _log,
                    logging.WARNING,
                    f"cluster checks skipped: {why}",
                    event="cluster-checks-skipped",
                    reason=reason,
                )
        elif self._skipping:
            self._skipping = ""
            log(_log, logging.INFO, "cluster checks running again", event="cluster-checks-resumed")
        return view

    def drift(self) -> list[clusterdrift.Drift]:
        """Every policy's drift against the current snapshot (worked out once per snapshot and policy)."""
        view = self.inventory.view() if self.inventory is not None else None
        return clusterdrift.drift_of(self.policies.current, view) if view is not None else []

    def cluster_details(self) -> dict[str, Any]:
        """For /readyz: where the credentials came from, the inventory's state, its nodes, and the drift."""
        assert self.credentials is not None
        details: dict[str, Any] = {"credentials": self.credentials.source}
        inventory = self.inventory
        if inventory is None:
            return details
        details["inventory"] = inventory.state()
        snapshot = inventory.last_view
        details["nodes"] = len(snapshot.nodes) if snapshot is not None else 0
        if inventory.last_error:
            details["lastError"] = inventory.last_error
        if self.budgets is not None:
            details["budgets"] = self.budgets.details()
        if self.claims is not None:
            details["dra"] = self.claims.details()
            for watch in self.dra_watches:
                details["dra"][watch.kind] = {"state": watch.state(), "objects": len(watch.items)}
        drift = self.drift()
        if drift:
            details["drift"] = [item.line for item in drift]
        return details

    def publish_inventory(self) -> None:
        view = self.inventory.view() if self.inventory is not None else None
        if view is None:
            return
        drift = clusterdrift.drift_of(self.policies.current, view)  # of the same snapshot as the node count
        metrics.set_inventory(len(view.nodes), {(d.policy, d.field): len(d.nodes) for d in drift})

    # ---------------------------------------------------------------------------- refreshing, per worker

    def refresh(self) -> None:
        """Look at the policy directory and certificate files now (a worker's start, the watcher)."""
        self.policies.check()
        if self.certificate is not None:
            self.refresh_certificate()

    def refresh_certificate(self) -> None:
        assert self.certificate is not None
        self.certificate.check()
        metrics.set_certificate_expiry(self.certificate.not_after.timestamp())
        problem = self.certificate.expiry_notice()
        if problem and time.monotonic() - self._expiry_warned >= EXPIRY_WARNING_EVERY:
            self._expiry_warned = time.monotonic()
            log(
                _log,
                logging.WARNING,
                problem,
                event="certificate-expiry",
                not_after=self.certificate.not_after.isoformat(),
            )

    def follow(self) -> None:
        """Keep the arbiter's copy as fresh as the workers' (quietly: they log and count).

        gunicorn forks every worker from the arbiter: a crashed worker's replacement, and every worker after a
        SIGHUP, starts from its copy. Were that the one loaded at startup, a worker forked while the files are
        broken (a rejected policy change, a rotation half done) would serve the policies or the certificate the
        server started with, not those the other workers serve.
        """
        self.policies.check(quiet=True)
        if self.certificate is not None:
            self.certificate.check(quiet=True)

    def start_watcher(self) -> threading.Thread:
        """A daemon thread in this process that polls for policy and certificate changes."""
        self._stop.clear()
        thread = threading.Thread(target=self._watch, name="gpu-admission-watcher", daemon=True)
        thread.start()
        return thread

    def stop_watcher(self) -> None:
        self._stop.set()
        if self.inventory is not None:
            self.inventory.stop()
        if self.claims is not None:
            self.claims.stop()
        if self.budgets is not None:
            self.budgets.stop()
        if self.policy_status is not None:
            self.policy_status.stop()  # gives the status Lease back
        if self.policy_watch is not None:
            self.policy_watch.stop()
        for watch in self.dra_watches:
            watch.stop()

    def _watch(self) -> None:
        next_cert = time.monotonic() + self.cert_interval
        while not self._stop.wait(self.policy_interval):
            try:
                self.policies.check()
                if self.certificate is not None and time.monotonic() >= next_cert:
                    next_cert = time.monotonic() + self.cert_interval
                    self.refresh_certificate()
                self.publish_inventory()
            except Exception:  # never let the watcher die: the next tick tries again
                _log.exception("watcher: unexpected error")
