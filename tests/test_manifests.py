"""manifests/: what `kubectl apply -k manifests/` (and each overlay) would apply, checked property by property.

`render` below resolves the few kustomize features the manifests use (resources, components,
configMapGenerator, JSON patches, `$patch: delete`, replacements, local-config) and fails on any other; where kubectl is
installed, its built-in kustomize renders the same directories and must agree (and renders the example
overlay in overlays/custom/, whose merge patch of a GPUPolicy and `images:` only kustomize resolves). Every
rendered object is also deserialized into the `kubernetes` client's models and serialized back: a field the
API does not know (a typo) would be dropped on the way and fail the round trip.

The webhooks' matchConditions are checked for structure (each must be the documented expression for its
kinds' pod-spec path, the engine's own `POD_SPEC_PATHS`, and its resource names must pick exactly what the
engine's `is_managed` picks) and evaluated with a CEL implementation (common-expression-language, with
cel-go's heterogeneous equality) on objects with and without GPUs and with missing fields.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from kubernetes.client import ApiClient

from tests import k8s_tools, yamldocs
from webhook import certs
from webhook.admission.base.podspec import POD_SPEC_PATHS
from webhook.admission.base.resources import is_managed
from webhook.admission.customresources import BUILTIN_KINDS
from webhook.admission.dra.claimrules import CLAIM_SPEC_PATHS

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
POLICY_COPY = MANIFESTS / "base" / "policies"
CLUSTER_SOURCE = MANIFESTS / "policy-source-cluster"
NAMESPACE = "gpu-admission"
KUBECTL = k8s_tools.binary("kubectl")
LOCAL_CONFIG = "config.kubernetes.io/local-config"
APP_LABELS = {"app.kubernetes.io/name": "gpu-admission", "app.kubernetes.io/component": "webhook"}
# The one list of namespaces never sent to the webhook; the component that copies it into both configurations.
EXCLUDED_LIST = MANIFESTS / "base" / "excluded-namespaces.yaml"
EXCLUDED_COMPONENT = MANIFESTS / "excluded-namespaces"
# Where the GPU stack installs by default (checked at the source: see the list's comments): an outage of the
# webhook must never stop it.
GPU_STACK_NAMESPACES = ["gpu-operator", "nvidia-gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu"]

# (API group, resource) -> kind, for every kind the webhooks receive.
RESOURCE_KINDS = {
    ("", "pods"): "Pod",
    ("", "pods/ephemeralcontainers"): "Pod",  # `kubectl debug`
    ("apps", "deployments"): "Deployment",
    ("apps", "statefulsets"): "StatefulSet",
    ("apps", "daemonsets"): "DaemonSet",
    ("apps", "replicasets"): "ReplicaSet",
    ("", "replicationcontrollers"): "ReplicationController",
    ("batch", "jobs"): "Job",
    ("batch", "cronjobs"): "CronJob",
    ("", "podtemplates"): "PodTemplate",
    ("resource.k8s.io", "resourceclaims"): "ResourceClaim",  # Dynamic Resource Allocation
    ("resource.k8s.io", "resourceclaimtemplates"): "ResourceClaimTemplate",
}

# The documented match condition, with SPEC standing for the pod spec's path under `object`. Every step is
# guarded (has(), `in`, != null), because an expression that errors under failurePolicy Fail rejects the
# request; CEL's && and || also absorb an error when the other side decides the result.
MATCH_CONDITION = """\
GUARDS && (
(has(SPEC.volumes) && SPEC.volumes != null && SPEC.volumes.exists(v,
  has(v.hostPath) && v.hostPath != null && has(v.hostPath.path) && v.hostPath.path.contains('dev'))) ||
(has(SPEC.resourceClaims) && SPEC.resourceClaims != null && size(SPEC.resourceClaims) > 0) ||
['containers', 'initContainers'].exists(section,
  section in SPEC && SPEC[section] != null &&
  SPEC[section].exists(c,
    (has(c.resources) && ['limits', 'requests'].exists(amounts,
      amounts in c.resources && c.resources[amounts] != null &&
      c.resources[amounts].exists(r,
        r in ['nvidia.com/gpu', 'nvidia.com/gpu.shared', 'amd.com/gpu',
          'aliyun.com/gpu-mem', 'nvidia.com/gpucores',
          'nvidia.com/gpumem', 'nvidia.com/gpumem-percentage',
          'volcano.sh/vgpu-cores', 'volcano.sh/vgpu-memory',
          'volcano.sh/vgpu-memory-percentage', 'volcano.sh/vgpu-number'] ||
        r.startsWith('nvidia.com/mig-') || r.startsWith('gpu.intel.com/') ||
        r.startsWith('deviceclass.resource.kubernetes.io/')))) ||
    (has(c.env) && c.env != null && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES')) ||
    (has(c.envFrom) && c.envFrom != null && c.envFrom.exists(f,
      has(f.prefix) && f.prefix != '' && 'NVIDIA_VISIBLE_DEVICES'.startsWith(f.prefix))) ||
    (has(c.volumeMounts) && c.volumeMounts != null && c.volumeMounts.exists(m,
      has(m.mountPath) && m.mountPath.contains('nvidia-container-devices'))))))"""


POD_SECTIONS = "['containers', 'initContainers']"
EPHEMERAL_SECTIONS = "['ephemeralContainers']"  # an ephemeral container's env can set NVIDIA_VISIBLE_DEVICES


def documented_condition(path: tuple[str, ...], sections: str = POD_SECTIONS) -> str:
    spec = ".".join(("object", *path))
    guards = " && ".join(f"has({'.'.join(('object', *path[: i + 1]))})" for i in range(len(path)))
    return MATCH_CONDITION.replace("GUARDS", guards).replace("SPEC", spec).replace(POD_SECTIONS, sections)


def claim_condition(path: tuple[str, ...]) -> str:
    """The condition of a DRA claim's or template's webhook: it asks for devices (every step guarded)."""
    steps = ("object", *path, "devices", "requests")
    guards = " && ".join(f"has({'.'.join(steps[: i + 1])})" for i in range(1, len(steps)))
    requests = ".".join(steps)
    return f"{guards} &&\n{requests} != null && size({requests}) > 0"


def is_claims(hook: dict[str, Any]) -> bool:
    return any(rule["apiGroups"] == ["resource.k8s.io"] for rule in hook["rules"])


def is_ephemeral(hook: dict[str, Any]) -> bool:
    return any(r["resources"] == ["pods/ephemeralcontainers"] for r in hook["rules"])


def is_custom(hook: dict[str, Any]) -> bool:
    """An entry for custom resources (validating only; tests/test_webhooks_generated.py checks them)."""
    return any(r["apiVersions"] == ["*"] for r in hook["rules"])


def is_namespaced(hook: dict[str, Any]) -> bool:
    """Not the GPUPolicy objects' entry (cluster-scoped: no namespaceSelector, no matchConditions;
    tests/test_webhooks_generated.py checks it)."""
    return all(r["scope"] == "Namespaced" for r in hook["rules"])


def pod_spec_hooks(configuration: dict[str, Any]) -> list[dict[str, Any]]:
    return [hook for hook in configuration["webhooks"] if not is_custom(hook) and is_namespaced(hook)]


def namespaced_hooks(configuration: dict[str, Any]) -> list[dict[str, Any]]:
    return [hook for hook in configuration["webhooks"] if is_namespaced(hook)]


# The entries: five for the places a pod spec lives and two for DRA claims, in both configurations; one per
# custom resource kind and one for GPUPolicy objects in the validating configuration only.
ENTRIES = {"MutatingWebhookConfiguration": 7, "ValidatingWebhookConfiguration": 7 + len(BUILTIN_KINDS) + 1}
ALL_ENTRIES = sum(ENTRIES.values())
NAMESPACED_ENTRIES = ALL_ENTRIES - 1  # all but GPUPolicy's


# ------------------------------------------------------------------------------------ a small kustomize


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yamldocs.load_all(path.read_text()) if doc is not None]


def _kustomization(directory: Path) -> dict[str, Any]:
    data = yamldocs.load((directory / "kustomization.yaml").read_text())
    supported = {"apiVersion", "kind", "resources", "components", "configMapGenerator", "patches", "replacements"}
    unknown = set(data) - supported
    assert not unknown, f"{directory}/kustomization.yaml uses {sorted(unknown)}: teach render() or avoid them"
    return data


def _generate_configmap(directory: Path, generator: dict[str, Any]) -> dict[str, Any]:
    assert generator.get("options", {}).get("disableNameSuffixHash") is True, "a fixed name lets the server reload"
    assert set(generator) <= {"name", "namespace", "options", "files"}, generator
    configmap: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}}
    if "namespace" in generator:
        configmap["metadata"]["namespace"] = generator["namespace"]
    data = {}
    for entry in generator.get("files", []):
        assert "=" not in entry and "/" not in entry, f"{entry}: only plain file names are supported here"
        data[entry] = (directory / entry).read_text()
    if data:
        configmap["data"] = data
    return configmap


def _selected(obj: dict[str, Any], selector: dict[str, Any]) -> bool:
    assert set(selector) <= {"kind", "name"}, selector
    actual = {"kind": obj["kind"], "name": obj["metadata"]["name"]}
    return all(actual[key] == value for key, value in selector.items())


def _apply_patches(objects: list[dict[str, Any]], directory: Path, patches: list[dict[str, Any]]) -> None:
    for entry in patches:
        text = (directory / entry["path"]).read_text() if "path" in entry else entry["patch"]
        operations = yamldocs.load(text)
        matched = [i for i, obj in enumerate(objects) if _selected(obj, entry["target"])]
        assert matched, f"patch {entry} matches nothing"
        if isinstance(operations, dict) and operations.get("$patch") == "delete":  # the one strategic merge used
            objects[:] = [obj for i, obj in enumerate(objects) if i not in matched]
            continue
        assert isinstance(operations, list), "only JSON patches and `$patch: delete` are supported here"
        for index in matched:
            objects[index] = jsonpatch.apply_patch(objects[index], operations)


def _split_field_path(path: str) -> list[str]:
    """A dotted field path split as kustomize splits it: a `[key=value]` selector is one part, dots and all."""
    return [part for part in re.split(r"\.(?![^\[]*\])", path) if part]


def _field_nodes(node: Any, parts: list[str], create: bool) -> Iterator[tuple[dict[str, Any], str]]:
    """(parent, key) pairs that a dotted field path with `*` list wildcards and `[key=value]` selectors names."""
    head, rest = parts[0], parts[1:]
    if head == "*" or head.startswith("["):
        assert isinstance(node, list)
        key, _, wanted = head.strip("[]").partition("=")
        for item in node:
            if head == "*" or (isinstance(item, dict) and item.get(key) == wanted):
                yield from _field_nodes(item, rest, create)
        return
    if not rest:
        if head in node or create:
            yield node, head
        return
    if head not in node and create:
        node[head] = {}
    if head in node:
        yield from _field_nodes(node[head], rest, create)


def _apply_replacements(objects: list[dict[str, Any]], replacements: list[dict[str, Any]]) -> None:
    for replacement in replacements:
        source = replacement["source"]
        (origin,) = [o for o in objects if _selected(o, {k: source[k] for k in ("kind", "name")})]
        value: Any = origin
        for part in source["fieldPath"].split("."):
            value = value[part]
        for target in replacement["targets"]:
            create = target.get("options", {}).get("create", False)
            matched = [o for o in objects if _selected(o, target["select"])]
            assert matched, f"replacement target {target['select']} matches nothing"
            for obj in matched:
                for field_path in target["fieldPaths"]:
                    for parent, key in _field_nodes(obj, _split_field_path(field_path), create):
                        parent[key] = copy.deepcopy(value)


def _accumulate(directory: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for entry in data.get("resources", []):
        path = directory / entry
        if path.is_dir():
            assert _kustomization(path).get("kind") != "Component", f"{entry}: a Component under resources"
            objects += render(path, drop_local=False)
        else:
            objects += load_documents(path)
    objects += [_generate_configmap(directory, g) for g in data.get("configMapGenerator", [])]
    return objects


def render(directory: Path, *, drop_local: bool = True) -> list[dict[str, Any]]:
    """What `kubectl kustomize directory` prints, for the features these manifests use."""
    data = _kustomization(directory)
    objects = _accumulate(directory, data)
    for entry in data.get("components", []):
        component_dir = directory / entry
        component = _kustomization(component_dir)
        assert component.get("kind") == "Component", f"{entry}: not a Component"
        objects += _accumulate(component_dir, component)
        _apply_patches(objects, component_dir, component.get("patches", []))
        _apply_replacements(objects, component.get("replacements", []))
    _apply_patches(objects, directory, data.get("patches", []))
    _apply_replacements(objects, data.get("replacements", []))
    if drop_local:
        objects = [o for o in objects if o["metadata"].get("annotations", {}).get(LOCAL_CONFIG) != "true"]
    return objects


def kubectl_kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yamldocs.load_all(result.stdout) if doc is not None]


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        grouped.setdefault(obj["kind"], []).append(obj)
    return grouped


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = by_kind(objects)[kind]
    return obj


VARIANTS = {
    "default": MANIFESTS,
    "no-match-conditions": MANIFESTS / "overlays" / "no-match-conditions",
    "cert-manager": MANIFESTS / "overlays" / "cert-manager",
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(path) for name, path in VARIANTS.items()}


@pytest.fixture(scope="module")
def default(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered["default"]


@pytest.fixture(scope="module")
def configmap_source(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """manifests/ without the policy-source-cluster component: the policies as files in a ConfigMap (the source
    overlays/custom/ keeps)."""
    directory = tmp_path_factory.mktemp("configmap-source")
    components = ["ca-bundle", "api-server", "excluded-namespaces"]
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(MANIFESTS / "base", directory)],
                "components": [os.path.relpath(MANIFESTS / name, directory) for name in components],
            }
        )
    )
    return render(directory)


def webhook_configurations(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    grouped = by_kind(objects)
    return grouped["MutatingWebhookConfiguration"] + grouped["ValidatingWebhookConfiguration"]


def with_ca_bundle(objects: list[dict[str, Any]], bundle: str) -> list[dict[str, Any]]:
    """A copy with every caBundle that is there set to `bundle` (as the documented one-liner does)."""
    filled = copy.deepcopy(objects)
    for configuration in webhook_configurations(filled):
        for hook in configuration["webhooks"]:
            if "caBundle" in hook["clientConfig"]:
                hook["clientConfig"]["caBundle"] = bundle
    return filled


# ------------------------------------------------------------------------------------------ rendering


def test_every_manifest_file_parses() -> None:
    files = sorted(MANIFESTS.rglob("*.yaml"))
    assert len(files) >= 15
    for path in files:
        documents = load_documents(path)
        assert documents, f"{path} is empty"


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_renders_the_expected_objects(rendered: dict[str, list[dict[str, Any]]], variant: str) -> None:
    kinds = sorted(_key(o)[0] for o in rendered[variant])
    expected = [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "GPUPolicy",
        "MutatingWebhookConfiguration",
        "Namespace",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "ResourceQuota",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    ]  # fmt: skip (policies as GPUPolicy objects: the CRD and the default policy, no ConfigMap)
    if variant == "cert-manager":
        expected = sorted([*expected, "Certificate", "Certificate", "Issuer", "Issuer"])
    assert kinds == expected
    cluster_scoped = {
        "Namespace", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ClusterRole",
        "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition", "GPUPolicy",
    }  # fmt: skip
    for obj in rendered[variant]:
        assert obj["metadata"].get("namespace") == (None if obj["kind"] in cluster_scoped else NAMESPACE), _key(obj)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")
@pytest.mark.parametrize("variant", VARIANTS)
def test_kubectl_kustomize_renders_the_same(rendered: dict[str, list[dict[str, Any]]], variant: str) -> None:
    assert sorted(kubectl_kustomize(VARIANTS[variant]), key=_key) == sorted(rendered[variant], key=_key)


@pytest.mark.parametrize("variant", VARIANTS)
def test_objects_round_trip_through_the_kubernetes_client_models(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    """Deserialize into V1Deployment & co. and back: an unknown (misspelt) field would not survive."""
    client = ApiClient()
    # The method behind ApiClient.deserialize, whose public signature changed across client releases.
    deserialize = client._ApiClient__deserialize  # type: ignore[attr-defined]
    checked = 0
    for obj in with_ca_bundle(rendered[variant], base64.b64encode(b"a CA").decode()):
        if obj["apiVersion"].startswith(("cert-manager.io/", "gpu-admission.io/")):
            continue  # custom resources: the client has no model (tests/test_policy_crd.py checks GPUPolicy's)
        model = deserialize(json.loads(json.dumps(obj)), f"V1{obj['kind']}")
        assert type(model).__name__ == f"V1{obj['kind']}"
        assert client.sanitize_for_serialization(model) == obj, f"{_key(obj)} lost or changed fields"
        checked += 1
    assert checked == 17  # the CRD included: every field of its schema is one the API knows


# ------------------------------------------------------------------------------------ the policy ConfigMap


def _policy_files(directory: Path) -> dict[str, str]:
    return {
        p.name: p.read_text()
        for p in sorted(directory.iterdir())
        if p.suffix in (".yaml", ".yml") and p.name != "kustomization.yaml"
    }


def first_day_copy() -> str:
    """What manifests/sync-policies.sh writes: policies/default.yaml with two header lines, in audit."""
    source = (ROOT / "policies" / "default.yaml").read_text()
    header = (
        "# Generated by manifests/sync-policies.sh (make manifests) from policies/default.yaml, in audit for the"
        " first day.\n"
        "# Rollout: audit (gpu-webhook audit lists what would change), then warn, then enforce: see the README.\n"
    )
    return header + re.sub(r"(?m)^  enforcement: enforce ", "  enforcement: audit   ", source)


def test_the_policy_copy_is_the_default_policy_in_audit() -> None:
    """kustomize reads only files under its root, so manifests/ carries copies: policies/default.yaml, in audit,
    for the ConfigMap and as the cluster source's GPUPolicy object."""
    assert _policy_files(POLICY_COPY) == {"default.yaml": first_day_copy()}, "run `make manifests`"
    assert (CLUSTER_SOURCE / "default.yaml").read_text() == first_day_copy(), "run `make manifests`"
    (generator,) = _kustomization(POLICY_COPY)["configMapGenerator"]
    assert generator.get("files", []) == ["default.yaml"]


