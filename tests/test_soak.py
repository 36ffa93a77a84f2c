"""Soak (`make soak`): the real server at half of its saturation for 5 minutes, with memory watched.

Saturation is measured first, in the test, as the server benchmark measures it: its load generator
(`bench/loadgen.py`, in its own process, 8 kept-alive connections) sends review (a) back to back for a few
seconds (a 2-container pod in `notebooks`: limits set from requests, mapped to the shared GPU resource,
memory env vars injected). Then 2 load processes with 8 kept-alive connections each send review (a) at half
that rate for GPU_ADMISSION_SOAK_SECONDS (default 300; GPU_ADMISSION_SOAK_RATE fixes the rate instead),
checking every answer whole. Every review must be answered right, the rate must be kept, and each worker's
RSS (from /proc) may grow less than 10% from the soak's start to its end (the largest sample of the last
minute).

The load generators run on the same 2 cores as the server's 2 workers: saturation here is of the machine,
client included, not of the server alone.
"""

from __future__ import annotations

import base64
import functools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from bench.loadgen import PLACEHOLDER_UID
from tests.conftest import ROOT, LiveServer
from tests.test_faults import SHIPPED, Client, answered_as, expected_response, shared_gpu_patch
from tests.test_hostile import worker_pids
from webhook.admission.review import make_review

SOAK_SECONDS = float(os.environ.get("GPU_ADMISSION_SOAK_SECONDS", "300"))
SOAK_RATE = os.environ.get("GPU_ADMISSION_SOAK_RATE")  # reviews/s; default: half of the measured saturation
SATURATION_SECONDS = 5.0
SATURATION_CONNECTIONS = 8  # the server benchmark's
PROCESSES, CONNECTIONS = 2, 8  # per process
CATCH_UP = 1.0  # seconds of reviews a late client may send back to back to keep the rate
RSS_WINDOW = 60.0  # seconds: the last minute (the last fifth, for a shorter run)
MAX_RSS_GROWTH = 0.10
RATE_KEPT = 0.95  # of the target rate, over the whole soak


def review_a(uid: str, _seq: int = 0, namespace: str = "notebooks") -> bytes:
    """Review (a): requests into limits, mapping to the shared resource, env injection."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nb-0", "namespace": namespace},
        "spec": {
            "containers": [
                {"name": "jupyter", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
                {"name": "sidecar", "image": "y", "resources": {"limits": {"cpu": "100m"}}},
            ]
        },
    }
    return json.dumps(make_review(pod, namespace=namespace, uid=uid)).encode()


@functools.cache
def check_a() -> Callable[[dict[str, Any]], str]:
    """Exactly the engine's answer to review (a) under the shipped policies."""
    return answered_as(expected_response(SHIPPED, "notebooks", body=review_a))


# --- load in other processes --------------------------------------------------------------------------------


@dataclass
class Endpoint:
    """What a Client needs of a LiveServer (picklable)."""

    url: str
    ca_file: Path


@dataclass
class Report:
    answered: int
    failures: list[str]
    latencies_ms: list[float]
    started: float
    finished: float


def _load(endpoint: Endpoint, process: int, seconds: float, rate: float | None, out: Any) -> None:
    """In a child process: CONNECTIONS clients for `seconds`, back to back or at `rate` reviews/s in all."""
    clients = [
        Client(endpoint, process * 100 + i, body=review_a, check=check_a())  # type: ignore[arg-type]
        for i in range(CONNECTIONS)
    ]
    started = time.monotonic()
    deadline = started + seconds
    interval = CONNECTIONS / rate if rate else 0.0

    def run(client: Client) -> None:
        seq, next_at = 0, time.monotonic() + (interval * client.index / CONNECTIONS if interval else 0.0)
        while time.monotonic() < deadline:
            if interval:
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                next_at = max(next_at + interval, time.monotonic() - CATCH_UP)  # late: catch up, a little
            seq += 1
            client.review(seq)
        client._close()

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = [r for c in clients for r in c.results]
    out.put(Report(
        answered=sum(1 for r in results if not r.error),
        failures=[f"{r.uid}: {r.error}" for r in results if r.error][:20],
        latencies_ms=[(r.done - r.sent) * 1000 for r in results if not r.error],
        started=started,
        finished=time.monotonic(),
    ))  # fmt: skip


def run_load(server: LiveServer, seconds: float, rate: float | None = None) -> tuple[Report, float]:
    """PROCESSES load processes; returns the merged report and the failures' count."""
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    endpoint = Endpoint(server.url, server.ca_file)
    per_process = rate / PROCESSES if rate else None
    processes = [context.Process(target=_load, args=(endpoint, p, seconds, per_process, out)) for p in range(PROCESSES)]
    for process in processes:
        process.start()
    reports = [out.get(timeout=seconds + 60) for _ in processes]
    for process in processes:
        process.join(10)
    merged = Report(
        answered=sum(r.answered for r in reports),
        failures=[f for r in reports for f in r.failures],
        latencies_ms=sorted(x for r in reports for x in r.latencies_ms),
        started=min(r.started for r in reports),
        finished=max(r.finished for r in reports),
    )
    return merged, merged.answered / (merged.finished - merged.started)


