"""`gpu-webhook serve --policy-source cluster`: the policies are the cluster's GPUPolicy objects.

Two replicas of the real server (gunicorn, TLS, 2 workers each), verified over HTTPS, against the loopback API,
which holds the GPUPolicy objects as the API server holds a custom resource with a status subresource. Every
worker lists and watches them and serves the set they make; one worker of the cluster (the holder of the Lease
gpu-admission-policy-status) writes each object's status. Each test has its own namespaces.

A pod asking for 9 GPUs (over the maximum per container) tells the policy's enforcement: refused under enforce,
admitted with warnings under warn.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from tests import waiting
from tests.conftest import LiveServer, gpu_webhook_command
from tests.fake_kube_api import FakeKubeAPI, LoopbackCluster, loopback_cluster
from tests.test_hostile import worker_pids
from tests.test_server import pod
from webhook.admission.review import make_review

SERVED_WITHIN = 5.0  # seconds: a change is served by every worker of every replica within this
STATUS_LEASE = "gpu-admission-policy-status"
OWN_NAMESPACE = "gpu-admission"
NAMESPACES = ("edit-a", "stream-a", "fall-a", "bad-a", "status-a", "status-b", "claimed-a")

T = TypeVar("T")


def eventually(condition: Callable[[], T], timeout: float = 10.0, what: str = "the condition") -> T:
    return waiting.eventually(condition, timeout, what)


def gpu_policy(name: str, namespaces: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "GPUPolicy",
        "metadata": {"name": name},
        "spec": {"namespaces": namespaces, **spec},
    }


def judged(server: LiveServer, namespace: str) -> dict[str, Any]:
    """/validate's answer to a 9-GPU pod in `namespace` (on a new connection: any worker), without its uid."""
    answer = server.post("/validate", make_review(pod(namespace, "9"), namespace=namespace))
    assert answer.status_code == 200, answer.text
    response = answer.json()["response"]
    response.pop("uid")
    return response


def served_by(server: LiveServer, namespace: str) -> tuple[str, bool]:
    """(the policy that decides `namespace`, whether the 9-GPU pod is admitted)."""
    response = judged(server, namespace)
    return response["auditAnnotations"]["policy"], response["allowed"]


def everywhere(servers: list[LiveServer], namespace: str, wanted: tuple[str, bool], asks: int = 8) -> bool:
    """Every one of `asks` reviews to each replica, each on a new connection, is decided as `wanted`."""
    return all(served_by(server, namespace) == wanted for server in servers for _ in range(asks))


def policy_review(obj: dict[str, Any], operation: str = "CREATE", *, dry_run: bool = False) -> dict[str, Any]:
    """A GPUPolicy review as the API server sends it: cluster-scoped, no namespace."""
    sent = make_review(obj, namespace="", operation=operation)  # type: ignore[arg-type]
    sent["request"]["resource"] = sent["request"]["requestResource"] = {
        "group": "gpu-admission.io", "version": "v1", "resource": "gpupolicies",
    }  # fmt: skip
    sent["request"]["dryRun"] = dry_run
    return sent


def status(api: FakeKubeAPI, name: str) -> dict[str, Any]:
    return (api.get("GPUPolicy", "", name) or {}).get("status") or {}


def ready(api: FakeKubeAPI, name: str) -> dict[str, Any]:
    """The object's Ready condition, as `kubectl wait --for=condition=Ready` reads it ({} where none)."""
    return next((c for c in status(api, name).get("conditions") or [] if c.get("type") == "Ready"), {})


def observed(api: FakeKubeAPI, name: str) -> bool:
    """The status is of the object's current generation."""
    found = api.get("GPUPolicy", "", name) or {}
    return bool(status(api, name)) and status(api, name).get("observedGeneration") == found["metadata"]["generation"]


def status_writes(api: FakeKubeAPI, name: str = "") -> int:
    suffix = f"/gpupolicies/{name}/status" if name else "/status"
    return sum(1 for r in list(api.requests) if r.startswith("PUT ") and r.split("?")[0].endswith(suffix))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    with loopback_cluster(tmp_path_factory.mktemp("policy-source"), namespaces=NAMESPACES) as found:
        found.api.apply(gpu_policy("teams", ["*-a", "*-b"], enforcement="warn"))  # the glob the others fall to
        yield found


