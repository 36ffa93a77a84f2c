"""The budget ledger's record (webhook/server/ledger.py): what an entry keeps of a pod is enough for every quota
scope to count it as it counts the pod itself, a record round-trips through its ConfigMap, and a record edited by
hand is read as far as it can be, never fatally. The API calls are tested against the loopback API in
tests/test_budget_server.py."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import pytest

from webhook.admission.cluster.quota import OPERATORS, gpu_quota
from webhook.server.ledger import LEDGER_LABEL, NAMESPACE_LABEL, Entry, Record, pod_of, scope_of

CROSS = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {}, "topologyKey": "zone", "namespaces": ["other"]}]}}  # fmt: skip
LOCAL = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 1, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}]}}  # fmt: skip


def pod(
    priority: str | None = None, deadline: int | None = None, cpu: str | None = None, affinity: Any = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu.shared": "1"}}
    if cpu is not None:
        resources["requests"] = {"cpu": cpu}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": resources}]}
    if priority is not None:
        spec["priorityClassName"] = priority
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


PODS = [
    pod(priority, deadline, cpu, affinity)
    for priority, deadline, cpu, affinity in itertools.product(
        (None, "high", "low"), (None, 0, 600), (None, "1"), (None, CROSS, LOCAL)
    )
]


def quota(scopes: list[str] | None = None, expressions: list[dict[str, Any]] | None = None) -> Any:
    spec: dict[str, Any] = {"hard": {"requests.nvidia.com/gpu": "2"}}
    if scopes is not None:
        spec["scopes"] = scopes
    if expressions is not None:
        spec["scopeSelector"] = {"matchExpressions": expressions}
    obj = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "team-a"},
           "spec": spec}  # fmt: skip
    found = gpu_quota(obj)
    assert found is not None
    return found


SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "CrossNamespacePodAffinity")


def priority_quota(operator: str) -> Any:
    values = {"values": ["high"]} if operator in ("In", "NotIn") else {}
    return quota(expressions=[{"scopeName": "PriorityClass", "operator": operator, **values}])


QUOTAS = [
    quota(),
    *(quota([scope]) for scope in SCOPES),
    *(priority_quota(operator) for operator in OPERATORS),
    quota(["NotTerminating", "NotBestEffort"]),
]


@pytest.mark.parametrize("counted", PODS, ids=lambda p: repr(p["spec"])[:60])
def test_an_entrys_scope_is_counted_by_every_quota_as_the_pod_is(counted: dict[str, Any]) -> None:
    stand_in = pod_of("team-a", "p", scope_of(counted))
    for each in QUOTAS:
        assert each.counts(stand_in) == each.counts(counted), (each.requirements, counted["spec"])


def test_a_record_round_trips_through_its_configmap_and_sums_what_each_quota_counts() -> None:
    high, plain = pod(priority="high", cpu="1"), pod()
    entries = {
        "uid-1": Entry("a", Fraction(1, 4), scope_of(high), 1.5),
        "uid-2": Entry("b", Fraction(1, 7), scope_of(plain), 2.0),
        "uid-3": Entry("c", Fraction(1, 4), scope_of(plain), 2.5),
    }
    written = Record("team-a", "").configmap("gpu-admission", entries)
    assert written["metadata"]["name"] == "gpu-budget-team-a"
    assert written["metadata"]["labels"][LEDGER_LABEL] == "true"
    assert written["metadata"]["labels"][NAMESPACE_LABEL] == "team-a"
    assert written["data"]["uid-2"] == '{"at":2.0,"gpus":"1/7","pod":"b","scope":{"bestEffort":true}}'
    assert "resourceVersion" not in written["metadata"]  # a create
    written["metadata"]["resourceVersion"] = "7"
    read = Record.of(written)
    assert read is not None and read.version == "7" and read.entries == entries
    assert read.used(quota()) == Fraction(1, 4) + Fraction(1, 7) + Fraction(1, 4)
    high_only = quota(expressions=[{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}])
    assert read.used(high_only) == Fraction(1, 4)
    assert read.used(quota(["BestEffort"])) == Fraction(1, 7) + Fraction(1, 4)  # GPUs alone: BestEffort QoS
    assert Record("team-a", "7").configmap("gpu-admission", {})["metadata"]["resourceVersion"] == "7"


def test_a_record_edited_by_hand_keeps_what_it_can_read() -> None:
    written = Record("team-a", "").configmap("gpu-admission", {"uid-1": Entry("a", Fraction(1, 2), (), 1.0)})
    written["data"].update({"uid-2": "not json", "uid-3": '{"pod": "x", "gpus": "1/0", "at": 1}', "uid-4": "[]"})
    read = Record.of(written)
    assert read is not None and list(read.entries) == ["uid-1"]
    other = {**written, "metadata": {**written["metadata"], "name": "gpu-budget-team-b"}}
    assert Record.of(other) is None  # its name does not match the namespace it says it counts
    assert Record.of({"metadata": {"name": "unrelated"}}) is None
