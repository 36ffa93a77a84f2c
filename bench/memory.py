"""Benchmark 3: resident memory of each gunicorn worker after 1,000 and after 100,000 reviews.

`gpu-webhook serve` as deployed (2 workers, 8 threads, TLS, metrics, a JSON log line per review) gets
review (a) on `/mutate`, with one review in 20 a denial on `/validate` (a fractional GPU in a namespace whose
policy gives whole GPUs only), each with its own uid, from the load generator (`bench/loadgen.py`, 8
kept-alive connections, as fast as the server answers). RSS is read from /proc/PID/status of each worker
(the arbiter's children) after 1,000 reviews and again after 100,000.
Targets: after 100,000 at most 1.1 x after 1,000, and under 80 MB, for every worker.

100,000 reviews take one to three minutes here (at the server's saturation; see bench/server.py); the run
stops at TIME_LIMIT_SECONDS whatever the count, and says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.common import check, table, write_results
from bench.server import CONNECTIONS, Server, load, review_body, setup, start_webhook, unpin

FIRST, TOTAL = 1_000, 100_000
TIME_LIMIT_SECONDS = 300
DENIALS_EVERY = 20
MB = 1024 * 1024

# Whole GPUs only everywhere but `inference` (the shipped default policy's rules).
DEFAULT_POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: default}
spec:
  namespaces: ["*"]
  sharing: {mode: exclusive}
  fractional: reject
"""


def denied_review() -> str:
    from bench.engine import gpu_container, pod

    obj = pod([gpu_container("train")])
    obj["metadata"]["namespace"] = "team-a"
    obj["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "0.5"
    return review_body(obj, namespace="team-a")


def rss(pid: int) -> dict[str, int]:
    """VmRSS and its parts (anonymous, file-backed, shared memory), in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            values[key] = int(rest.split()[0]) * 1024
    return values


def snapshot(server: Server) -> dict[int, dict[str, int]]:
    return {pid: rss(pid) for pid in sorted(server.worker_pids())}


def main() -> bool:
    unpin()
    mix = [{"path": "/mutate", "body": review_body()}] * (DENIALS_EVERY - 1)
    mix.append({"path": "/validate", "body": denied_review()})
    with setup(extra_policies=DEFAULT_POLICY) as where:
        server = start_webhook(where)
        try:
            arbiter = server.process.pid
            # Each load run also sends one review per connection first (its own warm-up): counted here.
            first = load(server, mix, warmup=0, duration=TIME_LIMIT_SECONDS, max_requests=FIRST - CONNECTIONS)
            done_first = first["ok"] + CONNECTIONS
            after_first = snapshot(server)
            remaining = TOTAL - done_first - CONNECTIONS
            rest = load(server, mix, warmup=0, duration=TIME_LIMIT_SECONDS, max_requests=remaining)
            done = done_first + rest["ok"] + CONNECTIONS
            after_all = snapshot(server)
            arbiter_rss = rss(arbiter)["VmRSS"]
            denials = _count_denials(server)
        finally:
            server.stop()

    rows: list[tuple[Any, ...]] = []
    results = []
    for pid in sorted(set(after_first) | set(after_all)):
        a, b = after_first.get(pid), after_all.get(pid)
        if a is None or b is None:  # a worker that died and was replaced: say so, it fails the check
            rows.append((f"worker {pid}", "-" if a is None else a["VmRSS"] / MB, "-" if b is None else b["VmRSS"] / MB,
                         "replaced", "-"))  # fmt: skip
            results.append({"pid": pid, "after_first": a, "after_all": b, "ratio": None})
            continue
        ratio = b["VmRSS"] / a["VmRSS"]
        rows.append((f"worker {pid}", f"{a['VmRSS'] / MB:.1f}", f"{b['VmRSS'] / MB:.1f}", f"{ratio:.3f}",
                     f"{b['RssAnon'] / MB:.1f} / {b['RssFile'] / MB:.1f} / {b['RssShmem'] / MB:.1f}"))  # fmt: skip
        results.append({"pid": pid, "after_first": a, "after_all": b, "ratio": ratio})
    print(
        table(
            f"RSS per worker, MB: after {done_first:,} and after {done:,} reviews "
            f"({rest['wall_s']:.0f} s at {rest['ok'] / max(rest['wall_s'], 1e-9):,.0f} reviews/s; "
            f"1 in {DENIALS_EVERY} denied)",
            ["process", f"after {done_first:,}", f"after {done:,}", "ratio", "anon / file / shmem"],
            rows,
        )
    )
    print(f"  arbiter (not serving reviews): {arbiter_rss / MB:.1f} MB; denials answered: {denials:,}")
    errors = first["errors"] + rest["errors"]
    ratios = [r["ratio"] for r in results]
    worst_ratio = max((r for r in ratios if r is not None), default=float("inf"))
    largest = max(r["after_all"]["VmRSS"] for r in results if r["after_all"])
    ok = check(
        [
            (f"{TOTAL:,} reviews answered", done >= TOTAL and errors == 0,
             f"{done:,} in the time limit, {errors} errors"),
            ("RSS after 100k <= 1.1 x after 1k", None not in ratios and worst_ratio <= 1.1,
             f"worst worker {worst_ratio:.3f}"),
            ("RSS < 80 MB per worker", largest < 80 * MB, f"largest {largest / MB:.1f} MB"),
        ]
    )  # fmt: skip
    write_results(
        "memory",
        {"reviews_first": done_first, "reviews_total": done, "denials": denials, "workers": results,
         "arbiter_rss": arbiter_rss, "errors": errors, "seconds": rest["wall_s"],
         "loadavg": os.getloadavg(), "targets_met": ok},
    )  # fmt: skip
    return ok


def _count_denials(server: Server) -> int:
    count = 0
    with server.log_file.open("rb") as handle:
        for line in handle:
            if b'"decision": "deny"' in line:
                count += 1
    return count


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