@pytest.fixture(scope="module")
def servers(cluster: LoopbackCluster, start_server: Callable[..., LiveServer]) -> Iterator[list[LiveServer]]:
    """Two replicas of two workers each, one API server between them."""
    arguments = ["--kubeconfig", cluster.kubeconfig, "--budget-namespace", OWN_NAMESPACE]
    started = [start_server(workers=2, extra_args=arguments, policy_source="cluster") for _ in range(2)]
    yield started
    for server in started:
        server.process.terminate()
    for server in started:
        server.stop()


# ------------------------------------------------------------------------------------------ serving the objects


def test_a_change_is_served_by_every_worker_of_every_replica_within_5_seconds(cluster, servers):
    api = cluster.api
    assert everywhere(servers, "edit-a", ("teams", True))

    started = time.monotonic()
    api.apply(gpu_policy("edit", ["edit-a"]))  # created: enforce
    eventually(lambda: everywhere(servers, "edit-a", ("edit", False)), SERVED_WITHIN, "the new policy served")
    api.apply(gpu_policy("edit", ["edit-a"], enforcement="warn"))  # edited
    eventually(lambda: everywhere(servers, "edit-a", ("edit", True)), SERVED_WITHIN, "the edit served")
    api.delete("GPUPolicy", "", "edit")  # deleted: the glob decides again
    eventually(lambda: everywhere(servers, "edit-a", ("teams", True)), SERVED_WITHIN, "the deletion served")
    assert time.monotonic() - started < 3 * SERVED_WITHIN

    for server in servers:  # each worker judged them itself, and said so

        def removed(server: LiveServer = server) -> set[int]:
            return {r["pid"] for r in server.log_records() if "edit" in r.get("removed", [])}

        eventually(lambda server=server: removed(server) == worker_pids(server, 2))


def test_a_review_sees_the_old_set_or_the_new_one_never_a_mix(cluster, servers):
    api = cluster.api
    api.apply(gpu_policy("stream", ["stream-a"], sharing={"mode": "time-slicing", "replicas": 4}))
    eventually(lambda: everywhere(servers, "stream-a", ("stream", False)))
    old = judged(servers[0], "stream-a")
    answers: list[dict[str, Any]] = []
    stop = threading.Event()

    def stream(server: LiveServer) -> None:
        session = server.session()  # kept alive: one worker's answers, one after another
        while not stop.is_set():
            sent = make_review(pod("stream-a", "9"), namespace="stream-a")
            response = server.post("/validate", sent, session=session).json()["response"]
            response.pop("uid")
            answers.append(response)

    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(stream, server) for server in servers for _ in range(2)]
        try:
            time.sleep(0.3)
            sharing = {"mode": "time-slicing", "replicas": 2}
            api.apply(gpu_policy("stream", ["stream-a"], enforcement="warn", sharing=sharing))
            eventually(lambda: everywhere(servers, "stream-a", ("stream", True)))
            new = judged(servers[0], "stream-a")
            time.sleep(0.3)
        finally:
            stop.set()
        for future in running:
            future.result()
    assert old != new
    assert len(answers) > 20
    assert all(answer in (old, new) for answer in answers), [a for a in answers if a not in (old, new)][:2]
    assert old in answers and new in answers


def test_a_deleted_policys_namespaces_fall_to_the_policy_that_matches_next(cluster, servers):
    api = cluster.api
    api.apply(gpu_policy("fall", ["fall-a"]))
    eventually(lambda: everywhere(servers, "fall-a", ("fall", False)))
    api.delete("GPUPolicy", "", "fall")
    eventually(lambda: everywhere(servers, "fall-a", ("teams", True)), SERVED_WITHIN)


