"""Custom resources (RayCluster, PyTorchJob, InferenceService, ...) judged by their pod templates: offline
through the engine and the CLI, through the real server over HTTPS, and at apply time through a real
kube-apiserver v1.36.

The fixtures (tests/fixtures/custom-resources/) are written here in the shapes of each project's samples and Go
types: the field paths and where the resources sit, not their files. The policies are examples/policies:
time-slicing (enforce, 1 per container) in `notebooks`, MPS (warn) in `inference`, MIG (enforce) in `batch`.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.admission.customresources import (
    BUILTIN,
    BUILTIN_KINDS,
    CustomKind,
    KindTable,
    Site,
    evaluate,
    parse_kinds,
    templates,
)
from webhook.admission.policy.loader import load_policies
from webhook.admission.policy.model import PolicySet

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "custom-resources"
EXAMPLE_POLICIES = ROOT / "examples" / "policies"
GPU_WEBHOOK = Path(sys.executable).parent / "gpu-webhook"

TIME_SLICED_4 = (
    "nvidia.com/gpu 4 (nvidia.com/gpu.shared 4 under time-slicing) exceeds 1 per container (policy "
    '"notebooks-time-slicing"): 4 time-slicing replicas are not 4 GPUs: the device plugin hands them out '
    "(failRequestsGreaterThanOne is off by default), on one GPU or several, each still shared with other pods; "
    "request 1, or whole GPUs in a namespace that has them"
)
TIME_SLICED_2 = TIME_SLICED_4.replace(" 4 ", " 2 ").replace("4 time-slicing replicas are not 4 GPUs",
                                                               "2 time-slicing replicas are not 2 GPUs")  # fmt: skip
RAY_WORKER_LINE = f'workerGroupSpecs[0] (gpu-group) container "ray-worker": {TIME_SLICED_4}'


@pytest.fixture(scope="module")
def policies() -> PolicySet:
    return load_policies(str(EXAMPLE_POLICIES))


def fixture(file: str, index: int = 0) -> dict[str, Any]:
    return [d for d in yaml.safe_load_all((FIXTURES / file).read_text()) if d is not None][index]


def raycluster(gpus: int = 4, namespace: str = "notebooks") -> dict[str, Any]:
    obj = fixture("raycluster.yaml")
    obj["metadata"]["namespace"] = namespace
    resources = obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = gpus
    return obj


# ------------------------------------------------------------------------------------------ the table


def test_every_kind_of_the_issue_is_in_the_table() -> None:
    names = {(k.group, k.kind) for k in BUILTIN_KINDS}
    assert names == {
        ("ray.io", "RayCluster"), ("ray.io", "RayJob"), ("ray.io", "RayService"),
        ("kubeflow.org", "PyTorchJob"), ("kubeflow.org", "TFJob"), ("kubeflow.org", "MPIJob"),
        ("kubeflow.org", "PaddleJob"), ("kubeflow.org", "XGBoostJob"), ("kubeflow.org", "JAXJob"),
        ("trainer.kubeflow.org", "TrainJob"), ("trainer.kubeflow.org", "TrainingRuntime"),
        ("jobset.x-k8s.io", "JobSet"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        ("serving.kserve.io", "InferenceService"), ("serving.kserve.io", "ServingRuntime"),
        ("serving.kserve.io", "LLMInferenceService"), ("batch.volcano.sh", "Job"),
        ("argoproj.io", "Workflow"), ("argoproj.io", "WorkflowTemplate"), ("argoproj.io", "CronWorkflow"),
        ("kubeflow.org", "Notebook"),
    }  # fmt: skip
    assert all(kind.source for kind in BUILTIN_KINDS)  # each cites its project's Go types


# Every template of every fixture, by its place: the paths of the projects' types, as the engine finds them.
PLACES = {
    ("raycluster.yaml", 0): ["headGroupSpec", "workerGroupSpecs[0] (gpu-group)"],
    ("kuberay.yaml", 0): ["rayClusterSpec.headGroupSpec", "rayClusterSpec.workerGroupSpecs[0] (gpu-workers)",
                          "submitterPodTemplate"],
    ("kuberay.yaml", 1): ["rayClusterConfig.headGroupSpec", "rayClusterConfig.workerGroupSpecs[0] (gpu-group)"],
    ("kubeflow-training.yaml", 0): ["pytorchReplicaSpecs.Master", "pytorchReplicaSpecs.Worker"],
    ("kubeflow-training.yaml", 1): ["tfReplicaSpecs.Worker"],
    ("kubeflow-training.yaml", 2): ["mpiReplicaSpecs.Launcher", "mpiReplicaSpecs.Worker"],
    ("kubeflow-training.yaml", 3): ["paddleReplicaSpecs.Worker"],
    ("kubeflow-training.yaml", 4): ["xgbReplicaSpecs.Master"],
    ("kubeflow-training.yaml", 5): ["jaxReplicaSpecs.Worker"],
    ("kubeflow-training.yaml", 6): [""],
    ("kubeflow-training.yaml", 7): ["template.spec.replicatedJobs[0] (node)"],
    ("jobset-lws.yaml", 0): ["replicatedJobs[0] (workers)"],
    ("jobset-lws.yaml", 1): ["leaderWorkerTemplate.leaderTemplate", "leaderWorkerTemplate.workerTemplate"],
    ("kserve.yaml", 0): ["predictor"],
    ("kserve.yaml", 1): ["predictor", "transformer"],
    ("kserve.yaml", 2): [""],
    ("kserve.yaml", 3): ["template"],
    ("volcano-argo-notebook.yaml", 0): ["tasks[0] (ps)", "tasks[1] (worker)"],
    ("volcano-argo-notebook.yaml", 1): ["templates[0] (train)"],
    ("volcano-argo-notebook.yaml", 2): ["templates[0] (main)", "templates[1] (infer)"],
    ("volcano-argo-notebook.yaml", 3): ["workflowSpec.templates[0] (main)"],
    ("volcano-argo-notebook.yaml", 4): ["template"],
}  # fmt: skip


@pytest.mark.parametrize(("file", "index"), list(PLACES), ids=[f"{f}#{i}" for f, i in PLACES])
def test_the_templates_are_found_where_each_project_keeps_them(file: str, index: int) -> None:
    obj = fixture(file, index)
    kind = BUILTIN.lookup(obj)
    assert kind is not None
    assert [t.place for t in templates(obj, kind)] == PLACES[(file, index)]


def test_inline_containers_become_the_pods_containers() -> None:
    """KServe's model format is the kserve-container; Argo's container, script and containerSet are the pod's;
    a TrainJob's resourcesPerNode are its trainer container's resources."""
    (isvc,) = templates(fixture("kserve.yaml", 0), BUILTIN.lookup(fixture("kserve.yaml", 0)))
    assert [c["name"] for c in isvc.spec["containers"]] == ["model"]
    assert isvc.spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    cron = fixture("volcano-argo-notebook.yaml", 3)
    (main,) = templates(cron, BUILTIN.lookup(cron))
    assert [c["name"] for c in main.spec["containers"]] == ["prepare", "train"]
    script = fixture("volcano-argo-notebook.yaml", 2)
    assert [c.get("name") for c in templates(script, BUILTIN.lookup(script))[1].spec["containers"]] == ["script"]
    train = fixture("kubeflow-training.yaml", 6)
    (node,) = templates(train, BUILTIN.lookup(train))
    assert node.spec["containers"] == [{"name": "trainer", "numNodes": 2,
                                        "resources": {"limits": {"nvidia.com/gpu": 2}}}]  # fmt: skip


def test_a_volcano_job_is_not_a_batch_job() -> None:
    """The group tells them apart: a batch/v1 Job goes to the engine's own pod-spec path."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    assert BUILTIN.lookup(job) is None
    assert BUILTIN.lookup(fixture("volcano-argo-notebook.yaml", 0)).group == "batch.volcano.sh"


