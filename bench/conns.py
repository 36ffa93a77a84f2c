"""Benchmark 7: a webhook no pod can starve. Connections held against the server, and large reviews beside small.

`gpu-webhook serve` as deployed (2 workers x 8 threads, TLS, metrics on, the probe port as the Deployment sets
it where the server has one), on loopback, with an attacker in this process (and its large senders in a child
process):
- held:    IDLE TCP connections that send nothing plus HALF_OPEN ones stopped in the middle of a TLS ClientHello,
  kept at that count (any the server closes is opened again at once, as an attacker would); meanwhile, every
  0.2 s, a probe on a NEW connection (`/healthz` over HTTPS on the webhook port, and over plain HTTP on the probe
  port) and a review on a NEW connection, each with the kubelet's 2 s timeout; then the same with ONLY_HALF_OPEN
  half-open handshakes alone, more than both workers' places, so that no held connection is silent;
- metrics: HALF_SENT requests on the metrics port, held; then scrapes on new connections, and the threads the
  server process runs meanwhile;
- large:   six clients that each send a 2 MB review (a GPU pod of 24,000 GPU containers; BENCH_LARGE=annotation:
  one container and a 2 MB annotation) back to back on kept-alive connections, while small reviews go out 20 a
  second on kept-alive connections (latency from each one's scheduled time); the small reviews' p50/p90/p99
  with and without the large ones.

Targets: every probe and review on a new connection answered within 2 s while the connections are held; small
reviews' p90 beside the large ones under 100 ms. Run: `python -m bench conns` (about a minute). Loopback only;
it raises its own open-files limit (resource module) to hold the connections.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import multiprocessing
import os
import resource
import selectors
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from bench.common import check, percentile, table, write_results
from bench.server import Server, Setup, _start, free_port, setup
from webhook.admission.review import make_review

IDLE, HALF_OPEN, HALF_SENT = 3000, 1000, 200
ONLY_HALF_OPEN = 3000  # half-open handshakes alone, more than both workers' places: none of them silent
PROBE_SECONDS = 6.0
LARGE_SENDERS, LARGE_BYTES, SMALL_RATE, LARGE_SECONDS = 6, 2 * 1024 * 1024, 20.0, 8.0
PROBE_TIMEOUT = 2.0  # the Deployment's timeoutSeconds
HALF_HELLO = b"\x16\x03\x01\x00\xc8\x01\x00"  # a TLS record header and the start of a ClientHello
HALF_SENT_METRICS = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # no blank line: the request never ends


def has_probe_port() -> bool:
    text = subprocess.run([sys.executable, "-m", "webhook", "serve", "--help"], capture_output=True, text=True).stdout
    return "--probe-port" in text


def start(where: Setup, probe_port: int | None) -> Server:
    port = free_port()
    args = [
        sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--metrics-port", str(free_port()), "--cert-file", str(where.cert_file), "--key-file", str(where.key_file),
        "--policies", str(where.policies), "--workers", "2", "--threads", "8",
    ]  # fmt: skip
    if probe_port:
        args += ["--probe-port", str(probe_port)]
    server = _start("webhook", args, where, port)
    server.metrics_port = int(args[args.index("--metrics-port") + 1])  # type: ignore[attr-defined]
    return server


LARGE_KIND = os.environ.get("BENCH_LARGE", "containers")  # or "annotation": 1 GPU container, a 2 MB annotation


def gpu_pod(name: str, size: int = 0) -> dict[str, Any]:
    """A GPU pod; with `size`, about that many bytes of JSON: GPU containers (the engine's work grows with
    them), or with BENCH_LARGE=annotation one container and an annotation of that size (parsing only)."""
    container = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "inference"},
        "spec": {"containers": [container]},
    }
    if size and LARGE_KIND == "annotation":
        pod["metadata"]["annotations"] = {"note": "x" * size}
    elif size:
        each = len(json.dumps({**container, "name": "c00000"})) + 2
        pod["spec"]["containers"] = [{**container, "name": f"c{i:05d}"} for i in range(size // each)]
    return pod


def review(name: str, size: int = 0) -> bytes:
    return json.dumps(make_review(gpu_pod(name, size), namespace="inference")).encode()


# ------------------------------------------------------------------------------------------- held connections


class Holder(threading.Thread):
    """Keeps `idle` silent TCP connections and `half_open` ones that sent `first` (half a ClientHello, or half an
    HTTP request) open to `port`, opening again at once any that the server closes."""

    def __init__(self, port: int, idle: int, half_open: int, first: bytes = HALF_HELLO) -> None:
        super().__init__(daemon=True)
        self.port, self.first = port, first
        self.wanted = {"idle": idle, "half": half_open}
        self.selector = selectors.DefaultSelector()
        self.open = {"idle": 0, "half": 0}
        self.reopened = 0
        self.stopping = threading.Event()
        self.filled = threading.Event()

    def _open(self, kind: str) -> None:
        sock = socket.socket()
        sock.settimeout(0.5)
        try:
            sock.connect(("127.0.0.1", self.port))
            if kind == "half":
                sock.sendall(self.first)
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, kind)
        self.open[kind] += 1

    def run(self) -> None:
        while not self.stopping.is_set():
            for kind, wanted in self.wanted.items():
                while self.open[kind] < wanted and not self.stopping.is_set():
                    self._open(kind)
            self.filled.set()
            for key, _ in self.selector.select(0.05):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.selector.unregister(sock)
                    sock.close()
                    self.open[key.data] -= 1
                    self.reopened += 1

    def close(self) -> None:
        self.stopping.set()
        self.join(10)
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]


def raise_open_files() -> int:
    """This process's open-files limit, raised to its hard limit (at most 65,536); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return max(soft, wanted)


