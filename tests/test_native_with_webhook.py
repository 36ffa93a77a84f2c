"""The native policies and the webhook installed together never fight.

The API server runs every MutatingAdmissionPolicy and mutating webhook in the mutating phase, in no order it
promises, and under `reinvocationPolicy: IfNeeded` calls each once more when a later one changed the object;
then its own validation; then every ValidatingAdmissionPolicy and validating webhook. For every Pod the compiled
set covers (the corpus of tests/test_native_policies.py, and generated pods), in both orders (the MAP then
/mutate, /mutate then the MAP) and with each reinvoked once more:

- the Pod ends with the resources and env the webhook alone gives it;
- it is changed once: the second pass of each changes nothing;
- the VAP and /validate agree on the final Pod, and with the webhook alone: the VAP never denies what the
  webhook admits, nor admits what it denies.

/mutate is answered as the server answers it (`build_response`, its JSON Patch applied as evanphx/json-patch
does); the MAP is selected and applied as test_native_policies.py does.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import apiserver_rules, evanphx, kube_cel
from tests.native_admission import bound, by_name, matches, mutate_with, request_for, variables_of
from tests.test_native_policies import CASES, EXCLUDED, NAMESPACES, NATIVE, NOT_COVERED, POLICIES, decoded, pods
from webhook.admission.engine import evaluate
from webhook.admission.native.scope import outside
from webhook.admission.review import WebhookMode, build_response, make_review, parse_review

MAPS = by_name(NATIVE, "MutatingAdmissionPolicy")
VAPS = by_name(NATIVE, "ValidatingAdmissionPolicy")
MAP_BINDINGS = by_name(NATIVE, "MutatingAdmissionPolicyBinding")
VAP_BINDINGS = by_name(NATIVE, "ValidatingAdmissionPolicyBinding")


def _policy_name(namespace: str, obj: dict[str, Any]) -> str | None:
    """The one compiled policy bound to and matching the namespace (None: an excluded namespace)."""
    scope = kube_cel.Scope({"object": obj, "request": request_for(obj, namespace)})
    chosen = [
        name for name, policy in MAPS.items() if bound(MAP_BINDINGS[name], namespace, {}) and matches(policy, scope)
    ]
    assert len(chosen) <= 1, chosen
    return chosen[0] if chosen else None


def the_map(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The MutatingAdmissionPolicy's pass over `obj`."""
    name = _policy_name(namespace, obj)
    return obj if name is None else mutate_with(MAPS[name], obj, request_for(obj, namespace))


def _answer(namespace: str, obj: dict[str, Any], which: WebhookMode) -> dict[str, Any]:
    request = parse_review(json.dumps(make_review(obj, namespace=namespace)).encode())
    return build_response(request, evaluate(obj, namespace, POLICIES), mode=which)["response"]


@dataclass
class Denied(Exception):
    """/mutate refused the pod: the mutating phase ends there."""

    message: str


def the_webhook(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """/mutate's pass over `obj`: its JSON Patch applied, or Denied."""
    answer = _answer(namespace, obj, "mutate")
    if not answer["allowed"]:
        raise Denied(answer["status"]["message"])
    return evanphx.apply(obj, json.loads(base64.b64decode(answer["patch"]))) if "patch" in answer else obj


def vap_denies(namespace: str, obj: dict[str, Any]) -> bool:
    """The ValidatingAdmissionPolicy denies `obj` (its binding's action is Deny and the validation fails)."""
    name = _policy_name(namespace, obj)
    if name is None or name not in VAPS:
        return False
    scope = variables_of(VAPS[name], obj, request_for(obj, namespace))
    (validation,) = VAPS[name]["spec"]["validations"]
    failed = scope.evaluate(validation["expression"]) is not True
    return failed and VAP_BINDINGS[name]["spec"]["validationActions"] == ["Deny"]


@dataclass
class Admission:
    allowed: bool
    obj: dict[str, Any]


def _containers(obj: dict[str, Any]) -> list[tuple[Any, Any]]:
    return [
        (body.get("resources"), body.get("env"))
        for section in ("initContainers", "containers")
        for body in obj["spec"].get(section, [])
    ]


def webhook_alone(namespace: str, obj: dict[str, Any]) -> Admission:
    """The default install: /mutate, the API server's validation, /validate."""
    try:
        mutated = the_webhook(namespace, obj)
    except Denied:
        return Admission(False, obj)
    if apiserver_rules.pod_spec_errors(mutated["spec"]):
        return Admission(False, mutated)
    return Admission(_answer(namespace, mutated, "validate")["allowed"], mutated)


def both(namespace: str, obj: dict[str, Any], first: str) -> Admission:
    """Both installed, `first` ("map" or "webhook") running first in the mutating phase, each then reinvoked
    once; every pass after the first of each must change nothing. Then both validations, which must agree."""
    passes = {"map": the_map, "webhook": the_webhook}
    order = [first, "webhook" if first == "map" else "map"]
    try:
        once = obj
        for which in order:
            once = passes[which](namespace, once)
        again = once
        for which in order:
            again = passes[which](namespace, again)
            assert _containers(again) == _containers(once), f"{which} changed the pod on its second pass"
    except Denied:
        return Admission(False, obj)
    if apiserver_rules.pod_spec_errors(once["spec"]):
        return Admission(False, once)
    webhook_allows = _answer(namespace, once, "validate")["allowed"]
    native_denies = vap_denies(namespace, once)
    assert native_denies == (not webhook_allows), ("VAP denies", native_denies, "/validate allows", webhook_allows)
    return Admission(webhook_allows, once)


def check(namespace: str, obj: dict[str, Any]) -> None:
    """Both orders end where the webhook alone ends: same verdict, same resources and env. The pod is in the
    namespace, as the API server sets it before admission."""
    obj["metadata"]["namespace"] = namespace
    alone = webhook_alone(namespace, obj)
    for first in ("map", "webhook"):
        together = both(namespace, obj, first)
        assert together.allowed == alone.allowed, first
        assert _containers(together.obj) == _containers(alone.obj), first


COVERED = sorted(case for case in CASES if case not in NOT_COVERED and CASES[case][0] not in EXCLUDED)


@pytest.mark.parametrize("case", COVERED)
def test_the_map_and_the_webhook_agree_in_either_order(case: str) -> None:
    namespace, obj = CASES[case]
    check(namespace, decoded(obj))


def test_every_covered_case_is_checked() -> None:
    assert len(COVERED) == 338  # the corpus's 339 covered cases but the excluded namespace


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(namespace=st.sampled_from([n for n in NAMESPACES if n not in EXCLUDED]), obj=pods())
def test_generated_pods_pass_both_in_either_order(namespace: str, obj: dict[str, Any]) -> None:
    obj = decoded(obj)
    if outside(obj, POLICIES.for_namespace(namespace)) is None:
        check(namespace, obj)


def test_a_replica_the_map_renamed_is_one_the_webhook_leaves_alone_and_the_other_way_round() -> None:
    obj = decoded(CASES["shared: one GPU becomes a replica"][1])
    obj["metadata"]["namespace"] = "shared"
    by_map, by_webhook = the_map("shared", obj), the_webhook("shared", obj)
    assert _containers(by_map) == _containers(by_webhook) != _containers(obj)
    assert _containers(the_webhook("shared", by_map)) == _containers(by_map)
    assert the_map("shared", by_webhook) == by_webhook
