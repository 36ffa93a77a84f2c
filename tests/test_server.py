"""The real server (`gpu-webhook serve`: gunicorn, TLS) answering AdmissionReviews over HTTPS.

One server for the module (`live_server`), on the shipped policies: `default` (whole GPUs, enforce) for
team namespaces, `notebooks-time-slicing` for `notebooks`, `inference-mps` (warn) for `inference`.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import socket
import ssl
import threading
import time
import warnings
from typing import Any

import jsonpatch
import pytest
import requests

from tests.conftest import LiveServer
from webhook.admission.review import WARNING_MAX_CHARS, make_review
from webhook.server.app import MAX_BODY_BYTES


def pod(namespace: str, gpus: str, *, limits_only: bool = False, env: list | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": gpus}}
    if not limits_only:
        resources["requests"] = {"nvidia.com/gpu": gpus}
    container: dict[str, Any] = {"name": "main", "image": "registry.example/train:1", "resources": resources}
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {"containers": [container]},
    }


def review(server: LiveServer, endpoint: str, obj: dict, **kwargs: Any) -> dict[str, Any]:
    sent = make_review(obj, namespace=obj["metadata"]["namespace"], **kwargs)
    answer = server.post(f"/{endpoint}", sent)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    body = answer.json()
    assert body["apiVersion"] == sent["apiVersion"] and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == sent["request"]["uid"]
    return body["response"]


# --- decisions ----------------------------------------------------------------------------------------------


def test_a_correct_gpu_pod_is_allowed_untouched(live_server):
    for endpoint in ("mutate", "validate"):
        response = review(live_server, endpoint, pod("team-a", "1"))
        assert response["allowed"] is True
        assert set(response) == {"uid", "allowed", "auditAnnotations"}  # no patch, no warnings, no status
        assert response["auditAnnotations"] == {"policy": "default", "decision": "allow"}


def test_mutate_returns_a_json_patch_that_gives_the_mapped_pod(live_server):
    obj = pod("notebooks", "1")
    response = review(live_server, "mutate", obj)
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    mutated = jsonpatch.apply_patch(copy.deepcopy(obj), patch)
    resources = mutated["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"nvidia.com/gpu.shared": "1"}, "requests": {"nvidia.com/gpu.shared": "1"}}
    assert mutated["metadata"]["annotations"] == {"gpu-admission.io/policy": "notebooks-time-slicing"}
    assert any(e["name"] == "XLA_PYTHON_CLIENT_MEM_FRACTION" for e in mutated["spec"]["containers"][0]["env"])
    assert response["warnings"][0] == (
        'gpu-admission: container "main": nvidia.com/gpu 1 became nvidia.com/gpu.shared 1 (time-slicing policy)'
    )
    # The API server then calls /validate with the mutated pod: admitted, and nothing more to change.
    assert review(live_server, "validate", mutated)["allowed"] is True
    assert "patch" not in review(live_server, "mutate", mutated)


def test_requests_without_limits_get_limits(live_server):
    obj = pod("team-a", "1")
    del obj["spec"]["containers"][0]["resources"]["limits"]
    response = review(live_server, "mutate", obj)
    mutated = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    assert mutated["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_what_the_api_server_refuses_is_denied_by_mutate_itself_with_the_engine_line(live_server):
    # The API server validates between the two webhooks: /validate would never see this pod, and kubectl would
    # show the API server's own message. /mutate denies it, and /validate says the same.
    obj = pod("team-a", "0.5")
    response = review(live_server, "mutate", obj)
    assert response["allowed"] is False and "patch" not in response
    assert review(live_server, "validate", obj)["status"] == response["status"]
    assert response["status"] == {
        "code": 403,
        "reason": "Forbidden",
        "message": 'container "main": nvidia.com/gpu "0.5" is fractional, but GPUs are whole devices '
        "(the API server refuses it anyway); request a "
        'whole number of GPUs (policy "default" gives whole GPUs only; ask for a namespace with sharing)',
    }


def test_a_policy_violation_is_left_to_validate(live_server):
    obj = pod("team-a", "9")  # valid to the API server; over the policy's maximum
    assert review(live_server, "mutate", obj)["allowed"] is True
    assert review(live_server, "validate", obj)["status"]["message"] == (
        'container "main": nvidia.com/gpu "9" exceeds the per-container maximum of 8 (policy "default"); request '
        "at most 8"
    )


def test_warn_enforcement_admits_with_warnings_within_the_api_servers_limits(live_server):
    response = review(live_server, "validate", pod("inference", "2"))
    assert response["allowed"] is True and "status" not in response
    warnings = response["warnings"]
    assert all(len(w) <= WARNING_MAX_CHARS for w in warnings)
    assert 'gpu-admission: container "main": nvidia.com/gpu 2: one mps share per container; ask for 1' in warnings


def test_v1beta1_is_answered_in_v1beta1(live_server):
    response = review(live_server, "validate", pod("team-a", "0.5"), version="admission.k8s.io/v1beta1")
    assert response["allowed"] is False and response["status"]["code"] == 403


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_untouched(live_server, operation):
    for endpoint in ("mutate", "validate"):
        assert set(review(live_server, endpoint, pod("team-a", "0.5"), operation=operation)) == {"uid", "allowed"}


def replica_set(gpus: str, **metadata: Any) -> dict[str, Any]:
    template_pod = pod("team-a", gpus)
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": "team-a", **metadata},
        "spec": {"replicas": 3, "template": {"metadata": {}, "spec": template_pod["spec"]}},
    }


def test_an_update_that_leaves_the_pod_spec_alone_is_allowed_untouched(live_server):
    # A workload made before the policy (16 GPUs is over default's 8), scaled down by its owner's controller:
    # denying it would keep a broken workload running; patching it would start a rollout nobody asked for.
    before = replica_set("16")
    scaled = copy.deepcopy(before)
    scaled["spec"]["replicas"] = 0
    for endpoint in ("mutate", "validate"):
        response = review(live_server, endpoint, scaled, operation="UPDATE", old=before)
        assert response["allowed"] is True and "patch" not in response and "warnings" not in response
    # Its pod spec changed: judged like a create.
    changed = copy.deepcopy(scaled)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/train:2"
    response = review(live_server, "validate", changed, operation="UPDATE", old=before)
    assert response["allowed"] is False and "exceeds the per-container maximum of 8" in response["status"]["message"]


def test_objects_being_deleted_and_workloads_owned_by_a_controller_are_left_alone(live_server):
    finalizing = replica_set("16", deletionTimestamp="2026-11-22T10:00:00Z", finalizers=["foregroundDeletion"])
    done = copy.deepcopy(finalizing)
    done["metadata"]["finalizers"] = []
    # Removing the last finalizer is an update of a non-compliant object: denying it would keep it forever.
    assert review(live_server, "validate", done, operation="UPDATE", old=finalizing)["allowed"] is True
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-1", "controller": True}
    owned = replica_set("0.5", ownerReferences=[owner])
    for endpoint in ("mutate", "validate"):
        response = review(live_server, endpoint, owned)
        assert response["allowed"] is True and "patch" not in response
    # The pods it makes are judged when they are created, whoever makes them.
    owned_pod = pod("team-a", "0.5")
    owned_pod["metadata"]["ownerReferences"] = [dict(owner, kind="ReplicaSet", name="web-1")]
    assert review(live_server, "validate", owned_pod)["allowed"] is False


def test_objects_without_a_pod_spec_pass(live_server):
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}, "data": {}}
    assert review(live_server, "validate", config)["allowed"] is True


# --- bad input ----------------------------------------------------------------------------------------------


def post_raw(server: LiveServer, data: Any, content_type: str | None = "application/json", **kw: Any):
    headers = {"Content-Type": content_type} if content_type else {}
    url = f"{server.url}/validate"
    return requests.post(url, data=data, headers=headers, verify=str(server.ca_file), timeout=10, **kw)


def assert_error(answer: requests.Response, status: int, message: str) -> None:
    assert answer.status_code == status
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json() == {"error": message, "code": status}


def test_bodies_over_7_mib_get_413_with_content_length_or_chunked(live_server):
    too_big = b"x" * (MAX_BODY_BYTES + 1)
    message = (
        "body larger than 7340032 bytes (7 MiB): an AdmissionReview holds at most two objects (an UPDATE's), "
        "each within the API server's 3 MiB limit"
    )
    assert_error(post_raw(live_server, too_big), 413, message)

    def chunks():  # no Content-Length: requests sends Transfer-Encoding: chunked
        for _ in range(113):  # 7 MiB + 64 KiB: the server reads 7 MiB + 1 and lets the rest drain
            yield b"x" * (64 * 1024)

    assert_error(post_raw(live_server, chunks()), 413, message)
    # Exactly 7 MiB is read, and judged as JSON.
    answer = post_raw(live_server, b" " * MAX_BODY_BYTES)
    assert answer.status_code == 400


def test_an_update_of_a_large_workload_carries_it_twice_and_is_answered(live_server):
    # A 2.5 MB script in a Deployment: the object is within the API server's limits, and the UPDATE's review,
    # object and oldObject, is over 5 MB.
    script = "echo " + "x" * 2_500_000
    workload = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": "team-a"},
        "spec": {"template": {"spec": pod("team-a", "1")["spec"]}},
    }  # fmt: skip
    workload["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", script]
    relabelled = copy.deepcopy(workload)
    relabelled["metadata"]["labels"] = {"tier": "batch"}
    response = review(live_server, "validate", relabelled, operation="UPDATE", old=workload)
    assert response["allowed"] is True


def test_non_json_and_wrong_content_types_get_400(live_server):
    assert_error(post_raw(live_server, b"<xml/>"), 400, "body: not valid JSON: Expecting value at line 1 column 1")
    body = json.dumps(make_review(pod("team-a", "1"), namespace="team-a")).encode()
    wrong_type = "Content-Type must be application/json, got 'text/yaml'"
    assert_error(post_raw(live_server, body, "text/yaml"), 400, wrong_type)
    assert_error(post_raw(live_server, body, None), 400, "Content-Type must be application/json, got 'none'")
    # A charset parameter is fine.
    assert post_raw(live_server, body, "application/json; charset=utf-8").status_code == 200


def test_a_malformed_review_gets_400_saying_what_is_wrong(live_server):
    bad = make_review(pod("team-a", "1"), namespace="team-a")
    del bad["request"]["uid"]
    assert_error(live_server.post("/validate", bad), 400, "request.uid: missing")
    bad = make_review(pod("team-a", "1"), namespace="team-a")
    bad["request"]["object"] = [1, 2]
    assert_error(live_server.post("/mutate", bad), 400, "request.object: expected an object, got list")


def test_json_nested_20000_deep_gets_400_and_the_next_review_is_answered(live_server):
    session = live_server.session()
    deep = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x", "object": '
    deep += b"[" * 20000 + b"]" * 20000 + b"}}"
    answer = session.post(f"{live_server.url}/validate", data=deep, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"].startswith("body: JSON nested too deeply")
    assert review(live_server, "validate", pod("team-a", "1"))["allowed"] is True


def test_errors_for_paths_and_methods_are_json(live_server):
    assert_error(live_server.get("/mutate"), 405, "GET is not allowed on /mutate; the webhooks take POST")
    missing = live_server.get("/nowhere")
    assert missing.status_code == 404 and missing.json()["code"] == 404


# --- health, TLS, connections -------------------------------------------------------------------------------


def test_healthz_and_readyz(live_server):
    assert live_server.get("/healthz").json() == {"alive": True}
    ready = live_server.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["ready"] is True and body["policies"] == 7 and "certificateNotAfter" in body


def test_tls_1_2_is_the_minimum(live_server):
    host, port = "127.0.0.1", int(live_server.url.rsplit(":", 1)[1])
    for version, accepted in ((ssl.TLSVersion.TLSv1_2, True), (ssl.TLSVersion.TLSv1_3, True)):
        context = ssl.create_default_context(cafile=str(live_server.ca_file))
        context.minimum_version = context.maximum_version = version
        with socket.create_connection((host, port)) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
            assert tls.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
            assert accepted
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
    except ValueError:  # this OpenSSL cannot even offer it
        return
    with socket.create_connection((host, port)) as raw, pytest.raises(ssl.SSLError):
        old.wrap_socket(raw, server_hostname=host)


def test_one_connection_serves_many_reviews(live_server):
    host, port = "127.0.0.1", int(live_server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(live_server.ca_file))
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=10)
    body = json.dumps(make_review(pod("team-a", "1"), namespace="team-a"))
    for _ in range(20):
        connection.request("POST", "/validate", body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        assert answer.status == 200 and answer.getheader("Connection") != "close"
        answer.read()
    assert connection.sock is not None  # the same socket all along: http.client would have reconnected
    connection.close()


def test_stalled_clients_do_not_starve_the_others(live_server):
    """32 clients that connect and send nothing, 32 that stop mid-handshake and 32 mid-request."""
    host, port = "127.0.0.1", int(live_server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(live_server.ca_file))
    stalled: list[socket.socket] = []
    try:
        for _ in range(32):
            stalled.append(socket.create_connection((host, port)))
            half_hello = socket.create_connection((host, port))
            half_hello.sendall(b"\x16\x03\x01\x00\xc8\x01\x00")  # the first bytes of a ClientHello
            stalled.append(half_hello)
            half_request = context.wrap_socket(socket.create_connection((host, port)), server_hostname=host)
            half_request.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            stalled.append(half_request)
        time.sleep(0.2)
        for _ in range(3):
            started = time.monotonic()
            assert review(live_server, "validate", pod("team-a", "1"))["allowed"] is True
            assert time.monotonic() - started < 1.0
    finally:
        for conn in stalled:
            conn.close()


# --- logs and metrics ---------------------------------------------------------------------------------------


def test_one_json_log_line_per_review_without_env_values_or_specs(live_server):
    secret = [{"name": "API_TOKEN", "value": "hunter2-do-not-log"}]
    sent = make_review(pod("team-a", "0.5", env=secret), namespace="team-a")
    assert live_server.post("/validate", sent).status_code == 200
    uid = sent["request"]["uid"]
    record = live_server.wait_for_log(lambda r: r.get("uid") == uid and r.get("message") == "review")
    assert {k: record[k] for k in ("webhook", "namespace", "name", "kind", "operation", "policy", "decision")} == {
        "webhook": "validate",
        "namespace": "team-a",
        "name": "train",
        "kind": "Pod",
        "operation": "CREATE",
        "policy": "default",
        "decision": "deny",
    }
    assert record["allowed"] is False and record["mutations"] == 0 and record["duration_ms"] > 0
    assert record["violations"][0].startswith('container "main": nvidia.com/gpu "0.5" is fractional')
    # Variables the engine reads or keeps: their values are not quoted either.
    kept = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-0d1e-secret-uuid"},
        {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0.987654"},
    ]
    for namespace, gpus in (("notebooks", "1"), ("team-a", "0")):
        sent = make_review(pod(namespace, gpus, env=kept), namespace=namespace)
        assert live_server.post("/mutate", sent).status_code == 200
        live_server.wait_for_log(lambda r, uid=sent["request"]["uid"]: r.get("uid") == uid)
    log = live_server.log()
    assert "hunter2-do-not-log" not in log and '"containers"' not in log
    assert "GPU-0d1e-secret-uuid" not in log and "0.987654" not in log
    assert sum(1 for r in live_server.log_records() if r.get("uid") == uid) == 1


def counters(server: LiveServer) -> dict[str, float]:
    return {k: v for k, v in server.metrics().items() if k.startswith("gpu_admission_")}


def test_metric_values_after_traffic(live_server):
    before = counters(live_server)
    session = live_server.session()

    def send(endpoint: str, obj: dict) -> None:
        sent = make_review(obj, namespace=obj["metadata"]["namespace"])
        assert session.post(f"{live_server.url}/{endpoint}", json=sent, timeout=10).status_code == 200

    for _ in range(3):
        send("validate", pod("team-a", "1"))  # allow
    send("validate", pod("team-a", "0.5"))  # deny
    send("validate", pod("inference", "2"))  # warn
    send("mutate", pod("notebooks", "1"))  # allow, with mapping and env
    send("mutate", pod("team-a", "1", limits_only=True))  # allow, nothing to change
    bad = session.post(f"{live_server.url}/validate", data=b"{", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400
    after = counters(live_server)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    reviews = 'gpu_admission_reviews_total{decision="%s",webhook="%s"}'
    assert delta(reviews % ("allow", "validate")) == 3
    assert delta(reviews % ("deny", "validate")) == 1
    assert delta(reviews % ("warn", "validate")) == 1
    assert delta(reviews % ("error", "validate")) == 1
    assert delta(reviews % ("allow", "mutate")) == 2
    assert delta(reviews % ("audit", "validate")) == 0
    assert delta('gpu_admission_mutations_total{kind="mapping"}') == 1
    assert delta('gpu_admission_mutations_total{kind="env"}') == 1
    assert delta('gpu_admission_review_duration_seconds_count{webhook="validate"}') == 6
    assert delta('gpu_admission_review_duration_seconds_count{webhook="mutate"}') == 2
    assert delta('gpu_admission_review_duration_seconds_bucket{le="+Inf",webhook="mutate"}') == 2
    assert after['gpu_admission_policy_reloads_total{result="error"}'] == 0
    expiry = after["gpu_admission_certificate_expiry_timestamp_seconds"]
    assert expiry == pytest.approx(live_server.cert_not_after().timestamp())


def test_concurrent_reviews_on_kept_alive_connections_all_succeed(live_server):
    failures: list[str] = []

    def client() -> None:
        session = live_server.session()
        for _ in range(25):
            sent = make_review(pod("notebooks", "1"), namespace="notebooks")
            answer = session.post(f"{live_server.url}/mutate", json=sent, timeout=10)
            if answer.status_code != 200 or answer.json()["response"]["uid"] != sent["request"]["uid"]:
                failures.append(answer.text)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
