"""Benchmark 1: the admission engine in process, on one core.

Scenarios (each with 1 and with 1,000 policies loaded):
  (a) a 2-container pod that needs requests copied into limits, mapping to the shared resource, env injection;
  (b) a 20-container pod (8 with GPUs, 12 without);
  (c) a pod without GPUs.
Targets: (a) >= 20,000 reviews/s, (c) >= 50,000 reviews/s; 1,000 policies cost (a) at most 10%.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

from bench.common import check, percentile, pin_to_one_core, table, write_results
from webhook.admission.cluster.nodes import ClusterView
from webhook.admission.engine import evaluate
from webhook.admission.policy.loader import parse_policy_sources

NAMESPACE = "inference"

TARGET_POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: inference}
spec:
  namespaces: [inference]
  sharing: {mode: time-slicing, replicas: 4}
"""


def policy_sources(count: int) -> dict[str, str]:
    """The target policy plus `count - 1` others: half exact names, half globs (the expensive kind)."""
    docs = [TARGET_POLICY]
    for i in range(count - 1):
        pattern = f"team-{i}" if i % 2 else f"proj-{i}-*"
        docs.append(
            "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\n"
            f"metadata: {{name: p{i}}}\nspec:\n  namespaces: ['{pattern}']\n"
        )
    return {"policies.yaml": "---\n".join(docs)}


def gpu_container(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.example/serve:1.4",
        "args": ["--port", "8080"],
        "ports": [{"containerPort": 8080, "name": "http"}],
        "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"}},
        "env": [{"name": "MODEL", "value": "m"}],
    }


def plain_container(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.example/sidecar:2",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
    }


def pod(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "serve-7d9f", "namespace": NAMESPACE, "labels": {"app": "serve"}},
        "spec": {"containers": containers, "serviceAccountName": "serve", "nodeSelector": {"gpu": "true"}},
    }


SCENARIOS = {
    "a: 2 containers, mutate": pod([gpu_container("serve"), gpu_container("warmup")]),
    "b: 20 containers": pod([gpu_container(f"g{i}") for i in range(8)] + [plain_container(f"s{i}") for i in range(12)]),
    "c: no GPU": pod([plain_container("web")]),
}


def measure(obj: dict[str, Any], policies, seconds: float, nodes: ClusterView | None = None) -> dict[str, float]:
    """Reviews per second and the median review time of `evaluate` on `obj` (with a node snapshot if given)."""
    for _ in range(200):  # warm caches
        evaluate(obj, NAMESPACE, policies, None, nodes)
    samples: list[float] = []
    clock = time.perf_counter_ns
    deadline = time.perf_counter() + seconds
    gc.collect()
    start = clock()
    while time.perf_counter() < deadline:
        for _ in range(100):
            t0 = clock()
            evaluate(obj, NAMESPACE, policies, None, nodes)
            samples.append(clock() - t0)
    elapsed = (clock() - start) / 1e9
    samples.sort()
    return {
        "reviews_per_s": len(samples) / elapsed,
        "p50_us": percentile(samples, 0.50) / 1000,
        "p99_us": percentile(samples, 0.99) / 1000,
        "reviews": len(samples),
    }


def main(seconds: float = 0.5, rounds: int = 5) -> bool:
    """Each scenario runs in `rounds` paired rounds, 1 policy and 1,000, and the medians are reported: the
    machine's speed drifts, and pairing keeps the 1,000-policy cost comparing like with like. The order within
    a pair alternates, so a machine that slows down (or speeds up) through each pair does not read as a cost."""
    core = pin_to_one_core()
    sets = {1: parse_policy_sources(policy_sources(1)), 1000: parse_policy_sources(policy_sources(1000))}
    results: dict[str, dict[int, dict[str, float]]] = {}
    costs: dict[str, float] = {}
    rows = []
    for name, obj in SCENARIOS.items():
        runs: dict[int, list[dict[str, float]]] = {1: [], 1000: []}
        for round_number in range(rounds):
            pair = list(sets.items())
            for count, policies in pair if round_number % 2 == 0 else reversed(pair):
                assert policies.for_namespace(NAMESPACE).name == "inference"
                runs[count].append(measure(obj, policies, seconds))
        costs[name] = statistics.median(
            1 - many["reviews_per_s"] / one["reviews_per_s"] for one, many in zip(runs[1], runs[1000], strict=True)
        )
        results[name] = {}
        for count, samples in runs.items():
            stats = results[name][count] = {
                key: statistics.median(s[key] for s in samples) for key in ("reviews_per_s", "p50_us", "p99_us")
            }
            rows.append((name, count, stats["reviews_per_s"], stats["p50_us"], stats["p99_us"]))
    title = f"engine.evaluate, one core (core {core}), medians of {rounds} paired rounds"
    print(table(title, ["scenario", "policies", "reviews/s", "p50 µs", "p99 µs"], rows))
    a, c = results["a: 2 containers, mutate"], results["c: no GPU"]
    cost = costs["a: 2 containers, mutate"]
    ok = check(
        [
            ("(a) >= 20,000 reviews/s", a[1]["reviews_per_s"] >= 20_000, f"{a[1]['reviews_per_s']:,.0f}/s"),
            ("(c) >= 50,000 reviews/s", c[1]["reviews_per_s"] >= 50_000, f"{c[1]['reviews_per_s']:,.0f}/s"),
            ("1,000 policies cost (a) <= 10%", cost <= 0.10, f"{cost:+.1%} (median of paired rounds)"),
        ]
    )
    write_results("engine", {"results": results, "cost_of_1000_policies": costs, "targets_met": ok})
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
