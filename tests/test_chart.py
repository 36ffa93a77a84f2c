"""The Helm chart (charts/gpu-admission/): linted and rendered by a real helm, and held equal to the kustomize
manifests, so that the two install paths never drift apart.

helm and kubectl come from tests/k8s_tools.py (`make test` unpacks both); where either is missing, these tests
skip and say so.
"""

from __future__ import annotations

import base64
import datetime
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests import k8s_tools, yamldocs
from webhook.admission.policy.loader import parse_policy_sources

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "gpu-admission"
MANIFESTS = ROOT / "manifests"
HELM = k8s_tools.binary("helm")
KUBECTL = k8s_tools.binary("kubectl")
NAMESPACE = "gpu-admission"

pytestmark = pytest.mark.skipif(
    HELM is None or KUBECTL is None,
    reason=f"helm or kubectl not found ({k8s_tools.SKIP_HINT})",
)

Key = tuple[str, str]
# The one value without a default (the API server's addresses), set to the kustomize base's placeholder.
REQUIRED = ("networkPolicy.apiServerCIDRs={REPLACE-WITH-THE-API-SERVER-CIDRS}",)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)


def render(*values: str, namespace: str = NAMESPACE, files: tuple[str, ...] = ()) -> dict[Key, dict[str, Any]]:
    """`helm template` with `--set` values (and `--set-file` ones), as objects by (kind, name), the CRD in crds/
    included (Helm installs it before the rest on the first install)."""
    flags = [arg for value in (*REQUIRED, *values) for arg in ("--set", value)]
    flags += [arg for value in files for arg in ("--set-file", value)]
    run = helm("template", "gpu-admission", str(CHART), "--namespace", namespace, "--include-crds", *flags)
    assert run.returncode == 0, run.stderr
    return by_key(yamldocs.load_all(run.stdout))


def kustomize(directory: Path) -> dict[Key, dict[str, Any]]:
    assert KUBECTL is not None
    run = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return by_key(yamldocs.load_all(run.stdout))


def by_key(documents: Any) -> dict[Key, dict[str, Any]]:
    objects = {}
    for document in documents:
        if document:
            key = (document["kind"], document["metadata"]["name"])
            assert key not in objects, f"{key} rendered twice"
            objects[key] = document
    return objects


def test_helm_lint_passes_with_the_default_and_with_custom_values(tmp_path: Path) -> None:
    custom = tmp_path / "values.yaml"
    custom.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": "registry.example.com/platform/gpu-admission", "tag": "0.1.0"},
                "replicas": 2,
                "certificates": {"source": "certManager", "secretName": "gpu-admission-tls"},
                "monitoring": {
                    "serviceMonitor": {"enabled": True},
                    "prometheusRule": {"enabled": True},
                    "dashboard": {"enabled": True, "annotations": {"grafana_folder": "GPU"}},
                },
                "excludedNamespaces": ["kube-system", "kube-node-lease", "gpu-operator"],
            }
        )
    )
    for extra in ([], ["--values", str(custom)]):
        run = helm("lint", "--strict", str(CHART), "--set", REQUIRED[0], *extra)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in run.stdout


def base_with_its_lists(
    tmp_path: Path, *, cluster_source: bool = True, native: bool = False
) -> dict[Key, dict[str, Any]]:
    """manifests/base with the two lists every variant copies in (the excluded namespaces, the API server's
    addresses), and without caBundle, which the chart leaves out by default; with the policies as GPUPolicy
    objects (manifests/policy-source-cluster/) or as files in a ConfigMap; with the native policies
    (manifests/native-policies/) if asked."""
    components = ["api-server", "excluded-namespaces"]
    if cluster_source:
        components.insert(0, "policy-source-cluster")
    if native:
        components.append("native-policies")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(MANIFESTS / "base", tmp_path)],
                "components": [os.path.relpath(MANIFESTS / name, tmp_path) for name in components],
            }
        )
    )
    return kustomize(tmp_path)


