"""Routes a tenant could take past the policy, each closed, through the real server (`gpu-webhook serve`,
TLS, a verifying client), sent as the API server sends them: an AdmissionReview with request.namespace,
request.kind and request.operation set, /mutate first, its JSON Patch applied as the API server applies it
(tests/evanphx.py), then /validate on the result.

One server for the module, on the shipped and example policies (`default`: whole GPUs for team namespaces;
`notebooks-time-slicing`; `batch-mig`: A100-80GB MIG offering 1g.10gb, 2g.20gb and 3g.40gb) and one more,
`kai-sharing` for the namespace `kai-team`, which trusts the scheduler `kai-scheduler`.
"""

from __future__ import annotations

import base64
import copy
import json
import socket
import ssl
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests import evanphx
from tests.conftest import ROOT, LiveServer, copy_policies
from webhook.admission.review import make_review

KAI_POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata:
  name: kai-sharing
spec:
  namespaces: ["kai-team"]
  trustedSchedulers: [kai-scheduler]
"""


@pytest.fixture(scope="module")
def server(start_server: Callable[..., LiveServer], tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    policies = copy_policies(tmp_path_factory.mktemp("routes") / "policies")
    (policies / "kai.yaml").write_text(KAI_POLICY)
    return start_server(policies)


def pod(namespace: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": list(containers), **spec},
    }


def container(name: str = "app", limits: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "registry.example/app:1", **fields}
    if limits is not None:
        body["resources"] = {"limits": dict(limits), "requests": dict(limits)}
    return body


def call(server: LiveServer, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
    answer = server.post(f"/{endpoint}", review)
    assert answer.status_code == 200, answer.text
    response = answer.json()["response"]
    assert response["uid"] == review["request"]["uid"]
    return response


def admit(server: LiveServer, obj: dict[str, Any], namespace: str | None = None, **kwargs: Any) -> tuple[bool, str]:
    """What the API server makes of `obj`: /mutate, its patch applied, then /validate on the result. Returns
    whether it was admitted and the denial's message ("" when admitted)."""
    namespace = namespace or obj["metadata"]["namespace"]
    mutated = call(server, "mutate", make_review(obj, namespace=namespace, **kwargs))
    if not mutated["allowed"]:
        return False, mutated["status"]["message"]
    if "patch" in mutated:
        obj = evanphx.apply(obj, json.loads(base64.b64decode(mutated["patch"])))
    validated = call(server, "validate", make_review(obj, namespace=namespace, **kwargs))
    return validated["allowed"], validated.get("status", {}).get("message", "")


# --- NVIDIA_VISIBLE_DEVICES beside a GPU request --------------------------------------------------------


ALL_GPUS = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


def test_visible_devices_beside_a_gpu_request_is_denied(server):
    obj = pod("team-a", container(limits={"nvidia.com/gpu": "1"}, env=ALL_GPUS))
    assert admit(server, obj) == (
        False,
        'container "app": sets NVIDIA_VISIBLE_DEVICES beside its GPU request; the kubelet puts it after the device '
        "plugin's value and the NVIDIA container toolkit keeps the last, so the container would see GPUs not "
        'allocated to it (policy "default"): remove the variable (the device plugin sets it)',
    )
    prefixed = [{"prefix": "NVIDIA_", "configMapRef": {"name": "devices"}}]
    obj = pod("notebooks", container(limits={"nvidia.com/gpu": "1"}, envFrom=prefixed))
    assert admit(server, obj) == (
        False,
        'container "app": envFrom prefix "NVIDIA_" can set NVIDIA_VISIBLE_DEVICES (from a key "VISIBLE_DEVICES") '
        "beside its GPU request; the kubelet puts it after the device plugin's value and the NVIDIA container "
        "toolkit keeps the last, so the container would see GPUs not allocated to it (policy "
        '"notebooks-time-slicing"): use another prefix',
    )


STACK = sorted((ROOT / "tests" / "fixtures" / "gpu-stack").glob("*.yaml"))


@pytest.mark.parametrize("manifest", STACK, ids=[path.stem for path in STACK])
def test_the_gpu_operators_privileged_pods_are_still_admitted_untouched(server, manifest):
    obj = yaml.safe_load(manifest.read_text())
    for endpoint in ("mutate", "validate"):
        namespace = obj["metadata"].get("namespace", "gpu-operator")
        response = call(server, endpoint, make_review(obj, namespace=namespace))
        assert response["allowed"] is True and "patch" not in response and "warnings" not in response


# --- a scheduler that sets NVIDIA_VISIBLE_DEVICES itself -------------------------------------------------


FROM_KAI = [
    {
        "name": "NVIDIA_VISIBLE_DEVICES",
        "valueFrom": {"configMapKeyRef": {"name": "p-shared-gpu-0", "key": "NVIDIA_VISIBLE_DEVICES"}},
    }
]


