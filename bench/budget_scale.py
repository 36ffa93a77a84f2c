"""Benchmark 10: GPU budgets at scale: what a create costs in a budgeted namespace of 10 to 100,000 GPU pods,
and the create rate with a budget against the rate without one.

Against the loopback API (tests/fake_kube_api.py, in a process of its own: bench/apiproc.py) and the real
`gpu-webhook serve` (2 workers, TLS). A create is what the API server does for a pod: /mutate, the patch
applied, /validate (where the budget reserves the pod in its namespace's ledger record), then the pod stored (a
POST to the loopback API, kept alive: the API server's own write), which the recount's pod watch sees.

1. Cost against the namespace's size. The namespace holds N running GPU pods (10, 1,000, 10,000, 100,000; a
   time-slicing replica each, as a controller's pods look), under a quota far above them. Once the recount has
   counted them, 100 pods are created one after another. Per create: the bytes the API exchanged (request
   bodies, responses and watch events, every worker's watches included), the /validate latency, and the CPU the
   server's processes spent (arbiter and workers, /proc). Target: none grows with N (the largest within 1.5x of
   the smallest, or within 1 KB / 1 ms / 1 ms of CPU where the smallest is tiny).
2. The create rate. In each of 5 rounds, in a new pair of namespaces: after 50 creates in each to warm up, 350
   creates in batches of 50, sequential, a batch in the budgeted namespace then one in the namespace without a
   quota. The median over the rounds of each batch's rate: pods 301-350 against pods 1-50 (target >= 0.9); and
   the median of the rounds' budgeted rate against unbudgeted (target >= 0.9). Then 640 creates, 64 at a time,
   in each, twice, interleaved (target: budgeted >= 0.8 of unbudgeted). The server's CPU per create is measured
   in each.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import ssl
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch

from bench.apiproc import ApiProcess
from bench.common import check, percentile, table, write_results
from bench.server import against_loopback_api
from webhook.admission.review import make_review
from webhook.server.ledger import Record

LEDGER_NAMESPACE = "gpu-admission"
SIZES = (10, 1_000, 10_000, 100_000)
CREATES = 100  # per size
BATCH, BATCHES = 50, 7  # the rate: 350 creates
ROUNDS = 5  # ... in each of 5 pairs of namespaces
BURST, BURST_CREATES = 64, 640
POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: teams}
spec:
  namespaces: ["bench-*"]
  sharing: {mode: time-slicing, replicas: 4}
  cluster: {fits: "off", offered: "off", drift: "off"}
"""


OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9f8c",
         "uid": "10000000-0000-4000-8000-000000000001", "controller": True}  # fmt: skip


def running_pod(namespace: str, index: int) -> dict[str, Any]:
    """A running GPU pod as the API server stores it after mutation: one time-slicing replica."""
    replica = {"nvidia.com/gpu.shared": "1", "cpu": "4", "memory": "16Gi"}
    container = {"name": "train", "image": "registry.example/train:1",
                 "resources": {"limits": replica, "requests": replica}}  # fmt: skip
    metadata = {
        "name": f"run-{index:06d}-7d9f8c-x{index % 97:02d}",
        "namespace": namespace,
        "uid": f"00000000-0000-4000-8000-{index:012d}",
        "labels": {"app": "train", "pod-template-hash": "7d9f8c"},
        "ownerReferences": [OWNER],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [container], "nodeName": f"gpu-node-{index % 5000:05d}"},
        "status": {"phase": "Running", "qosClass": "Guaranteed"},
    }


def new_pod(namespace: str, name: str) -> dict[str, Any]:
    """A pod as a user writes it: `nvidia.com/gpu: 1`, which the policy turns into a replica."""
    container = {"name": "main", "image": "registry.example/train:1",
                 "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [container]},
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}}  # fmt: skip


def quota(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": namespace},
            "spec": {"hard": {"requests.nvidia.com/gpu": "1000000"}}}  # fmt: skip