# ------------------------------------------------------------------------------------------ verdicts


def test_a_raycluster_asking_4_gpus_per_worker_is_denied_under_time_slicing(policies: PolicySet) -> None:
    decision = evaluate(raycluster(4), "notebooks", policies)
    assert (decision.allowed, decision.verdict, decision.patch) == (False, "deny", [])
    assert decision.violations == decision.denials == [RAY_WORKER_LINE]


def test_a_raycluster_within_policy_is_admitted_unchanged(policies: PolicySet) -> None:
    obj = raycluster(1)
    before = copy.deepcopy(obj)
    decision = evaluate(obj, "notebooks", policies)
    assert (decision.allowed, decision.verdict, decision.patch, decision.warnings) == (True, "allow", [], [])
    assert obj == before  # judged, never changed: the operator's pods are mutated when they are created


def test_under_warn_the_same_lines_are_warnings(policies: PolicySet) -> None:
    decision = evaluate(raycluster(4, "inference"), "inference", policies)
    assert (decision.allowed, decision.verdict) == (True, "warn")
    assert decision.violations == [
        'workerGroupSpecs[0] (gpu-group) container "ray-worker": nvidia.com/gpu 4 (nvidia.com/gpu.shared 4 under '
        'mps) exceeds 1 per container (policy "inference-mps"): 4 MPS replicas are not 4 GPUs, and the device '
        "plugin refuses them (its failRequestsGreaterThanOne is on by default under MPS: the kubelet fails the pod "
        "with UnexpectedAdmissionError); request 1, or whole GPUs in a namespace that has them"
    ]
    # The short form (an admission warning is kept within 120 characters: the container names the place).
    assert decision.warnings == ['gpu-admission: container "ray-worker": nvidia.com/gpu 4: one mps share per '
                                 "container; ask for 1"]  # fmt: skip


