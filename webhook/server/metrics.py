"""Prometheus metrics, correct across gunicorn workers.

prometheus_client's multiprocess mode: each worker writes its values to mmap files in
PROMETHEUS_MULTIPROC_DIR, and the arbiter serves the sum on the metrics port. The variable must be set
before prometheus_client is first imported (`gpu-webhook serve` does it first thing); without it (unit
tests) the metrics live in process memory.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import suppress
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

WEBHOOKS = ("mutate", "validate")
DECISIONS = ("allow", "deny", "warn", "audit", "error")

REVIEWS = Counter(
    "gpu_admission_reviews",
    "AdmissionReviews answered, by webhook and decision (error: a 4xx or 5xx answer).",
    ["webhook", "decision"],
)
DURATION = Histogram(
    "gpu_admission_review_duration_seconds",
    "Time from the request's arrival in the handler to its answer (parse, engine, response).",
    ["webhook"],
    # Up past the webhooks' 5 s timeout (timeoutSeconds), so a review near it shows as such, not as "over 1 s".
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 5.0, 10.0),
)
MUTATIONS = Counter(
    "gpu_admission_mutations",
    "Changes /mutate made, by kind (e.g. requests-into-limits).",
    ["kind"],
)
RELOADS = Counter(
    "gpu_admission_policy_reloads",
    "Policy reloads after a change in the policy directory, by result (ok, error), per worker.",
    ["result"],
)
CLUSTER_SKIPS = Counter(
    "gpu_admission_cluster_checks_skipped",
    "Reviews judged without the cluster checks because the node inventory had no trusted view, by reason "
    "(listing: the first list has not completed; stale: the watch has been broken too long).",
    ["reason"],
)
DRA_CACHE_MISSES = Counter(
    "gpu_admission_dra_cache_misses",
    "Pod claims and templates not found in the webhook's DRA cache, so their devices went uncounted (the pod "
    "is not denied for it), by kind (ResourceClaim, ResourceClaimTemplate) and the cache's state (current: not "
    "there, e.g. created after the pod; listing: the first list has not completed; stale: the watch is broken).",
    ["kind", "state"],
)
CONNECTIONS_CLOSED = Counter(
    "gpu_admission_connections_closed",
    "Connections closed before a request on them was answered, by reason (full: to make room for a new one; "
    "silent: nothing sent in time; handshake: TLS handshake unfinished in time; incomplete: request unfinished in "
    "time). Many, without a rise in reviews: something holds connections open against the webhook.",
    ["reason"],
)
CLOSE_REASONS = ("full", "silent", "handshake", "incomplete")
_inventory_nodes: Gauge | None = None  # created in a worker, as the certificate gauge
_drift_nodes: Gauge | None = None
_drift_shown: set[tuple[str, str]] = set()
_cert_expiry: Gauge | None = None  # created in the first worker that sets it, see set_certificate_expiry
_budget_used: Gauge | None = None  # created in a worker, as the inventory's (set_budgets)
_budget_hard: Gauge | None = None
BUDGET_UNCHECKED = Counter(
    "gpu_admission_budget_unchecked",
    "GPU pods of budgeted namespaces whose budget could not be checked (the ledger or the ResourceQuotas could "
    "not be read or written in time), by outcome (refused: cluster.quota deny; admitted: warn, uncounted).",
    ["outcome"],
)
BUDGET_ADMITTED = Counter(
    "gpu_admission_budget_admitted",
    "GPU pods of budgeted namespaces admitted, by how their room was counted (hold: from this worker's hold, "
    "written later with others; write: a reservation written before the answer).",
    ["how"],
)

# Label children are looked up once: `.labels()` costs a lock and a dict lookup per call.
_REVIEW_CHILDREN = {(w, d): REVIEWS.labels(webhook=w, decision=d) for w in WEBHOOKS for d in DECISIONS}
_DURATION_CHILDREN = {w: DURATION.labels(webhook=w) for w in WEBHOOKS}
_MUTATION_CHILDREN: dict[str, Any] = {}  # filled as kinds appear (the engine names them)
for _result in ("ok", "error"):
    RELOADS.labels(result=_result)
_CLOSED_CHILDREN = {reason: CONNECTIONS_CLOSED.labels(reason=reason) for reason in CLOSE_REASONS}


def observe_review(webhook: str, decision: str, seconds: float, mutation_kinds: Iterable[str] = ()) -> None:
    """Count one answered review.

    Each increment is a locked write to a memory-mapped file, so each kind is incremented once by its count
    (a 2-container pod names 3 kinds twice).
    """
    _REVIEW_CHILDREN[(webhook, decision)].inc()
    _DURATION_CHILDREN[webhook].observe(seconds)
    if not mutation_kinds:
        return
    counts: dict[str, int] = {}
    for kind in mutation_kinds:
        counts[kind] = counts.get(kind, 0) + 1
    for kind, count in counts.items():
        child = _MUTATION_CHILDREN.get(kind)
        if child is None:
            child = _MUTATION_CHILDREN[kind] = MUTATIONS.labels(kind=kind)
        child.inc(count)


def count_closed(reason: str) -> None:
    """One connection closed early (worker.py), for CLOSE_REASONS' `reason`."""
    _CLOSED_CHILDREN[reason].inc()


