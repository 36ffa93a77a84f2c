"""GPU budgets in `gpu-webhook audit` and `policy lint --cluster`, against tests/fake_kube_api.py.

The cluster: a time-slicing namespace (`notebooks`, 4 replicas per GPU as nvidia.com/gpu.shared) with the
ResourceQuota every GPU cluster has, `requests.nvidia.com/gpu: "1"`, which the API server stops counting once
the webhook maps its pods; a MIG namespace (A100-80GB, fractional: mig) whose pods get slices of several
profiles; an ACK memory namespace whose shares are GiB of a 24 GiB GPU; a namespace of whole GPUs whose quota
also has the `limits.` entry the API server never counts; a namespace with a quota scoped to a priority class;
a namespace whose pods hold DRA claims. Each namespace's use is read in GPU-equivalents by route, against each
quota, and each quota entry the API server cannot hold as meant is named with the entry to write instead.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fake_kube_api import FakeKubeAPI
from tests.test_cli_audit import gpu_webhook
from tests.test_dra import claim, exactly

ROOT = Path(__file__).resolve().parent.parent
KEEPS_THE_NAME = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: sliced-as-gpu}
spec:
  namespaces: [sliced]
  sharing: {mode: time-slicing, replicas: 4, resourceName: nvidia.com/gpu}
  fractional: shared
"""


def pod(
    name: str,
    namespace: str,
    gpu: str | None = "1",
    *,
    phase: str | None = None,
    priority: str | None = None,
    claims: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod asking `gpu` of nvidia.com/gpu (requests = limits), as written before the webhook maps it."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/app:1"}
    if gpu is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpu}, "requests": {"nvidia.com/gpu": gpu}}
    spec: dict[str, Any] = {"containers": [container]}
    if priority:
        spec["priorityClassName"] = priority
    if claims:
        spec["resourceClaims"] = [
            {"name": key, "resourceClaimTemplateName": source.removeprefix("template:")}
            if source.startswith("template:")
            else {"name": key, "resourceClaimName": source}
            for key, source in claims.items()
        ]
        container.setdefault("resources", {})["claims"] = [{"name": key} for key in claims]
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": spec,
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def quota(name: str, namespace: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard, **spec},
    }


def in_namespace(obj: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    obj["metadata"].update(name=name, namespace=namespace)
    return obj


HIGH = {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}
CLUSTER = [
    *[pod(f"nb-{i}", "notebooks") for i in range(3)],
    pod("finished", "notebooks", phase="Succeeded"),  # a terminal pod holds nothing
    pod("cpu", "notebooks", None),
    quota("gpus", "notebooks", {"requests.nvidia.com/gpu": "1", "pods": "20"}),
    pod("half", "mig-a", "0.5"),  # one 3g.40gb: 1/2
    pod("one", "mig-a", "1"),  # one 1g.10gb (the policy's migProfile): 1/7
    quota("gpus", "mig-a", {"requests.nvidia.com/gpu": "2"}),
    *[pod(f"share-{i}", "ack-team", "0.25") for i in range(2)],  # 6 GiB of 24: 1/4 each
    quota("gpus", "ack-team", {"requests.nvidia.com/gpu": "1"}),
    pod("train", "plain", "2"),
    quota("gpus", "plain", {"requests.nvidia.com/gpu": "4", "limits.nvidia.com/gpu": "4"}),
    pod("urgent", "prio", "1", priority="high"),
    pod("batch", "prio", "1"),
    quota("high-gpus", "prio", {"requests.nvidia.com/gpu": "1"}, **HIGH),
    pod("sliced-0", "sliced"),
    quota("gpus", "sliced", {"requests.nvidia.com/gpu": "8"}),
    in_namespace(claim(exactly(count=1)), "one-gpu", "dra"),
    in_namespace(claim(exactly(count=2), kind="ResourceClaimTemplate"), "two-per-pod", "dra"),
    pod("reader-a", "dra", None, claims={"gpu": "one-gpu"}),  # one shared claim: counted once
    pod("reader-b", "dra", None, claims={"gpu": "one-gpu"}),
    pod("trainer", "dra", None, claims={"gpus": "template:two-per-pod"}),
    quota("gpus", "dra", {"requests.nvidia.com/gpu": "4"}),
    # The GPU operator's namespace is never sent to the webhook: its pods keep what they ask, its quota holds.
    pod("validator", "gpu-operator", "1"),
    quota("gpus", "gpu-operator", {"requests.nvidia.com/gpu": "1"}),
]


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("policies")
    for path in (ROOT / "examples" / "policies").glob("*.yaml"):
        shutil.copy(path, directory / path.name)
    (directory / "sliced.yaml").write_text(KEEPS_THE_NAME)
    return str(directory)


@pytest.fixture(scope="module")
def cluster():
    api = FakeKubeAPI()
    api.add(*CLUSTER)
    api.start()
    yield api
    api.stop()


@pytest.fixture
def kubeconfig(cluster: FakeKubeAPI, tmp_path: Path) -> str:
    cluster.forbidden.clear()
    return str(cluster.write_kubeconfig(tmp_path / "kubeconfig"))


def audit_json(kubeconfig: str, policies: str, *args: str) -> dict[str, Any]:
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", policies, "-o", "json", *args)
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout)