class Client:
    """One kept-alive HTTPS connection per thread to the server, doing what the API server does for a create."""

    def __init__(self, port: int, ca_file: Path, api: Any) -> None:
        self.port, self.context, self.api = port, ssl.create_default_context(cafile=str(ca_file)), api
        self.local = threading.local()

    def _post(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30)
            self.local.connection = connection
        connection.request("POST", path, json.dumps(review), {"Content-Type": "application/json"})
        return json.loads(connection.getresponse().read())["response"]

    def create(self, pod: dict[str, Any]) -> float:
        """/mutate, the patch applied, /validate, the pod stored; the seconds /validate took."""
        namespace = pod["metadata"]["namespace"]
        mutated = self._post("/mutate", make_review(pod, namespace=namespace))
        if mutated.get("patch"):
            pod = jsonpatch.apply_patch(copy.deepcopy(pod), json.loads(base64.b64decode(mutated["patch"])))
        started = time.perf_counter()
        validated = self._post("/validate", make_review(pod, namespace=namespace))
        seconds = time.perf_counter() - started
        if not validated["allowed"]:
            raise RuntimeError(f"pod {pod['metadata']['name']} refused: {validated.get('status')}")
        self._store({**pod, "status": {"phase": "Running"}})
        return seconds

    def _store(self, pod: dict[str, Any]) -> None:
        """POST the pod to the loopback API over a kept-alive connection: the API server's own write."""
        connection = getattr(self.local, "api", None)
        if connection is None:
            host, port = self.api.url.removeprefix("http://").split(":")
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            self.local.api = connection
        path = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.api.token}"}
        connection.request("POST", path, json.dumps(pod), headers)
        answer = connection.getresponse()
        answer.read()
        if answer.status != 201:
            raise RuntimeError(f"storing pod {pod['metadata']['name']}: HTTP {answer.status}")


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of these processes (their own, not their children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def server_pids(arbiter: int) -> list[int]:
    found = [arbiter]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == arbiter:
                found.append(int(entry.name))
    return found


def wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


def record_of(api: Any, namespace: str) -> Record:
    found = api.get("ConfigMap", LEDGER_NAMESPACE, f"gpu-budget-{namespace}")
    read = Record.of(found) if found is not None else None
    return read if read is not None else Record(namespace, "")


@dataclass
class Live:
    api: ApiProcess
    client: Client
    arbiter: int


@contextmanager
def live(objects: list[dict[str, Any]]) -> Iterator[Live]:
    """The loopback API holding `objects`, in a process of its own, and the real server (2 workers) against it."""
    api = ApiProcess(objects)
    try:
        with against_loopback_api(POLICY, api, LEDGER_NAMESPACE) as (server, where):
            yield Live(api, Client(server.port, where.ca_file, api), server.process.pid)
    finally:
        api.stop()


def moved(api: ApiProcess) -> int:
    """The bytes that have crossed the loopback API so far, both ways."""
    counters = api.counters()
    return counters["bytesReceived"] + counters["bytesSent"]


def cost_at(size: int) -> dict[str, float]:
    """Per create in a namespace of `size` running GPU pods: bytes through the API, /validate ms, server CPU ms."""
    namespace = "bench-scale"
    objects = [quota(namespace), *(running_pod(namespace, index) for index in range(size))]
    with live(objects) as where:
        api = where.api
        listed = time.monotonic()
        wait(lambda: record_of(api, namespace).pods() == size, 600, f"the recount of {size:,} pods")
        listed_s = time.monotonic() - listed
        time.sleep(1.0)
        pids = server_pids(where.arbiter)
        before_bytes, before_cpu = moved(api), cpu_seconds(pids)
        seconds = [where.client.create(new_pod(namespace, f"new-{index}")) for index in range(CREATES)]
        wait(lambda: (lambda r: not r.entries and r.pods() == size + CREATES)(record_of(api, namespace)), 60,
             "the recount of the new pods")  # fmt: skip
        crossed = moved(api) - before_bytes
        cpu = cpu_seconds(pids) - before_cpu
        size_bytes = len(json.dumps(api.get("ConfigMap", LEDGER_NAMESPACE, f"gpu-budget-{namespace}")))
    return {
        "bytes": crossed / CREATES,
        "validate_ms": statistics.median(seconds) * 1000,
        "validate_p99_ms": percentile(sorted(s * 1000 for s in seconds), 0.99),
        "cpu_ms": cpu / CREATES * 1000,
        "record_bytes": size_bytes,
        "recount_s": listed_s,
    }


def settled(record: Record, pods: int) -> bool:
    return not record.entries and record.pods() == pods


def rates() -> dict[str, Any]:
    """Creates per second: ROUNDS rounds, each in a fresh pair of namespaces, of sequential batches of 50, a
    budgeted batch then an unbudgeted one (so that both meet the same machine); then bursts of 64 at a time; the
    server's CPU per create in each namespace. A batch of 50 lasts a fifth of a second here, and single batches
    scatter by a quarter: each batch's rate is the median over the rounds."""
    budgeted = [f"bench-budget-{r}" for r in range(ROUNDS)]
    with live([quota(namespace) for namespace in budgeted]) as where:
        api, client = where.api, where.client
        pids = server_pids(where.arbiter)
        found: dict[str, Any] = {"sequential bench-budget": [], "sequential bench-free": [], "ratios": []}
        cpu = {"bench-budget": 0.0, "bench-free": 0.0}
        for round_ in range(ROUNDS):
            pair = {"bench-budget": budgeted[round_], "bench-free": f"bench-free-{round_}"}
            for namespace in pair.values():  # warm: connections made, the recount running
                for index in range(BATCH):
                    client.create(new_pod(namespace, f"warm-{index}"))
            record = pair["bench-budget"]
            wait(lambda record=record: settled(record_of(api, record), BATCH), 60, "warm-up")
            seen: dict[str, list[float]] = {"bench-budget": [], "bench-free": []}
            for batch in range(BATCHES):
                for kind, namespace in pair.items():
                    before, started = cpu_seconds(pids), time.perf_counter()
                    for index in range(BATCH):
                        client.create(new_pod(namespace, f"seq-{batch}-{index}"))
                    seen[kind].append(BATCH / (time.perf_counter() - started))
                    time.sleep(0.5)  # the recount of this batch is done before the next, and counted with it
                    cpu[kind] += cpu_seconds(pids) - before
            found["sequential bench-budget"].append(seen["bench-budget"])
            found["sequential bench-free"].append(seen["bench-free"])
            found["ratios"].append(statistics.mean(seen["bench-budget"]) / statistics.mean(seen["bench-free"]))
        found["cpu_ms"] = {kind: seconds / (BATCH * BATCHES * ROUNDS) * 1000 for kind, seconds in cpu.items()}
        bursts = (budgeted[0], "bench-free-0", budgeted[0], "bench-free-0")  # twice each, interleaved
        for namespace in bursts:
            pods = [new_pod(namespace, f"burst-{uuid.uuid4().hex[:8]}") for _ in range(BURST_CREATES)]
            started = time.perf_counter()
            with ThreadPoolExecutor(BURST) as pool:
                list(pool.map(client.create, pods))
            kind = "bench-budget" if namespace == budgeted[0] else "bench-free"
            found.setdefault(f"burst {kind}", []).append(BURST_CREATES / (time.perf_counter() - started))
        found["conflicts"] = api.counters()["conflicts"]
        for namespace in budgeted:
            wait(lambda namespace=namespace: not record_of(api, namespace).entries, 30, "the recount of the bursts")
        found["counted"] = sum(record_of(api, namespace).pods() for namespace in budgeted)
        found["created"] = ROUNDS * (BATCH + BATCH * BATCHES) + 2 * BURST_CREATES
    return found


def main() -> bool:
    costs = {size: cost_at(size) for size in SIZES}
    rows = [(f"{size:,}", f"{c['bytes'] / 1024:.1f}", c["validate_ms"], c["validate_p99_ms"], c["cpu_ms"],
             f"{c['record_bytes'] / 1024:.1f}", f"{c['recount_s']:.1f}") for size, c in costs.items()]  # fmt: skip
    print(table(f"a create in a budgeted namespace of N GPU pods ({CREATES} sequential creates; 2 workers, loopback "
                "API)", ["N pods", "API KB/create", "validate p50 ms", "p99 ms", "server CPU ms/create",
                         "record KB", "first recount s"], rows))  # fmt: skip
    found = rates()
    rounds_budget, rounds_free = found["sequential bench-budget"], found["sequential bench-free"]
    seq_budget = [statistics.median(r[i] for r in rounds_budget) for i in range(BATCHES)]
    seq_free = [statistics.median(r[i] for r in rounds_free) for i in range(BATCHES)]
    rows = [(f"pods {i * BATCH + 1}-{(i + 1) * BATCH}", seq_budget[i], seq_free[i],
             " ".join(f"{r[i]:.0f}" for r in rounds_budget)) for i in range(BATCHES)]  # fmt: skip
    print(table(f"creates per second, sequential, in batches of 50 (after 50 to warm up; median of {ROUNDS} rounds, "
                "each in new namespaces)", ["batch", "budgeted /s", "no quota /s", "budgeted, each round"],
                rows))  # fmt: skip
    print("  budgeted against unbudgeted, each round: " + " ".join(f"{r:.2f}" for r in found["ratios"]))
    burst_budget = statistics.mean(found["burst bench-budget"])
    burst_free = statistics.mean(found["burst bench-free"])
    print(table(f"creates per second, {BURST} at a time ({BURST_CREATES} creates, twice each)",
                ["namespace", "runs /s", "mean /s"],
                [("budgeted", " ".join(f"{r:.0f}" for r in found["burst bench-budget"]), burst_budget),
                 ("no quota", " ".join(f"{r:.0f}" for r in found["burst bench-free"]), burst_free)]))  # fmt: skip
    print(
        f"  the server's CPU per sequential create (both workers and the arbiter, the recount included): "
        f"{found['cpu_ms']['bench-budget']:.2f} ms budgeted, {found['cpu_ms']['bench-free']:.2f} ms without a quota"
    )
    print(f"  {found['conflicts']} writes lost a compare-and-swap race and were decided again; the record counts "
          f"{found['counted']} of {found['created']} budgeted pods created")  # fmt: skip
    small, large = costs[SIZES[0]], costs[SIZES[-1]]

    def flat(key: str, slack: float) -> bool:
        return large[key] <= max(small[key] * 1.5, small[key] + slack)

    seq_ratio = statistics.median(found["ratios"])
    ok = check(
        [
            (f"API bytes per create do not grow from {SIZES[0]} to {SIZES[-1]:,} pods", flat("bytes", 1024),
             f"{small['bytes']:.0f} -> {large['bytes']:.0f} B"),
            ("/validate latency does not grow", flat("validate_ms", 1.0),
             f"{small['validate_ms']:.2f} -> {large['validate_ms']:.2f} ms"),
            ("server CPU per create does not grow", flat("cpu_ms", 1.0),
             f"{small['cpu_ms']:.2f} -> {large['cpu_ms']:.2f} ms"),
            ("pods 301-350 created at >= 0.9 of the rate of pods 1-50", seq_budget[-1] >= 0.9 * seq_budget[0],
             f"{seq_budget[-1]:.0f} / {seq_budget[0]:.0f} = {seq_budget[-1] / seq_budget[0]:.2f}"),
            ("sequential budgeted creates >= 0.9 of unbudgeted", seq_ratio >= 0.9, f"{seq_ratio:.2f} (median of "
             f"{ROUNDS} rounds)"),
            (f"{BURST} at a time: budgeted >= 0.8 of unbudgeted", burst_budget >= 0.8 * burst_free,
             f"{burst_budget / burst_free:.2f}"),
            ("every budgeted pod created is counted once", found["counted"] == found["created"],
             f"{found['counted']} of {found['created']}"),
        ]
    )  # fmt: skip
    write_results("budget_scale", {"sizes": {str(k): v for k, v in costs.items()},
                                   "sequential_per_s": {"budgeted": seq_budget, "no_quota": seq_free,
                                                        "rounds_budgeted": rounds_budget,
                                                        "rounds_no_quota": rounds_free, "ratios": found["ratios"]},
                                   "burst_per_s": {"budgeted": found["burst bench-budget"],
                                                   "no_quota": found["burst bench-free"]},
                                   "server_cpu_ms": found["cpu_ms"], "conflicts": found["conflicts"],
                                   "targets_met": ok})  # fmt: skip
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