def test_the_default_render_is_the_kustomize_base_but_for_the_namespace(tmp_path: Path) -> None:
    """`helm install --namespace` needs the namespace first, so the chart makes it only when asked. The API
    server's addresses have no default in either (REQUIRED sets the base's placeholder)."""
    base = base_with_its_lists(tmp_path)
    namespace = base.pop(("Namespace", NAMESPACE))
    assert render() == base
    assert render("namespace.create=true") == {**base, ("Namespace", NAMESPACE): namespace}
    assert {key for key in base if key[0] in ("CustomResourceDefinition", "GPUPolicy", "ConfigMap")} == {
        ("CustomResourceDefinition", "gpupolicies.gpu-admission.io"), ("GPUPolicy", "default"),
    }  # fmt: skip


def test_the_configmap_source_renders_the_kustomize_base_without_the_cluster_source(tmp_path: Path) -> None:
    """policySource configmap: the policies as files in a ConfigMap, mounted, as manifests/overlays/custom/ keeps
    them; the CRD still ships in crds/ (Helm never deletes a chart's CRDs), and no GPUPolicy object."""
    base = base_with_its_lists(tmp_path, cluster_source=False)
    base.pop(("Namespace", NAMESPACE))
    rendered = render("policySource=configmap")
    crd = rendered.pop(("CustomResourceDefinition", "gpupolicies.gpu-admission.io"))
    assert crd == yamldocs.load((MANIFESTS / "policy-source-cluster" / "gpupolicies.yaml").read_text())
    assert rendered == base


def test_native_policies_render_the_kustomize_component_beside_the_base(tmp_path: Path) -> None:
    """nativePolicies.enabled renders the base with the component manifests/native-policies/ (both from one
    generated file); off by default, so the default render above has none of them. The component also builds
    alone (the native set without the webhook)."""
    base = base_with_its_lists(tmp_path, native=True)
    base.pop(("Namespace", NAMESPACE))
    native = kustomize(MANIFESTS / "native-policies")
    assert sorted(kind for kind, _ in native) == sorted(
        ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy",
         "ValidatingAdmissionPolicyBinding"] * 2
    )  # fmt: skip
    assert native.items() <= base.items()
    assert render("nativePolicies.enabled=true") == base


def test_native_policies_stop_the_install_under_policies_of_your_own(tmp_path: Path) -> None:
    """The shipped set is the shipped default's: beside other policies it would hold namespaces to a policy the
    webhook does not serve."""
    own = tmp_path / "team.yaml"
    own.write_text((CHART / "files" / "default.yaml").read_text())
    run = helm(
        "template", "gpu-admission", str(CHART), "--set", REQUIRED[0], "--set", "nativePolicies.enabled=true",
        "--set-file", f"policies.team\\.yaml={own}",
    )  # fmt: skip
    assert run.returncode != 0
    assert "render yours (gpu-webhook policy render native --policies DIR > native.yaml)" in run.stderr, run.stderr


def test_under_the_cluster_source_each_policy_document_becomes_a_gpupolicy_object() -> None:
    """The `policies` map works for both sources: as objects, each document of each value as written."""
    from webhook.admission.policy.objects import judge_objects

    examples = ROOT / "examples" / "policies"
    rendered = render(files=(f"policies.a\\.yaml={ROOT / 'policies' / 'default.yaml'}",
                             f"policies.b\\.yaml={examples / 'time-slicing.yaml'}"))  # fmt: skip
    objects = [obj for key, obj in rendered.items() if key[0] == "GPUPolicy"]
    expected = [*yamldocs.load_all((ROOT / "policies" / "default.yaml").read_text()),
                *yamldocs.load_all((examples / "time-slicing.yaml").read_text())]  # fmt: skip
    assert sorted(objects, key=lambda o: o["metadata"]["name"]) == sorted(
        [doc for doc in expected if doc], key=lambda o: o["metadata"]["name"]
    )
    judged = judge_objects(objects)
    assert all(verdict.ready for verdict in judged.verdicts.values()), judged.verdicts
    assert ("ConfigMap", "gpu-admission-policies") not in rendered