def _hold(port: int, idle: int, half_open: int, first: bytes, filled: Any, stop: Any, reopened: Any) -> None:
    raise_open_files()
    holder = Holder(port, idle, half_open, first)
    holder.start()
    holder.filled.wait(60)
    filled.set()
    while not stop.wait(0.05):
        reopened.value = holder.reopened
    reopened.value = holder.reopened
    holder.close()


@contextlib.contextmanager
def held_connections(port: int, idle: int, half_open: int, first: bytes = HALF_HELLO) -> Iterator[Any]:
    """`Holder`'s connections, held by a child process (its loop would slow this process's own clients down);
    yields a shared counter of the connections the server closed and the child opened again."""
    context = multiprocessing.get_context("fork")
    filled, stop, reopened = context.Event(), context.Event(), context.Value("q", 0)
    child = context.Process(target=_hold, args=(port, idle, half_open, first, filled, stop, reopened), daemon=True)
    child.start()
    try:
        if not filled.wait(60):
            raise RuntimeError(f"could not open {idle + half_open} connections to port {port} within 60 s")
        yield reopened
    finally:
        stop.set()
        child.join(15)
        if child.is_alive():
            child.kill()
            child.join(5)


def timed(action: Any) -> float | None:
    started = time.monotonic()
    try:
        action()
    except Exception:
        return None
    return time.monotonic() - started


def _ask(connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None) -> None:
    """One request on a new connection, answered 200 (its body read), then the connection closed."""
    try:
        connection.request(method, path, body, {"Content-Type": "application/json"} if body else {})
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 200, answer.status
    finally:
        connection.close()


def _https(server: Server) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    return http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=PROBE_TIMEOUT)


def https_get(server: Server, path: str) -> None:
    _ask(_https(server), "GET", path)


def http_get(port: int, path: str) -> None:
    _ask(http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT), "GET", path)


def https_review(server: Server, body: bytes) -> None:
    _ask(_https(server), "POST", "/mutate", body)


def summary(name: str, times: list[float | None]) -> list[str]:
    done = sorted(t for t in times if t is not None)
    failed = len(times) - len(done)
    return [name, str(len(times)), str(failed), f"{percentile(done, 0.5) * 1000:.0f}" if done else "-",
            f"{done[-1] * 1000:.0f}" if done else "-"]  # fmt: skip


def held(server: Server, probe_port: int | None, idle: int, half_open: int) -> tuple[list[list[str]], dict[str, Any]]:
    probes: dict[str, list[float | None]] = {"probe https /healthz": [], "review (new connection)": []}
    if probe_port:
        probes["probe http /healthz (probe port)"] = []
    body = review("small")
    with held_connections(server.port, idle, half_open) as reopened:
        time.sleep(0.5)
        deadline = time.monotonic() + PROBE_SECONDS
        while time.monotonic() < deadline:
            probes["probe https /healthz"].append(timed(lambda: https_get(server, "/healthz")))
            probes["review (new connection)"].append(timed(lambda: https_review(server, body)))
            if probe_port:
                probes["probe http /healthz (probe port)"].append(timed(lambda: http_get(probe_port, "/healthz")))
            time.sleep(0.2)
    rows = [summary(name, times) for name, times in probes.items()]
    answered = all(t is not None for times in probes.values() for t in times)
    return rows, {"reopened": reopened.value, "rows": rows, "all_answered": answered}


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def metrics_held(server: Server) -> tuple[list[list[str]], dict[str, Any]]:
    port = server.metrics_port  # type: ignore[attr-defined]
    before = threads_of(server.process.pid)
    scrapes = []
    with held_connections(port, 0, HALF_SENT, first=HALF_SENT_METRICS) as reopened:
        time.sleep(0.5)
        during = threads_of(server.process.pid)
        for _ in range(10):
            scrapes.append(timed(lambda: http_get(port, "/metrics")))
            time.sleep(0.2)
    rows = [summary("metrics scrape (new connection)", scrapes)]
    return rows, {"threads_before": before, "threads_held": during, "reopened": reopened.value, "rows": rows}