def by_namespace(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {use["namespace"]: use for use in report["budgets"]["namespaces"]}


def findings(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(f["namespace"], f["entry"]): f for f in report["budgets"]["quotaFindings"]}


def test_each_namespaces_use_is_read_in_gpu_equivalents_by_route_against_its_quotas(kubeconfig, policies):
    uses = by_namespace(audit_json(kubeconfig, policies))
    routes = {"extended": "0", "deviceclass": "0", "claims": "0", "templates": "0"}
    notebooks = uses["notebooks"]
    assert notebooks["policy"] == "notebooks-time-slicing"
    assert notebooks["pods"] == 3, "the finished pod and the CPU-only pod hold no GPU"
    assert notebooks["byRoute"] == {**routes, "extended": "0.75"}, "3 replicas of 4"
    assert notebooks["quotas"] == [
        {"name": "gpus", "entry": "requests.nvidia.com/gpu", "hard": "1", "used": "0.75", "free": "0.25", "pods": 3}
    ]
    # MIG on an A100-80GB: a 3g.40gb slice is 1/2 (two fill the memory), a 1g.10gb 1/7 (seven fill the compute).
    assert uses["mig-a"]["total"] == "9/14" and uses["mig-a"]["quotas"][0]["free"] == "19/14"
    assert uses["ack-team"]["total"] == "0.5", "two 6 GiB shares of a 24 GiB GPU"
    assert uses["plain"]["quotas"][0]["used"] == "2"
    # A quota scoped to a priority class counts only the pods of that class; the namespace's use counts all.
    assert uses["prio"]["total"] == "2"
    assert uses["prio"]["quotas"] == [
        {"name": "high-gpus", "entry": "requests.nvidia.com/gpu", "hard": "1", "used": "1", "free": "0", "pods": 1}
    ]
    # A ResourceClaim two pods share counts once; a template's claim once per pod.
    assert uses["dra"]["byRoute"] == {**routes, "claims": "1", "templates": "2"}
    assert uses["dra"]["pods"] == 3 and uses["dra"]["quotas"][0]["used"] == "3"
    assert "gpu-operator" not in uses, "a namespace the webhook never sees has no budget of the webhook's"


def test_a_quota_entry_the_mapping_leaves_uncounted_is_named_with_the_entry_to_write(kubeconfig, policies):
    found = findings(audit_json(kubeconfig, policies))
    notebooks = found[("notebooks", "requests.nvidia.com/gpu")]
    assert (notebooks["problem"], notebooks["write"]) == ("uncounted", 'requests.nvidia.com/gpu.shared: "4"')
    assert notebooks["line"] == (
        'quota "gpus" of namespace "notebooks": requests.nvidia.com/gpu: 1 counts nothing: under policy '
        '"notebooks-time-slicing" the namespace\'s pods ask nvidia.com/gpu.shared, never nvidia.com/gpu; write '
        'requests.nvidia.com/gpu.shared: "4"; the webhook holds this budget in GPU-equivalents (policy '
        '"notebooks-time-slicing", spec.cluster.quota: deny)'
    )
    # MIG: every form the policy makes is a slice; 2 GPUs are 14 of 1g.10gb, 7 of 2g.20gb, 4 of 3g.40gb.
    mig = found[("mig-a", "requests.nvidia.com/gpu")]
    assert mig["problem"] == "uncounted"
    assert mig["write"] == (
        'requests.nvidia.com/mig-1g.10gb: "14", requests.nvidia.com/mig-2g.20gb: "7", '
        'requests.nvidia.com/mig-3g.40gb: "4"'
    )
    assert "only the webhook's budget holds the forms together" in mig["line"]
    # ACK: whole GPUs stay nvidia.com/gpu, shares become GiB: the entry counts the whole GPUs only.
    ack = found[("ack-team", "requests.nvidia.com/gpu")]
    assert (ack["problem"], ack["write"]) == ("partial", 'requests.aliyun.com/gpu-mem: "24"')
    # The API server counts extended resources only as requests.: limits.nvidia.com/gpu holds nothing there.
    limits = found[("plain", "limits.nvidia.com/gpu")]
    assert limits["problem"] == "limits" and "requests.nvidia.com/gpu beside it is what it counts" in limits["line"]
    assert ("plain", "requests.nvidia.com/gpu") not in found, "whole GPUs: the native entry counts them exactly"
    assert ("prio", "requests.nvidia.com/gpu") not in found


def test_where_time_slicing_keeps_the_name_a_quota_of_n_is_said_in_gpus(kubeconfig, policies):
    sliced = findings(audit_json(kubeconfig, policies))[("sliced", "requests.nvidia.com/gpu")]
    assert sliced["problem"] == "replicas"
    assert sliced["line"].startswith(
        'quota "gpus" of namespace "sliced": requests.nvidia.com/gpu: 8 counts time-slicing replicas, not GPUs: '
        'under policy "sliced-as-gpu" the device plugin keeps the name nvidia.com/gpu for one of 4 per GPU, so the '
        "API server holds the namespace to 2 GPU; write 4 per GPU meant"
    )


def test_the_table_shows_the_budgets_under_the_objects(kubeconfig, policies):
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", policies, "-n", "notebooks")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("NAMESPACE")))
    assert lines[start].split() == [
        "NAMESPACE", "POLICY", "PODS", "EXTENDED", "DEVICECLASS", "CLAIMS", "TEMPLATES", "TOTAL", "QUOTA", "HARD",
        "USED", "FREE",
    ]  # fmt: skip
    assert lines[start + 1].split() == [
        "notebooks", "notebooks-time-slicing", "3", "0.75", "0", "0", "0", "0.75", "gpus", "1", "0.75", "0.25",
    ]  # fmt: skip
    assert lines[start + 2].startswith('quota "gpus" of namespace "notebooks": requests.nvidia.com/gpu: 1 counts')
    assert lines[-1].startswith("GPU budgets: 1 namespace with GPU pods or GPU quotas, 1 GPU quota ")


def test_quotas_the_auditor_may_not_list_are_said_and_the_report_stands(cluster, kubeconfig, policies):
    cluster.forbidden.add("resourcequotas")
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", policies, "-o", "json")
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        "gpu-webhook audit: skipped resourcequotas at cluster scope: forbidden (403): resourcequotas is forbidden: "
        'User "auditor" cannot list resource "resourcequotas" in API group "" at the cluster scope; grant list on '
        "resourcequotas for the GPU budgets"
    ]
    assert "budgets" not in json.loads(run.stdout)