def test_the_cluster_source_needs_the_charts_rbac() -> None:
    run = helm("template", "gpu-admission", str(CHART), "--set", REQUIRED[0], "--set", "clusterChecks.rbac=false")
    assert run.returncode != 0
    assert "policySource cluster: the server lists and watches GPUPolicy objects" in run.stderr


def test_cert_manager_renders_the_cert_manager_overlay() -> None:
    overlay = kustomize(MANIFESTS / "overlays" / "cert-manager")
    overlay.pop(("Namespace", NAMESPACE))
    assert render("certificates.source=certManager") == overlay


def test_monitoring_renders_the_monitoring_overlays_objects_with_the_labels_asked_for() -> None:
    overlay = kustomize(MANIFESTS / "overlays" / "monitoring")
    dashboard = ("ConfigMap", "gpu-admission-grafana-dashboard")
    monitoring = {
        key: value
        for key, value in overlay.items()
        if key[0] in ("ServiceMonitor", "PrometheusRule") or key == dashboard
    }
    assert len(monitoring) == 3
    assert dashboard not in render(), "the dashboard is off by default"
    enabled = ("monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true",
               "monitoring.dashboard.enabled=true")  # fmt: skip
    rendered = render(*enabled)
    assert {key: rendered[key] for key in monitoring} == monitoring
    labelled = render(
        *enabled, "monitoring.serviceMonitor.labels.release=prometheus",
        "monitoring.prometheusRule.labels.release=prometheus", "monitoring.dashboard.labels.release=prometheus",
    )  # fmt: skip
    for key in monitoring:
        assert labelled[key]["metadata"]["labels"] == {**monitoring[key]["metadata"]["labels"], "release": "prometheus"}


def test_the_dashboard_goes_where_grafanas_sidecar_looks_with_the_annotations_asked_for() -> None:
    key = ("ConfigMap", "gpu-admission-grafana-dashboard")
    rendered = render(
        "monitoring.dashboard.enabled=true", "monitoring.dashboard.namespace=monitoring",
        "monitoring.dashboard.annotations.grafana_folder=GPU",
    )  # fmt: skip
    metadata = rendered[key]["metadata"]
    assert metadata["namespace"] == "monitoring"
    assert metadata["annotations"] == {"grafana_folder": "GPU"}
    assert metadata["labels"]["grafana_dashboard"] == "1"


def test_without_match_conditions_the_webhooks_are_the_older_clusters_overlays() -> None:
    overlay = kustomize(MANIFESTS / "overlays" / "no-match-conditions")
    rendered = render("webhooks.matchConditions=false")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhooks = overlay[(kind, "gpu-admission")]["webhooks"]
        for webhook in webhooks:
            webhook["clientConfig"].pop("caBundle")  # the overlay's placeholder; the chart's default has none
        assert rendered[(kind, "gpu-admission")]["webhooks"] == webhooks


