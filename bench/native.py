"""Benchmark 12: Pod creates per second with no admission, with the webhook, and with the native policies.

No real API server runs here: the Pods are created in the loopback API (tests/fake_kube_api.py, a process of its
own), one after another from one client over a kept-alive connection, each admitted first as:
  (a) no admission   the create alone;
  (b) webhook        the API server's calls to the real `gpu-webhook serve` (2 workers, TLS, kept alive):
                     /mutate, its JSON Patch applied, then /validate on the mutated Pod;
  (c) native         the native policies (`policy render native` of the same policy) evaluated in this process
                     by the tests' model of admission (tests/native_admission.py, on tests/kube_cel.py and the
                     `common-expression-language` package): the bindings and matchConditions, the MAP's JSON
                     Patches, the API server's validation of the pod spec, then the VAP.
The Pod: two containers asking `nvidia.com/gpu: 1` each in a time-slicing namespace (the engine benchmark's
review (a) without its nodeSelector, so that the native set covers it), renamed to a replica and given the
memory variables by both (b) and (c), which are checked to create the same Pod.

(c) measures a Python CEL evaluator, not the API server's cel-go: an upper bound on the native policies' cost,
not the API server's figure. No target: the figures are for docs/performance.md. `BENCH_SECONDS` (environment,
default 3) sets each arm's length.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import ssl
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from bench.apiproc import ApiProcess
from bench.common import check, percentile, table, write_results
from bench.engine import NAMESPACE, SCENARIOS, TARGET_POLICY
from bench.server import Server, setup, start_webhook
from tests import evanphx
from tests.native_admission import admit
from webhook.admission.native.compile import compile_native
from webhook.admission.native.scope import outside
from webhook.admission.policy.loader import parse_policy_sources
from webhook.admission.review import make_review
from webhook.cli.webhooks import EXCLUDED_NAMESPACES

SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
WARMUP = 50  # creates before each arm's clock starts
COLUMNS = ["arm", "creates/s", "p50 ms", "p99 ms", "creates"]


def bench_pod() -> dict[str, Any]:
    """The engine benchmark's review (a) as the API server decodes it: no nodeSelector, requests as strings."""
    obj = copy.deepcopy(SCENARIOS["a: 2 containers, mutate"])
    obj["spec"].pop("nodeSelector", None)
    return json.loads(json.dumps(obj, default=str))


class Native:
    """The native set compiled from the benchmark's policy, run as the API server runs it: the tests' model of
    admission (tests/native_admission.py: bindings, matchConditions, the MAP's JSON Patches, the API server's
    validation of the pod spec, the VAP), without the tests' second pass of the MAP."""

    def __init__(self) -> None:
        policies = parse_policy_sources({"inference.yaml": TARGET_POLICY})
        self.native = compile_native(policies, [name for name, _ in EXCLUDED_NAMESPACES])
        assert outside(bench_pod(), policies.for_namespace(NAMESPACE)) is None, "the native set must cover the pod"

    def admit(self, obj: dict[str, Any]) -> dict[str, Any]:
        outcome = admit(self.native, NAMESPACE, obj, reinvoked=False)
        if not outcome.allowed:
            raise RuntimeError(f"the native policies refused the benchmark's pod: {outcome.message}")
        return outcome.obj


class Webhook:
    """The API server's two calls to the webhook over one kept-alive TLS connection."""

    def __init__(self, server: Server) -> None:
        context = ssl.create_default_context(cafile=str(server.ca_file))
        self.connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=30)

    def _review(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(make_review(obj, namespace=NAMESPACE), separators=(",", ":"))
        self.connection.request("POST", path, body, {"Content-Type": "application/json"})
        answer = self.connection.getresponse()
        response: dict[str, Any] = json.loads(answer.read())["response"]
        if answer.status != 200 or not response["allowed"]:
            raise RuntimeError(f"the webhook refused the benchmark's pod: {response}")
        return response

    def admit(self, obj: dict[str, Any]) -> dict[str, Any]:
        mutated = self._review("/mutate", obj)
        if "patch" in mutated:
            obj = evanphx.apply(obj, json.loads(base64.b64decode(mutated["patch"])))
        self._review("/validate", obj)
        return obj


class Creates:
    """Pod creates in the loopback API over one kept-alive connection, each named afresh."""

    def __init__(self, api: ApiProcess) -> None:
        url = urlsplit(api.url)
        self.connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
        self.headers = {"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"}
        self.count = 0

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.count += 1
        obj = {**obj, "metadata": {**obj["metadata"], "name": f"bench-{self.count}"}}
        self.connection.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", json.dumps(obj), self.headers)
        answer = self.connection.getresponse()
        body: dict[str, Any] = json.loads(answer.read())
        if answer.status != 201:
            raise RuntimeError(f"create answered {answer.status}: {body}")
        return body


def run_arm(creates: Creates, admit: Callable[[dict[str, Any]], dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Admit then create the pod, one after another, for `seconds` after a warm-up."""
    pod = bench_pod()
    for _ in range(WARMUP):
        creates.create(admit(pod))
    samples: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        creates.create(admit(pod))
        samples.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    samples.sort()
    return {
        "creates_per_s": len(samples) / elapsed,
        "p50_ms": statistics.median(samples) * 1e3,
        "p99_ms": percentile(samples, 0.99) * 1e3,
        "creates": len(samples),
    }


def _containers(obj: dict[str, Any]) -> list[Any]:
    return [(c.get("resources"), c.get("env")) for c in obj["spec"]["containers"]]


def main(seconds: float = SECONDS) -> bool:
    native = Native()
    api = ApiProcess([])
    try:
        with setup() as where:
            server = start_webhook(where)
            try:
                webhook = Webhook(server)
                creates = Creates(api)
                arms: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
                    "(a) no admission": lambda obj: obj,
                    "(b) webhook: /mutate + /validate over HTTPS": webhook.admit,
                    "(c) native policies, Python CEL evaluator": native.admit,
                }
                same = _containers(webhook.admit(bench_pod())) == _containers(native.admit(bench_pod()))
                results = {name: run_arm(creates, admit, seconds) for name, admit in arms.items()}
            finally:
                server.stop()
    finally:
        api.stop()
    rows = [[name, r["creates_per_s"], r["p50_ms"], r["p99_ms"], r["creates"]] for name, r in results.items()]
    print(table(f"Pod creates in the loopback API, one client, {seconds:g} s per arm", COLUMNS, rows))
    print(
        "  (c) runs a Python CEL evaluator, not the API server's cel-go: an upper bound on the native policies'\n"
        "  cost, not the API server's figure. No real API server ran: the creates go to the loopback API."
    )
    ok = check([("(b) and (c) create the same pod", same, "resources and env of every container")])
    write_results("native", {"seconds_per_arm": seconds, "results": results, "same_pod": same})
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