def test_per_pod_caps_apply_per_template_not_summed_across_replicas(policies: PolicySet) -> None:
    """maxPerPod (8 by default) caps one pod: 16 workers of 4 whole GPUs each are 16 pods of 4, not one of 64."""
    obj = raycluster(4, "team-a")
    obj["spec"]["workerGroupSpecs"][0]["replicas"] = 16
    obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    decision = evaluate(obj, "team-a", policies)
    assert (decision.allowed, decision.violations) == (True, [])
    obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    )
    decision = evaluate(obj, "team-a", policies)
    assert decision.verdict == "deny"
    assert [line.split(":")[0] for line in decision.violations] == ["headGroupSpec pod"]


# Every fixture in `notebooks` (time-slicing, 1 per container): the exact verdict and lines.
VERDICTS = {
    ("raycluster.yaml", 0): [RAY_WORKER_LINE],
    ("kubeflow-training.yaml", 0): [f'pytorchReplicaSpecs.Worker container "pytorch": {TIME_SLICED_2}'],
    ("kubeflow-training.yaml", 6): [f'container "trainer": {TIME_SLICED_2}'],
}


@pytest.mark.parametrize(("file", "index"), list(PLACES), ids=[f"{f}#{i}" for f, i in PLACES])
def test_each_fixture_has_its_exact_verdict_under_time_slicing(policies: PolicySet, file: str, index: int) -> None:
    decision = evaluate(fixture(file, index), "notebooks", policies)
    expected = VERDICTS.get((file, index), [])
    assert decision.violations == expected
    assert decision.verdict == ("deny" if expected else "allow")
    assert not decision.patch and not decision.skipped


def test_mig_namespaces_judge_each_template_as_its_pods_will_be(policies: PolicySet) -> None:
    """In a MIG namespace nvidia.com/gpu becomes a slice: 2 per container is two slices, denied per template."""
    obj = fixture("kubeflow-training.yaml", 0)
    decision = evaluate(obj, "batch", policies)
    assert decision.verdict == "deny"
    assert [line.split(": nvidia.com")[0] for line in decision.violations] == [
        'pytorchReplicaSpecs.Worker container "pytorch"'
    ]


