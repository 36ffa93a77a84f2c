"""`kubectl debug`: containers added to a running Pod through the `pods/ephemeralcontainers` subresource.

The API server sends an UPDATE of the Pod (kind Pod, resource pods, subResource ephemeralcontainers) with the
whole Pod as object and oldObject. Only the ephemeral containers the update adds are judged: the rest of the
Pod was judged when it was created, and a policy tightened since must not keep anyone from debugging it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.conftest import LiveServer
from webhook.admission.engine import evaluate
from webhook.admission.policy.loader import parse_policy_sources
from webhook.admission.policy.model import PolicySet

VISIBLE_ALL = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


def running_pod(gpus: str = "1", ephemeral: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "train", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
    }
    if ephemeral is not None:
        spec["ephemeralContainers"] = ephemeral
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "team-a", "uid": "6f3f0c58-0000-4000-8000-000000000001"},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def debugger(name: str = "debugger", env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "image": "busybox:1.36",
        "stdin": True,
        "tty": True,
        "targetContainerName": "train",
    }
    if env is not None:
        body["env"] = env
    return body


def policies(enforcement: str = "enforce") -> PolicySet:
    return parse_policy_sources(
        {
            "p.yaml": "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: default}\n"
            f"spec: {{namespaces: ['*'], enforcement: {enforcement}, limits: {{maxPerContainer: 1, maxPerPod: 1}}}}\n"
        }
    )


@pytest.mark.parametrize(
    ("old_ephemeral", "new_ephemeral", "decision", "violations"),
    [
        # A plain debugger on a GPU pod: allowed, untouched.
        (None, [debugger()], "allow", []),
        # The debugger asks for every GPU on the node through the variable: denied, naming that container only.
        (None, [debugger("peek", VISIBLE_ALL)], "deny", ["peek"]),
        # An earlier debugger that set it (admitted before the policy said otherwise) is not judged again.
        ([debugger("peek", VISIBLE_ALL)], [debugger("peek", VISIBLE_ALL), debugger("second")], "allow", []),
        # ... but a second one that sets it is.
        ([debugger("first")], [debugger("first"), debugger("peek", VISIBLE_ALL)], "deny", ["peek"]),
    ],
)
def test_only_the_ephemeral_containers_an_update_adds_are_judged(old_ephemeral, new_ephemeral, decision, violations):
    old = running_pod("2", old_ephemeral)  # 2 GPUs: over today's maximum of 1, admitted under an older policy
    new = running_pod("2", new_ephemeral)
    result = evaluate(new, "team-a", policies(), old)
    assert result.verdict == decision
    assert result.patch == [] and result.mutated is new
    assert len(result.violations) == len(violations)
    for line, name in zip(result.violations, violations, strict=True):
        # The rule's own wording is validate.py's; what matters here is which container it names.
        assert line.startswith(f'ephemeral container "{name}": ') and "NVIDIA_VISIBLE_DEVICES" in line, line


def test_the_same_pod_on_create_is_judged_whole():
    """The contrast: on CREATE (no old object) the over-limit container is denied as before."""
    result = evaluate(running_pod("2", [debugger()]), "team-a", policies())
    assert result.verdict == "deny"
    assert [line.split(":")[0] for line in result.violations] == ['container "train"']


def test_an_update_that_changes_more_than_ephemeral_containers_is_judged_whole():
    """No API server sends one for a Pod (the webhooks match Pod UPDATEs only through the subresource), and a
    malformed old object is no reason to judge less."""
    old = running_pod("1")
    new = running_pod("2", [debugger()])  # the GPU count changed too
    assert evaluate(new, "team-a", policies(), old).verdict == "deny"
    assert evaluate(new, "team-a", policies(), {"kind": "Pod", "spec": "not a spec"}).verdict == "deny"


@pytest.mark.parametrize(("enforcement", "allowed", "decision"), [("warn", True, "warn"), ("audit", True, "audit")])
def test_an_added_container_follows_the_policys_enforcement(enforcement, allowed, decision):
    result = evaluate(running_pod("1", [debugger("peek", VISIBLE_ALL)]), "team-a", policies(enforcement), running_pod())
    assert (result.allowed, result.verdict) == (allowed, decision)


def ephemeral_containers_review(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What the API server sends for `kubectl debug -it trainer --image=busybox:1.36 --target=train`."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d8f3c2a-5b1e-4c1f-9f59-2f5b7f0e9a11",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "ephemeralcontainers",
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "ephemeralcontainers",
            "name": "trainer",
            "namespace": "team-a",
            "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
        },
    }


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_the_server_answers_an_ephemeralcontainers_review(live_server: LiveServer, endpoint: str) -> None:
    old = running_pod("1")
    allowed = live_server.post(endpoint, ephemeral_containers_review(old, running_pod("1", [debugger()])))
    assert allowed.status_code == 200, allowed.text
    answer = allowed.json()["response"]
    assert answer["allowed"] is True and "patch" not in answer
    denied_new = running_pod("1", [debugger("peek", VISIBLE_ALL)])
    response = live_server.post(endpoint, ephemeral_containers_review(copy.deepcopy(old), denied_new))
    answer = response.json()["response"]
    if endpoint == "/validate":
        assert answer["allowed"] is False
        assert 'ephemeral container "peek": ' in answer["status"]["message"], json.dumps(answer)
    else:
        assert answer["allowed"] is True and "patch" not in answer  # /mutate never patches a debug container
