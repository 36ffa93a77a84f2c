"""The server's shell, in process: the Flask app with an injected engine, the policy and certificate stores.

Everything here is also covered against the real server (test_server*.py); what only an in-process test can
reach is the engine failing (no policy may serve as a backdoor to make it fail) and exact reload mechanics.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import REGISTRY

from webhook import certs
from webhook.admission.policy.loader import load_policies
from webhook.admission.policy.model import PolicySet
from webhook.admission.review import make_review
from webhook.server.app import MAX_BODY_BYTES, create_app
from webhook.server.policies import PolicyStore
from webhook.server.state import ServerState
from webhook.server.tls import CertStore
from webhook.server.worker import INLINE_MAX_BYTES, READ_AHEAD_BYTES, answerable_here, request_complete

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}

POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata:
  name: {name}
spec:
  namespaces: ["{namespace}"]
  enforcement: {enforcement}
"""


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def client(evaluate: Any = None, **state: Any):
    store = PolicyStore(PolicySet())
    kwargs: dict[str, Any] = {"policies": store, **state}
    if evaluate is not None:
        kwargs["evaluate"] = evaluate
    return create_app(ServerState(**kwargs)).test_client()


# --- the Flask shell ---------------------------------------------------------------------------------------


def test_an_engine_failure_is_a_500_with_the_uid_and_no_traceback(caplog):
    def broken(obj, namespace, policies, old, cluster, claims):
        raise KeyError("spec")

    before = sample("gpu_admission_reviews_total", webhook="validate", decision="error")
    with caplog.at_level(logging.ERROR):
        answer = client(broken).post("/validate", json=make_review(GPU_POD, namespace="team-a", uid="uid-42"))
    assert answer.status_code == 500
    assert answer.get_json() == {"error": "internal error evaluating review uid-42; see the webhook's log", "code": 500}
    assert "Traceback" not in answer.get_data(as_text=True)
    record = next(r for r in caplog.records if "engine failed" in r.getMessage())
    assert "uid=uid-42" in record.getMessage() and record.exc_info is not None  # the traceback is in the log
    assert sample("gpu_admission_reviews_total", webhook="validate", decision="error") == before + 1


def test_an_engine_recursing_too_deep_is_a_400_not_a_500():
    def deep(obj, namespace, policies, old, cluster, claims):
        raise RecursionError("maximum recursion depth exceeded")

    answer = client(deep).post("/mutate", json=make_review(GPU_POD, namespace="team-a"))
    assert answer.status_code == 400
    assert answer.get_json()["error"] == "request.object: nested too deeply to evaluate"


def test_an_unexpected_error_outside_the_engine_is_a_json_500():
    app = create_app(ServerState(PolicyStore(PolicySet())))

    @app.get("/boom")
    def boom():
        raise RuntimeError("secret detail")

    answer = app.test_client().get("/boom")
    assert answer.status_code == 500
    assert answer.get_json() == {"error": "internal error; see the webhook's log", "code": 500}


def test_the_engine_gets_the_object_the_namespace_and_the_policies_of_the_moment():
    seen = []
    policies = PolicySet()

    def spy(obj, namespace, given, old, cluster, claims):
        seen.append((obj, namespace, given))
        from webhook.admission.engine import evaluate

        return evaluate(obj, namespace, given, old, cluster, claims)

    store = PolicyStore(policies)
    app = create_app(ServerState(store, evaluate=spy)).test_client()
    review = make_review(GPU_POD, namespace="team-a")
    assert app.post("/validate", json=review).status_code == 200
    assert seen == [(GPU_POD, "team-a", policies)]  # the request's namespace


@pytest.mark.parametrize(
    ("kwargs", "status", "message"),
    [
        ({"data": b"{}", "content_type": "text/plain"}, 400, "Content-Type must be application/json, got 'text/plain'"),
        ({"data": b"{}"}, 400, "Content-Type must be application/json, got 'none'"),
        (
            {"data": b"nope", "content_type": "application/json"},
            400,
            "body: not valid JSON: Expecting value at line 1 column 1",
        ),
        (
            {"data": b"x" * (MAX_BODY_BYTES + 1), "content_type": "application/json"},
            413,
            f"body larger than {MAX_BODY_BYTES} bytes (7 MiB): an AdmissionReview holds at most two objects (an "
            "UPDATE's), each within the API server's 3 MiB limit",
        ),
    ],
)
def test_bad_requests_get_json_errors(kwargs, status, message):
    answer = client().post("/mutate", **kwargs)
    assert answer.status_code == status
    assert answer.get_json() == {"error": message, "code": status}