def test_policy_lint_cluster_shows_the_budgets_too(kubeconfig, policies):
    run = gpu_webhook("policy", "lint", "--policies", policies, "--cluster", "--kubeconfig", kubeconfig, "-o", "json")
    document = json.loads(run.stdout)
    assert by_namespace(document)["notebooks"]["quotas"][0]["used"] == "0.75"
    assert findings(document)[("notebooks", "requests.nvidia.com/gpu")]["problem"] == "uncounted"
    assert run.returncode == 1, "unmatched namespace entries of the example policies"
    table = gpu_webhook("policy", "lint", "--policies", policies, "--cluster", "--kubeconfig", kubeconfig)
    assert table.stdout.splitlines()[-1].startswith("GPU budgets: 7 namespaces with GPU pods or GPU quotas")


OPEN = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: open}
spec:
  namespaces: [open]
  sharing: {mode: time-slicing, replicas: 2}
  fractional: shared
  cluster: {quota: off}
"""


def test_lint_fails_on_a_quota_entry_that_neither_the_api_server_nor_the_webhook_holds(tmp_path: Path):
    """spec.cluster.quota: off leaves the budget to the API server, which counts nothing once the pods ask
    nvidia.com/gpu.shared: today's silent failure, an exit code of 1 for CI."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "open.yaml").write_text(OPEN)
    api = FakeKubeAPI()
    api.add_namespaces("open")
    api.add(pod("a", "open"), pod("b", "open"), quota("gpus", "open", {"requests.nvidia.com/gpu": "1"}))
    api.start()
    try:
        config = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        run = gpu_webhook(
            "policy", "lint", "--policies", str(tmp_path / "policies"), "--cluster", "--kubeconfig", config
        )
    finally:
        api.stop()
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert (
        'quota "gpus" of namespace "open": requests.nvidia.com/gpu: 1 counts nothing: under policy "open" the '
        "namespace's pods ask nvidia.com/gpu.shared, never nvidia.com/gpu; write "
        'requests.nvidia.com/gpu.shared: "2"'
    ) in lines
    assert lines[-1].endswith(
        "; 1 quota entry the API server cannot hold as meant, 1 of them held by neither it nor the webhook"
    )
    assert lines[-3].split() == ["open", "open", "2", "1", "0", "0", "0", "1", "gpus", "1", "1", "0"]


def test_under_yaml_the_budgets_go_to_stderr(kubeconfig, policies):
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", policies, "-n", "notebooks", "-o", "yaml")
    assert run.returncode == 0, run.stderr
    assert "GPU budgets:" not in run.stdout, "stdout is the mutated objects, for tools"
    assert run.stderr.splitlines()[-1].startswith("GPU budgets: 1 namespace with GPU pods or GPU quotas")
