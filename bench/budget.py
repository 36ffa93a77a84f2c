"""Benchmark 9: what a namespace's GPU budget costs a review in the engine.

The same pod (one container asking `nvidia.com/gpu: 1`, mapped to a time-slicing replica of 4) reviewed by
`engine.evaluate` without a budget and with one (a ResourceQuota of `requests.nvidia.com/gpu: 4` holding 2.5
GPU-equivalents, the usual quota; and the same quota scoped to NotTerminating pods: the pod fits, so its scope
is not read), counted by callgrind where valgrind is installed, else timed in paired rounds on one core. The API
calls that bring the budget (the server's ledger) are not the engine's and are counted apart (the server's
benchmarks). Also counted: `pod_ask` alone, memoized per container shape. A review without a budget works out
no ask. Target: the budgeted review costs at most 10% more than the same review without a budget.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from fractions import Fraction
from typing import Any

from bench.common import callgrind_child, callgrind_or_none, check, pin_to_one_core, table, write_results
from webhook.admission.budgets.budget import Usage, pod_ask
from webhook.admission.cluster.quota import gpu_quota
from webhook.admission.engine import evaluate
from webhook.admission.policy.loader import parse_policy_sources

NAMESPACE = "team-3"
POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: teams}
spec:
  namespaces: ["team-*"]
  sharing: {mode: time-slicing, replicas: 4}
"""
QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "gpus", "namespace": NAMESPACE},
    "spec": {"hard": {"requests.nvidia.com/gpu": "4", "pods": "50"}},
}
SCOPED = {**QUOTA, "spec": {**QUOTA["spec"], "scopes": ["NotTerminating"]}}


def gpu_pod() -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"}}
    container = {"name": "train", "image": "registry.example/train:1", "resources": resources}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": NAMESPACE},
            "spec": {"containers": [container]}}  # fmt: skip


def _setup(quota_object: dict[str, Any] = QUOTA) -> tuple[Any, dict[str, Any], list[Usage]]:
    policies = parse_policy_sources({"p.yaml": POLICY})
    quota = gpu_quota(quota_object)
    assert quota is not None
    return policies, gpu_pod(), [Usage(quota, Fraction(5, 2))]


def _call(which: str) -> Any:
    policies, obj, budget = _setup(SCOPED if which == "scoped" else QUOTA)
    if which in ("budget", "scoped"):
        return lambda: evaluate(obj, NAMESPACE, policies, budget=budget)
    if which == "ask":
        policy = policies.for_namespace(NAMESPACE)
        mutated = evaluate(obj, NAMESPACE, policies).mutated
        return lambda: pod_ask(mutated, policy, None, NAMESPACE)
    return lambda: evaluate(obj, NAMESPACE, policies)


def _child(which: str, calls: int) -> None:
    """Inside callgrind: warm up, then `calls` calls inside the counted `functools.reduce`."""
    callgrind_child(_call(which), calls)


def instructions(which: str, calls: int = 500) -> float | None:
    return callgrind_or_none("bench.budget", which, calls)


def measure(which: str, seconds: float) -> float:
    call = _call(which)
    for _ in range(200):
        call()
    gc.collect()
    done, start = 0, time.perf_counter()
    while time.perf_counter() < start + seconds:
        for _ in range(100):
            call()
        done += 100
    return done / (time.perf_counter() - start)


def main(seconds: float = 0.5, rounds: int = 7) -> bool:
    policies, obj, budget = _setup()
    decision = evaluate(obj, NAMESPACE, policies, budget=budget)
    assert decision.allowed and decision.ask is not None and decision.ask.total == Fraction(1, 4), decision
    core = pin_to_one_core()
    runs: dict[str, list[float]] = {"plain": [], "budget": []}
    for number in range(rounds):
        for which in ("plain", "budget") if number % 2 == 0 else ("budget", "plain"):
            runs[which].append(measure(which, seconds))
    timed = statistics.median(p / b - 1 for p, b in zip(runs["plain"], runs["budget"], strict=True))
    print(table(f"engine.evaluate, one core (core {core}), medians of {rounds} paired rounds", ["review", "reviews/s"],
                [(which, statistics.median(values)) for which, values in runs.items()]))  # fmt: skip
    counted = {which: instructions(which) for which in ("plain", "budget", "scoped", "ask")}
    plain, budgeted, scoped = counted["plain"], counted["budget"], counted["scoped"]
    if plain is not None and budgeted is not None and scoped is not None:
        cost, how = budgeted / plain - 1, "instructions"
        print(f"  instructions per review: without a budget {plain:,.0f}, with one {budgeted:,.0f} ({cost:+.1%}), "
              f"scoped {scoped:,.0f} ({scoped / plain - 1:+.1%}); pod_ask alone {counted['ask']:,.0f}")  # fmt: skip
    else:
        cost, how = timed, "timed"
    print(f"  with a budget, timed: {timed:+.1%} time per review (median of {rounds} paired rounds)")
    ok = check([("a budgeted review costs <= 10% more than without a budget", cost <= 0.10, f"{cost:+.1%} ({how})")])
    write_results("budget", {"instructions": counted, "timed_cost": timed, "cost": cost, "targets_met": ok})
    return ok


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(0 if main() else 1)