def test_left_alone_like_workloads(policies: PolicySet) -> None:
    obj = raycluster(4)
    owned = copy.deepcopy(obj)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "j", "uid": "u",
                                             "controller": True}]  # fmt: skip
    assert evaluate(owned, "notebooks", policies).skip_reason == "its pod templates come from its controller"
    scaled = copy.deepcopy(obj)
    scaled["spec"]["workerGroupSpecs"][0]["replicas"] = 1
    decision = evaluate(scaled, "notebooks", policies, old=obj)
    assert (decision.allowed, decision.skip_reason) == (True, "this update leaves its pod templates as they were")
    deleting = copy.deepcopy(obj)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert evaluate(obj, "notebooks", policies, old=deleting).skip_reason == "it is being deleted"
    changed = raycluster(1)
    assert evaluate(obj, "notebooks", policies, old=changed).verdict == "deny"  # the update raises the ask
    empty = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "e"}, "spec": {}}
    assert evaluate(empty, "notebooks", policies).skip_reason == "it has no pod template where a RayCluster holds them"
    elsewhere = {"apiVersion": "ray.io/v9", "kind": "RayCluster", "metadata": {"name": "e"},
                 "spec": {"workers": {"resources": {"limits": {"nvidia.com/gpu": 4}}}}}  # fmt: skip
    assert evaluate(elsewhere, "notebooks", policies).skip_reason == (
        "gpu-admission does not read this RayCluster (ray.io): no pod template at spec.headGroupSpec.template.spec, "
        "spec.workerGroupSpecs[*].template.spec, but it asks for nvidia.com/gpu at spec.workers.resources.limits: "
        "not judged; name its pod templates in a --custom-resources file (docs/custom-resources.md)"
    )