def count_reload(ok: bool) -> None:
    RELOADS.labels(result="ok" if ok else "error").inc()


def count_cluster_skip(reason: str) -> None:
    CLUSTER_SKIPS.labels(reason=reason).inc()


def count_dra_cache_miss(kind: str, state: str) -> None:
    DRA_CACHE_MISSES.labels(kind=kind, state=state).inc()


def set_inventory(nodes: int, drift: dict[tuple[str, str], int]) -> None:
    """Publish the inventory's node count and the policy drift: per (policy, field), the nodes that disagree
    (0 once they agree again). Created on first use in a worker, so that the arbiter reports no zero."""
    global _inventory_nodes, _drift_nodes
    if _inventory_nodes is None or _drift_nodes is None:
        _inventory_nodes = Gauge(
            "gpu_admission_inventory_nodes", "Nodes in the webhook's node inventory.", multiprocess_mode="livemax"
        )
        _drift_nodes = Gauge(
            "gpu_admission_policy_drift_nodes",
            "Nodes whose GPU labels disagree with a policy field (sharing.replicas, sharing.mode, gpu.model, "
            "gpu.memoryMiB, sharing.migProfile): see /readyz or `gpu-webhook policy lint --cluster`.",
            ["policy", "field"],
            multiprocess_mode="livemax",
        )
    _inventory_nodes.set(nodes)
    for key in _drift_shown - drift.keys():
        _drift_nodes.labels(policy=key[0], field=key[1]).set(0)
    for (policy, field), count in drift.items():
        _drift_nodes.labels(policy=policy, field=field).set(count)
    _drift_shown.update(drift)


def count_budget_unchecked(outcome: str) -> None:
    BUDGET_UNCHECKED.labels(outcome=outcome).inc()


def count_budget_admitted(how: str) -> None:
    BUDGET_ADMITTED.labels(how=how).inc()


def set_budgets(values: dict[tuple[str, str], tuple[float, float]], shown: set[tuple[str, str]]) -> None:
    """Publish each GPU quota's used and hard GPU-equivalents, by (namespace, quota); a quota in `shown` (those
    published before, updated here) that is gone is set to 0. Created on first use in a worker."""
    global _budget_used, _budget_hard
    if _budget_used is None or _budget_hard is None:
        _budget_used = Gauge(
            "gpu_admission_budget_used_gpus",
            "GPU-equivalents a namespace's GPU ResourceQuota holds now, by the webhook's ledger (a whole GPU 1, a "
            "time-slicing replica 1/replicas, a MIG slice its larger share of compute or memory, ...).",
            ["namespace", "quota"],
            multiprocess_mode="livemax",
        )
        _budget_hard = Gauge(
            "gpu_admission_budget_hard_gpus",
            "GPU-equivalents a namespace's GPU ResourceQuota allows (its requests.nvidia.com/gpu or "
            "limits.nvidia.com/gpu entry, the lesser).",
            ["namespace", "quota"],
            multiprocess_mode="livemax",
        )
    for namespace, quota in shown - values.keys():
        _budget_used.labels(namespace=namespace, quota=quota).set(0)
        _budget_hard.labels(namespace=namespace, quota=quota).set(0)
    for (namespace, quota), (used, hard) in values.items():
        _budget_used.labels(namespace=namespace, quota=quota).set(used)
        _budget_hard.labels(namespace=namespace, quota=quota).set(hard)
    shown.update(values)


