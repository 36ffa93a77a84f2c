"""AdmissionReview in and out (`webhook.admission.review`): pure, no server."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
import pytest

from webhook.admission.engine import Decision
from webhook.admission.review import (
    WARNING_MAX_CHARS,
    WARNINGS_MAX_TOTAL_CHARS,
    ReviewError,
    build_response,
    limit_warnings,
    make_review,
    parse_review,
)

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


def body(review: Any) -> bytes:
    return json.dumps(review).encode()


def request_with(**changes: Any) -> bytes:
    review = make_review(POD, namespace="team-a", uid="u-1")
    for key, value in changes.items():
        if value is ...:
            del review["request"][key]
        else:
            review["request"][key] = value
    return body(review)


# --- parse_review: what a good review gives ---------------------------------------------------------------


def test_a_review_from_make_review_parses_back():
    request = parse_review(body(make_review(POD, namespace="team-a", uid="u-1")))
    assert request.uid == "u-1"
    assert request.api_version == "admission.k8s.io/v1"
    assert request.kind == {"group": "", "version": "v1", "kind": "Pod"}
    assert request.resource == {"group": "", "version": "v1", "resource": "pods"}
    assert (request.operation, request.namespace, request.name) == ("CREATE", "team-a", "train")
    assert request.object == POD and request.old_object is None and request.dry_run is False
    assert request.evaluates and request.engine_namespace == "team-a" and request.object_name == "train"


def test_workloads_get_their_group_and_plural():
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}
    review = make_review(deployment, namespace="ns", operation="UPDATE", version="admission.k8s.io/v1beta1")
    assert review["apiVersion"] == "admission.k8s.io/v1beta1"
    request = review["request"]
    assert request["kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert request["resource"]["resource"] == "deployments"
    assert request["oldObject"] == deployment  # an UPDATE carries the previous object too
    assert parse_review(body(review)).operation == "UPDATE"


def test_the_namespace_and_kind_are_the_requests():
    no_namespace = {**POD, "metadata": {"generateName": "train-"}}
    request = parse_review(request_with(name=..., object=no_namespace))
    assert request.engine_namespace == "team-a"
    assert request.object_name == "train-"  # a pod named by the API server after admission
    assert parse_review(request_with(namespace=..., name=..., object=no_namespace)).engine_namespace == "default"
    no_kind = {k: v for k, v in POD.items() if k != "kind"}
    assert parse_review(request_with(object=no_kind)).engine_object == POD


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"namespace": ...},
            "request.object.metadata.namespace: 'team-a' differs from no request.namespace; the API "
            "server sends the namespace the object is stored in: send the two equal",
        ),
        (
            {"namespace": "notebooks"},
            "request.object.metadata.namespace: 'team-a' differs from request.namespace "
            "'notebooks'; the API server sends the namespace the object is stored in: send the two equal",
        ),
        (
            {"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}},
            "request.object.kind: 'Pod' differs from "
            "request.kind.kind 'ConfigMap'; the API server sends the kind it admits: send the two equal",
        ),
        (
            {"kind": {"group": "apps", "version": "v1", "kind": "Pod"}},
            "request.object.apiVersion: 'v1' differs from "
            "request.kind ('apps/v1'); the API server sends the object in the version it names: send the two equal",
        ),
    ],
)
def test_an_object_that_says_another_namespace_or_kind_than_the_request_is_refused(changes, message):
    with pytest.raises(ReviewError) as caught:
        parse_review(request_with(**changes))
    assert str(caught.value) == message


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_carry_no_object_and_are_not_evaluated(operation):
    review = make_review(POD, namespace="team-a", operation=operation)
    request = parse_review(body(review))
    assert request.object is None and not request.evaluates
    assert build_response(request, None, mode="validate")["response"] == {"uid": request.uid, "allowed": True}


# --- parse_review: what is wrong, precisely -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "body: empty; POST an AdmissionReview (JSON) as the API server does"),
        (b"   \n", "body: empty; POST an AdmissionReview (JSON) as the API server does"),
        (b"{", "body: not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        (b'{"a": 1', "body: not valid JSON: Expecting ',' delimiter at line 1 column 8"),
        (b"\xff\xfe{}", "body: not UTF-8 (invalid byte at offset 0); send UTF-8 JSON"),
        (b"[]", "body: expected an AdmissionReview object, got list"),
        (b'"review"', "body: expected an AdmissionReview object, got string"),
        (b"{}", "apiVersion: missing"),
        (b'{"apiVersion": 1}', "apiVersion: expected a string, got number"),
        (
            b'{"apiVersion": "admission.k8s.io/v2"}',
            "apiVersion: 'admission.k8s.io/v2' is not supported; "
            "send admission.k8s.io/v1 (or admission.k8s.io/v1beta1)",
        ),
        (b'{"apiVersion": "admission.k8s.io/v1"}', "kind: missing"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}', "kind: expected 'AdmissionReview', got 'Pod'"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request: missing"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}',
            "request: expected an object, got list",
        ),
    ],
)
def test_envelope_errors_say_where_and_what(raw, message):
    with pytest.raises(ReviewError) as error:
        parse_review(raw)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"uid": ...}, "request.uid: missing"),
        ({"uid": 7}, "request.uid: expected a string, got number"),
        ({"uid": ""}, "request.uid: empty; the response must echo the request's uid"),
        ({"uid": "u" * 200}, "request.uid: 200 characters; a Kubernetes UID has 36 (at most 128)"),
        ({"uid": "a\nb"}, "request.uid: contains control characters; a Kubernetes UID has none"),
        ({"kind": ...}, "request.kind: missing"),
        ({"kind": "Pod"}, "request.kind: expected an object, got string"),
        (
            {"kind": {"group": "", "version": "v1"}},
            "request.kind.kind: missing; the API server sends the object's kind, e.g. Pod",
        ),
        ({"kind": {"kind": 3}}, "request.kind.kind: expected a string, got number"),
        ({"operation": ...}, "request.operation: missing"),
        ({"operation": "PATCH"}, "request.operation: 'PATCH' is not one of CREATE, UPDATE, DELETE, CONNECT"),
        ({"namespace": ["a"]}, "request.namespace: expected a string, got list"),
        ({"name": False}, "request.name: expected a string, got boolean"),
        ({"dryRun": "yes"}, "request.dryRun: expected a boolean, got string"),
        ({"object": ...}, "request.object: missing; CREATE reviews carry the object"),
        ({"object": None}, "request.object: missing; CREATE reviews carry the object"),
        ({"object": []}, "request.object: expected an object, got list"),
        ({"object": "pod"}, "request.object: expected an object, got string"),
        ({"oldObject": 1.5}, "request.oldObject: expected an object, got number"),
        ({"object": {"metadata": []}}, "request.object.metadata: expected an object, got list"),
        ({"object": {"kind": []}}, "request.object.kind: expected a string, got list"),
        ({"oldObject": {"apiVersion": {}}}, "request.oldObject.apiVersion: expected a string, got object"),
        (
            {"object": {"metadata": {"namespace": 1}}},
            "request.object.metadata.namespace: expected a string, got number",
        ),
    ],
)
def test_request_errors_name_the_field(changes, message):
    with pytest.raises(ReviewError) as error:
        parse_review(request_with(**changes))
    assert str(error.value) == message


def test_duplicate_keys_are_rejected_because_go_and_python_could_disagree():
    raw = request_with().replace(b'"uid": "u-1"', b'"uid": "u-1", "uid": "u-2"')
    with pytest.raises(ReviewError, match=r"^body: duplicate key 'uid' in one JSON object"):
        parse_review(raw)
    nested = request_with().replace(b'"name": "main"', b'"name": "main", "name": "other"')
    with pytest.raises(ReviewError, match="duplicate key 'name'"):
        parse_review(nested)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(literal):
    raw = request_with().replace(b'"1"', literal.encode())
    with pytest.raises(ReviewError) as error:
        parse_review(raw)
    assert str(error.value) == f"body: {literal} is not valid JSON (JSON has no NaN or Infinity): send a number"


def test_json_nested_20000_deep_is_a_review_error_not_a_crash():
    envelope = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
    raw = envelope + b"[" * 20000 + b"]" * 20000 + b"}"
    with pytest.raises(ReviewError, match=r"^body: JSON nested too deeply"):
        parse_review(raw)


def test_unicode_and_nul_characters_in_values_are_fine():
    obj = {**POD, "metadata": {"name": "ü\u0000名", "namespace": "team-a"}}
    assert parse_review(request_with(object=obj, name=...)).object_name == "ü\u0000名"


# --- build_response -----------------------------------------------------------------------------------------


def decision(**fields: Any) -> Decision:
    base: dict[str, Any] = {"allowed": True, "verdict": "allow", "policy": "p"}
    base.update(fields)
    return Decision(**base)


def request(version: str = "admission.k8s.io/v1"):
    return parse_review(body(make_review(POD, namespace="team-a", uid="u-1", version=version)))


def test_allowed_echoes_uid_and_version():
    for version in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
        answer = build_response(request(version), decision(), mode="validate")
        assert answer == {
            "apiVersion": version,
            "kind": "AdmissionReview",
            "response": {"uid": "u-1", "allowed": True, "auditAnnotations": {"policy": "p", "decision": "allow"}},
        }


def test_validate_denies_with_403_and_the_engine_lines():
    lines = ['container "main": nvidia.com/gpu "0.5" is fractional', "second line"]
    answer = build_response(request(), decision(allowed=False, verdict="deny", violations=lines), mode="validate")
    assert answer["response"] == {
        "uid": "u-1",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "\n".join(lines)},
        "auditAnnotations": {"policy": "p", "decision": "deny"},
    }


def test_audit_decisions_put_their_lines_in_the_audit_log_only():
    lines = ['container "main": nvidia.com/gpu "9" exceeds the per-container maximum of 8']
    answer = build_response(request(), decision(verdict="audit", violations=lines), mode="validate")
    assert answer["response"] == {
        "uid": "u-1",
        "allowed": True,
        "auditAnnotations": {"policy": "p", "decision": "audit", "violations": lines[0]},
    }


def test_mutate_never_denies_and_sends_a_base64_json_patch_only_when_there_is_one():
    patch = [{"op": "add", "path": "/metadata/annotations", "value": {"gpu-admission.io/policy": "p"}}]
    denied = decision(allowed=False, verdict="deny", violations=["no"], patch=patch)
    response = build_response(request(), denied, mode="mutate")["response"]
    assert response["allowed"] is True and "status" not in response
    assert response["patchType"] == "JSONPatch"
    sent = json.loads(base64.b64decode(response["patch"]))
    assert sent == patch
    assert jsonpatch.apply_patch(POD, sent)["metadata"]["annotations"] == {"gpu-admission.io/policy": "p"}
    unchanged = build_response(request(), decision(), mode="mutate")["response"]
    assert "patch" not in unchanged and "patchType" not in unchanged
    # /validate never sends a patch: the API server would refuse one from a validating webhook.
    assert "patch" not in build_response(request(), decision(patch=patch), mode="validate")["response"]


def test_warnings_are_carried_on_both_webhooks():
    warned = decision(verdict="warn", warnings=["gpu-admission: mind the GPUs"])
    for mode in ("mutate", "validate"):
        assert build_response(request(), warned, mode=mode)["response"]["warnings"] == ["gpu-admission: mind the GPUs"]


def test_warnings_respect_the_api_servers_limits():
    long = "x" * 300
    assert limit_warnings([long]) == ["x" * (WARNING_MAX_CHARS - 3) + "..."]
    assert limit_warnings(["a\nb\tc", "a\nb\tc", "", "ok"]) == ["a b c", "ok"]  # one line each, deduplicated
    # Separators and a no-break space (a container named "\u00a0", found by the soak's fuzzing) are not
    # printable either: each becomes a space.
    assert limit_warnings(['container "\u00a0": x', "a\u2028b\u2029c\u200bd"]) == ['container " ": x', "a b c d"]
    many = [f"warning {i:03d} " + "y" * 100 for i in range(100)]
    limited = limit_warnings(many)
    assert sum(len(w) for w in limited) <= WARNINGS_MAX_TOTAL_CHARS
    assert all(len(w) <= WARNING_MAX_CHARS for w in limited)
    assert limited[-1] == f"... and {100 - len(limited) + 1} more warning(s): see the webhook's log"


def test_build_response_needs_a_known_mode():
    with pytest.raises(ValueError, match="mode must be 'mutate' or 'validate'"):
        build_response(request(), decision(), mode="audit")
