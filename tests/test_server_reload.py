"""Hot reload in the real server: policy changes within 5 s, certificate rotation without failed reviews, and
what a worker forked later (SIGHUP, a crash) starts from."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable

import pytest
from cryptography import x509

from tests.conftest import SHIPPED_POLICIES, LiveServer
from tests.test_hostile import worker_pids
from tests.test_server import pod
from tests.test_server_app import configmap_swap
from webhook import certs
from webhook.admission.review import make_review

RELOAD_DEADLINE = 5.0  # seconds: the issue's promise for policy changes

WARN_POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata:
  name: reload-warn
spec:
  namespaces: ["reload-ns"]
  enforcement: warn
"""


def allowed(server: LiveServer, namespace: str) -> bool:
    """Whether 9 GPUs in a container (over the maximum: denied under enforce, admitted under warn) are admitted
    in `namespace`. (Not a fraction: the API server refuses that whatever the enforcement, and so does the
    webhook.)"""
    sent = make_review(pod(namespace, "9"), namespace=namespace)
    answer = server.post("/validate", sent)
    assert answer.status_code == 200, answer.text
    return answer.json()["response"]["allowed"]


def within(deadline: float, condition: Callable[[], bool]) -> float:
    """Seconds until `condition()` held; fails after `deadline`."""
    started = time.monotonic()
    while time.monotonic() - started < deadline:
        if condition():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"not within {deadline} s")


def reloads(server: LiveServer, result: str) -> float:
    return server.metrics().get(f'gpu_admission_policy_reloads_total{{result="{result}"}}', 0.0)


@pytest.fixture(scope="module")
def reload_server(start_server, tmp_path_factory) -> LiveServer:
    directory = tmp_path_factory.mktemp("reload-policies")
    shutil.copy(SHIPPED_POLICIES / "default.yaml", directory / "default.yaml")
    return start_server(policies_dir=directory)


def test_a_good_change_is_served_within_5_seconds(reload_server):
    assert not allowed(reload_server, "reload-ns")
    ok_before = reloads(reload_server, "ok")
    (reload_server.policies_dir / "reload.yaml").write_text(WARN_POLICY)
    took = within(RELOAD_DEADLINE, lambda: allowed(reload_server, "reload-ns"))
    assert took < RELOAD_DEADLINE
    assert reloads(reload_server, "ok") == ok_before + 1
    reload_server.wait_for_log(lambda r: r.get("event") == "policy-reload" and r.get("result") == "ok")
    (reload_server.policies_dir / "reload.yaml").unlink()
    within(RELOAD_DEADLINE, lambda: not allowed(reload_server, "reload-ns"))


def test_a_broken_change_keeps_the_last_good_set_logs_file_and_field_and_stays_ready(reload_server):
    directory = reload_server.policies_dir
    (directory / "reload.yaml").write_text(WARN_POLICY)
    within(RELOAD_DEADLINE, lambda: allowed(reload_server, "reload-ns"))
    errors_before = reloads(reload_server, "error")

    broken = WARN_POLICY.replace("enforcement: warn", "enforcement: warn\n  sharing: {mode: time-slicing, replicas: 1}")
    (directory / "reload.yaml").write_text(broken.replace("reload-warn", "reload-broken"))
    (directory / "other.yaml").write_text(WARN_POLICY.replace("reload-warn", "other").replace("reload-ns", "other-ns"))
    record = reload_server.wait_for_log(
        lambda r: r.get("event") == "policy-reload" and r.get("result") == "error", timeout=RELOAD_DEADLINE
    )
    (problem,) = record["problems"]
    assert problem.startswith(f"{directory / 'reload.yaml'}#0 spec.sharing.replicas: ")
    assert reloads(reload_server, "error") == errors_before + 1
    # The whole change is rejected: reload.yaml's old content stays, other.yaml (fine in itself) is not taken.
    assert allowed(reload_server, "reload-ns") and not allowed(reload_server, "other-ns")
    ready = reload_server.get("/readyz")
    assert ready.status_code == 200 and ready.json()["policyReloadRejected"] == [problem]

    (directory / "reload.yaml").unlink()
    (directory / "other.yaml").unlink()
    within(RELOAD_DEADLINE, lambda: not allowed(reload_server, "reload-ns"))
    assert "policyReloadRejected" not in reload_server.get("/readyz").json()


