"""Instructions per review, counted by valgrind's callgrind: the engine's work in a unit that the machine's
speed and load cannot disturb (the timed benchmarks drift by up to 2 times on a shared virtual machine).

Each count runs in a `python` of its own under callgrind, with counting switched on only inside the
`functools.reduce` that drives the measured calls: start-up, imports and warm-up are not counted. There is no
target here; the counts are for comparing one change of the code with the next, and the README quotes them.
Without valgrind the benchmark says so and passes.
"""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import callgrind_per_call, table, write_results
from bench.engine import NAMESPACE, SCENARIOS, policy_sources

CALLS = 500  # per count: the counts are exact, so a few hundred calls give every digit that matters
WARM_UP = 200  # calls before counting: memos filled, as in a long-running worker

# What is counted: the engine's entry point for each scenario, review (a)'s parts, and the harness's own
# cost per call (a few hundred instructions, included in every other count).
PARTS = {
    "a: evaluate": "a: 2 containers, mutate",
    "a: evaluate, 5,000-node snapshot": "a: 2 containers, mutate",
    "a: mutate": "a: 2 containers, mutate",
    "a: validate (the mutated pod)": "a: 2 containers, mutate",
    "a: relevance check": "a: 2 containers, mutate",
    "b: evaluate": "b: 20 containers",
    "c: evaluate": "c: no GPU",
    "the harness alone (a call doing nothing)": "c: no GPU",
}


def _call(part: str) -> Callable[[], Any]:
    """The one call that `part` counts, with everything it needs made beforehand."""
    from webhook.admission.base.podspec import mentions_gpu, pod_spec_path
    from webhook.admission.engine import evaluate
    from webhook.admission.phases.mutate import mutate
    from webhook.admission.phases.validate import validate
    from webhook.admission.policy.loader import parse_policy_sources

    policies = parse_policy_sources(policy_sources(1))
    policy = policies.for_namespace(NAMESPACE)
    obj = SCENARIOS[PARTS[part]]
    spec_path = pod_spec_path(obj)
    if part.startswith("the harness"):
        return lambda: None
    if part.endswith("evaluate"):
        return lambda: evaluate(obj, NAMESPACE, policies)
    if part.endswith("snapshot"):  # the cluster checks' cost (bench/cluster.py times it)
        from bench.cluster import node_object
        from webhook.admission.cluster.nodes import ClusterView, NodeInfo

        view = ClusterView.of(NodeInfo.from_object(node_object(i)) for i in range(5_000))
        return lambda: evaluate(obj, NAMESPACE, policies, None, view)
    if part == "a: mutate":
        return lambda: mutate(obj, policy, spec_path)
    if part.startswith("a: validate"):
        mutated = mutate(obj, policy, spec_path).obj
        return lambda: validate(mutated, policy, spec_path)
    return lambda: mentions_gpu(obj, spec_path)


def _child(part: str, calls: int) -> None:
    """Run inside callgrind: warm up, then make `calls` calls inside the counted `functools.reduce`."""
    call = _call(part)
    for _ in range(WARM_UP):
        call()
    functools.reduce(lambda _, __: call(), range(calls), None)


def count(part: str, calls: int = CALLS) -> float:
    """Instructions per call of `part`."""
    return callgrind_per_call("bench.instructions", part, calls)


def main() -> bool:
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (Debian: apt-get install valgrind)")
        return True
    with ThreadPoolExecutor(max_workers=2) as pool:  # each count is a process of its own
        counts = dict(zip(PARTS, pool.map(count, PARTS), strict=True))
    rows = [(part, round(value)) for part, value in counts.items()]
    print(table("instructions per call (valgrind callgrind, 1 policy)", ["what", "instructions"], rows))
    write_results("instructions", {"calls_per_count": CALLS, "instructions_per_call": counts})
    return True


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(0 if main() else 1)