def _first_day_policy() -> Any:
    """The repository's default policy, in audit."""
    from webhook.admission.policy.loader import parse_policy_sources
    from webhook.admission.policy.model import Enforcement

    (repository,) = parse_policy_sources({"default.yaml": (ROOT / "policies" / "default.yaml").read_text()}).policies
    assert repository.enforcement is Enforcement.ENFORCE
    return dataclasses.replace(repository, enforcement=Enforcement.AUDIT)


def test_the_only_gpupolicy_object_is_the_default_policy_in_audit(default: list[dict[str, Any]]) -> None:
    """The first day breaks nothing, with policies as objects too: no example policy goes live, and the default
    only logs and counts. The object is judged as the server judges objects."""
    from webhook.admission.policy.objects import judge_objects

    (obj,) = by_kind(default)["GPUPolicy"]
    judged = judge_objects([obj])
    assert judged.verdicts["default"].problems == ()
    (policy,) = judged.policies.policies
    assert dataclasses.replace(policy, source="default.yaml#0") == _first_day_policy()
    assert "ConfigMap" not in by_kind(default)  # no policies ConfigMap beside the objects


def test_the_configmap_holds_only_the_default_policy_in_audit(configmap_source: list[dict[str, Any]]) -> None:
    """The same first day with the policies as files in a ConfigMap."""
    from webhook.admission.policy.loader import parse_policy_sources

    configmap = one(configmap_source, "ConfigMap")
    assert configmap["metadata"]["name"] == "gpu-admission-policies"  # no hash suffix: updated in place
    assert list(configmap.get("data", {})) == ["default.yaml"]
    shipped = parse_policy_sources(configmap["data"])  # the loader's own check: raises PolicyLoadError
    (policy,) = shipped.policies
    assert policy == _first_day_policy()  # everything but the enforcement is the repository's default policy


