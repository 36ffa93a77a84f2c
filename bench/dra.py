"""Benchmark 8: the DRA cache of 100,000 ResourceClaims, and what counting a pod's claims costs a review.

Memory: one worker's `ClaimCache` (webhook/server/claims.py) lists 100,000 ResourceClaims (in pages of 500, as
from the API server, fed in-process so that only the cache is measured) spread over 500 namespaces: claims
made from templates (each pod gets one, named `<pod>-<claim>-<suffix>`), asking 1, 2, 4 or 8 GPUs of
`gpu.nvidia.com` or a MIG device, and one in ten with a `firstAvailable` pair. Held: the cache's own
allocations (tracemalloc) once the API objects are freed, and the growth of the process's resident memory.
Review cost: `engine.evaluate` on a pod asking `nvidia.com/gpu: 1` and on the same pod naming one claim of that
cache, paired rounds on one core, and counted by callgrind where valgrind is installed. Targets: 100,000 claims
hold under 50 MB per worker; a pod with a claim costs at most 10% more than the plain GPU pod. Measured
2026-11-25 (docs/performance.md): 10.7 MB; plain 92,577 and with a claim 100,928 instructions, +9.0%.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

from bench.common import callgrind_child, callgrind_or_none, check, pin_to_one_core, rss, table, write_results
from webhook.admission.engine import evaluate
from webhook.admission.policy.loader import parse_policy_sources
from webhook.server.claims import ClaimCache, ClaimsCache

CLAIMS = 100_000
NAMESPACES = 500
PAGE = 500
MB = 1024 * 1024
POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: teams}
spec:
  namespaces: ["team-*"]
  limits: {maxPerContainer: 16, maxPerPod: 16}
"""


def claim_object(index: int) -> dict[str, Any]:
    """A ResourceClaim as a list item carries it: made from a template, allocated, with its status."""
    count = (1, 2, 4, 8)[index % 4]
    device_class = "mig.nvidia.com" if index % 7 == 0 else "gpu.nvidia.com"
    exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    request: dict[str, Any] = {"name": "gpu", "exactly": exactly}
    if index % 10 == 0:
        request = {"name": "gpu", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2 * count},
            {"name": "small", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count},
        ]}  # fmt: skip
    name = f"train-{index:06d}-7d9f8c-gpus-{index * 7919 % 100000:05x}"
    return {
        "metadata": {
            "name": name,
            "namespace": f"team-{index % NAMESPACES}",
            "uid": f"00000000-0000-4000-8000-{index:012d}",
            "resourceVersion": str(index),
            "generateName": f"train-{index:06d}-7d9f8c-gpus-",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": f"train-{index:06d}-7d9f8c",
                    "uid": f"10000000-0000-4000-8000-{index:012d}",
                    "controller": True,
                }
            ],
        },
        "spec": {"devices": {"requests": [request]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": f"node-{index % 5000}",
                            "device": f"gpu-{i}",
                        }
                        for i in range(count)
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [f"node-{index % 5000}"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": f"train-{index:06d}-7d9f8c", "uid": "x"}],
        },
    }


class Pages:
    """The API server's paged list, in-process: pages of 500 claims, made as they are asked for."""

    def list_page(self, token: str | None) -> dict[str, Any]:
        start = int(token or 0)
        end = min(start + PAGE, CLAIMS)
        metadata: dict[str, Any] = {"resourceVersion": str(CLAIMS)}
        if end < CLAIMS:
            metadata["continue"] = str(end)
        return {"metadata": metadata, "items": [claim_object(i) for i in range(start, end)]}

    def watch(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return iter(())


def cache_memory() -> tuple[ClaimCache, float, float, float]:
    """The cache listed, its held MB (tracemalloc), the process's RSS growth in MB, and a list's seconds."""
    gc.collect()
    before_rss = rss()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = ClaimCache(Pages(), "ResourceClaim")
    cache._list()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    grown = (rss() - before_rss) / MB
    started = time.perf_counter()  # a second list, untraced: its time (the objects made in-process included)
    ClaimCache(Pages(), "ResourceClaim")._list()
    return cache, held / MB, grown, time.perf_counter() - started


def gpu_pod(claim: str | None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"}}
    spec: dict[str, Any] = {"containers": [{"name": "train", "image": "registry.example/train:1",
                                            "resources": resources}]}  # fmt: skip
    if claim is not None:
        resources["claims"] = [{"name": "gpus"}]
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "team-3"}, "spec": spec}


