"""Moving a running install from the policy ConfigMap to GPUPolicy objects, with no moment in which a namespace is
served by another policy (docs/operations.md, "Moving from the ConfigMap to GPUPolicy objects").

The steps, as the guide gives them: the policy files of the ConfigMap are applied as they are (`kubectl apply -f`:
the files are the objects); `gpu-webhook policy compare` confirms the objects serve exactly the files' policies;
then the Deployment rolls from `--policies DIR` to `--policy-source cluster`. During the roll, replicas of both
kinds answer reviews side by side, so the proof is that a replica of each kind gives every review the same
answer, for every namespace the policies name, by exact name, by glob, and for none (the built-in defaults).
A replica of the new kind takes no review before its first list (tests/test_server_policy_source.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import LiveServer
from tests.fake_kube_api import LoopbackCluster, loopback_cluster
from tests.test_server import pod
from webhook.admission.review import make_review
from webhook.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
# The ConfigMap's files: the shipped default and every example policy (every sharing mode, exact names and globs).
FILES = [ROOT / "policies" / "default.yaml", *sorted((ROOT / "examples" / "policies").glob("*.yaml"))]
# Exact names, names that only a glob gives, and names that no policy names.
NAMESPACES = (
    "notebooks", "notebook-7", "inference", "inference-eu", "batch", "mig-train", "hami-a", "volcano-a",
    "ack-notebooks", "research", "default",
)  # fmt: skip
ASKS = ("0.25", "0.5", "1", "2", "9")


def documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


@pytest.fixture(scope="module")
def configmap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory a ConfigMap volume shows the server."""
    directory = tmp_path_factory.mktemp("configmap")
    for path in FILES:
        shutil.copy(path, directory / path.name)
    return directory


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, configmap: Path) -> Iterator[LoopbackCluster]:
    """The cluster after `kubectl apply -f` of the ConfigMap's files, one file after another."""
    with loopback_cluster(tmp_path_factory.mktemp("migration"), namespaces=NAMESPACES) as found:
        for path in sorted(configmap.glob("*.yaml")):
            for document in documents(path):
                found.api.apply(document)
        yield found


def compare(capsys: pytest.CaptureFixture[str], configmap: Path, kubeconfig: str) -> tuple[int, str]:
    code = main(["policy", "compare", "--policies", str(configmap), "--kubeconfig", kubeconfig])
    out, err = capsys.readouterr()
    assert err == ""
    return code, out


def test_the_applied_files_serve_exactly_the_configmaps_policies(capsys, configmap, cluster) -> None:
    code, out = compare(capsys, configmap, cluster.kubeconfig)
    policies = sum(len(documents(path)) for path in FILES)
    assert (code, out) == (
        0,
        f"the same {policies} policies, in another order, which no glob tie makes matter: every namespace gets the "
        "same policy\n",
    )


def test_compare_names_every_difference(capsys, configmap, cluster) -> None:
    """An object edited in the cluster, one the webhook does not serve and one the directory lacks: each named,
    exit 1; the migration waits until compare exits 0."""
    api = cluster.api
    edited = next(d for d in documents(configmap / "mps.yaml"))
    name = edited["metadata"]["name"]
    original = api.get("GPUPolicy", "", name)
    assert original is not None
    try:
        api.apply({**edited, "spec": {**edited["spec"], "enforcement": "audit"}})
        api.apply({"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": {"name": "extra"},
                   "spec": {"namespaces": ["extra"]}})  # fmt: skip
        api.apply({"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": {"name": "typo"},
                   "spec": {"namespaces": ["typo"], "enforcment": "warn"}})  # fmt: skip
        code, out = compare(capsys, configmap, cluster.kubeconfig)
    finally:
        api.apply(original)
        api.delete("GPUPolicy", "", "extra")
        api.delete("GPUPolicy", "", "typo")
    assert code == 1
    assert out.splitlines() == [
        "not served: GPUPolicy typo is not served by the webhook: gpupolicy/typo spec.enforcment: unknown field "
        '(did you mean "enforcement"?)',
        f"differs: policy {name} (gpu-webhook policy export writes the cluster's)",
        f"only in cluster {cluster_context(cluster)}: policy extra",
        "3 differences",
    ]


def cluster_context(cluster: LoopbackCluster) -> str:
    return yaml.safe_load(Path(cluster.kubeconfig).read_text())["current-context"]


@pytest.fixture(scope="module")
def replicas(
    configmap: Path, cluster: LoopbackCluster, start_server: Callable[..., LiveServer]
) -> Iterator[tuple[LiveServer, LiveServer]]:
    """A replica of the old kind (the ConfigMap's directory) and one of the new (the GPUPolicy objects), with the
    same credentials, as two pods of one Deployment have (both read the nodes and the budgets)."""
    old = start_server(configmap, workers=1, extra_args=["--kubeconfig", cluster.kubeconfig])
    new = start_server(workers=1, extra_args=["--kubeconfig", cluster.kubeconfig], policy_source="cluster")
    yield old, new
    old.stop()
    new.stop()


def answer(server: LiveServer, endpoint: str, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    reply = server.post(endpoint, make_review(obj, namespace=namespace))
    assert reply.status_code == 200, reply.text
    response = reply.json()["response"]
    response.pop("uid")
    return response


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_during_the_roll_both_kinds_of_replica_answer_every_review_alike(replicas, namespace) -> None:
    old, new = replicas
    for gpus in ASKS:
        for obj in (pod(namespace, gpus), pod(namespace, gpus, limits_only=True)):
            for endpoint in ("/mutate", "/validate"):
                assert answer(new, endpoint, obj, namespace) == answer(old, endpoint, obj, namespace), (
                    endpoint,
                    gpus,
                )
