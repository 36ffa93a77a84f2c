"""A small HTTPS load generator: kept-alive connections, closed loop (saturation) or open loop (a fixed rate).

Run as its own process (`python -m bench.loadgen SPEC.json`), so it competes with the server for the CPU as a
separate client would; it prints one JSON object of results. wrk is faster but has no fixed-rate mode
(Debian's wrk is not wrk2), and a fixed-rate run must not coordinate with the server: here every request
has a scheduled time on a fixed timetable and its latency counts from that time, so a stalled server is
charged for the requests that waited behind it (no "coordinated omission").

The spec (JSON): host, port, ca (file), connections, duration and warmup (seconds), rate (requests/s; 0 is a
closed loop), requests (a list of {"path", "body"} sent in turn), optional max_requests and cpus. Each body's
uid "00000000-0000-0000-0000-000000000000" is replaced by a fresh uid of the same length per request, and the
answer must echo it with status 200, else the request counts as an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_CLOSE = re.compile(rb"\r\nconnection:\s*close", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Template:
    """One request as bytes around its uid: head + prefix + uid + suffix."""

    head_and_prefix: bytes
    suffix: bytes

    @classmethod
    def build(cls, host: str, port: int, path: str, body: str) -> Template:
        raw = body.encode("utf-8")
        prefix, found, suffix = raw.partition(PLACEHOLDER_UID.encode())
        if not found:
            raise ValueError(f"request body for {path} has no uid {PLACEHOLDER_UID} to replace")
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
        ).encode("ascii")
        return cls(head + prefix, suffix)

    def render(self, uid: bytes) -> bytes:
        return self.head_and_prefix + uid + self.suffix


def uid_for(index: int) -> bytes:
    text = f"{index:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}".encode()


class Connection:
    """One kept-alive TLS connection, blocking; minimal HTTP/1.1 (Content-Length bodies)."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        raw = socket.create_connection((host, port), timeout=30)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = context.wrap_socket(raw, server_hostname=host)
        self.buffer = b""

    def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send a request, return (status, body, server closes)."""
        self.sock.sendall(request)
        buffer = self.buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            buffer += self._recv()
        head = buffer[: end + 2]
        status = int(head[9:12])
        match = _CONTENT_LENGTH.search(head)
        total = end + 4 + (int(match.group(1)) if match else 0)
        while len(buffer) < total:
            buffer += self._recv()
        self.buffer = buffer[total:]
        return status, buffer[end + 4 : total], _CLOSE.search(head) is not None

    def _recv(self) -> bytes:
        data = self.sock.recv(262144)
        if not data:
            raise ConnectionError("server closed the connection")
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass
class Recorder:
    """What all threads saw; one list append per request (atomic under the GIL)."""

    measure_from: float
    measure_until: float
    latencies: list[float] = field(default_factory=list)
    counts: list[list[int]] = field(default_factory=list)  # [sent, ok] per thread
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, message: str) -> None:
        with self.lock:
            self.errors += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(message[:300])


def run(spec: dict[str, Any]) -> dict[str, Any]:
    host, port = spec.get("host", "127.0.0.1"), int(spec["port"])
    connections = int(spec.get("connections", 8))
    duration, warmup = float(spec.get("duration", 5)), float(spec.get("warmup", 1))
    rate = float(spec.get("rate", 0))
    max_requests = int(spec.get("max_requests", 0)) or None
    if spec.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(spec["cpus"]))
    templates = [Template.build(host, port, r["path"], r["body"]) for r in spec["requests"]]
    context = ssl.create_default_context(cafile=spec["ca"])
    sys.setswitchinterval(0.0005)  # threads that wake for I/O get the interpreter quickly

    conns = [Connection(host, port, context) for _ in range(connections)]
    for conn in conns:  # one request each first: handshakes and first-request costs are not measured
        status, _, _ = conn.exchange(templates[0].render(uid_for(0)))
        if status != 200:
            raise SystemExit(f"loadgen: the server answered {status} to the first request")

    counter = iter(range(1, 1 << 62))  # next() on a range iterator is atomic under the GIL
    start = time.perf_counter() + 0.05
    recorder = Recorder(start + warmup, start + warmup + duration)
    end = start + warmup + duration
    interval = 1.0 / rate if rate > 0 else 0.0
    total = int(rate * (warmup + duration)) if rate > 0 else None
    if max_requests is not None:
        total = min(total, max_requests) if total is not None else max_requests
    stop = threading.Event()

    def worker(conn: Connection) -> None:
        clock, latencies, templates_n = time.perf_counter, recorder.latencies, len(templates)
        counts = [0, 0]  # sent, ok: this thread's own, summed at the end (no lock per request)
        recorder.counts.append(counts)
        while not stop.is_set():
            index = next(counter)
            if total is not None and index > total:
                return
            if interval:
                scheduled = start + (index - 1) * interval
                delay = scheduled - clock()
                if delay > 0:
                    time.sleep(delay)
            else:
                scheduled = clock()
                if scheduled >= end:
                    return
            uid = uid_for(index)
            counts[0] += 1
            try:
                status, body, closing = conn.exchange(templates[index % templates_n].render(uid))
            except (OSError, ValueError) as exc:
                recorder.error(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = Connection(host, port, context)  # a refused reconnect ends this thread
                continue
            done = clock()
            if status != 200 or uid not in body:
                recorder.error(f"status {status}: {body[:200]!r}")
            else:
                counts[1] += 1
                if scheduled >= recorder.measure_from and done <= recorder.measure_until + (30 if interval else 0):
                    latencies.append(done - scheduled)
            if closing:
                conn.close()
                conn = Connection(host, port, context)

    cpu_before = os.times()
    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in conns]
    for thread in threads:
        thread.start()
    deadline = end + 30  # an open loop drains what is queued; nothing waits for ever
    for thread in threads:
        thread.join(max(0.0, deadline - time.perf_counter()))
    stop.set()
    finished = time.perf_counter()
    cpu_after = os.times()
    for conn in conns:
        conn.close()

    latencies = sorted(recorder.latencies)
    window = duration if rate > 0 or max_requests is None else max(1e-9, finished - recorder.measure_from)
    count = len(latencies)

    def pct(fraction: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(count - 1, max(0, round(fraction * (count - 1))))] * 1000

    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    return {
        "connections": connections,
        "rate_target": rate,
        "duration_s": round(window, 3),
        "sent": sum(c[0] for c in recorder.counts),
        "ok": sum(c[1] for c in recorder.counts),
        "measured": count,
        "errors": recorder.errors,
        "error_samples": recorder.error_samples,
        "throughput": count / window,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": pct(1.0),
        "loadgen_cpu_s": round(cpu, 3),
        "wall_s": round(finished - start, 3),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.loadgen SPEC.json  (see the module's docstring)", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        spec = json.load(handle)
    print(json.dumps(run(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