def measure(obj: dict[str, Any], policies: Any, claims: Any, seconds: float) -> float:
    """Reviews per second of `evaluate` on `obj`."""
    for _ in range(200):
        evaluate(obj, "team-3", policies, None, None, claims)
    done = 0
    gc.collect()
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(100):
            evaluate(obj, "team-3", policies, None, None, claims)
        done += 100
    return done / (time.perf_counter() - start)


def _pods() -> tuple[Any, dict[str, Any], dict[str, Any], ClaimsCache]:
    """The policies, the plain GPU pod, the same pod naming one claim, and a claims view that holds it."""
    policies = parse_policy_sources({"p.yaml": POLICY})
    claims = ClaimCache(Pages(), "ResourceClaim")
    obj = claim_object(NAMESPACES * 4 + 3)  # team-3, 8 of gpu.nvidia.com (16 allowed)
    entry = claims._entry(obj)
    assert entry is not None
    claims.held = {entry[0]: {entry[1]: entry[2]}}
    claims._listed = True
    view = ClaimsCache(claims, ClaimCache(Pages(), "ResourceClaimTemplate"))
    return policies, gpu_pod(None), gpu_pod(entry[1]), view


def _child(which: str, calls: int) -> None:
    """Inside callgrind: warm up, then `calls` reviews inside the counted `functools.reduce`."""
    policies, plain, claiming, view = _pods()
    obj = claiming if which == "claim" else plain

    def call() -> Any:
        return evaluate(obj, "team-3", policies, None, None, view)

    callgrind_child(call, calls)


def instructions(which: str, calls: int = 500) -> float | None:
    """Instructions per review of the plain pod or the pod with a claim (valgrind), or None without it."""
    return callgrind_or_none("bench.dra", which, calls)


def main(seconds: float = 0.5, rounds: int = 9) -> bool:
    cache, held_mb, rss_mb, list_s = cache_memory()
    print(table(f"{CLAIMS:,} ResourceClaims in one worker's cache", ["held (tracemalloc)", "RSS growth", "list"],
                [(f"{held_mb:.1f} MB", f"{rss_mb:.1f} MB", f"{list_s:.2f} s")]))  # fmt: skip
    core = pin_to_one_core()
    policies, plain, claiming, _ = _pods()
    view = ClaimsCache(cache, ClaimCache(Pages(), "ResourceClaimTemplate"))  # the 100,000 claims
    decision = evaluate(claiming, "team-3", policies, None, None, view)
    assert decision.violations == [] and decision.warnings == [], decision
    runs: dict[str, list[float]] = {"plain": [], "with a claim": []}
    for number in range(rounds):
        pair = [("plain", plain), ("with a claim", claiming)]
        for label, obj in pair if number % 2 == 0 else reversed(pair):
            runs[label].append(measure(obj, policies, view, seconds))
    timed = statistics.median(p / c - 1 for p, c in zip(runs["plain"], runs["with a claim"], strict=True))
    rows = [(label, statistics.median(values)) for label, values in runs.items()]
    print(table(f"engine.evaluate, one core (core {core}), medians of {rounds} paired rounds",
                ["pod", "reviews/s"], rows))  # fmt: skip
    counted = {which: instructions(which) for which in ("plain", "claim")}
    if counted["plain"] is not None and counted["claim"] is not None:
        cost, how = counted["claim"] / counted["plain"] - 1, "instructions"
        print(f"  instructions per review: plain {counted['plain']:,.0f}, with a claim {counted['claim']:,.0f}")
    else:
        cost, how = timed, "timed"
    print(f"  with a claim, timed: {timed:+.1%} time per review (median of {rounds} paired rounds)")
    ok = check(
        [
            (f"{CLAIMS:,} claims hold < 50 MB per worker", held_mb < 50, f"{held_mb:.1f} MB (RSS +{rss_mb:.1f} MB)"),
            ("a pod with a claim costs <= 10% more than the plain GPU pod", cost <= 0.10, f"{cost:+.1%} ({how})"),
        ]
    )
    write_results("dra", {"claims": CLAIMS, "held_mb": held_mb, "rss_mb": rss_mb, "list_s": list_s,
                          "reviews_per_s": dict(rows), "timed_cost": timed, "instructions": counted, "cost": cost,
                          "targets_met": ok})  # fmt: skip
    return ok


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(0 if main() else 1)