# ------------------------------------------------------------------------------------------------ large reviews


def _large_sender(port: int, ca: str, seconds: float, count: list[int] | None = None) -> None:
    body = review("large", LARGE_BYTES)
    context = ssl.create_default_context(cafile=ca)
    deadline = time.monotonic() + seconds

    def send() -> None:
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, http.client.HTTPException):
                connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
                connection.getresponse().read()

    threads = [threading.Thread(target=send) for _ in range(LARGE_SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def small_reviews(server: Server, seconds: float) -> list[float]:
    """Small reviews at SMALL_RATE on 4 kept-alive connections in turn; latency from each one's scheduled time."""
    context = ssl.create_default_context(cafile=str(server.ca_file))
    connections = [http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=30) for _ in range(4)]
    body, latencies = review("small"), []
    start_at = time.monotonic()
    for index in range(int(seconds * SMALL_RATE)):
        scheduled = start_at + index / SMALL_RATE
        with contextlib.suppress(ValueError):
            time.sleep(max(0.0, scheduled - time.monotonic()))
        connection = connections[index % len(connections)]
        connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        connection.getresponse().read()
        latencies.append(time.monotonic() - scheduled)
    for connection in connections:
        connection.close()
    return latencies


def large(server: Server) -> tuple[list[list[str]], dict[str, Any]]:
    alone = small_reviews(server, 3.0)
    sender = multiprocessing.get_context("fork").Process(
        target=_large_sender, args=(server.port, str(server.ca_file), LARGE_SECONDS + 1.0)
    )
    sender.start()
    time.sleep(1.0)
    beside = small_reviews(server, LARGE_SECONDS)
    sender.join(60)
    rows, p90 = [], percentile(sorted(beside), 0.9)
    for name, times in (("small reviews alone", alone), ("small beside 6 x 2 MB", beside)):
        ordered = sorted(times)
        rows.append([name, str(len(ordered))] + [f"{percentile(ordered, q) * 1000:.0f}" for q in (0.5, 0.9, 0.99)]
                    + [f"{ordered[-1] * 1000:.0f}"])  # fmt: skip
    return rows, {"rows": rows, "p90_beside_ms": p90 * 1000}


def main() -> bool:
    raise_open_files()
    probe_port = free_port() if has_probe_port() else None
    results: dict[str, Any] = {}
    with setup() as where:
        server = start(where, probe_port)
        try:
            for name, idle, half_open in (("held", IDLE, HALF_OPEN), ("held_half_open", 0, ONLY_HALF_OPEN)):
                rows, results[name] = held(server, probe_port, idle, half_open)
                print(
                    table(
                        f"\nheld: {idle} idle TCP connections and {half_open} half-open TLS handshakes on the "
                        f"webhook port (re-opened when closed: {results[name]['reopened']}); new connections, "
                        f"{PROBE_TIMEOUT:g} s timeout",
                        ["on a new connection", "tries", "failed", "p50 ms", "max ms"],
                        rows,
                    )
                )
            rows, results["metrics"] = metrics_held(server)
            print(
                table(
                    f"\nmetrics port: {HALF_SENT} half-sent requests held; server threads "
                    f"{results['metrics']['threads_before']} before, {results['metrics']['threads_held']} while held",
                    ["on a new connection", "tries", "failed", "p50 ms", "max ms"],
                    rows,
                )
            )
            rows, results["large"] = large(server)
            print(
                table(
                    f"\nlarge reviews: {LARGE_SENDERS} clients sending {LARGE_BYTES // 1024 // 1024} MB reviews "
                    f"({LARGE_KIND}) back to back; small reviews at {SMALL_RATE:g}/s on kept-alive connections",
                    ["run", "reviews", "p50 ms", "p90 ms", "p99 ms", "max ms"],
                    rows,
                )
            )
        finally:
            server.stop()
    write_results("conns", results)
    return check([
        ("every probe and review on a new connection answered within 2 s while connections are held",
         results["held"]["all_answered"], f"{results['held']['reopened']:,} connections closed and opened again"),
        ("... and while only half-open handshakes are held, more than the workers' places",
         results["held_half_open"]["all_answered"],
         f"{results['held_half_open']['reopened']:,} connections closed and opened again"),
        ("small reviews' p90 beside six clients sending 2 MB reviews", results["large"]["p90_beside_ms"] < 100,
         f"{results['large']['p90_beside_ms']:.0f} ms (target < 100 ms)"),
    ])  # fmt: skip
