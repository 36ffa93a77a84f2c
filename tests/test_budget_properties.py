"""The budget rule as a property: any sequence of pod creates and deletes across sharing modes, each create
judged by `budget.judge` with the quotas' use tracked as the sum of the asks admitted (what the server's ledger
and `check` hold), keeps every quota's use within its hard limit, and never refuses a pod that fits.

Pods are real pod specs mutated by the engine (whole GPUs, time-slicing replicas, MIG fractions, ACK and HAMi
shares, DRA device class resources) and weighed by `pod_ask`; quotas carry scopes, so that a pod counts only
against the quotas that select it.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from tests.engine_support import container, pod, policy
from tests.test_engine_properties import SETTINGS
from webhook.admission.budgets.budget import Usage, judge, pod_ask
from webhook.admission.cluster.quota import gpu_quota
from webhook.admission.engine import evaluate
from webhook.admission.policy.model import GPU, Backend, Fractional, Mode, PolicySet, Sharing

A100 = GPU(model="A100-80GB")
MODES = {
    "whole": policy(),
    "time-slicing": policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), fractional=Fractional.SHARED),
    "mps": policy(sharing=Sharing(mode=Mode.MPS, replicas=3), gpu=A100),
    "mig": policy(sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=A100, fractional=Fractional.MIG),
    "ack": policy(sharing=Sharing(mode=Mode.MEMORY, backend=Backend.ACK), gpu=A100),
    "hami": policy(sharing=Sharing(mode=Mode.MEMORY, backend=Backend.HAMI), gpu=A100),
}
AMOUNTS = {
    "whole": ["1", "2"],
    "time-slicing": ["1", "0.25"],
    "mps": ["1"],
    "mig": ["1", "0.25", "0.5", "0.125"],
    "ack": ["0.25", "0.5", "0.1", "2"],
    "hami": ["0.25", "0.3", "1"],
}


@st.composite
def pods(draw: st.DrawFn) -> tuple[str, dict]:
    """A mode and a pod of it: one or two containers, maybe an init container, maybe a priority class."""
    mode = draw(st.sampled_from(sorted(MODES)))
    amount = draw(st.sampled_from(AMOUNTS[mode]))
    containers = [container("app", limits={"nvidia.com/gpu": amount})]
    if draw(st.booleans()):
        containers.append(container("extra", limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}))
    init = (container("setup", limits={"nvidia.com/gpu": amount}),) if draw(st.booleans()) else ()
    extra = {"priorityClassName": "high"} if draw(st.booleans()) else {}
    return mode, pod(*containers, init=init, **extra)


def quotas(hard_all: Fraction, hard_high: Fraction) -> list:
    every = {"requests.nvidia.com/gpu": str(float(hard_all))}
    high = {"requests.nvidia.com/gpu": str(float(hard_high))}
    selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}
    made = [
        {"kind": "ResourceQuota", "metadata": {"name": "all", "namespace": "team"}, "spec": {"hard": every}},
        {"kind": "ResourceQuota", "metadata": {"name": "high", "namespace": "team"},
         "spec": {"hard": high, "scopeSelector": selector}},
    ]  # fmt: skip
    return [gpu_quota(q) for q in made]


operations = st.lists(st.one_of(pods(), st.integers(min_value=0, max_value=20)), max_size=30)


@SETTINGS
@given(operations, st.sampled_from([0.5, 1, 1.5, 3]), st.sampled_from([0.25, 1, 2]))
def test_any_creates_and_deletes_keep_every_quota_within_hard_and_refuse_only_what_does_not_fit(ops, all_, high):
    budget = quotas(Fraction(all_), Fraction(high))
    used = {q.name: Fraction(0) for q in budget}
    running: list[tuple[dict, Fraction]] = []  # admitted pods (mutated) and their asks
    for op in ops:
        if isinstance(op, int):  # delete the op-th running pod, if any: its share is given back
            if running:
                gone, ask = running.pop(op % len(running))
                for q in budget:
                    if q.counts(gone):
                        used[q.name] -= ask
            continue
        mode, obj = op
        pol = replace(MODES[mode], name=mode)
        policies = PolicySet((pol,))
        if not evaluate(obj, "team", policies).allowed:
            continue  # refused for its own reasons (not the budget's)
        usages = [Usage(q, used[q.name]) for q in budget]
        decision = evaluate(obj, "team", policies, budget=usages)  # the engine judges it (budget.judge)
        ask = pod_ask(decision.mutated, pol, None)
        assert decision.ask == (ask if ask.total else None)
        counting = [q for q in budget if q.counts(decision.mutated)]
        fits = all(used[q.name] + ask.total <= q.hard for q in counting)
        assert decision.allowed == fits, (decision.violations, ask, used)
        assert decision.allowed == (judge(ask, usages, "p", decision.mutated) is None)
        if decision.allowed:
            running.append((decision.mutated, ask.total))
            for q in counting:
                used[q.name] += ask.total
        for q in budget:
            assert 0 <= used[q.name] <= q.hard
    assert sum(ask for _, ask in running) >= 0