def test_wrong_methods_and_paths_get_json_errors():
    app = client()
    assert app.get("/mutate").get_json() == {
        "error": "GET is not allowed on /mutate; the webhooks take POST",
        "code": 405,
    }
    assert app.post("/nowhere").get_json()["error"] == (
        "no such endpoint /nowhere; use /mutate, /validate, /healthz or /readyz"
    )
    # A 405 says what is allowed, in its message and in the Allow header (RFC 9110); OPTIONS is no exception.
    wrong = app.post("/healthz")
    assert wrong.status_code == 405 and set(wrong.headers["Allow"].split(", ")) == {"GET", "HEAD"}
    assert wrong.get_json()["error"] == "POST is not allowed on /healthz; /healthz takes GET or HEAD"
    assert app.get("/mutate").headers["Allow"] == "POST"
    options = app.options("/validate")
    assert options.status_code == 405 and options.is_json and options.headers["Allow"] == "POST"


# --- readiness and the certificate store --------------------------------------------------------------------


@pytest.fixture()
def cert_dir(tmp_path: Path) -> Path:
    certs.generate_dev_certs(tmp_path)
    return tmp_path


def test_ready_with_a_valid_certificate_and_unready_within_7_days_of_expiry(cert_dir: Path):
    store = CertStore(cert_dir / "tls.crt", cert_dir / "tls.key")
    app = client(certificate=store)
    ready = app.get("/readyz")
    assert ready.status_code == 200
    assert ready.get_json() == {"policies": 0, "certificateNotAfter": store.not_after.isoformat(), "ready": True}

    certs.reissue_serving_certificate(cert_dir, valid_for=dt.timedelta(days=3))
    assert store.check() is True  # the new pair is taken
    unready = app.get("/readyz")
    assert unready.status_code == 503
    (reason,) = unready.get_json()["reasons"]
    assert reason.startswith(f"certificate {cert_dir / 'tls.crt'} expires in 2.9 days (")
    assert reason.endswith(f"UTC): renew it (`gpu-webhook certs renew --dir {cert_dir}`) or update its Secret")
    assert app.get("/healthz").get_json() == {"alive": True}  # alive all the same


def write_chain(directory: Path, intermediate_valid: tuple[dt.datetime, dt.timedelta]) -> x509.Certificate:
    """tls.crt and tls.key: a certificate for a year, then the intermediate that signed it (valid from
    `intermediate_valid[0]` for `[1]`), as an API server behind an intermediate CA needs them; the intermediate."""
    start, valid_for = intermediate_valid
    ca_key, intermediate = certs.create_ca("team intermediate", now=start, valid_for=valid_for)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-admission")]))
        .issuer_name(intermediate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in (leaf, intermediate))
    (directory / "tls.crt").write_bytes(pem)
    certs.write_private_key(directory / "tls.key", key)
    return intermediate