def test_a_configmap_symlink_swap_is_served_within_5_seconds(start_server, tmp_path):
    directory = tmp_path / "configmap"
    directory.mkdir()
    default = (SHIPPED_POLICIES / "default.yaml").read_text()
    configmap_swap(directory, {"default.yaml": default}, 1)
    server = start_server(policies_dir=directory)
    assert not allowed(server, "reload-ns")
    configmap_swap(directory, {"default.yaml": default, "reload.yaml": WARN_POLICY}, 2)
    assert within(RELOAD_DEADLINE, lambda: allowed(server, "reload-ns")) < RELOAD_DEADLINE
    configmap_swap(directory, {"default.yaml": default.replace("enforcement: enforce", "enforcement: warn   ")}, 3)
    os.unlink(directory / "reload.yaml")  # the kubelet removes links of keys that went away
    assert within(RELOAD_DEADLINE, lambda: allowed(server, "team-a"))


def test_a_policy_directory_that_disappears_and_comes_back_is_no_longer_reported_rejected(start_server, tmp_path):
    directory = tmp_path / "policies"
    directory.mkdir()
    shutil.copy(SHIPPED_POLICIES / "default.yaml", directory / "default.yaml")
    server = start_server(policies_dir=directory)
    away = tmp_path / "away"
    directory.rename(away)  # or a network mount that is away for a while
    record = server.wait_for_log(
        lambda r: r.get("event") == "policy-reload" and r.get("result") == "error", timeout=RELOAD_DEADLINE
    )
    (problem,) = record["problems"]
    assert problem.startswith(f"{directory}: no such policy directory")
    assert not allowed(server, "team-a"), "the last good set is still served"
    assert server.get("/readyz").json()["policyReloadRejected"] == record["problems"]

    away.rename(directory)  # back, unchanged: what is served is what is there, nothing is rejected any more
    within(RELOAD_DEADLINE, lambda: "policyReloadRejected" not in server.get("/readyz").json())
    assert not allowed(server, "team-a")