def test_values_reach_every_place_that_must_agree() -> None:
    notebooks_file = ROOT / "examples" / "policies" / "time-slicing.yaml"
    default_file = ROOT / "policies" / "default.yaml"
    notebooks, default = notebooks_file.read_text(), default_file.read_text()
    rendered = render(
        "image.repository=registry.example.com/gpu-admission", "image.tag=9.9.9", "replicas=5", "workers=4",
        "excludedNamespaces={kube-system,kube-node-lease,gpu-operator}", "certificates.caBundle=Q0E=",
        "certificates.secretName=my-tls", "webhooks.timeoutSeconds=3", "priorityClassName=",
        "clusterChecks.rbac=false", "policySource=configmap",
        namespace="platform",
        files=(f"policies.notebooks\\.yaml={notebooks_file}", f"policies.default\\.yaml={default_file}"),
    )  # fmt: skip
    deployment = rendered[("Deployment", "gpu-admission")]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["metadata"]["namespace"] == "platform"
    assert deployment["spec"]["replicas"] == 5
    assert container["image"] == "registry.example.com/gpu-admission:9.9.9"
    assert container["command"][container["command"].index("--workers") + 1] == "4"
    assert pod["volumes"][0]["secret"]["secretName"] == "my-tls"
    assert "priorityClassName" not in pod and ("ResourceQuota", "gpu-admission-critical-pods") not in rendered
    assert pod["automountServiceAccountToken"] is False and ("ClusterRole", "gpu-admission-nodes") not in rendered
    assert ("ClusterRole", "gpu-admission-policy-editor") in rendered  # bound to nobody: always there to bind
    # The policies ConfigMap holds the files as given, and they load as policies.
    data = rendered[("ConfigMap", "gpu-admission-policies")]["data"]
    assert data == {"notebooks.yaml": notebooks, "default.yaml": default}
    assert {policy.name for policy in parse_policy_sources(data).policies} >= {"default", "notebooks-time-slicing"}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in rendered[(kind, "gpu-admission")]["webhooks"]:
            assert webhook["clientConfig"]["service"] == {
                "name": "gpu-admission", "namespace": "platform", "path": webhook["clientConfig"]["service"]["path"],
                "port": 443,
            }  # fmt: skip
            assert webhook["clientConfig"]["caBundle"] == "Q0E="
            assert webhook["timeoutSeconds"] == 3
            if webhook["rules"][0]["scope"] == "Cluster":
                continue  # GPUPolicy objects: no namespace to select
            (names, ignore) = webhook["namespaceSelector"]["matchExpressions"]
            assert names["values"] == ["kube-system", "kube-node-lease", "gpu-operator", "platform"]  # platform's own
            assert ignore == {"key": "gpu-admission.io/ignore", "operator": "NotIn", "values": ["true"]}


def test_without_the_api_servers_addresses_the_install_stops_with_a_line_saying_where_to_find_them() -> None:
    run = helm("template", "gpu-admission", str(CHART))
    assert run.returncode == 1
    assert "networkPolicy.apiServerCIDRs: list the addresses the API server calls the webhook from" in run.stderr
    three = render("networkPolicy.apiServerCIDRs={10.0.0.10/32,10.0.0.11/32,10.0.0.12/32}")
    overlay = kustomize(MANIFESTS / "overlays" / "custom")  # the example overlay lists the same three
    assert three[("NetworkPolicy", "gpu-admission")] == overlay[("NetworkPolicy", "gpu-admission")]
    assert ("NetworkPolicy", "gpu-admission") not in render("networkPolicy.enabled=false")


def test_an_ordered_install_registers_no_webhook_until_asked() -> None:
    rendered = render("webhooks.register=false")
    assert not [key for key in rendered if key[0].endswith("WebhookConfiguration")]
    assert ("Deployment", "gpu-admission") in rendered


def test_generated_certificates_serve_the_service_name_and_are_signed_by_the_ca_bundle() -> None:
    rendered = render("certificates.source=generate", "certificates.generate.days=30", namespace="platform")
    secret = rendered[("Secret", "gpu-admission-tls")]
    assert secret["type"] == "kubernetes.io/tls"
    certificate = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    authority = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpu-admission.platform.svc" in names.get_values_for_type(x509.DNSName)
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert datetime.timedelta(days=29) < lifetime <= datetime.timedelta(days=31)
    public_key = authority.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    assert certificate.signature_hash_algorithm is not None
    signed = certificate.tbs_certificate_bytes
    public_key.verify(certificate.signature, signed, padding.PKCS1v15(), certificate.signature_hash_algorithm)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in rendered[(kind, "gpu-admission")]["webhooks"]:
            assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("certificates.source=vault", "value must be one of 'secret', 'certManager', 'generate'"),
        ("policySource=files", "value must be one of 'cluster', 'configmap'"),
        ("excludedNamespaces={gpu-operator}", "at '/excludedNamespaces'"),
        ("policies.notes\\.txt=x", "'notes.txt' does not match pattern"),
        ("replicas=0", "at '/replicas'"),
        ("webhooks.timeoutSeconds=60", "at '/webhooks/timeoutSeconds'"),
        ("imge.tag=1", "additional properties 'imge' not allowed"),
    ],
)
def test_the_values_schema_refuses_what_would_break_the_install(value: str, message: str) -> None:
    run = helm("template", "gpu-admission", str(CHART), "--set", REQUIRED[0], "--set", value)
    assert run.returncode != 0
    assert message in run.stderr, run.stderr