def test_an_object_the_loader_refuses_is_not_served_and_its_status_says_why(cluster, servers):
    api = cluster.api
    api.apply(gpu_policy("good", ["status-b"]))
    api.apply(gpu_policy("bad", ["bad-a"], sharng={"mode": "mps"}))  # written around the webhook
    eventually(lambda: everywhere(servers, "status-b", ("good", False)))
    assert everywhere(servers, "bad-a", ("teams", True))  # not served: its namespace is the glob's

    condition = eventually(lambda: ready(api, "bad").get("status") == "False" and ready(api, "bad"))
    line = 'gpupolicy/bad spec.sharng: unknown field (did you mean "sharing"?)'
    assert condition["reason"] == "Invalid" and condition["message"] == line
    assert status(api, "bad")["observedGeneration"] == 1 and status(api, "bad")["matchedNamespaces"] == 0
    assert "mode" not in status(api, "bad")
    eventually(lambda: ready(api, "good").get("status") == "True")
    details = servers[1].get("/readyz")
    assert details.status_code == 200  # an object not served is its own problem, not the replica's
    assert details.json()["policiesNotServed"] == {"bad": line}
    for server in servers:  # logged once per worker and generation

        def refused(server: LiveServer = server) -> list[dict[str, Any]]:
            return [r for r in server.log_records() if r.get("event") == "policy-reload" and r.get("policy") == "bad"]

        eventually(lambda server=server: len(refused(server)) >= 2)
        assert len(refused(server)) == 2 and {tuple(r["problems"]) for r in refused(server)} == {(line,)}

    api.apply(gpu_policy("bad", ["bad-a"], sharing={"mode": "time-slicing", "replicas": 4}))  # mended
    eventually(lambda: everywhere(servers, "bad-a", ("bad", False)), SERVED_WITHIN)
    eventually(lambda: ready(api, "bad").get("status") == "True" and observed(api, "bad"))
    assert status(api, "bad")["mode"] == "time-slicing"


# ------------------------------------------------------------------------------------------ GPUPolicy admission


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ({"sharng": {"mode": "mps"}}, 'gpupolicy/new spec.sharng: unknown field (did you mean "sharing"?)'),
        (
            {"sharing": {"mode": "time-slicing", "replicas": 0}},
            "gpupolicy/new spec.sharing.replicas: 0 is too small; time-slicing and mps share each GPU as at least 2 "
            "replicas",
        ),
        (
            {"sharing": {"mode": "exclusive", "replicas": 4}},
            "gpupolicy/new spec.sharing.replicas: only applies when mode is time-slicing or mps (mode is exclusive); "
            "remove it",
        ),
    ],
    ids=["misspelt-field", "replicas-0", "mode-contradiction"],
)
def test_validate_refuses_a_gpupolicy_with_the_loaders_line(servers, spec, line):
    for dry_run in (False, True):  # a dry run is answered the same (and nothing is written either way)
        answer = servers[0].post("/validate", policy_review(gpu_policy("new", ["new-a"], **spec), dry_run=dry_run))
        assert answer.status_code == 200
        response = answer.json()["response"]
        assert response["allowed"] is False
        assert response["status"] == {"code": 422, "reason": "Invalid", "message": line}


def test_validate_refuses_a_namespace_another_stored_policy_holds(cluster, servers):
    cluster.api.apply(gpu_policy("claims", ["claimed-a"]))
    eventually(lambda: everywhere(servers, "claimed-a", ("claims", False)))
    for operation in ("CREATE", "UPDATE"):
        sent = policy_review(gpu_policy("other", ["claimed-a", "free-a"]), operation)
        response = servers[1].post("/validate", sent).json()["response"]
        assert response["allowed"] is False
        assert response["status"]["message"] == (
            'gpupolicy/other spec.namespaces[0]: namespace "claimed-a" is listed by both policy "claims" '
            '(gpupolicy/claims) and policy "other" (gpupolicy/other); keep it in one of them'
        )
    # The stored object itself, changed: it does not clash with itself.
    response = servers[1].post("/validate", policy_review(gpu_policy("claims", ["claimed-a"]), "UPDATE"))
    assert response.json()["response"]["allowed"] is True


def test_validate_allows_a_good_gpupolicy_and_mutate_leaves_any_unchanged(servers):
    good = gpu_policy("fine", ["fine-a"], sharing={"mode": "time-slicing", "replicas": 4})
    for dry_run in (False, True):
        response = servers[0].post("/validate", policy_review(good, dry_run=dry_run)).json()["response"]
        assert response["allowed"] is True and "status" not in response
    bad = gpu_policy("fine", ["fine-a"], sharng={})
    response = servers[0].post("/mutate", policy_review(bad)).json()["response"]
    assert response["allowed"] is True and "patch" not in response