def saturation(server: LiveServer, seconds: float) -> dict[str, Any]:
    """Review (a) at saturation, measured as `bench/server.py` does: the benchmark's load generator in its own
    process, closed loop (each connection sends its next review when the last is answered). Its JSON results."""
    port = int(server.url.rsplit(":", 1)[1])
    review = {"path": "/mutate", "body": review_a(PLACEHOLDER_UID).decode()}
    spec = {"host": "127.0.0.1", "port": port, "ca": str(server.ca_file), "connections": SATURATION_CONNECTIONS,
            "warmup": 1.0, "duration": seconds, "requests": [review]}  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
    try:
        done = subprocess.run([sys.executable, "-m", "bench.loadgen", handle.name], capture_output=True, text=True,
                              cwd=ROOT, timeout=seconds + 60)  # fmt: skip
    finally:
        os.unlink(handle.name)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))] if values else float("nan")


# --- memory -------------------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


class RssSampler(threading.Thread):
    """Each worker's RSS every second: (seconds since start, pid, KiB)."""

    def __init__(self, pids: set[int]) -> None:
        super().__init__(daemon=True)
        self.pids, self.samples = pids, []
        self.stopping = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        while not self.stopping.is_set():
            now = time.monotonic() - self.started_at
            self.samples.extend((now, pid, rss_kib(pid)) for pid in self.pids)
            self.stopping.wait(1.0)

    def first(self, pid: int) -> int:
        """The RSS sampled as the soak began (after the saturation run: the workers are warm)."""
        return next(rss for _, p, rss in self.samples if p == pid)

    def window_max(self, pid: int, keep: Callable[[float], bool]) -> int:
        return max(rss for t, p, rss in self.samples if p == pid and keep(t))


# --- the soak -----------------------------------------------------------------------------------------------


@pytest.mark.soak
def test_half_of_saturation_for_5_minutes_fails_nothing_and_memory_stays_flat(start_server):
    server = start_server(workers=2, threads=8)
    workers = worker_pids(server, 2)
    assert len(workers) == 2

    measured = saturation(server, SATURATION_SECONDS)
    assert measured["errors"] == 0, measured["error_samples"]
    saturated = measured["throughput"]
    rate = float(SOAK_RATE) if SOAK_RATE else saturated / 2

    sampler = RssSampler(workers)
    sampler.start()
    report, achieved = run_load(server, SOAK_SECONDS, rate)
    sampler.stopping.set()
    sampler.join()
    duration = report.finished - report.started
    window = min(RSS_WINDOW, duration / 5)

    lines = [
        f"\nsoak: saturation {saturated:.0f} reviews/s (bench/loadgen.py, {SATURATION_CONNECTIONS} kept-alive "
        f"connections, on the same 2 cores); soak at {rate:.0f}/s ({PROCESSES} processes x {CONNECTIONS} connections)"
        f" for {duration:.0f} s: {report.answered} answered, {len(report.failures)} failed, achieved {achieved:.0f}/s",
        f"  latency ms: p50 {percentile(report.latencies_ms, 0.5):.2f}  p99 {percentile(report.latencies_ms, 0.99):.2f}"
        f"  p99.9 {percentile(report.latencies_ms, 0.999):.2f}  max {report.latencies_ms[-1]:.1f}",
    ]
    growths = {}
    for pid in sorted(workers):
        start = sampler.first(pid)
        end = sampler.window_max(pid, lambda t, end=duration: t >= end - window)
        growths[pid] = end / start - 1
        lines.append(f"  worker {pid}: RSS {start / 1024:.1f} MiB at the start -> {end / 1024:.1f} MiB (the largest "
                     f"of the last {window:.0f} s): {growths[pid] * 100:+.1f}%")  # fmt: skip
    print("\n".join(lines))

    assert report.failures == [], report.failures
    assert worker_pids(server) == workers, "a worker was replaced during the soak"
    assert duration >= SOAK_SECONDS
    assert achieved >= rate * RATE_KEPT, f"the load reached {achieved:.0f}/s of {rate:.0f}/s: is the machine busy?"
    for pid, growth in growths.items():
        assert growth < MAX_RSS_GROWTH, f"worker {pid}: RSS grew {growth * 100:.1f}%"
    assert "Traceback" not in server.log()


def test_review_a_is_what_the_soak_says(start_server):
    """The soak's review, once, checked whole: limits from requests, the shared resource, env for 0.25."""
    server = start_server()
    sent = json.loads(review_a("soak-check"))
    response = server.post("/mutate", sent).json()["response"]
    assert check_a()(response) == "" and shared_gpu_patch(response) == ""
    mutated = jsonpatch.apply_patch(sent["request"]["object"], json.loads(base64.b64decode(response["patch"])))
    jupyter, sidecar = mutated["spec"]["containers"]
    shared = {"nvidia.com/gpu.shared": "1"}
    assert jupyter["resources"] == {"requests": shared, "limits": shared}
    assert {"name": "CUDA_MEMORY_FRACTION", "value": "0.25"} in jupyter["env"]
    assert sidecar == sent["request"]["object"]["spec"]["containers"][1]