def new_workers(server: LiveServer, before: set[int], timeout: float = 15) -> set[int]:
    """Once none of the workers `before` is left: the workers then (as many as before)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = worker_pids(server)
        if len(workers) == len(before) and not workers & before:
            return workers
        time.sleep(0.1)
    raise AssertionError(f"workers {before} not replaced within {timeout} s: {worker_pids(server)}")


def test_workers_started_after_a_good_change_and_a_broken_one_serve_the_good_one(start_server, tmp_path):
    """SIGHUP (or a crashed worker) forks new workers from the arbiter, which loaded the policies at startup: they
    must start from the set the old ones served, even when what is on disk now is broken."""
    directory = tmp_path / "policies"
    directory.mkdir()
    shutil.copy(SHIPPED_POLICIES / "default.yaml", directory / "default.yaml")
    server = start_server(policies_dir=directory, workers=2)
    assert not allowed(server, "reload-ns")
    (directory / "reload.yaml").write_text(WARN_POLICY)  # a good change
    within(RELOAD_DEADLINE, lambda: allowed(server, "reload-ns"))
    time.sleep(2)  # in a cluster, changes are minutes apart (the arbiter looks about once a second)
    broken = WARN_POLICY.replace("reload-warn", "broken").replace("reload-ns", "broken-ns")
    (directory / "broken.yaml").write_text(broken.replace("enforcement: warn", "enforcement: maybe"))  # then a bad one
    record = server.wait_for_log(
        lambda r: r.get("event") == "policy-reload" and r.get("result") == "error", timeout=RELOAD_DEADLINE
    )

    before = worker_pids(server, 2)
    server.process.send_signal(signal.SIGHUP)
    new_workers(server, before)
    for _ in range(6):  # new connections, so both new workers answer some
        assert allowed(server, "reload-ns"), "a new worker serves the policies loaded at startup"
    ready = server.get("/readyz").json()
    assert ready["policies"] == 2 and ready["policyReloadRejected"] == record["problems"]


# --- certificates -------------------------------------------------------------------------------------------


def served_serial(server: LiveServer) -> int:
    """The serial number of the certificate a new connection gets."""
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with socket.create_connection((host, port)) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_a_new_certificate_is_served_without_failing_reviews_in_flight(start_server, tmp_path):
    cert = certs.generate_dev_certs(tmp_path / "certs")
    server = start_server(cert=cert, cert_reload_interval=1)
    old_serial = served_serial(server)

    failures: list[str] = []
    answered = [0]
    stop = threading.Event()

    def hammer() -> None:  # kept-alive connections, as the API server's
        session = server.session()
        while not stop.is_set():
            try:
                sent = make_review(pod("team-a", "1"), namespace="team-a")
                answer = session.post(f"{server.url}/validate", json=sent, timeout=10)
                if answer.status_code != 200 or not answer.json()["response"]["allowed"]:
                    failures.append(answer.text)
                answered[0] += 1
            except Exception as exc:  # a dropped connection would land here
                failures.append(repr(exc))

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        rotated = certs.reissue_serving_certificate(cert.directory, valid_for=dt.timedelta(days=90))
        new_serial = certs.load_certificate(rotated.tls_cert).serial_number
        took = within(10, lambda: served_serial(server) == new_serial)
        time.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert new_serial != old_serial and took < 60
    assert failures == [] and answered[0] > 10
    expiry = server.metrics()["gpu_admission_certificate_expiry_timestamp_seconds"]
    assert expiry == pytest.approx(certs.certificate_not_after(rotated.tls_cert).timestamp())


def test_a_worker_started_while_the_certificate_files_are_missing_serves_the_last_good_certificate(
    start_server, tmp_path
):
    """A worker respawned mid-rotation (the files briefly gone) serves what the others served, not the certificate
    loaded at startup, which may have expired long ago in a pod that runs for months."""
    cert = certs.generate_dev_certs(tmp_path / "certs")
    server = start_server(cert=cert, cert_reload_interval=1)
    rotated = certs.reissue_serving_certificate(cert.directory, valid_for=dt.timedelta(days=90))
    new_serial = certs.load_certificate(rotated.tls_cert).serial_number
    within(10, lambda: served_serial(server) == new_serial)
    time.sleep(2)  # the arbiter looks about once a second

    aside = tmp_path / "aside"
    aside.mkdir()
    for path in (cert.tls_cert, cert.tls_key):
        path.rename(aside / path.name)
    before = worker_pids(server, 1)
    os.kill(next(iter(before)), signal.SIGKILL)
    new_workers(server, before)
    assert served_serial(server) == new_serial, "the new worker serves the certificate loaded at startup"
    for path in aside.iterdir():
        path.rename(cert.directory / path.name)


def test_a_replacement_that_is_not_valid_now_is_refused_and_the_good_certificate_stays(start_server, tmp_path):
    cert = certs.generate_dev_certs(tmp_path / "certs")
    server = start_server(cert=cert, cert_reload_interval=1)
    good_serial = served_serial(server)
    # Issued for next week (a clock mistake, or a file meant for later): every handshake would fail.
    ca_key, ca_cert = certs.load_private_key(cert.ca_key), certs.load_certificate(cert.ca_cert)
    later = certs.utcnow() + dt.timedelta(days=7)
    key, future = certs.issue_serving_certificate(ca_key, ca_cert, dns_names=["localhost"], ip_addresses=["127.0.0.1"],
                                                  now=later)  # fmt: skip
    certs.write_private_key(cert.tls_key, key)
    certs.write_certificate(cert.tls_cert, future)
    record = server.wait_for_log(lambda r: r.get("event") == "certificate-reload" and r.get("result") == "error")
    assert "the new certificate is valid from" in record["message"] and "not now" in record["message"]
    assert served_serial(server) == good_serial
    assert allowed(server, "team-a") is False, "reviews are still answered (a fraction is denied in team-a)"
    assert _readyz_status(server) == 200


def test_a_certificate_close_to_expiry_makes_the_server_unready_and_says_what_to_run(start_server, tmp_path):
    cert = certs.generate_dev_certs(tmp_path / "certs")
    certs.reissue_serving_certificate(cert.directory, valid_for=dt.timedelta(days=3))
    server = start_server(cert=cert, wait=False)
    within(15, lambda: server.log_records() != [] and _readyz_status(server) == 503)
    reasons = server.get("/readyz").json()["reasons"]
    assert reasons[0].startswith(f"certificate {cert.tls_cert} expires in 2.9 days")
    assert f"gpu-webhook certs renew --dir {cert.directory}" in reasons[0]
    assert server.get("/healthz").status_code == 200
    server.wait_for_log(lambda r: r.get("event") == "certificate-expiry" and "certs renew" in r["message"])
    expiry = server.metrics()["gpu_admission_certificate_expiry_timestamp_seconds"]
    assert expiry - time.time() < 3 * 86400 + 60


def test_readiness_may_wait_for_the_expiry_itself_while_the_log_and_the_metric_still_warn(start_server, tmp_path):
    # Every replica shares the certificate: an operator may prefer a warning to all replicas going unready.
    cert = certs.generate_dev_certs(tmp_path / "certs")
    certs.reissue_serving_certificate(cert.directory, valid_for=dt.timedelta(days=3))
    server = start_server(cert=cert, extra_args=["--unready-before-expiry", "0d"])
    assert server.get("/readyz").status_code == 200
    record = server.wait_for_log(lambda r: r.get("event") == "certificate-expiry")
    assert record["message"].startswith(f"certificate {cert.tls_cert} expires in 2.9 days")
    assert "not ready" not in record["message"] and "certs renew" in record["message"]
    expiry = server.metrics()["gpu_admission_certificate_expiry_timestamp_seconds"]
    assert expiry - time.time() < 3 * 86400 + 60


def _readyz_status(server: LiveServer) -> int:
    try:
        return server.get("/readyz", timeout=2).status_code
    except Exception:
        return 0