def test_the_charts_default_policy_is_the_manifests_first_day_copy() -> None:
    """Both are written by `make manifests` (manifests/sync-policies.sh)."""
    shipped = (MANIFESTS / "base" / "policies" / "default.yaml").read_text()
    assert (CHART / "files" / "default.yaml").read_text() == shipped


def test_the_opt_out_guard_names_the_group_asked_for_or_is_left_out() -> None:
    rendered = render("ignoreLabelGuard.allowedGroup=platform-admins")
    guard = rendered[("ValidatingAdmissionPolicy", "gpu-admission-ignore-label")]
    assert guard["spec"]["variables"][0] == {"name": "allowedGroup", "expression": "'platform-admins'"}
    left_out = render("ignoreLabelGuard.enabled=false")
    assert not [key for key in left_out if key[0].startswith("ValidatingAdmissionPolicy")]


def test_a_real_api_server_takes_the_two_step_install_an_upgrade_and_the_uninstall(
    kube_apiserver: Any, tmp_path: Path
) -> None:
    """The README's Helm install on kube-apiserver v1.36 (no kubelet: the replicas never start, so no --wait):
    nothing registered in the first step, both configurations in the second (the API server compiles their CEL
    and the guard's), the generated certificate kept by the upgrade, and nothing left after the uninstall."""
    namespace = "chart-install"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    assert kube_apiserver.request("POST", "/api/v1/namespaces", body).status_code == 201
    common = ["--namespace", namespace, "--kubeconfig", str(kube_apiserver.kubeconfig)]
    unvalidated = "--disable-openapi-validation"  # this API server build cannot serve OpenAPI v2 as protobuf
    install = helm(
        "install", "gpu-admission", str(CHART), *common, unvalidated,
        "--set", "networkPolicy.apiServerCIDRs={10.0.0.10/32}",
        "--set", "certificates.source=generate", "--set", "webhooks.register=false",
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    hooks = "/apis/admissionregistration.k8s.io/v1/{}/gpu-admission"
    kinds = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    assert [kube_apiserver.request("GET", hooks.format(kind)).status_code for kind in kinds] == [404, 404]
    secret = f"/api/v1/namespaces/{namespace}/secrets/gpu-admission-tls"
    certificate = kube_apiserver.request("GET", secret).json()["data"]["tls.crt"]

    register = ("--reuse-values", "--set", "webhooks.register=true")
    upgrade = helm("upgrade", "gpu-admission", str(CHART), *common, unvalidated, *register)
    assert upgrade.returncode == 0, upgrade.stderr
    from webhook.admission.customresources import BUILTIN_KINDS

    for kind in kinds:
        configuration = kube_apiserver.request("GET", hooks.format(kind)).json()
        # 5 pod-spec places, claims, claim templates; and the custom resources and GPUPolicy, validated only.
        custom = len(BUILTIN_KINDS) + 1 if kind.startswith("validating") else 0
        assert len(configuration["webhooks"]) == 7 + custom
        assert {hook["clientConfig"]["service"]["namespace"] for hook in configuration["webhooks"]} == {namespace}
    assert kube_apiserver.request("GET", secret).json()["data"]["tls.crt"] == certificate  # kept (lookup)

    uninstall = helm("uninstall", "gpu-admission", *common)
    assert uninstall.returncode == 0, uninstall.stderr
    assert [kube_apiserver.request("GET", hooks.format(kind)).status_code for kind in kinds] == [404, 404]
    deployment = f"/apis/apps/v1/namespaces/{namespace}/deployments/gpu-admission"
    assert kube_apiserver.request("GET", deployment).status_code == 404
