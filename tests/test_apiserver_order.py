"""The API server's order for a review: /mutate, the API server's own validation, then /validate.

The API server validates the object between the mutating and the validating webhooks, so a GPU request that
its validation refuses never reaches /validate: the user would read the API server's message, not ours.
/mutate denies those itself, whatever the enforcement, and these tests prove that nothing /mutate admits is
refused by those rules (tests/apiserver_rules.py, an oracle written from Kubernetes' validation source), and
that /validate, judging the object after mutation, keeps its verdict.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given

from tests import evanphx
from tests.apiserver_rules import pod_spec_errors
from tests.engine_support import EXCLUSIVE, MIG, TIME_SLICING, container, pod, policy
from tests.test_engine_properties import NS, SETTINGS, objects, pod_spec, policies
from webhook.admission.engine import evaluate
from webhook.admission.policy.model import Enforcement, Policy, PolicySet
from webhook.admission.review import build_response, make_review, parse_review


def review(obj: dict[str, Any], pol: Policy, webhook: str) -> dict[str, Any]:
    """What the webhook answers `webhook` for `obj` in the policy's namespace under `pol`."""
    namespace = pol.namespaces[0]
    request = parse_review(json.dumps(make_review(obj, namespace=namespace)).encode())
    decision = evaluate(obj, namespace, PolicySet((pol,)))
    return build_response(request, decision, mode=webhook)["response"]


def api_server_order(obj: dict[str, Any], pol: Policy) -> tuple[dict[str, Any], list[str], dict[str, Any] | None]:
    """/mutate's answer; the API server's errors on the patched object; /validate's answer (None when the
    object never got that far)."""
    mutated = review(obj, pol, "mutate")
    if not mutated["allowed"]:
        return mutated, [], None
    patch = json.loads(base64.b64decode(mutated["patch"])) if "patch" in mutated else []
    after = evanphx.apply(obj, patch)
    errors = pod_spec_errors(pod_spec(after))
    return mutated, errors, (review(after, pol, "validate") if not errors else None)


WARN = policy(enforcement=Enforcement.WARN)
AUDIT = policy(enforcement=Enforcement.AUDIT)
AUDIT_MIG = policy(sharing=MIG.sharing, gpu=MIG.gpu, enforcement=Enforcement.AUDIT)


@pytest.mark.parametrize(
    ("pol", "resources", "message"),
    [
        # The two measured on a real kube-apiserver: a fraction in a whole-GPU namespace, request 1 and limit 2.
        (
            WARN,
            {"limits": {"nvidia.com/gpu": "500m"}},
            'container "train": nvidia.com/gpu "500m" (0.5 GPU) is fractional, but GPUs are whole devices '
            '(the API server refuses it anyway); request a whole number of GPUs (policy "team" gives whole GPUs '
            "only; ask for a namespace with sharing)",
        ),
        (
            AUDIT,
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            'container "train": nvidia.com/gpu request "1" differs from limit "2"; GPUs cannot be overcommitted (the '
            "API server refuses it anyway): set request and limit to the same whole number",
        ),
        (
            AUDIT,
            {"limits": {"nvidia.com/gpu": "-1"}},
            'container "train": nvidia.com/gpu limit "-1" is negative (the API server refuses it anyway); set a whole '
            "number of devices >= 0",
        ),
        (
            AUDIT_MIG,
            {"limits": {"nvidia.com/gpu": "0.5"}},
            'container "train": nvidia.com/gpu "0.5" is fractional, but GPUs are whole devices (the API server refuses '
            'it anyway); request nvidia.com/gpu: 1, which policy "team" turns into nvidia.com/mig-1g.10gb',
        ),
    ],
    ids=["fraction-under-warn", "request-not-limit-under-audit", "negative-under-audit", "mig-fraction-no-convert"],
)
def test_mutate_denies_what_the_api_server_would_refuse_whatever_the_enforcement(pol, resources, message):
    obj = pod(container("train", **resources))
    answer = review(obj, pol, "mutate")
    assert answer["allowed"] is False
    assert answer["status"] == {"code": 403, "reason": "Forbidden", "message": message}
    assert "patch" not in answer


def test_a_workload_template_is_refused_the_same_way():
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": pod(container("train", limits={"nvidia.com/gpu": "0.5"}))["spec"]}},
    }
    answer = review(deployment, WARN, "mutate")
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith('container "train": nvidia.com/gpu "0.5" is fractional')


def test_policy_violations_stay_with_validate_and_its_enforcement():
    obj = pod(container("train", limits={"nvidia.com/gpu": "9"}))  # valid to the API server, over the maximum
    assert review(obj, EXCLUSIVE, "mutate")["allowed"] is True
    assert review(obj, EXCLUSIVE, "validate")["allowed"] is False
    warned = review(obj, WARN, "validate")
    assert warned["allowed"] is True
    assert warned["warnings"] == [
        'gpu-admission: container "train": nvidia.com/gpu "9": at most 8 per container; ask for fewer'
    ]


def test_mapped_requests_over_the_maximum_are_left_for_validate_in_the_users_words():
    obj = pod(container("app", limits={"nvidia.com/gpu": "2"}))
    mutated, errors, validated = api_server_order(obj, TIME_SLICING)
    assert (mutated["allowed"], errors) == (True, [])
    assert validated is not None and validated["allowed"] is False
    assert validated["status"]["message"].startswith('container "app": nvidia.com/gpu 2 (nvidia.com/gpu.shared 2')


@SETTINGS
@given(objects(), policies())
def test_nothing_mutate_admits_is_refused_by_the_api_server(obj, pol):
    mutated, errors, validated = api_server_order(obj, pol)
    assert errors == [], (errors, mutated)
    if validated is not None:  # /validate judges the mutated object as the engine judged the original
        decision = evaluate(obj, NS, PolicySet((pol,)))
        assert validated["allowed"] == decision.allowed
        assert not decision.refusals