def test_a_trusted_schedulers_pods_may_take_visible_devices_from_its_config_map(server):
    # KAI Scheduler's GPU sharing: a gpu-fraction annotation, no GPU resource, and the variable from a
    # ConfigMap that its binder writes when it binds the pod.
    kai = pod("kai-team", container(env=FROM_KAI), schedulerName="kai-scheduler")
    kai["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    assert admit(server, kai) == (True, "")
    # A literal value is never trusted, and another scheduler is not.
    literal = pod("kai-team", container(env=ALL_GPUS), schedulerName="kai-scheduler")
    assert admit(server, literal) == (
        False,
        'container "app": sets NVIDIA_VISIBLE_DEVICES but requests no GPU; the NVIDIA container toolkit would expose '
        'GPUs without allocating them (policy "kai-sharing"): remove the variable or request nvidia.com/gpu',
    )
    other = pod("kai-team", container(env=FROM_KAI), schedulerName="my-scheduler")
    assert admit(server, other) == (
        False,
        'container "app": sets NVIDIA_VISIBLE_DEVICES but requests no GPU; the NVIDIA container toolkit would expose '
        'GPUs without allocating them (policy "kai-sharing"): remove the variable or request nvidia.com/gpu; if a '
        "scheduler sets it (KAI Scheduler's GPU sharing), list that scheduler in the policy's trustedSchedulers "
        '(spec.schedulerName "my-scheduler" is not listed)',
    )
    # Secure by default: the shipped policy trusts no scheduler, and its line says where to.
    default = pod("team-a", container(env=FROM_KAI), schedulerName="kai-scheduler")
    assert admit(server, default) == (
        False,
        'container "app": sets NVIDIA_VISIBLE_DEVICES but requests no GPU; the NVIDIA container toolkit would expose '
        'GPUs without allocating them (policy "default"): remove the variable or request nvidia.com/gpu; if a '
        "scheduler sets it (KAI Scheduler's GPU sharing), list that scheduler in the policy's trustedSchedulers "
        '(spec.schedulerName "kai-scheduler" is not listed)',
    )


# --- a zero-valued companion ------------------------------------------------------------------------------


def test_a_zero_valued_companion_does_not_keep_a_whole_gpu_in_a_sharing_namespace(server):
    obj = pod("notebooks", container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "0"}))
    assert admit(server, obj) == (
        False,
        'container "app": nvidia.com/gpu "1" stays a whole GPU beside nvidia.com/gpu.shared, but under policy '
        '"notebooks-time-slicing" (time-slicing) nvidia.com/gpu becomes nvidia.com/gpu.shared; request '
        "nvidia.com/gpu.shared or nvidia.com/gpu, not both\n"
        'container "app": nvidia.com/gpu.shared "0" beside nvidia.com/gpu "1" asks for no device, and a zero keeps '
        'the webhook from making the request what policy "notebooks-time-slicing" gives; remove '
        "nvidia.com/gpu.shared",
    )
    obj = pod("batch", container(limits={"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "0"}))
    assert admit(server, obj) == (
        False,
        'container "app": nvidia.com/gpu "1" stays a whole GPU beside nvidia.com/mig-1g.10gb, but under policy '
        '"batch-mig" (mig) nvidia.com/gpu becomes nvidia.com/mig-1g.10gb; request nvidia.com/mig-1g.10gb or '
        "nvidia.com/gpu, not both\n"
        'container "app": nvidia.com/mig-1g.10gb "0" beside nvidia.com/gpu "1" asks for no device, and a zero keeps '
        'the webhook from making the request what policy "batch-mig" gives; remove nvidia.com/mig-1g.10gb',
    )
    # A zero alone asks for nothing (charts write `nvidia.com/gpu: 0` for their CPU variant).
    assert admit(server, pod("notebooks", container(limits={"nvidia.com/gpu": "0"}))) == (True, "")


# --- a client-set deletionTimestamp -------------------------------------------------------------------------


def test_a_deletion_timestamp_set_on_create_does_not_skip_the_review(server):
    obj = pod("team-a", container(limits={"nvidia.com/mig-3g.40gb": "1"}))
    obj["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    allowed, message = admit(server, obj)
    assert not allowed and message.startswith('container "app": nvidia.com/mig-3g.40gb "1" is a MIG slice')
    # An update of a workload that is being deleted is still left alone (its finalizers must be able to go).
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "team-a", "deletionTimestamp": "2026-11-22T10:00:00Z",
                     "finalizers": ["example.com/f"]},
        "spec": {"template": {"spec": pod("team-a", container(limits={"nvidia.com/mig-3g.40gb": "1"}))["spec"]}},
    }  # fmt: skip
    done = copy.deepcopy(deployment)
    done["metadata"]["finalizers"] = []
    assert admit(server, done, operation="UPDATE", old=deployment) == (True, "")


# --- pools a namespace's policy does not serve --------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "resource", "message"),
    [
        (
            "team-a",
            "nvidia.com/mig-3g.40gb",
            'container "app": nvidia.com/mig-3g.40gb "1" is a MIG slice, but policy "default" gives this namespace '
            "whole GPUs (mode exclusive); request nvidia.com/gpu instead",
        ),
        (
            "batch",
            "nvidia.com/gpu.shared",
            'container "app": nvidia.com/gpu.shared "1" is a shared GPU, but policy "batch-mig" gives this namespace '
            "MIG slices (nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb, nvidia.com/mig-3g.40gb); request "
            "nvidia.com/gpu: 1 (it becomes nvidia.com/mig-1g.10gb) or one of those",
        ),
        (
            "notebooks",
            "nvidia.com/mig-1g.10gb",
            'container "app": nvidia.com/mig-1g.10gb "1" is a MIG slice, but policy "notebooks-time-slicing" '
            "gives this namespace time-slicing replicas (nvidia.com/gpu.shared); request nvidia.com/gpu: 1 (it becomes "
            "nvidia.com/gpu.shared: 1) or nvidia.com/gpu.shared",
        ),
    ],
)
def test_a_namespace_may_ask_only_for_the_pool_its_policy_serves(server, namespace, resource, message):
    assert admit(server, pod(namespace, container(limits={resource: "1"}))) == (False, message)


def test_each_namespace_still_gets_what_its_pool_serves(server):
    assert admit(server, pod("team-a", container(limits={"nvidia.com/gpu": "2"}))) == (True, "")
    assert admit(server, pod("notebooks", container(limits={"nvidia.com/gpu.shared": "1"}))) == (True, "")
    assert admit(server, pod("batch", container(limits={"nvidia.com/mig-3g.40gb": "1"}))) == (True, "")


# --- the container toolkit's volume-mounts device list, and /dev hostPaths ------------------------------------


def test_the_toolkits_device_list_mounts_and_gpu_device_host_paths_are_denied(server):
    volumes = [
        {"name": "all", "hostPath": {"path": "/dev/null"}},
        {"name": "gpu0", "hostPath": {"path": "/dev/nvidia0"}},
    ]
    mounts = [
        {"name": "all", "mountPath": "/var/run/nvidia-container-devices/all"},
        {"name": "gpu0", "mountPath": "/dev/nvidia0"},
    ]
    obj = pod("team-a", container(volumeMounts=mounts), volumes=volumes)
    assert admit(server, obj) == (
        False,
        'container "app": mounts volume "all" at /var/run/nvidia-container-devices/all, the NVIDIA container '
        "toolkit's device list: it would give the container the GPUs named there without allocating them (policy "
        '"default"); remove the mount and request nvidia.com/gpu\n'
        'container "app": mounts hostPath /dev/nvidia0 (volume "gpu0"): the node\'s GPU device nodes, outside the '
        'device plugin\'s allocation (policy "default"); remove the volume and request nvidia.com/gpu',
    )
    privileged = pod("team-a", container(volumeMounts=mounts, securityContext={"privileged": True}), volumes=volumes)
    assert admit(server, privileged) == (True, "")


# --- the review's namespace and kind are the request's ------------------------------------------------------


def test_the_policy_follows_request_namespace_and_a_mismatch_is_refused(server):
    obj = pod("notebooks", container(limits={"nvidia.com/gpu": "0.25"}))
    review = make_review(obj, namespace="team-a")
    answer = server.post("/validate", review)
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        "request.object.metadata.namespace: 'notebooks' differs from request.namespace 'team-a'; the API server "
        "sends the namespace the object is stored in: send the two equal"
    )
    # An object without a namespace is judged under the request's (here whole GPUs: 0.25 is refused).
    del obj["metadata"]["namespace"]
    allowed, message = admit(server, obj, namespace="team-a")
    assert not allowed and '(policy "default" gives whole GPUs only' in message
    kind = make_review(pod("team-a", container()), namespace="team-a")
    kind["request"]["object"]["kind"] = "ConfigMap"
    answer = server.post("/mutate", kind)
    assert (answer.status_code, answer.json()["error"]) == (
        400,
        "request.object.kind: 'ConfigMap' differs from request.kind.kind 'Pod'; the API server sends the kind it "
        "admits: send the two equal",
    )


def test_a_5000_digit_integer_gets_400_with_a_clear_line_and_no_traceback(server):
    review = make_review(pod("team-a", container(limits={"nvidia.com/gpu": "1"})), namespace="team-a")
    text = json.dumps(review).replace('"nvidia.com/gpu": "1"', '"nvidia.com/gpu": ' + "9" * 5000, 1)
    answer = server.post("/validate", None, data=text.encode(), headers={"Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (
        400,
        "body: a number with more than 4300 digits; no Kubernetes field holds one (an int64 has 19 digits): send "
        "it as a quantity string",
    )
    assert "Traceback" not in server.log()


def test_tls_1_2_sessions_get_no_ticket(server):
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(server.ca_file))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection((host, port)) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.version() == "TLSv1.2"
        assert tls.session is not None and tls.session.has_ticket is False
