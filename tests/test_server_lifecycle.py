"""Starting and stopping the real server: refusals in one line, `--dev`, SIGTERM, a killed worker."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from gunicorn import sock as gunicorn_sockets
from gunicorn.config import Config
from gunicorn.glogging import Logger

from tests.conftest import (
    EXAMPLE_POLICIES,
    ROOT,
    SHIPPED_POLICIES,
    LiveServer,
    free_port,
    gpu_webhook_command,
    wait_until_ready,
)
from tests.test_server import pod
from tests.test_server_app import write_chain
from webhook import certs
from webhook.admission.review import make_review
from webhook.server.worker import WebhookWorker


def serve(*args: str, cwd=None, timeout: float = 20) -> subprocess.CompletedProcess:
    """`gpu-webhook serve ...` expected to exit by itself (a refusal)."""
    env = {k: v for k, v in os.environ.items() if k != "GPU_ADMISSION_POLICIES"}
    return subprocess.run(
        [*gpu_webhook_command(), "serve", "--port", str(free_port()), "--metrics-port", "0", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=env,
    )  # fmt: skip


# --- refusing to start --------------------------------------------------------------------------------------


def test_a_broken_policy_directory_fails_with_the_loaders_lines_and_exit_2(dev_certs, tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: bad}\n"
        "spec: {namespaces: [a], enforcement: maybe}\n"
    )
    cert, key = str(dev_certs.tls_cert), str(dev_certs.tls_key)
    run = serve("--cert-file", cert, "--key-file", key, "--policies", str(tmp_path))
    assert run.returncode == 2 and run.stdout == ""
    lines = run.stderr.splitlines()
    assert lines[0] == f"gpu-webhook serve: invalid policies in {tmp_path}:"
    assert lines[1].startswith(f"  {tmp_path / 'bad.yaml'}#0 spec.enforcement: ")


@pytest.mark.parametrize(
    "case",
    ["missing-dir", "no-cert", "missing-cert", "mismatched-key", "expired", "expired-intermediate", "probe-port"],
)
def test_certificate_and_directory_problems_are_one_line_and_exit_2(dev_certs, tmp_path, case):
    cert, key, policies = str(dev_certs.tls_cert), str(dev_certs.tls_key), str(SHIPPED_POLICIES)
    expected: str
    if case == "missing-dir":
        args = ["--cert-file", cert, "--key-file", key, "--policies", str(tmp_path / "nope")]
        expected = f"policy directory {tmp_path / 'nope'} not found"
    elif case == "no-cert":
        args = ["--policies", policies]
        expected = "the webhook serves HTTPS only: pass --cert-file FILE --key-file FILE"
    elif case == "missing-cert":
        args = ["--cert-file", str(tmp_path / "tls.crt"), "--key-file", key, "--policies", policies]
        expected = f"{tmp_path / 'tls.crt'}: no such file (expected the certificate)"
    elif case == "probe-port":  # the probe listener would take the metrics port's place (or the webhook's)
        args = ["--cert-file", cert, "--key-file", key, "--policies", policies]
        args += ["--metrics-port", "19191", "--probe-port", "19191"]
        expected = "--probe-port 19191 is the metrics port too: pick another"
    elif case == "mismatched-key":
        other = certs.generate_dev_certs(tmp_path / "other")
        args = ["--cert-file", cert, "--key-file", str(other.tls_key), "--policies", policies]
        expected = f"{other.tls_key} does not match {cert}"
    elif case == "expired-intermediate":  # the certificate has a year left, but the chain it is served with ended
        chain_dir = tmp_path / "chain"
        chain_dir.mkdir()
        intermediate = write_chain(chain_dir, (dt.datetime.now(dt.UTC) - dt.timedelta(days=10), dt.timedelta(days=1)))
        args = ["--cert-file", str(chain_dir / "tls.crt"), "--key-file", str(chain_dir / "tls.key")]
        args += ["--policies", policies]
        expected = (
            f"intermediate CN=team intermediate in {chain_dir / 'tls.crt'} expired on "
            f"{intermediate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: reissue it from its CA, put it after the "
            "certificate in the file and update the Secret"
        )
    else:
        expired_dir = tmp_path / "expired"
        expired_dir.mkdir()
        past = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
        ca_key, ca_cert = certs.create_ca(now=past)
        key, cert_obj = certs.issue_serving_certificate(
            ca_key, ca_cert, ip_addresses=["127.0.0.1"], valid_for=dt.timedelta(days=2), now=past
        )
        certs.write_private_key(expired_dir / "tls.key", key)
        certs.write_certificate(expired_dir / "tls.crt", cert_obj)
        args = ["--cert-file", str(expired_dir / "tls.crt"), "--key-file", str(expired_dir / "tls.key")]
        args += ["--policies", policies]
        expected = f"certificate {expired_dir / 'tls.crt'} expired on "
    run = serve(*args)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"gpu-webhook serve: {expected}")
    if case == "expired":
        renew = f"gpu-webhook certs renew --dir {expired_dir}"
        assert run.stderr.rstrip().endswith(f"renew it (`{renew}`) or update its Secret")


# --- --dev --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "shown"), [(None, "127.0.0.1"), ("127.0.0.2", "127.0.0.2"), ("::1", "[::1]")])
def test_dev_makes_certificates_and_prints_a_curl_command_that_works(tmp_path, host, shown):
    """The dev certificate names the address the server listens on, so the banner's command verifies. The
    policies are `make run`'s: the examples, one per sharing mode."""
    shutil.copytree(EXAMPLE_POLICIES, tmp_path / "examples" / "policies")
    port = free_port()
    args = [*gpu_webhook_command(), "serve", "--dev", "--policies", "examples/policies", "--port", str(port),
            "--metrics-port", "0", "--workers", "1"]  # fmt: skip
    args += ["--host", host] if host else []
    env = {k: v for k, v in os.environ.items() if k != "GPU_ADMISSION_POLICIES"}
    started = time.monotonic()
    process = subprocess.Popen(
        args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        banner = [process.stdout.readline().rstrip() for _ in range(3)]  # type: ignore[union-attr]
        url = f"https://{shown}:{port}"
        assert banner == [
            f"gpu-webhook: serving {url} (6 policies from examples/policies)",
            "  dev CA: certs/dev/ca.crt",
            f"  try:    curl --cacert certs/dev/ca.crt {url}/healthz",
        ]
        ca = tmp_path / "certs" / "dev" / "ca.crt"
        server = LiveServer(url, ca, "", tmp_path / "examples" / "policies",
                            certs.CertPaths.in_dir(ca.parent), process, tmp_path / "none")  # fmt: skip
        wait_until_ready(server)
        ready_after = time.monotonic() - started
        assert ready_after < 5, f"ready after {ready_after:.2f} s"  # about 1 s; generous on a busy machine
        if shutil.which("curl"):
            curl = subprocess.run(
                banner[2].split(maxsplit=1)[1].split(), cwd=tmp_path, capture_output=True, text=True, timeout=10
            )
            assert json.loads(curl.stdout) == {"alive": True}, curl.stderr
        else:
            assert server.get("/healthz").json() == {"alive": True}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


# --- stopping -----------------------------------------------------------------------------------------------


def test_a_stopping_worker_closes_its_listeners_when_it_stops_accepting_not_before():
    """gthread's loop may switch accepting on after `alive` turned False (a signal between its check and the
    call): the listeners must stay usable then. Switched off, they close, and new connections are refused."""
    config = Config()
    config.set("bind", ["127.0.0.1:0"])
    logger = Logger(config)
    listeners = gunicorn_sockets.create_sockets(config, logger)
    port = listeners[0].getsockname()[1]
    worker = WebhookWorker(1, os.getpid(), listeners, None, 30, config, logger)
    worker.poller = selectors.DefaultSelector()
    worker.alive = False
    try:
        worker.set_accept_enabled(True)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            [(key, _)] = worker.poller.select(2)
            accepted, _ = key.fileobj.accept()
            accepted.close()
        worker.set_accept_enabled(False)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
    finally:
        worker.poller.close()
        for listener in listeners:
            listener.close()


def test_sigterm_finishes_the_reviews_in_flight_and_exits_within_10_s(start_server):
    server = start_server()
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    body = json.dumps(make_review(pod("team-a", "0.5"), namespace="team-a")).encode()
    head = (
        f"POST /validate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    context = ssl.create_default_context(cafile=str(server.ca_file))
    in_flight = []
    for _ in range(3):  # reviews half sent when SIGTERM arrives
        tls = context.wrap_socket(socket.create_connection((host, port)), server_hostname=host)
        tls.sendall(head + body[:100])
        in_flight.append(tls)
    time.sleep(0.3)

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    for tls in in_flight:  # the rest of each review, after the signal
        tls.sendall(body[100:])
    for tls in in_flight:
        tls.settimeout(10)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = tls.recv(65536)
            if not chunk:
                break
            answer += chunk
        tls.close()
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        review = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert review["response"]["allowed"] is False and review["response"]["status"]["code"] == 403
    assert server.process.wait(10) == 0
    assert time.monotonic() - signalled < 10
    with pytest.raises(requests.ConnectionError):
        server.get("/healthz", timeout=2)


def validate_request(host: str) -> bytes:
    """A whole `POST /validate` of a fractional GPU in team-a (denied under the shipped policies)."""
    body = json.dumps(make_review(pod("team-a", "0.5"), namespace="team-a")).encode()
    head = (
        f"POST /validate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def assert_denied_and_closing(answer: bytes) -> None:
    """`answer` is the 403 review of `validate_request`, marked as the connection's last."""
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\nConnection: close\r\n" in head + b"\r\n", head
    assert json.loads(body)["response"]["status"]["code"] == 403


def test_a_tls_handshake_under_way_at_sigterm_is_finished_and_its_review_answered(start_server):
    """A client that connected just before SIGTERM (the endpoint removal is still on its way) has a review to
    send: its handshake is finished and the review answered, as for a connection that had sent it already."""
    server = start_server()
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(server.ca_file))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
    raw = socket.create_connection((host, port), timeout=10)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    raw.sendall(outgoing.read())  # the ClientHello: the server answers, then waits for the client's Finished
    time.sleep(0.3)

    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    while True:  # the rest of the handshake, after the signal
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            chunk = raw.recv(65536)
            assert chunk, "the server closed the connection mid-handshake"
            incoming.write(chunk)
    tls.write(validate_request(host))
    try:
        raw.sendall(outgoing.read())  # the client's Finished, and the review
        answer = b""
        while chunk := raw.recv(65536):
            incoming.write(chunk)
            with contextlib.suppress(ssl.SSLWantReadError):
                while data := tls.read(65536):
                    answer += data
    except OSError as exc:  # a reset: the connection was dropped
        raise AssertionError(f"the connection was dropped: {exc!r}") from None
    finally:
        raw.close()
    assert_denied_and_closing(answer)
    assert server.process.wait(10) == 0


def test_after_sigterm_a_new_connection_is_refused_at_once_while_the_reviews_in_flight_finish(start_server):
    """Not accepted by the kernel into a listen queue nobody reads, to wait until the worker exits and be reset
    then (using up the API server's 5 s webhook timeout): refused, so the client knows at once."""
    server = start_server(workers=2)
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(server.ca_file))
    request = validate_request(host)
    in_flight = context.wrap_socket(socket.create_connection((host, port)), server_hostname=host)
    in_flight.sendall(request[:-100])  # half a review keeps its worker draining
    time.sleep(0.3)

    server.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    refused = False
    while not refused and time.monotonic() - signalled < 3:
        time.sleep(0.1)
        try:
            socket.create_connection((host, port), timeout=1).close()
        except ConnectionRefusedError:
            refused = True
    assert refused, "still accepting connections (into the listen queue) 3 s after SIGTERM"
    assert server.running

    in_flight.sendall(request[-100:])
    in_flight.settimeout(10)
    answer = b""
    while chunk := in_flight.recv(65536):
        answer += chunk
    in_flight.close()
    assert_denied_and_closing(answer)
    assert server.process.wait(10) == 0


def test_a_killed_worker_is_replaced_and_serves_within_2_s(start_server):
    server = start_server()
    booted = [r["message"] for r in server.log_records() if r.get("message", "").startswith("Booting worker with pid")]
    worker = int(booted[-1].rsplit(" ", 1)[1])
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    session = server.session()
    while True:
        try:
            sent = make_review(pod("team-a", "1"), namespace="team-a")
            if session.post(f"{server.url}/validate", json=sent, timeout=2).status_code == 200:
                break
        except requests.RequestException:
            session = server.session()
        assert time.monotonic() - killed < 2, server.log()[-2000:]
        time.sleep(0.02)
    assert server.running


# --- several workers ----------------------------------------------------------------------------------------


def test_metrics_add_up_across_workers(start_server):
    server = start_server(workers=2)
    name = 'gpu_admission_reviews_total{decision="deny",webhook="validate"}'
    before = server.metrics().get(name, 0.0)

    def send(_: int) -> int:
        review = make_review(pod("team-a", "0.5"), namespace="team-a")
        answer = requests.post(f"{server.url}/validate", json=review, verify=str(server.ca_file), timeout=10)
        return answer.status_code

    sent, pids = 0, set()
    # New connections, 10 at once (sent one by one, they tend to go to one worker), until both have answered some.
    with ThreadPoolExecutor(10) as pool:
        while len(pids) < 2 and sent < 300:
            assert list(pool.map(send, range(10))) == [200] * 10
            sent += 10
            time.sleep(0.1)
            pids = {r["pid"] for r in server.log_records() if r.get("message") == "review"}
    assert len(pids) == 2, "one worker took every connection"
    assert server.metrics()[name] - before == sent
    server.stop()