def test_many_problems_are_said_in_one_readable_message(servers):
    spec = {f"field{n}": n for n in range(14)}
    response = servers[0].post("/validate", policy_review(gpu_policy("many", ["many-a"], **spec))).json()
    lines = response["response"]["status"]["message"].splitlines()
    assert len(lines) == 11 and lines[-1] == "and 4 more"
    assert lines[0].startswith("gpupolicy/many spec.field0: unknown field")


# ------------------------------------------------------------------------------------------ the status


def test_the_status_is_written_once_by_the_lease_holder_and_follows_the_object(cluster, servers):
    api = cluster.api
    holder = eventually(lambda: ((api.get("Lease", OWN_NAMESPACE, STATUS_LEASE) or {}).get("spec") or {}).get(
        "holderIdentity"))  # fmt: skip
    pids = {pid for server in servers for pid in worker_pids(server, 2)}
    assert int(holder.rsplit("_", 1)[1]) in pids  # one worker of the four, of either replica

    api.apply(gpu_policy("counted", ["status-a", "status-c*"], enforcement="warn", cluster={"quota": "warn"}))
    eventually(lambda: observed(api, "counted"))
    found = status(api, "counted")
    assert found["observedGeneration"] == 1
    assert (found["mode"], found["enforcement"], found["quota"]) == ("exclusive", "warn", "warn")
    assert found["matchedNamespaces"] == 1 and found["namespaces"] == ["status-a"]
    condition = found["conditions"][0]
    assert condition["type"] == "Ready" and condition["status"] == "True" and condition["reason"] == "Served"
    assert condition["message"] == "serving 1 namespace" and condition["observedGeneration"] == 1
    assert status_writes(api, "counted") == 1  # one writer, one write

    for n in range(12):  # namespaces come: counted, the first ten shown
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"status-c{n:02d}"}})
    eventually(lambda: status(api, "counted")["matchedNamespaces"] == 13)
    assert status(api, "counted")["namespaces"] == ["status-a"] + [f"status-c{n:02d}" for n in range(9)]

    writes = status_writes(api)
    time.sleep(2.5)  # nothing changes: nothing is written
    assert status_writes(api) == writes

    since = condition["lastTransitionTime"]
    refused = {"mode": "time-slicing", "replicas": 0}
    api.apply(gpu_policy("counted", ["status-a"], sharing=refused))  # generation 2: refused
    eventually(lambda: observed(api, "counted"))
    flipped = ready(api, "counted")
    assert (flipped["status"], flipped["reason"], flipped["observedGeneration"]) == ("False", "Invalid", 2)
    assert "spec.sharing.replicas: 0 is too small" in flipped["message"]
    api.apply(gpu_policy("counted", ["status-a"], sharing={**refused, "replicas": 2}))  # generation 3: mended
    eventually(lambda: observed(api, "counted") and ready(api, "counted")["status"] == "True")
    assert status(api, "counted")["observedGeneration"] == 3 and status(api, "counted")["mode"] == "time-slicing"
    assert ready(api, "counted")["lastTransitionTime"] >= since


def test_a_status_edited_by_hand_is_written_again(cluster, servers):
    api = cluster.api
    eventually(lambda: observed(api, "teams"))
    api.set_status("GPUPolicy", "teams", {"observedGeneration": 0})
    eventually(lambda: observed(api, "teams") and ready(api, "teams").get("status") == "True")


# ------------------------------------------------------------------------------------------ before the first list


def test_a_worker_takes_no_review_before_its_first_list(tmp_path, start_server):
    with loopback_cluster(tmp_path, namespaces=["slow-a"]) as cluster:
        cluster.api.apply(gpu_policy("slow", ["slow-a"], enforcement="warn"))
        cluster.api.slow["gpupolicies"] = 1.5  # every list takes 1.5 s
        server = start_server(workers=2, extra_args=["--kubeconfig", cluster.kubeconfig], policy_source="cluster",
                              wait=False)  # fmt: skip
        started = time.monotonic()
        first = served_by_when_answered(server, "slow-a")
        assert time.monotonic() - started >= 1.0
        assert first == ("slow", True)  # the cluster's policy, never the built-in defaults (which refuse 9 GPUs)
        assert server.get("/readyz").status_code == 200
        server.stop()