def test_a_kind_nobody_named_that_asks_for_gpus_is_skipped_with_the_reason(policies: PolicySet) -> None:
    obj = {
        "apiVersion": "example.com/v1", "kind": "TrainingRun", "metadata": {"name": "big"},
        "spec": {"workers": [{"template": {"spec": {"containers": [
            {"name": "w", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}]},
    }  # fmt: skip
    decision = evaluate(obj, "notebooks", policies)
    assert (decision.allowed, decision.skipped) == (True, True)
    assert decision.skip_reason == (
        "gpu-admission does not read TrainingRun (example.com), which asks for nvidia.com/gpu at "
        "spec.workers[0].template.spec.containers[0].resources.limits: not judged; name its pod templates in a "
        "--custom-resources file (docs/custom-resources.md)"
    )
    table = KindTable.of(BUILTIN_KINDS, parse_kinds(yaml.safe_load(ADMIN_KINDS), "kinds.yaml"))
    decision = evaluate(obj, "notebooks", policies, kinds=table)
    assert decision.violations == [f'workers[0] container "w": {TIME_SLICED_4}']
    plain = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {"size": 4}}
    assert evaluate(plain, "notebooks", policies).skip_reason == "it has no pod spec"  # no GPU: nothing to say


# ------------------------------------------------------------------------------------------ an admin's kinds

ADMIN_KINDS = """\
apiVersion: gpu-admission.io/v1
kind: CustomResourceTemplates
kinds:
  - group: example.com
    kind: TrainingRun
    resource: trainingruns
    templates: ["spec.launcher.template.spec", "spec.workers[*].template.spec"]
"""


def test_an_admins_kinds_are_one_entry_each() -> None:
    (kind,) = parse_kinds(yaml.safe_load(ADMIN_KINDS), "kinds.yaml")
    assert kind == CustomKind(
        "example.com", "TrainingRun", "trainingruns",
        (Site("spec.launcher.template.spec"), Site("spec.workers[*].template.spec")), "kinds.yaml",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"kind": "GPUPolicy"}, "k.yaml: not a CustomResourceTemplates document (kind: CustomResourceTemplates)"),
        ({"kind": "CustomResourceTemplates", "kinds": []},
         "k.yaml: kinds: a list of {group, kind, resource, templates} entries"),
        ({"kind": "CustomResourceTemplates", "kinds": [{"group": "g", "kind": "K", "resource": "ks"}]},
         "k.yaml: kinds[0].templates: a list of paths to pod specs, such as spec.workers[*].template.spec"),
        ({"kind": "CustomResourceTemplates", "kinds": [{"group": "g", "kind": "K", "resource": "ks",
                                                        "templates": ["spec.a[0].b"]}]},
         "k.yaml: kinds[0].templates: 'spec.a[0].b': 'a[0]' is not a key, optionally followed by [*] or {*}"),
        ({"kind": "CustomResourceTemplates", "kinds": [{"group": "", "kind": "K"}]},
         "k.yaml: kinds[0].group: a non-empty string"),
        ({"kind": "CustomResourceTemplates", "kinds": [{"grup": "g"}]},
         "k.yaml: kinds[0]: unknown key 'grup' (group, kind, resource, templates, nameKey)"),
    ],
)  # fmt: skip
def test_an_admins_file_that_cannot_be_used_is_one_line(document: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_kinds(document, "k.yaml")
    assert str(caught.value) == message


# ------------------------------------------------------------------------------------------ the CLI


def gpu_webhook(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_ADMISSION_POLICIES", "NO_COLOR")}
    return subprocess.run([str(GPU_WEBHOOK), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


def test_check_judges_custom_resources_and_names_the_template() -> None:
    run = gpu_webhook("check", "--policies", "examples/policies", "tests/fixtures/custom-resources/")
    assert run.returncode == 1, run.stderr
    denials = [line for line in run.stdout.splitlines() if line.startswith("DENY ")]
    assert denials == [
        f"DENY tests/fixtures/custom-resources/kubeflow-training.yaml#0 PyTorchJob/pytorch-ddp: "
        f"{VERDICTS[('kubeflow-training.yaml', 0)][0]}",
        f"DENY tests/fixtures/custom-resources/kubeflow-training.yaml#6 TrainJob/torch-fine-tune: "
        f"{VERDICTS[('kubeflow-training.yaml', 6)][0]}",
        f"DENY tests/fixtures/custom-resources/raycluster.yaml#0 RayCluster/raycluster-gpu: {RAY_WORKER_LINE}",
    ]
    assert run.stdout.splitlines()[-1] == "22 objects: 19 allowed, 3 denied, 0 mutated, 0 skipped, 0 with warnings"


def test_check_says_skip_for_a_kind_it_cannot_read_and_reads_it_with_custom_resources(tmp_path: Path) -> None:
    manifest = tmp_path / "run.yaml"
    manifest.write_text(
        "apiVersion: example.com/v1\nkind: TrainingRun\nmetadata: {name: big, namespace: notebooks}\n"
        "spec:\n  launcher:\n    template:\n      spec:\n        containers:\n"
        "          - {name: l, image: x, resources: {limits: {nvidia.com/gpu: 4}}}\n"
    )
    run = gpu_webhook("check", "--policies", str(EXAMPLE_POLICIES), str(manifest))
    assert run.returncode == 0, run.stderr
    (skip,) = [line for line in run.stdout.splitlines() if line.startswith("SKIP ")]
    assert skip == (
        f"SKIP {manifest}#0 TrainingRun/big: gpu-admission does not read TrainingRun (example.com), which asks for "
        "nvidia.com/gpu at spec.launcher.template.spec.containers[0].resources.limits: not judged; name its pod "
        "templates in a --custom-resources file (docs/custom-resources.md)"
    )
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(ADMIN_KINDS)
    run = gpu_webhook("check", "--policies", str(EXAMPLE_POLICIES), "--custom-resources", str(kinds), str(manifest))
    assert run.returncode == 1
    assert f'DENY {manifest}#0 TrainingRun/big: launcher container "l": {TIME_SLICED_4}' in run.stdout.splitlines()
    kinds.write_text("kind: CustomResourceTemplates\nkinds: [{group: g}]\n")
    run = gpu_webhook("check", "--policies", str(EXAMPLE_POLICIES), "--custom-resources", str(kinds), str(manifest))
    assert (run.returncode, run.stderr) == (
        2, f"gpu-webhook check: {kinds}: kinds[0].kind: a non-empty string\n"
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ the server


@pytest.fixture(scope="module")
def server(start_server: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.conftest import copy_policies

    work = tmp_path_factory.mktemp("crd-server")
    kinds = work / "kinds.yaml"
    kinds.write_text(ADMIN_KINDS)
    return start_server(copy_policies(work / "policies", EXAMPLE_POLICIES),
                        extra_args=["--custom-resources", str(kinds)])  # fmt: skip


def _validate(server: Any, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    from webhook.admission.review import make_review

    answer = server.post("/validate", make_review(obj, namespace=namespace))
    assert answer.status_code == 200, answer.text
    return answer.json()["response"]


def test_the_server_denies_a_raycluster_with_the_templates_line(server: Any) -> None:
    response = _validate(server, raycluster(4), "notebooks")
    assert response["allowed"] is False
    assert response["status"]["message"] == RAY_WORKER_LINE
    assert "patch" not in response


def test_the_server_admits_one_within_policy_and_warns_under_warn(server: Any) -> None:
    response = _validate(server, raycluster(1), "notebooks")
    assert (response["allowed"], response.get("warnings"), response.get("patch")) == (True, None, None)
    response = _validate(server, raycluster(4, "inference"), "inference")
    assert response["allowed"] is True
    assert response["warnings"] == [
        'gpu-admission: container "ray-worker": nvidia.com/gpu 4: one mps share per container; ask for 1'
    ]


def test_the_server_reads_the_admins_kinds(server: Any) -> None:
    obj = {
        "apiVersion": "example.com/v1", "kind": "TrainingRun", "metadata": {"name": "big"},
        "spec": {"workers": [{"name": "a", "template": {"spec": {"containers": [
            {"name": "w", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}]},
    }  # fmt: skip
    response = _validate(server, obj, "notebooks")
    assert response["status"]["message"] == f'workers[0] (a) container "w": {TIME_SLICED_4}'


def test_check_server_sends_custom_resources_to_validate(server: Any) -> None:
    run = gpu_webhook("check", "--server", server.url, "--ca-file", str(server.ca_file),
                      "tests/fixtures/custom-resources/raycluster.yaml")  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert f"DENY tests/fixtures/custom-resources/raycluster.yaml#0 RayCluster/raycluster-gpu: {RAY_WORKER_LINE}" in (
        run.stdout.splitlines()
    )


# ------------------------------------------------------------------------------------------ a real API server

RAYCLUSTER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "rayclusters.ray.io"},
    "spec": {
        "group": "ray.io",
        "names": {"kind": "RayCluster", "plural": "rayclusters", "singular": "raycluster"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            # A minimal structural schema: the templates kept whole, as KubeRay's own CRD keeps a PodTemplateSpec.
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}  # fmt: skip


ONLY = "gpu-admission-test/custom-resources"  # the shared API server's webhooks for this file's namespace only


@pytest.fixture(scope="module")
def apiserver_with_webhook(kube_apiserver: Any, kubectl: Path, server: Any) -> Iterator[Any]:
    """The shared API server with a minimal RayCluster CRD, and the shipped webhook configurations (rendered
    from manifests/, as `kubectl apply -k` would make them) pointed at this file's server."""
    from tests import envtest

    plane = kube_apiserver
    created = plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD)
    assert created.status_code in (201, 409), created.text
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "notebooks", "labels": {ONLY: "true"}}}
    if plane.request("POST", "/api/v1/namespaces", namespace).status_code == 409:
        patched = plane.request("PATCH", "/api/v1/namespaces/notebooks", {"metadata": {"labels": {ONLY: "true"}}},
                                headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        assert patched.status_code == 200, patched.text
    # One made before the webhook was registered: what `audit` finds in a cluster that had none.
    existing = raycluster(4)
    existing["metadata"]["name"] = "made-before"
    deadline = time.monotonic() + 30
    while (
        made := plane.request("POST", "/apis/ray.io/v1/namespaces/notebooks/rayclusters", existing)
    ).status_code == 404 and time.monotonic() < deadline:  # the new CRD is served within a second or two
        time.sleep(0.25)
    assert made.status_code in (201, 409), made.text
    configurations = envtest.shipped_webhook_configurations(
        kubectl, server.url, Path(server.ca_file).read_bytes(), "custom-resources", ONLY
    )
    paths = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
             "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}  # fmt: skip
    for configuration in configurations:
        path = f"/apis/admissionregistration.k8s.io/v1/{paths[configuration['kind']]}"
        registered = plane.request("POST", path, configuration)
        assert registered.status_code == 201, registered.text  # every generated condition compiles on v1.36
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the webhook is in the API server's cache
        probe = plane.request("POST", "/apis/ray.io/v1/namespaces/notebooks/rayclusters?dryRun=All", raycluster(4))
        if probe.status_code == 403 and "denied the request" in probe.text:
            break
        time.sleep(0.5)
    yield plane
    for configuration in configurations:
        path = f"/apis/admissionregistration.k8s.io/v1/{paths[configuration['kind']]}"
        plane.request("DELETE", f"{path}/{configuration['metadata']['name']}")


def test_the_api_server_denies_a_raycluster_beyond_the_policy_at_apply_time(apiserver_with_webhook: Any) -> None:
    plane = apiserver_with_webhook
    answer = plane.request("POST", "/apis/ray.io/v1/namespaces/notebooks/rayclusters", raycluster(4))
    assert answer.status_code == 403, answer.text
    assert answer.json()["message"] == (
        f'admission webhook "rayclusters.ray.io.gpu-admission.io" denied the request: {RAY_WORKER_LINE}'
    )


def test_the_api_server_admits_a_raycluster_within_the_policy(apiserver_with_webhook: Any) -> None:
    plane = apiserver_with_webhook
    obj = raycluster(1)
    obj["metadata"]["name"] = "within-policy"
    answer = plane.request("POST", "/apis/ray.io/v1/namespaces/notebooks/rayclusters", obj)
    assert answer.status_code == 201, answer.text
    stored = answer.json()
    assert stored["spec"] == obj["spec"]  # judged, never changed


def test_kubectl_apply_shows_the_denial(apiserver_with_webhook: Any, kubectl: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "raycluster.yaml"
    manifest.write_text(json.dumps(raycluster(4)))
    # --validate=false: kubectl's own schema check waits for the new CRD's OpenAPI, which is beside the point.
    run = subprocess.run(
        [
            str(kubectl),
            "--kubeconfig",
            str(apiserver_with_webhook.kubeconfig),
            "apply",
            "--validate=false",
            "-f",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert RAY_WORKER_LINE in run.stderr


def test_audit_lists_the_custom_resources_the_cluster_serves(apiserver_with_webhook: Any) -> None:
    run = gpu_webhook("audit", "--kubeconfig", str(apiserver_with_webhook.kubeconfig), "--policies",
                      str(EXAMPLE_POLICIES), "-n", "notebooks", "-o", "json")  # fmt: skip
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    (result,) = [r for r in report["results"] if r["kind"] == "RayCluster"]
    assert (result["name"], result["allowed"], result["denials"]) == ("made-before", False, [RAY_WORKER_LINE])