def test_the_sync_script_writes_the_first_day_default(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(MANIFESTS, root / "manifests")
    shutil.copytree(ROOT / "policies", root / "policies")
    (root / "manifests" / "base" / "policies" / "stale.yaml").write_text("name: gone\n")
    result = subprocess.run(["sh", str(root / "manifests" / "sync-policies.sh")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    written = "manifests/base/policies, manifests/policy-source-cluster and charts/gpu-admission/files"
    assert result.stdout == f"synced policies/default.yaml into {written} (enforcement: audit)\n"
    assert not (root / "manifests" / "base" / "policies" / "stale.yaml").exists()
    assert _policy_files(root / "manifests" / "base" / "policies") == {"default.yaml": first_day_copy()}
    assert (root / "manifests" / "policy-source-cluster" / "default.yaml").read_text() == first_day_copy()
    assert (root / "charts" / "gpu-admission" / "files" / "default.yaml").read_text() == first_day_copy()
    # A default.yaml whose enforcement line the script cannot find is an error, not a silent enforce.
    (root / "policies" / "default.yaml").write_text("apiVersion: gpu-admission.io/v1\n")
    result = subprocess.run(["sh", str(root / "manifests" / "sync-policies.sh")], capture_output=True, text=True)
    assert result.returncode == 1
    assert "no '  enforcement: enforce ' line" in result.stderr


# ---------------------------------------------------------------------------------------- the Deployment


def test_the_deployment_runs_three_spread_replicas(default: list[dict[str, Any]]) -> None:
    deployment = one(default, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    assert spec["selector"]["matchLabels"] == APP_LABELS == spec["template"]["metadata"]["labels"]
    assert spec["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    (term,) = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == APP_LABELS


def test_the_service_account_reads_cluster_wide_and_writes_only_the_ledger_in_its_namespace(
    default: list[dict[str, Any]],
) -> None:
    roles = {role["metadata"]["name"]: role for role in by_kind(default)["ClusterRole"]}
    role, binding = roles["gpu-admission-nodes"], one(default, "ClusterRoleBinding")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "verbs": ["get", "list", "watch"],
            "resources": ["resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses"],
        },
        {"apiGroups": [""], "resources": ["pods", "resourcequotas"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["gpu-admission.io"], "resources": ["gpupolicies"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["gpu-admission.io"], "resources": ["gpupolicies/status"], "verbs": ["update"]},
    ]  # fmt: skip (the GPUPolicy objects it serves, the namespaces they govern, and their status: its one write)
    # For the people who write policies, bound to nobody (docs/operations.md says how to bind it); never status.
    editor = roles["gpu-admission-policy-editor"]
    assert editor["rules"] == [
        {"apiGroups": ["gpu-admission.io"], "resources": ["gpupolicies"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    ]  # fmt: skip
    assert [b["roleRef"]["name"] for b in by_kind(default)["ClusterRoleBinding"]] == ["gpu-admission-nodes"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]
    }  # fmt: skip
    account = one(default, "ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    assert binding["subjects"] == [subject]
    ledger, ledger_binding = one(default, "Role"), one(default, "RoleBinding")
    assert ledger["metadata"]["namespace"] == ledger_binding["metadata"]["namespace"] == account["namespace"]
    assert ledger["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    ]  # the budget ledger's records and the recount's Lease: no delete, nothing outside the webhook's namespace
    assert ledger_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                         "name": ledger["metadata"]["name"]}  # fmt: skip
    assert ledger_binding["subjects"] == [subject]


def test_the_pod_is_locked_down_to_the_restricted_pod_security_standard(default: list[dict[str, Any]]) -> None:
    namespace = one(default, "Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = one(default, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is True  # for the node inventory: see the RBAC test
    assert pod["serviceAccountName"] == one(default, "ServiceAccount")["metadata"]["name"]
    assert not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert {next(k for k in v if k != "name") for v in pod["volumes"]} <= {"secret", "configMap", "emptyDir"}
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context.get("privileged") is not True


def test_the_container_has_a_cpu_request_but_no_cpu_limit(default: list[dict[str, Any]]) -> None:
    (container,) = one(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    resources = container["resources"]
    assert "cpu" in resources["requests"] and "cpu" not in resources.get("limits", {})
    assert "memory" in resources["requests"] and "memory" in resources["limits"]
    assert container["image"] == "ghcr.io/gpu-admission/gpu-admission:0.1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"


def _flags(command: list[str]) -> dict[str, str]:
    assert command[:2] == ["gpu-webhook", "serve"]
    rest = command[2:]
    assert all(flag.startswith("--") for flag in rest[::2]), rest
    return dict(zip(rest[::2], rest[1::2], strict=True))


def test_the_server_reads_gpupolicy_objects_and_mounts_no_policies(default: list[dict[str, Any]]) -> None:
    (container,) = one(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    flags = _flags(container["command"])
    assert flags["--policy-source"] == "cluster" and "--policies" not in flags
    assert [m["name"] for m in container["volumeMounts"]] == ["tls", "tmp"]
    assert [v["name"] for v in one(default, "Deployment")["spec"]["template"]["spec"]["volumes"]] == ["tls", "tmp"]


def test_the_server_command_points_at_the_mounted_certificate_and_policies(
    configmap_source: list[dict[str, Any]],
) -> None:
    default = configmap_source  # the policies as files: mounted from the ConfigMap
    pod = one(default, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    flags = _flags(container["command"])
    assert flags["--port"] == "8443" and flags["--metrics-port"] == "9090"
    assert flags["--host"] == "0.0.0.0" and int(flags["--workers"]) >= 1
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    tls_dir, policy_dir = mounts["tls"]["mountPath"], mounts["policies"]["mountPath"]
    assert (tls_dir, policy_dir) == ("/etc/gpu-admission/tls", "/etc/gpu-admission/policies")
    assert flags["--cert-file"] == f"{tls_dir}/tls.crt" and flags["--key-file"] == f"{tls_dir}/tls.key"
    assert flags["--policies"] == policy_dir
    assert all(m["readOnly"] for m in (mounts["tls"], mounts["policies"]))
    assert all("subPath" not in m for m in mounts.values()), "subPath mounts never see Secret/ConfigMap updates"
    assert volumes["tls"]["secret"]["secretName"] == "gpu-admission-tls"
    assert volumes["policies"]["configMap"]["name"] == one(default, "ConfigMap")["metadata"]["name"]
    assert mounts["tmp"]["mountPath"] == "/tmp" and "emptyDir" in volumes["tmp"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": 8443, "metrics": 9090, "probes": 8080}
    assert flags["--probe-port"] == "8080"


def test_the_server_command_is_one_the_cli_accepts(
    default: list[dict[str, Any]], configmap_source: list[dict[str, Any]]
) -> None:
    from webhook.cli import serve_cmd
    from webhook.cli.main import build_parser

    (container,) = one(configmap_source, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert args.handler is serve_cmd.run
    assert (args.port, args.metrics_port, args.workers, args.dev) == (8443, 9090, 2, False)
    assert args.cert_file == "/etc/gpu-admission/tls/tls.crt" and args.policies == "/etc/gpu-admission/policies"
    (container,) = one(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert args.handler is serve_cmd.run and args.policy_source == "cluster"


def test_the_latency_histogram_reaches_past_the_webhooks_timeout(default: list[dict[str, Any]]) -> None:
    # A review close to the API server's timeout must show as such, not as "somewhere over the last bucket".
    from webhook.server.metrics import DURATION

    last_bucket = max(b for b in DURATION._upper_bounds if b != float("inf"))
    timeouts = {hook["timeoutSeconds"] for c in webhook_configurations(default) for hook in c["webhooks"]}
    assert last_bucket > max(timeouts) == 5


def test_the_pre_stop_delay_needs_only_the_images_python(default: list[dict[str, Any]]) -> None:
    # preStop.sleep needs Kubernetes 1.30 (1.29 drops it silently, older API servers refuse the Deployment).
    (container,) = one(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["lifecycle"] == {"preStop": {"exec": {"command": ["python3", "-c", "import time; time.sleep(5)"]}}}


def test_probes_use_readyz_and_healthz_on_the_probe_listener(default: list[dict[str, Any]]) -> None:
    """Plain HTTP on a port of their own (`serve --probe-port`): connections held against the webhook port
    cannot fail them."""
    (container,) = one(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8080, "scheme": "HTTP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080, "scheme": "HTTP"}


def _container_ports(objects: list[dict[str, Any]]) -> dict[str, int]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def test_the_network_policy_lets_only_the_api_server_call_and_monitoring_scrape(
    default: list[dict[str, Any]],
) -> None:
    """The webhook port from the API server's addresses (manifests/api-server/, an obvious placeholder until
    set), the metrics port from the monitoring namespace, and nothing else: the probe port is the kubelet's,
    which comes from the node."""
    policy = one(default, "NetworkPolicy")
    assert policy["spec"]["podSelector"] == {"matchLabels": APP_LABELS}
    assert one(default, "Deployment")["spec"]["template"]["metadata"]["labels"] == APP_LABELS
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    api_server, monitoring = policy["spec"]["ingress"]
    ports = _container_ports(default)
    assert api_server["ports"] == [{"port": ports["https"], "protocol": "TCP"}]
    assert monitoring["ports"] == [{"port": ports["metrics"], "protocol": "TCP"}]
    assert monitoring["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    (source,) = api_server["from"]
    assert source == {"ipBlock": {"cidr": "REPLACE-WITH-THE-API-SERVER-CIDRS"}}
    with pytest.raises(ValueError):  # so the API server refuses the policy rather than apply a guess
        ipaddress.ip_network(source["ipBlock"]["cidr"])
    service_ports = {p["targetPort"] for p in one(default, "Service")["spec"]["ports"]}
    assert service_ports == {ports["https"], ports["metrics"]}  # the probe port is not in the Service either


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_sets_the_api_server_addresses_in_one_place(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    """Each installable variant takes the addresses from manifests/api-server/api-server.yaml."""
    data = yamldocs.load((VARIANTS[variant] / "kustomization.yaml").read_text())
    assert any(Path(c).name == "api-server" for c in data.get("components", [])), variant
    assert one(rendered[variant], "NetworkPolicy") == one(rendered["default"], "NetworkPolicy")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_the_example_overlay_sets_its_own_api_server_addresses() -> None:
    objects = kubectl_kustomize(MANIFESTS / "overlays" / "custom")
    policy = one(objects, "NetworkPolicy")
    networks = [ipaddress.ip_network(s["ipBlock"]["cidr"]) for s in policy["spec"]["ingress"][0]["from"]]
    assert [str(n) for n in networks] == ["10.0.0.10/32", "10.0.0.11/32", "10.0.0.12/32"]
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": _container_ports(objects)["https"], "protocol": "TCP"}]


def test_the_disruption_budget_and_service(default: list[dict[str, Any]]) -> None:
    budget = one(default, "PodDisruptionBudget")
    # Unready replicas serve nothing: a drain may always evict them (the default would wait forever).
    assert budget["spec"] == {
        "minAvailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow", "selector": {"matchLabels": APP_LABELS},
    }  # fmt: skip
    service = one(default, "Service")
    assert service["metadata"]["name"] == "gpu-admission"
    assert service["spec"]["selector"] == APP_LABELS
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"https": (443, 8443), "metrics": (9090, 9090)}


# -------------------------------------------------------------------------------------------- the webhooks


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_every_webhook_is_strict_fast_and_calls_the_service(default: list[dict[str, Any]], kind: str) -> None:
    configuration = one(default, kind)
    service = one(default, "Service")
    mutating = kind.startswith("Mutating")
    assert len(configuration["webhooks"]) == ENTRIES[kind]
    for hook in configuration["webhooks"]:
        assert hook["name"].endswith(".gpu-admission.io")
        assert hook["admissionReviewVersions"] == ["v1"]
        # Only /validate of a Pod CREATE writes (its budget reservation), never on a dry run.
        writes = not mutating and hook["name"] == "pods.gpu-admission.io"
        assert hook["sideEffects"] == ("NoneOnDryRun" if writes else "None")
        assert hook["timeoutSeconds"] == 5
        assert hook["failurePolicy"] == "Fail"
        assert hook.get("reinvocationPolicy") == ("IfNeeded" if mutating else None)
        assert hook["clientConfig"]["service"] == {
            "name": service["metadata"]["name"],
            "namespace": service["metadata"]["namespace"],
            "path": "/mutate" if mutating else "/validate",
            "port": 443,
        }
        if not is_namespaced(hook):
            assert "namespaceSelector" not in hook  # the API server ignores it for cluster-scoped objects
            continue
        assert hook["namespaceSelector"] == {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded_namespaces()},
                {"key": "gpu-admission.io/ignore", "operator": "NotIn", "values": ["true"]},
            ]
        }


def excluded_namespaces() -> list[str]:
    (listing,) = load_documents(EXCLUDED_LIST)
    assert listing["metadata"]["annotations"] == {LOCAL_CONFIG: "true"}  # read by kustomize, never applied
    return listing["namespaces"]


def name_exclusions(objects: list[dict[str, Any]]) -> list[list[str]]:
    """Each webhook entry's `kubernetes.io/metadata.name NotIn` values, in order (ten entries)."""
    found = []
    for configuration in [o for o in objects if o["kind"].endswith("WebhookConfiguration")]:
        for hook in namespaced_hooks(configuration):
            (names,) = [
                e["values"]
                for e in hook["namespaceSelector"]["matchExpressions"]
                if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
            ]
            found.append(names)
    return found


def test_the_gpu_stacks_default_namespaces_are_in_the_one_list() -> None:
    assert excluded_namespaces() == ["kube-system", "kube-node-lease", NAMESPACE, *GPU_STACK_NAMESPACES]
    # The base holds no copy: each entry's values come from the list, through the component.
    for name in ("mutatingwebhookconfiguration.yaml", "validatingwebhookconfiguration.yaml"):
        (configuration,) = load_documents(MANIFESTS / "base" / name)
        assert name_exclusions([configuration]) == [[]] * len(namespaced_hooks(configuration))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_webhook_entry_excludes_every_listed_namespace(
    rendered: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    found = name_exclusions(rendered[variant])
    assert found == [excluded_namespaces()] * NAMESPACED_ENTRIES
    # Everything else still fails closed while no replica answers: tenants' GPU pods are refused, not let through.
    for configuration in webhook_configurations(rendered[variant]):
        assert {hook["failurePolicy"] for hook in configuration["webhooks"]} == {"Fail"}


def test_an_overlay_adds_a_namespace_to_the_list_with_one_patch(tmp_path: Path) -> None:
    """What an admin writes in an overlay of their own: a component, listed before the one that copies the list
    in, that adds to the list; every webhook entry of both configurations then excludes it."""
    root = tmp_path / "repo"
    shutil.copytree(MANIFESTS, root / "manifests")
    overlay = tmp_path / "repo" / "site"
    (overlay / "gpu-stack").mkdir(parents=True)
    (overlay / "gpu-stack" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
        "kind: Component\n"
        "patches:\n"
        "  - target: {kind: ExcludedNamespaces, name: gpu-admission-excluded-namespaces}\n"
        "    patch: |-\n"
        "      - {op: add, path: /namespaces/-, value: gpu-system}\n"
    )
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources: [../manifests/base]\n"
        "components: [../manifests/ca-bundle, gpu-stack, ../manifests/excluded-namespaces]\n"
    )
    outputs = [render(overlay)] + ([kubectl_kustomize(overlay)] if KUBECTL else [])
    for objects in outputs:
        assert name_exclusions(objects) == [[*excluded_namespaces(), "gpu-system"]] * NAMESPACED_ENTRIES
        assert not [o for o in objects if o["kind"] == "ExcludedNamespaces"]  # local-config: never applied


def _kinds_of(hook: dict[str, Any]) -> dict[str, list[str]]:
    """kind -> operations, from a webhook's rules."""
    kinds: dict[str, list[str]] = {}
    for rule in hook["rules"]:
        assert rule["apiVersions"] == ["v1"] and rule["scope"] == "Namespaced"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                kinds[RESOURCE_KINDS[(group, resource)]] = rule["operations"]
    return kinds


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_rules_cover_every_kind_the_engine_reads_with_the_right_operations(
    default: list[dict[str, Any]], kind: str
) -> None:
    covered: dict[str, list[str]] = {}
    for hook in pod_spec_hooks(one(default, kind)):
        if is_ephemeral(hook):
            (rule,) = hook["rules"]
            assert rule["operations"] == ["UPDATE"] and rule["apiGroups"] == [""], "kubectl debug is an UPDATE"
            continue
        kinds = _kinds_of(hook)
        assert not set(kinds) & set(covered), f"{hook['name']} repeats {set(kinds) & set(covered)}"
        covered.update(kinds)
    assert set(covered) == set(POD_SPEC_PATHS) | set(CLAIM_SPEC_PATHS)
    for name, operations in covered.items():
        assert operations == (["CREATE"] if name == "Pod" else ["CREATE", "UPDATE"]), name


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_each_match_condition_is_the_documented_one_for_its_kinds_pod_spec_path(
    default: list[dict[str, Any]], kind: str
) -> None:
    for hook in pod_spec_hooks(one(default, kind)):
        (condition,) = hook["matchConditions"]  # conditions are ANDed: one per webhook
        if is_claims(hook):
            (claim_kind,) = _kinds_of(hook)
            expected = claim_condition(CLAIM_SPEC_PATHS[claim_kind])
            assert condition == {"name": "asks-for-devices", "expression": expected}, hook["name"]
            continue
        assert condition["name"] == "mentions-managed-gpu"
        paths = {POD_SPEC_PATHS[k] for k in _kinds_of(hook)}
        assert len(paths) == 1, f"{hook['name']} mixes kinds whose pod specs live at {paths}"
        sections = EPHEMERAL_SECTIONS if is_ephemeral(hook) else POD_SECTIONS
        assert condition["expression"] == documented_condition(paths.pop(), sections), hook["name"]


def test_the_documented_condition_is_well_formed_and_guards_every_step() -> None:
    expression = documented_condition(("spec", "template", "spec"))
    depth = 0
    for char in re.sub(r"'[^']*'", "''", expression):
        depth += {"(": 1, ")": -1}.get(char, 0)
        assert depth >= 0
    assert depth == 0
    assert expression.startswith(
        "has(object.spec) && has(object.spec.template) && has(object.spec.template.spec) && (\n"
    )
    assert "oldObject" not in expression  # absent on CREATE; the new object is what gets admitted
    # Every indexed or iterated value is tested first.
    for guarded, use in [
        ("section in object.spec.template.spec && object.spec.template.spec[section] != null",
         "object.spec.template.spec[section].exists("),
        ("amounts in c.resources && c.resources[amounts] != null", "c.resources[amounts].exists("),
        ("has(c.env) && c.env != null", "c.env.exists("),
        ("has(c.volumeMounts) && c.volumeMounts != null", "c.volumeMounts.exists("),
        ("has(object.spec.template.spec.volumes) && object.spec.template.spec.volumes != null",
         "object.spec.template.spec.volumes.exists("),
        ("has(v.hostPath) && v.hostPath != null && has(v.hostPath.path)", "v.hostPath.path.contains("),
    ]:  # fmt: skip
        assert expression.index(guarded) < expression.index(use)


def test_the_condition_selects_exactly_the_resources_the_engine_manages() -> None:
    expression = documented_condition(("spec",))
    names = re.findall(r"'([^']+)'", re.search(r"r in \[([^\]]*)\]", expression).group(1))
    prefixes = re.findall(r"r\.startsWith\('([^']+)'\)", expression)
    env_names = re.findall(r"e\.name == '([^']+)'", expression)
    assert env_names == ["NVIDIA_VISIBLE_DEVICES"]
    samples = [
        "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb.shared",
        "nvidia.com/mig-1g.10gb.me", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe",
        "cpu", "memory", "ephemeral-storage", "nvidia.com/gpux", "nvidia.com/mig", "amd.com/cpu",
        "intel.com/gpu", "hugepages-2Mi", "example.com/nvidia.com/gpu", "nvidia.com/gpu.shared.extra",
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com", "deviceclass.resource.kubernetes.io/rdma.example.com",
        "deviceclass.kubernetes.io/gpu.nvidia.com", "resource.kubernetes.io/gpu.nvidia.com",
    ]  # fmt: skip
    for resource in samples:
        selected = resource in names or any(resource.startswith(p) for p in prefixes)
        assert selected == is_managed(resource), resource


def test_mutating_and_validating_webhooks_see_the_same_objects(default: list[dict[str, Any]]) -> None:
    mutating = one(default, "MutatingWebhookConfiguration")["webhooks"]
    validating = pod_spec_hooks(one(default, "ValidatingWebhookConfiguration"))  # custom resources: validated only
    shared = ("name", "rules", "namespaceSelector", "matchConditions", "failurePolicy", "timeoutSeconds")
    assert [{k: h[k] for k in shared} for h in mutating] == [{k: h[k] for k in shared} for h in validating]


# ------------------------------------------------------------------------------------ caBundle and overlays


def test_ca_bundle_is_an_obvious_placeholder_until_filled(default: list[dict[str, Any]]) -> None:
    for configuration in webhook_configurations(default):
        for hook in configuration["webhooks"]:
            bundle = hook["clientConfig"]["caBundle"]
            assert bundle == "REPLACE-WITH-OUTPUT-OF-gpu-webhook-certs-ca-bundle"
            with pytest.raises(ValueError):  # so the API server refuses it rather than trust nothing
                base64.b64decode(bundle, validate=True)


def _sed_is_gnu() -> bool:
    sed = shutil.which("sed")
    return bool(sed) and subprocess.run([sed, "--version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _sed_is_gnu(), reason="the documented one-liner uses GNU sed -i")
def test_the_documented_one_liner_fills_every_ca_bundle(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(MANIFESTS, root / "manifests")
    out = certs.generate_certs(tmp_path / "certs", service="gpu-admission", namespace=NAMESPACE)
    bundle_file = root / "manifests" / "ca-bundle" / "ca-bundle.yaml"
    (line,) = [x for x in bundle_file.read_text().splitlines() if x.startswith("#   sed -i")]
    command = line.removeprefix("#   ").replace("DIR", str(out.directory))
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        ["bash", "-c", command], cwd=root, capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}
    )
    assert result.returncode == 0, result.stderr
    outputs = [render(root / "manifests"), render(root / "manifests" / "overlays" / "no-match-conditions")]
    if KUBECTL:
        outputs.append(kubectl_kustomize(root / "manifests"))
    for objects in outputs:
        bundles = [h["clientConfig"]["caBundle"] for c in webhook_configurations(objects) for h in c["webhooks"]]
        assert len(bundles) == ALL_ENTRIES
        assert {base64.b64decode(b, validate=True) for b in bundles} == {out.ca_cert.read_bytes()}


def test_the_no_match_conditions_overlay_differs_only_in_what_older_clusters_lack(
    rendered: dict[str, list[dict[str, Any]]], default: list[dict[str, Any]]
) -> None:
    overlay = sorted(rendered["no-match-conditions"], key=_key)
    expected = sorted(copy.deepcopy(default), key=_key)
    for configuration in webhook_configurations(expected):
        for hook in configuration["webhooks"]:
            hook.pop("matchConditions", None)  # Kubernetes 1.28+ (GPUPolicy's entry has none)
    del one(expected, "PodDisruptionBudget")["spec"]["unhealthyPodEvictionPolicy"]  # beta from 1.27
    assert overlay == expected


def test_the_cert_manager_overlay_issues_the_mounted_secret_and_injects_the_ca(
    rendered: dict[str, list[dict[str, Any]]], default: list[dict[str, Any]]
) -> None:
    objects = rendered["cert-manager"]
    certificates = {c["metadata"]["name"]: c["spec"] for c in by_kind(objects)["Certificate"]}
    issuers = {i["metadata"]["name"]: i["spec"] for i in by_kind(objects)["Issuer"]}
    serving, ca = certificates["gpu-admission-tls"], certificates["gpu-admission-ca"]
    secret = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
    assert serving["secretName"] == secret == "gpu-admission-tls"
    assert serving["dnsNames"] == certs.service_dns_names("gpu-admission", NAMESPACE)
    assert "server auth" in serving["usages"]
    assert serving["privateKey"] == {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"}
    assert ca["isCA"] is True and issuers[ca["issuerRef"]["name"]] == {"selfSigned": {}}
    assert issuers[serving["issuerRef"]["name"]] == {"ca": {"secretName": ca["secretName"]}}
    for configuration in webhook_configurations(objects):
        annotations = configuration["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/gpu-admission-tls"}
        assert all("caBundle" not in hook["clientConfig"] for hook in configuration["webhooks"])
    # Everything else is the default's.
    others = sorted((o for o in objects if not o["apiVersion"].startswith("cert-manager.io/")), key=_key)
    expected = sorted(copy.deepcopy(default), key=_key)
    for configuration in webhook_configurations(expected):
        configuration["metadata"]["annotations"] = {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/gpu-admission-tls"}
        for hook in configuration["webhooks"]:
            del hook["clientConfig"]["caBundle"]
    assert others == expected


def test_the_service_name_matches_what_certs_generate_covers(default: list[dict[str, Any]]) -> None:
    """The API server dials NAME.NS.svc: `certs generate --service gpu-admission --namespace gpu-admission`."""
    service = one(default, "Service")["metadata"]
    expected = f"{service['name']}.{service['namespace']}.svc"
    assert expected in certs.service_dns_names("gpu-admission", NAMESPACE)


# ------------------------------------------------------------------------------------ first-day safety


def test_a_fail_closed_webhook_runs_at_system_cluster_critical_priority(default: list[dict[str, Any]]) -> None:
    pod = one(default, "Deployment")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    # Clusters that limit critical classes to namespaces with a quota naming them (limitedResources) admit it.
    quota = one(default, "ResourceQuota")
    assert quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"]["scopeSelector"] == {
        "matchExpressions": [{"operator": "In", "scopeName": "PriorityClass", "values": ["system-cluster-critical"]}]
    }
    assert int(quota["spec"]["hard"]["pods"]) >= one(default, "Deployment")["spec"]["replicas"] + 1


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_kubectl_debug_is_matched_through_the_ephemeralcontainers_subresource(
    default: list[dict[str, Any]], kind: str
) -> None:
    (hook,) = [h for h in one(default, kind)["webhooks"] if is_ephemeral(h)]
    assert hook["name"] == "ephemeralcontainers.gpu-admission.io"
    assert hook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
         "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"},
    ]  # fmt: skip
    assert hook["matchConditions"][0]["expression"] == documented_condition(("spec",), EPHEMERAL_SECTIONS)


# ------------------------------------------------------------------------------------ the monitoring overlay

MONITORING = MANIFESTS / "overlays" / "monitoring"
PROMETHEUS_OPERATOR_SCHEMAS = ROOT / "tests" / "fixtures" / "prometheus-operator"


@pytest.fixture(scope="module")
def monitoring() -> list[dict[str, Any]]:
    objects = render(MONITORING)
    if KUBECTL:
        assert sorted(kubectl_kustomize(MONITORING), key=_key) == sorted(objects, key=_key)
    return objects


def test_the_monitoring_overlay_adds_a_service_monitor_and_rules_to_the_default(
    monitoring: list[dict[str, Any]], default: list[dict[str, Any]]
) -> None:
    def added(o: dict[str, Any]) -> bool:
        dashboard = o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpu-admission-grafana-dashboard"
        return dashboard or o["apiVersion"].startswith("monitoring.coreos.com/")

    others = [o for o in monitoring if not added(o)]
    assert sorted(others, key=_key) == sorted(default, key=_key)
    assert sorted(o["kind"] for o in monitoring if o not in others) == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]


@pytest.mark.parametrize(("kind", "schema_file"), [
    ("ServiceMonitor", "servicemonitor.schema.yaml"), ("PrometheusRule", "prometheusrule.schema.yaml"),
])  # fmt: skip
def test_monitoring_objects_meet_the_prometheus_operator_crd_schemas(
    monitoring: list[dict[str, Any]], kind: str, schema_file: str
) -> None:
    import jsonschema

    schema = yamldocs.load((PROMETHEUS_OPERATOR_SCHEMAS / schema_file).read_text())
    obj = one(monitoring, kind)
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    assert obj["metadata"]["namespace"] == NAMESPACE
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in jsonschema.Draft7Validator(
        schema).iter_errors(obj)]  # fmt: skip
    assert errors == []


def test_the_service_monitor_scrapes_the_services_metrics_port(monitoring: list[dict[str, Any]]) -> None:
    service = one(monitoring, "Service")
    spec = one(monitoring, "ServiceMonitor")["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["port"] == "metrics"
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")  # the arbiter's plain-HTTP endpoint


def test_the_alerts_watch_errors_latency_certificate_expiry_and_reloads(monitoring: list[dict[str, Any]]) -> None:
    from webhook.server import metrics

    (group,) = one(monitoring, "PrometheusRule")["spec"]["groups"]
    alerts = {rule["alert"]: rule for rule in group["rules"]}
    assert set(alerts) == {
        "GPUAdmissionDown", "GPUAdmissionErrors", "GPUAdmissionSlow", "GPUAdmissionCertificateExpiresSoon",
        "GPUAdmissionCertificateExpiresVerySoon", "GPUAdmissionPolicyReloadFailed",
    }  # fmt: skip
    # Each names series the server exports (prometheus_client adds _total to counters, _bucket to histograms).
    exported = {
        f"{metrics.REVIEWS._name}_total", f"{metrics.DURATION._name}_bucket", f"{metrics.RELOADS._name}_total",
        "gpu_admission_certificate_expiry_timestamp_seconds",
    }  # fmt: skip
    used = {name for rule in alerts.values() for name in re.findall(r"gpu_admission_[a-z_]+", rule["expr"])}
    assert used == exported
    assert 'decision="error"' in alerts["GPUAdmissionErrors"]["expr"]
    assert 'result="error"' in alerts["GPUAdmissionPolicyReloadFailed"]["expr"]
    timeout = max(h["timeoutSeconds"] for c in webhook_configurations(monitoring) for h in c["webhooks"])
    assert float(alerts["GPUAdmissionSlow"]["expr"].rsplit(">", 1)[1]) < timeout
    for rule in alerts.values():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


# ------------------------------------------------------------------------------------ customising: an overlay

CUSTOM = MANIFESTS / "overlays" / "custom"


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_the_example_overlay_patches_the_default_policy_adds_one_and_sets_the_image(
    default: list[dict[str, Any]],
) -> None:
    """The example overlay installs the GPUPolicy source: its default.yaml patches the shipped default policy (the
    fields it writes replace the shipped ones) and its notebooks.yaml is one more GPUPolicy object."""
    from webhook.admission.policy.objects import judge_objects

    objects = kubectl_kustomize(CUSTOM)
    policies = sorted((o for o in objects if o["kind"] == "GPUPolicy"), key=lambda o: o["metadata"]["name"])
    written = {p.name: yamldocs.load(p.read_text()) for p in sorted((CUSTOM / "policies").glob("*.yaml"))}
    shipped = next(o for o in default if o["kind"] == "GPUPolicy")
    assert shipped["spec"]["enforcement"] == "audit"
    assert policies == [
        {**shipped, "spec": {**shipped["spec"], **written["default.yaml"]["spec"]}},
        written["notebooks.yaml"],
    ]
    assert policies[0]["spec"]["enforcement"] == "warn"
    judged = judge_objects(policies)
    assert all(verdict.ready for verdict in judged.verdicts.values()), judged.verdicts
    assert [p.name for p in judged.policies.policies] == ["default", "notebooks-time-slicing"]
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/platform/gpu-admission:0.1.0"
    # Nothing else differs from manifests/ (which installs the GPUPolicy source too).
    expected = [copy.deepcopy(o) for o in default if o["kind"] != "GPUPolicy"] + policies
    one(expected, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] = container["image"]
    addresses = one(objects, "NetworkPolicy")["spec"]["ingress"][0]["from"]  # the API server's: its own
    one(expected, "NetworkPolicy")["spec"]["ingress"][0]["from"] = addresses
    # Its more-excluded-namespaces/ component adds gpu-system to the namespaces never sent to the webhook.
    for configuration in webhook_configurations(expected):
        for hook in namespaced_hooks(configuration):
            hook["namespaceSelector"]["matchExpressions"][0]["values"].append("gpu-system")
    assert sorted(objects, key=_key) == sorted(expected, key=_key)


# ------------------------------------------------------------------------------------ matchConditions, evaluated


def _cel(expression: str, obj: dict[str, Any]) -> Any:
    import cel  # common-expression-language: cel-go's semantics, heterogeneous equality included

    return cel.evaluate(expression, {"object": obj})


def _at(path: tuple[str, ...], spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "x"}}
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = spec
    return obj


GPU_LIMIT = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
# Pod specs, and whether an object with that spec mentions a managed GPU (the engine's mentions_gpu agrees).
CONDITION_CASES = [
    ({"containers": [{"name": "a", **GPU_LIMIT}]}, True),
    ({"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]}, True),
    ({"initContainers": [{"name": "a", "resources": {"limits": {"gpu.intel.com/i915": "1"}}}], "containers": []}, True),
    ({"containers": [{"name": "a", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}, True),
    # KEP-5004: a DeviceClass asked for as an extended resource (DRA serves it).
    (
        {
            "containers": [
                {"name": "a", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 2}}}
            ]
        },
        True,
    ),
    ({"containers": [{"name": "a", "envFrom": [{"prefix": "NVIDIA_", "configMapRef": {"name": "c"}}]}]}, True),
    ({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "example.com/gpu": "1"}}}]}, False),
    ({"containers": [{"name": "a", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}]}, False),
    ({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "c"}}]}]}, False),
    # The container toolkit's device list, and hostPaths that may hold the node's device nodes.
    (
        {
            "containers": [
                {"name": "a", "volumeMounts": [{"name": "d", "mountPath": "/run/nvidia-container-devices/0"}]}
            ]
        },
        True,
    ),
    ({"containers": [{"name": "a"}], "volumes": [{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]}, True),
    ({"containers": [{"name": "a"}], "volumes": [{"name": "d", "hostPath": {"path": "//./dev"}}]}, True),
    (
        {
            "containers": [{"name": "a", "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
            "volumes": [{"name": "d", "hostPath": {"path": "/var/lib/data"}}, {"name": "e", "emptyDir": {}}],
        },
        False,
    ),
    ({"containers": [{"name": "a", "volumeMounts": None}], "volumes": None}, False),
    ({"containers": [{"name": "a"}], "volumes": [{"name": "d", "hostPath": None}]}, False),
    # Missing and null fields at every step: false, never an error (an error under failurePolicy Fail rejects).
    ({}, False),
    ({"containers": None, "initContainers": None}, False),
    ({"containers": [{"name": "a"}]}, False),
    # (resources is a struct in k8s.io/api core/v1 Container, never null in what the API server sends; env
    # and envFrom are slices, guarded against null all the same.)
    ({"containers": [{"name": "a", "resources": {}, "env": None, "envFrom": None}]}, False),
    ({"containers": [{"name": "a", "resources": {"limits": None, "requests": {}}}]}, False),
]


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
@pytest.mark.parametrize(("spec", "selected"), CONDITION_CASES)
def test_match_conditions_select_what_the_engine_would_judge(
    default: list[dict[str, Any]], kind: str, spec: dict[str, Any], selected: bool
) -> None:
    from webhook.admission.base.podspec import mentions_gpu

    for hook in pod_spec_hooks(one(default, kind)):
        if is_ephemeral(hook) or is_claims(hook):
            continue
        (condition,) = hook["matchConditions"]
        (path,) = {POD_SPEC_PATHS[k] for k in _kinds_of(hook)}
        obj = _at(path, copy.deepcopy(spec))
        assert _cel(condition["expression"], obj) is selected, hook["name"]
        assert mentions_gpu(obj, path) is selected or spec.get("containers") is None, "the engine's twin differs"
    # An object without the pod spec's parents at all is not selected either.
    for hook in namespaced_hooks(one(default, kind)):
        assert _cel(hook["matchConditions"][0]["expression"], {"metadata": {"name": "x"}}) is False


@pytest.mark.parametrize(
    ("spec", "selected"),
    [
        ({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}, True),
        ({"devices": {"requests": []}}, False),  # a claim for no device
        ({"devices": {"requests": None}}, False),
        ({"devices": {}}, False),
        ({}, False),
    ],
)
def test_the_claim_conditions_select_claims_and_templates_that_ask_for_devices(
    default: list[dict[str, Any]], spec: dict[str, Any], selected: bool
) -> None:
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        hooks = [h for h in one(default, kind)["webhooks"] if is_claims(h)]
        names = ["resourceclaims.gpu-admission.io", "resourceclaimtemplates.gpu-admission.io"]
        assert [h["name"] for h in hooks] == names
        claim, template = ({"metadata": {"name": "x"}, "spec": copy.deepcopy(spec)},
                           {"metadata": {"name": "x"}, "spec": {"spec": copy.deepcopy(spec)}})  # fmt: skip
        for hook, obj in zip(hooks, (claim, template), strict=True):
            assert _cel(hook["matchConditions"][0]["expression"], obj) is selected, hook["name"]
            assert _cel(hook["matchConditions"][0]["expression"], {"metadata": {"name": "x"}}) is False


@pytest.mark.parametrize(
    ("ephemeral", "selected"),
    [
        ([{"name": "debugger", "image": "busybox"}], False),
        ([{"name": "debugger", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}], True),
        ([{"name": "debugger", "envFrom": [{"prefix": "NVIDIA_VISIBLE_", "secretRef": {"name": "s"}}]}], True),
        (None, False),
    ],
)
def test_the_ephemeral_containers_condition_selects_debug_containers_that_can_reach_gpus(
    default: list[dict[str, Any]], ephemeral: Any, selected: bool
) -> None:
    pod = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "a", **GPU_LIMIT}]}}
    if ephemeral is not None:
        pod["spec"]["ephemeralContainers"] = ephemeral
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = [h for h in one(default, kind)["webhooks"] if is_ephemeral(h)]
        assert _cel(hook["matchConditions"][0]["expression"], pod) is selected


def test_the_webhook_configurations_and_nothing_else_are_labelled_to_apply_last(
    default: list[dict[str, Any]],
) -> None:
    """Install: `kubectl apply -k manifests/ -l 'gpu-admission.io/apply-last!=true'`, wait for the rollout, then
    `-l gpu-admission.io/apply-last=true`; uninstall in the reverse order. A selector `!=` also matches objects
    without the label, so the two selectors split the objects in two."""
    last = [o["kind"] for o in default if o["metadata"].get("labels", {}).get("gpu-admission.io/apply-last") == "true"]
    assert sorted(last) == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    labelled = [o for o in default if "gpu-admission.io/apply-last" in o["metadata"].get("labels", {})]
    assert len(labelled) == 2


# ------------------------------------------------------------------------------------ who may opt a namespace out

OPT_OUT_GROUP = "gpu-admission:namespace-opt-out"


def _namespace(labels: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "team-a"}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def _admission_policy_verdict(
    policy: dict[str, Any], operation: str, new: dict[str, Any], old: dict[str, Any] | None, groups: list[str] | None
) -> tuple[bool, str]:
    """What the API server does with a ValidatingAdmissionPolicy: its variables in order (each may read the
    ones before), then each validation; the first false one denies with its message."""
    user: dict[str, Any] = {"username": "someone"}
    if groups is not None:
        user["groups"] = groups
    context: dict[str, Any] = {
        "object": new, "oldObject": old, "request": {"operation": operation, "userInfo": user}, "variables": {},
    }  # fmt: skip
    import cel

    for variable in policy["spec"]["variables"]:
        context["variables"][variable["name"]] = cel.evaluate(variable["expression"], context)
    for validation in policy["spec"]["validations"]:
        if cel.evaluate(validation["expression"], context) is not True:
            return False, cel.evaluate(validation["messageExpression"], context)
    return True, ""


OPT_OUT_MESSAGE = (
    "the label gpu-admission.io/ignore takes a namespace out of the GPU admission webhooks: only members of the "
    f"group {OPT_OUT_GROUP} may set, change or remove it; ask a cluster admin"
)
IGNORED = {"gpu-admission.io/ignore": "true"}


@pytest.mark.parametrize(
    ("operation", "old", "new", "groups", "allowed"),
    [
        ("CREATE", None, None, ["system:authenticated"], True),
        ("CREATE", None, {"team": "a"}, None, True),
        ("CREATE", None, IGNORED, ["system:authenticated"], False),
        ("CREATE", None, IGNORED, None, False),
        ("CREATE", None, IGNORED, [OPT_OUT_GROUP], True),
        ("UPDATE", {"team": "a"}, {"team": "b"}, ["system:authenticated"], True),
        ("UPDATE", None, IGNORED, ["system:authenticated"], False),
        ("UPDATE", {"gpu-admission.io/ignore": "false"}, IGNORED, ["system:masters"], False),
        ("UPDATE", IGNORED, {}, ["system:authenticated"], False),
        ("UPDATE", IGNORED, None, ["system:authenticated"], False),
        ("UPDATE", IGNORED, {**IGNORED, "team": "a"}, ["system:authenticated"], True),
        ("UPDATE", None, IGNORED, ["system:authenticated", OPT_OUT_GROUP], True),
        ("UPDATE", IGNORED, {}, [OPT_OUT_GROUP], True),
    ],
)
def test_only_the_named_group_may_set_change_or_remove_the_opt_out_label(
    default: list[dict[str, Any]], operation: str, old: Any, new: Any, groups: Any, allowed: bool
) -> None:
    policy = one(default, "ValidatingAdmissionPolicy")
    verdict = _admission_policy_verdict(
        policy, operation, _namespace(new), _namespace(old) if operation == "UPDATE" else None, groups
    )
    assert verdict == ((True, "") if allowed else (False, OPT_OUT_MESSAGE))


def test_the_opt_out_guard_matches_namespaces_and_its_binding_denies(default: list[dict[str, Any]]) -> None:
    policy = one(default, "ValidatingAdmissionPolicy")
    binding = one(default, "ValidatingAdmissionPolicyBinding")
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["namespaces"]}
    ]
    assert policy["spec"]["variables"][0] == {"name": "allowedGroup", "expression": f"'{OPT_OUT_GROUP}'"}
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    # The label it guards is the one the webhooks skip.
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in namespaced_hooks(one(default, kind)):
            keys = [e["key"] for e in hook["namespaceSelector"]["matchExpressions"]]
            assert "gpu-admission.io/ignore" in keys