def test_an_intermediate_that_expires_before_the_certificate_is_what_readiness_follows(tmp_path: Path):
    """Once an intermediate in tls.crt expires, every handshake fails as if the certificate had: readiness and
    the expiry count from it, and the reason says what helps (renewing the certificate would not)."""
    now = dt.datetime.now(dt.UTC)
    intermediate = write_chain(tmp_path, (now, dt.timedelta(days=3)))
    store = CertStore(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert store.not_after == intermediate.not_valid_after_utc
    unready = client(certificate=store).get("/readyz")
    assert unready.status_code == 503
    assert unready.get_json()["certificateNotAfter"] == intermediate.not_valid_after_utc.isoformat()
    (reason,) = unready.get_json()["reasons"]
    assert reason == (
        f"intermediate CN=team intermediate in {tmp_path / 'tls.crt'} expires in 2.9 days "
        f"({intermediate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC): reissue it from its CA, put it after the "
        "certificate in the file and update the Secret"
    )

    # A change to a chain whose intermediate has expired is refused like an expired certificate.
    context = store.context
    write_chain(tmp_path, (now - dt.timedelta(days=10), dt.timedelta(days=1)))
    assert store.check() is False
    assert store.context is context and store.not_after == intermediate.not_valid_after_utc


def test_a_broken_certificate_change_keeps_the_last_good_context(cert_dir: Path, caplog):
    store = CertStore(cert_dir / "tls.crt", cert_dir / "tls.key")
    context = store.context
    (cert_dir / "tls.key").write_text("not a key\n")
    with caplog.at_level(logging.ERROR):
        assert store.check() is False
        assert store.check() is False  # said once, not at every look
    assert store.context is context
    assert [r.getMessage() for r in caplog.records if "certificate reload failed" in r.getMessage()] != []
    assert len([r for r in caplog.records if "certificate reload failed" in r.getMessage()]) == 1


# --- the policy store ---------------------------------------------------------------------------------------


def write_policy(directory: Path, file: str, name: str, namespace: str, enforcement: str = "enforce") -> None:
    (directory / file).write_text(POLICY.format(name=name, namespace=namespace, enforcement=enforcement))


def test_a_good_change_is_swapped_in_whole_and_counted(tmp_path: Path):
    write_policy(tmp_path, "a.yaml", "a", "team-a")
    store = PolicyStore.from_directory(tmp_path)
    first = store.current
    assert store.check() is None  # nothing changed
    before = sample("gpu_admission_policy_reloads_total", result="ok")
    write_policy(tmp_path, "b.yml", "b", "team-b", "warn")
    assert store.check() is True
    assert [p.name for p in store.current.policies] == ["a", "b"]
    assert first is not store.current and [p.name for p in first.policies] == ["a"]  # the old set is untouched
    assert sample("gpu_admission_policy_reloads_total", result="ok") == before + 1
    (tmp_path / "README.md").write_text("not a policy")
    assert store.check() is None  # only what the loader reads counts


def test_a_broken_change_is_rejected_whole_logged_with_file_and_field_and_counted(tmp_path: Path, caplog):
    write_policy(tmp_path, "a.yaml", "a", "team-a")
    store = PolicyStore.from_directory(tmp_path)
    good = store.current
    before = sample("gpu_admission_policy_reloads_total", result="error")
    write_policy(tmp_path, "b.yaml", "b", "team-b")
    (tmp_path / "c.yaml").write_text(POLICY.format(name="c", namespace="team-c", enforcement="enforce") + "  typo: 1\n")
    with caplog.at_level(logging.ERROR):
        assert store.check() is False
        assert store.check() is None  # the same broken state is judged once
    assert store.current is good  # b.yaml, although fine, is not taken either
    assert sample("gpu_admission_policy_reloads_total", result="error") == before + 1
    (record,) = [r for r in caplog.records if "policy reload rejected" in r.getMessage()]
    problems = record.fields["problems"]  # type: ignore[attr-defined]
    assert len(problems) == 1 and problems[0].startswith(f"{tmp_path / 'c.yaml'}#0 spec.typo")
    assert store.last_error == problems
    (tmp_path / "c.yaml").unlink()
    assert store.check() is True and store.last_error is None
    assert [p.name for p in store.current.policies] == ["a", "b"]


def configmap_swap(directory: Path, files: dict[str, str], generation: int) -> None:
    """What the kubelet does: a new `..<timestamp>` dir, `..data` swapped by rename, links to `..data/*`."""
    data = directory / f"..2024_01_01_00_00_0{generation}.000000000"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    tmp_link = directory / "..data_tmp"
    tmp_link.symlink_to(data.name)
    old = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    os.replace(tmp_link, directory / "..data")
    for name in files:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    if old:
        for child in (directory / old).iterdir():
            child.unlink()
        (directory / old).rmdir()


def test_a_configmap_symlink_swap_is_seen(tmp_path: Path):
    text = POLICY.format(name="a", namespace="team-a", enforcement="enforce")
    configmap_swap(tmp_path, {"policy.yaml": text}, 1)
    store = PolicyStore.from_directory(tmp_path)
    assert [p.enforcement.value for p in store.current.policies] == ["enforce"]
    # Same name, same size, maybe the same mtime: only the inode behind the links changes.
    configmap_swap(tmp_path, {"policy.yaml": text.replace("enforcement: enforce", "enforcement: warn   ")}, 2)
    assert store.check() is True
    assert [p.enforcement.value for p in store.current.policies] == ["warn"]
    assert store.current == load_policies(tmp_path)


# --- the worker's request framing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "complete"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", False),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", True),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 5\r\n\r\n{}", False),
        (b"POST /mutate HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}", True),
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n", False),
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", True),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 9999999\r\n\r\n" + b"x" * READ_AHEAD_BYTES, True),
    ],
)
def test_the_worker_hands_over_whole_requests(data, complete):
    assert request_complete(data) is complete


@pytest.mark.parametrize(
    ("data", "here"),
    [
        (b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", True),  # no body
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", True),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{", False),  # not all here yet
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}GET", False),  # and more: a thread sorts it out
        (b"POST /mutate HTTP/1.1\r\nHost: x\r\n", False),  # headers not finished
        # A chunked body is never certain: this one's only chunk holds "x0\r\n", and looks finished.
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nx0\r\n\r\n", False),
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", False),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % INLINE_MAX_BYTES + b" " * INLINE_MAX_BYTES, False),
    ],
)
def test_the_main_loop_answers_only_small_requests_that_are_certainly_whole(data, here):
    """Anything else goes to a thread, which may wait for the rest of it: the main loop never waits."""
    assert answerable_here(data) is here


def test_review_bodies_log_no_env_values(caplog):
    pod = json.loads(json.dumps(GPU_POD))
    pod["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "value": "hunter2-secret"}]
    with caplog.at_level(logging.INFO, logger="gpu_admission"):
        assert client().post("/validate", json=make_review(pod, namespace="team-a")).status_code == 200
    assert "hunter2-secret" not in caplog.text and '"containers"' not in caplog.text