def set_certificate_expiry(timestamp: float) -> None:
    """Publish the serving certificate's expiry.

    The gauge is created on first use, in a worker: created at import it would also exist in the arbiter
    with the value 0, and `livemin` across live processes would then always say 0.
    """
    global _cert_expiry
    if _cert_expiry is None:
        _cert_expiry = Gauge(
            "gpu_admission_certificate_expiry_timestamp_seconds",
            "When the serving certificate, or an intermediate served with it, expires first (Unix time): the earliest "
            "that any live worker serves.",
            multiprocess_mode="livemin",
        )
    _cert_expiry.set(timestamp)


def multiprocess_registry() -> CollectorRegistry:
    """A registry that reads every worker's files (for the arbiter's metrics endpoint)."""
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


# The metrics endpoint: prometheus_client's server runs a thread per connection, reads with no timeout and
# keeps no count, so 40 clients that send half a request hold 40 threads for ever. Here a request must arrive
# within METRICS_READ_TIMEOUT, and beyond METRICS_CONNECTIONS a new connection closes the oldest still reading
# (one whose request has arrived is being answered: closing it would cut a scrape off).
METRICS_READ_TIMEOUT = 5.0
METRICS_CONNECTIONS = 16


class _QuietHandler(WSGIRequestHandler):
    timeout = METRICS_READ_TIMEOUT  # each read: StreamRequestHandler sets it on the socket

    def parse_request(self) -> bool:
        """The request's head is read: its connection is answered now, no longer one of those the limit counts
        (a new connection closing it would cut off a scrape half answered)."""
        parsed = super().parse_request()
        if parsed:
            self.server.answering(self.connection)  # type: ignore[attr-defined]
        return parsed

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing: a scrape every 30 s is not news."""


def serve_metrics(host: str, port: int, registry: CollectorRegistry) -> Any:
    """Serve `registry` on http://host:port/metrics from a daemon thread; returns the server."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIServer, make_server

    from prometheus_client import make_wsgi_app

    class MetricsServer(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        request_queue_size = 128  # socketserver's 5 would drop new connections (SYN retried after 1 s) in a burst
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.open: OrderedDict[socket.socket, float] = OrderedDict()  # connection -> when its deadline ends
            self.open_lock = threading.Lock()
            super().__init__(*args, **kwargs)

        def process_request(self, request: Any, client_address: Any) -> None:
            with self.open_lock:
                self.open[request] = time.monotonic() + METRICS_READ_TIMEOUT
                while len(self.open) > METRICS_CONNECTIONS:
                    _close_for_good(self.open.popitem(last=False)[0])
            super().process_request(request, client_address)

        def answering(self, request: Any) -> None:
            """`request`'s head has arrived: it is being answered, so neither a new connection nor the read
            deadline closes it (writing has the handler's timeout)."""
            with self.open_lock:
                self.open.pop(request, None)

        def shutdown_request(self, request: Any) -> None:
            with self.open_lock:
                self.open.pop(request, None)
            super().shutdown_request(request)

        def service_actions(self) -> None:
            """Every half second (serve_forever's poll): a connection whose request is still incomplete after
            METRICS_READ_TIMEOUT, read byte by byte or not, is closed, and its thread ends."""
            now = time.monotonic()
            with self.open_lock:
                while self.open and next(iter(self.open.values())) <= now:
                    _close_for_good(self.open.popitem(last=False)[0])

    server = make_server(host, port, make_wsgi_app(registry), MetricsServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def _close_for_good(connection: socket.socket) -> None:
    """Wake the thread reading it (its read returns nothing) rather than close the descriptor under it."""
    with suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)


def mark_worker_dead(pid: int) -> None:
    """Drop a dead worker's live gauges (its counters stay: they were counted)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