def served_by_when_answered(server: LiveServer, namespace: str) -> tuple[str, bool]:
    """The first answer the server gives to a review in `namespace` (connections wait in the listen queue while
    every worker waits for its list)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return served_by(server, namespace)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_an_unreachable_api_server_keeps_the_replica_unready_and_saying_why(tmp_path, start_server):
    with loopback_cluster(tmp_path, namespaces=["down-a"]) as cluster:
        cluster.api.apply(gpu_policy("down", ["down-a"], enforcement="warn"))
        cluster.api.unavailable.add("gpupolicies")
        arguments = ["--kubeconfig", cluster.kubeconfig, "--policy-start-wait", "0.5"]
        server = start_server(workers=1, extra_args=arguments, policy_source="cluster", wait=False)
        code, details = eventually(lambda: _answered(server, "/readyz"))  # once the start wait is over
        assert code == 503
        reasons = details["reasons"]
        assert reasons == [
            "policies: GPUPolicy list not yet complete: listing GPUPolicy objects: HTTP 503 the server is currently "
            "unable to handle the request"
        ]
        refused = server.post("/validate", make_review(pod("down-a", "9"), namespace="down-a"))
        assert refused.status_code == 503 and "GPUPolicy list not yet complete" in refused.json()["error"]
        server.wait_for_log(lambda r: r.get("event") == "policy-start-wait-over")

        cluster.api.unavailable.clear()  # the API server is back: listed at the next try (backoff 0.5 s, doubling)
        eventually(lambda: server.get("/readyz").status_code == 200)
        assert served_by(server, "down-a") == ("down", True)
        server.stop()


def _answered(server: LiveServer, path: str) -> tuple[int, Any] | None:
    """(HTTP status, JSON body), or None while no worker answers."""
    try:
        answer = server.get(path, timeout=2)
    except Exception:
        return None
    return answer.status_code, answer.json()


def test_with_the_files_source_a_gpupolicy_is_judged_on_its_own(live_server):
    """`--policy-source files` (the default): no stored objects to clash with, only the object's own lines."""
    bad = policy_review(gpu_policy("new", ["new-a"], sharng={}))
    response = live_server.post("/validate", bad).json()["response"]
    assert response["status"]["message"] == 'gpupolicy/new spec.sharng: unknown field (did you mean "sharing"?)'
    claimed = policy_review(gpu_policy("new", ["default"]))  # a namespace a policy file may list: no clash here
    assert live_server.post("/validate", claimed).json()["response"]["allowed"] is True


def test_validate_never_refuses_a_write_of_the_status(servers):
    sent = policy_review(gpu_policy("new", ["new-a"], sharng={}), "UPDATE")
    sent["request"]["subResource"] = "status"
    assert servers[0].post("/validate", sent).json()["response"]["allowed"] is True


# ------------------------------------------------------------------------------------------ refusing to start


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (
            ["--policy-source", "cluster"],
            "gpu-webhook serve: --policy-source cluster reads GPUPolicy objects from the API server, but there are no "
            "credentials (not in a cluster, and neither --kubeconfig nor $KUBECONFIG is set): run in a pod, or pass "
            "--kubeconfig FILE",
        ),
        (
            ["--policy-source", "cluster", "--policies", "policies"],
            "gpu-webhook serve: --policies policies: --policy-source cluster reads GPUPolicy objects from the API "
            "server, not files: drop --policies, or use --policy-source files",
        ),
    ],
    ids=["no-credentials", "with-policies"],
)
def test_serve_refuses_to_start_in_one_line(dev_certs, tmp_path, arguments, line):
    command = [*gpu_webhook_command(), "serve", "--cert-file", str(dev_certs.tls_cert), "--key-file",
               str(dev_certs.tls_key), "--metrics-port", "0", *arguments]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=30)
    assert (done.returncode, done.stderr.strip()) == (2, line)
