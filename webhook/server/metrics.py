"""Prometheus metrics, correct across gunicorn workers.

prometheus_client's multiprocess mode: each worker writes its values to mmap files in
PROMETHEUS_MULTIPROC_DIR, and the arbiter serves the sum on the metrics port. The variable must be set
before prometheus_client is first imported (`gpu-webhook serve` does it first thing); without it (unit
tests) the metrics live in process memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

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
_cert_expiry: Gauge | None = None  # created in the first worker that sets it, see set_certificate_expiry

# Label children are looked up once: `.labels()` costs a lock and a dict lookup per call.
_REVIEW_CHILDREN = {(w, d): REVIEWS.labels(webhook=w, decision=d) for w in WEBHOOKS for d in DECISIONS}
_DURATION_CHILDREN = {w: DURATION.labels(webhook=w) for w in WEBHOOKS}
_MUTATION_CHILDREN: dict[str, Any] = {}  # filled as kinds appear (the engine names them)
for _result in ("ok", "error"):
    RELOADS.labels(result=_result)


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


def count_reload(ok: bool) -> None:
    RELOADS.labels(result="ok" if ok else "error").inc()


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


def mark_worker_dead(pid: int) -> None:
    """Drop a dead worker's live gauges (its counters stay: they were counted)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
