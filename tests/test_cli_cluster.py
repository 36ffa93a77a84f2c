"""The CLI against a cluster's nodes (tests/fake_kube_api.py): `check --cluster`, `policy lint --cluster` and
`audit` print the cluster checks' lines and the policy drift as a table a person can act on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests import gfd_cluster
from tests.fake_kube_api import FakeKubeAPI, loopback_cluster
from tests.test_cli_audit import gpu_webhook
from tests.test_clustercheck import A100, node
from tests.test_server_cluster import POLICY, SLICED

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "big", "namespace": "train"},
    "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "12"}}}]},
}


@pytest.fixture
def setup(tmp_path: Path):
    nodes = [node("gpu-a", {"nvidia.com/gpu": "8"}, A100)]
    nodes += [node(name, {"nvidia.com/gpu.shared": "32"}, SLICED) for name in ("ts-a", "ts-b", "ts-c", "ts-d")]
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    namespaces = ["default", "train", "notebooks"]
    with loopback_cluster(tmp_path, namespaces=namespaces, nodes=nodes, policies={"p.yaml": POLICY}) as cluster:
        yield cluster.api, cluster.kubeconfig, str(cluster.policies), str(manifest)


NAMESPACES_MATCH = "every namespace entry of the policies matches a namespace of the cluster ({} namespaces read)"
DRIFT_TABLE = [
    "POLICY  FIELD             POLICY SAYS  NODES SAY  NODES                            FIX",
    "shared  sharing.replicas  4            8          4 nodes (ts-a, ts-b, ts-c, ...)  set sharing.replicas: 8 (or "
    "auto), or change the device plugin's sharing config",
    "policy drift: 1 disagreement in 1 policy (5 nodes read); until fixed, memory fractions and MIG conversions are "
    "wrong for the pods on those nodes",
]


def test_check_is_offline_by_default_and_runs_the_cluster_checks_with_cluster(setup):
    api, kubeconfig, policies, manifest = setup
    offline = gpu_webhook("check", "--policies", policies, manifest)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert api.list_requests("nodes") == []
    online = gpu_webhook("check", "--cluster", "--kubeconfig", kubeconfig, "--policies", policies, manifest)
    assert online.returncode == 1
    assert (
        'container "main": nvidia.com/gpu "12" fits on no node: the most one node holds is 8 (node "gpu-a"); '
        'request at most 8, or list a larger node pool in cluster.assumeNodes (policy "training", cluster.fits)'
    ) in online.stdout
    misuse = gpu_webhook("check", "--kubeconfig", kubeconfig, "--policies", policies, manifest)
    assert (misuse.returncode, misuse.stderr) == (
        2,
        "gpu-webhook check: --kubeconfig and --context only apply with --cluster or --from-cluster\n",
    )


def test_policy_lint_cluster_prints_the_drift_table_and_exits_1(setup):
    _, kubeconfig, policies, _ = setup
    run = gpu_webhook("policy", "lint", policies, "--cluster", "--kubeconfig", kubeconfig)
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[-4:] == [*DRIFT_TABLE, NAMESPACES_MATCH.format(3)]


def test_policy_lint_cluster_without_drift_says_so(setup, tmp_path):
    _, kubeconfig, _, _ = setup
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "p.yaml").write_text(POLICY.replace("replicas: 4", "replicas: 8"))
    run = gpu_webhook("policy", "lint", str(clean), "--cluster", "--kubeconfig", kubeconfig)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-2:] == [
        "no policy drift: every policy agrees with the nodes its pods can land on (5 nodes read)",
        NAMESPACES_MATCH.format(3),
    ]


def test_audit_prints_the_drift_under_its_report(setup):
    _, kubeconfig, policies, _ = setup
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", policies)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-3:] == DRIFT_TABLE


# --- A mixed cluster, labelled as GPU feature discovery labels it (tests/gfd_cluster.py) --------------------


@pytest.fixture
def mixed(tmp_path: Path):
    """The fake API holding the mixed cluster's nodes and namespaces; the directory of its policies."""
    with loopback_cluster(tmp_path, namespaces=gfd_cluster.NAMESPACES, nodes=gfd_cluster.nodes(),
                          policies={"cluster.yaml": gfd_cluster.POLICIES}) as cluster:  # fmt: skip
        yield cluster.api, cluster.kubeconfig, cluster.policies


def lint(policies: Path, kubeconfig: str, *extra: str):
    return gpu_webhook("policy", "lint", "--policies", str(policies), "--cluster", "--kubeconfig", kubeconfig, *extra)


def test_policy_lint_cluster_finds_no_drift_in_a_correct_mixed_cluster(mixed):
    _, kubeconfig, policies = mixed
    run = lint(policies, kubeconfig)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.splitlines()[-2:] == [
        "no policy drift: every policy agrees with the nodes its pods can land on (7 nodes read)",
        NAMESPACES_MATCH.format(7),
    ]


RELABELLED = [
    "POLICY     FIELD             POLICY SAYS  NODES SAY  NODES                           FIX",
    "notebooks  sharing.replicas  4            2          2 nodes (a100-ts-0, a100-ts-1)  set sharing.replicas: 2 (or "
    "auto), or change the device plugin's sharing config",
    "policy drift: 1 disagreement in 1 policy (7 nodes read); until fixed, memory fractions and MIG conversions are "
    "wrong for the pods on those nodes",
]


def test_a_relabelled_pool_is_reported_on_its_policy_and_no_other(mixed):
    api, kubeconfig, policies = mixed
    for item in gfd_cluster.nodes(gfd_cluster.TWO_REPLICAS, 16):
        api.put_node(item)
    run = lint(policies, kubeconfig)
    assert (run.returncode, run.stderr) == (1, "")
    assert run.stdout.splitlines()[-4:] == [*RELABELLED, NAMESPACES_MATCH.format(7)]
    audit = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", str(policies))
    assert (audit.returncode, audit.stderr) == (0, "")
    assert audit.stdout.splitlines()[-3:] == RELABELLED


DRIFT_ITEM = {
    "policy": "notebooks",
    "field": "sharing.replicas",
    "policySays": "4",
    "nodesSay": "2",
    "nodes": ["a100-ts-0", "a100-ts-1"],
    "effect": "each pod is told it has 1/4 of a GPU, but the GPU is shared 2 ways",
    "fix": "set sharing.replicas: 2 (or auto), or change the device plugin's sharing config",
    "line": 'policy "notebooks" sharing.replicas is 4, but 2 nodes (a100-ts-0, a100-ts-1) say 2: each pod is told it '
    "has 1/4 of a GPU, but the GPU is shared 2 ways; set sharing.replicas: 2 (or auto), or change the device "
    "plugin's sharing config",
}


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_the_drift_as_json_or_yaml(mixed, output):
    api, kubeconfig, policies = mixed
    for item in gfd_cluster.nodes(gfd_cluster.TWO_REPLICAS, 16):
        api.put_node(item)
    run = lint(policies, kubeconfig, "-o", output)
    assert run.returncode == 1
    assert yaml.safe_load(run.stdout) == {
        "nodes": 7, "namespaces": 7, "drift": [DRIFT_ITEM], "unmatchedNamespaces": [],
        "budgets": {"namespaces": [], "quotaFindings": []},  # no GPU pod, no quota: nothing to hold
    }  # fmt: skip
    # lint's own lines (the fixture's MIG policy makes a whole GPU a smaller slice than a fraction, and a
    # time-slicing policy keeps the name nvidia.com/gpu, so a quota of N counts replicas: two warnings)
    assert run.stderr.splitlines()[-1] == (
        "5 policies in 1 file: no errors, no glob ties, 1 MIG slice size warning, 1 quota unit warning"
    )
    audit = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", str(policies), "-o", output)
    assert audit.returncode == 0, audit.stderr
    if output == "json":
        assert json.loads(audit.stdout)["drift"] == [DRIFT_ITEM]
        assert audit.stderr == ""
    else:  # stdout is the objects, for kubectl apply: the table goes to stderr
        assert audit.stderr.splitlines() == RELABELLED


def test_output_needs_cluster(mixed):
    _, _, policies = mixed
    run = gpu_webhook("policy", "lint", "--policies", str(policies), "-o", "json")
    assert (run.returncode, run.stdout, run.stderr) == (
        2,
        "",
        "gpu-webhook policy lint: -o/--output only applies with --cluster\n",
    )


def test_a_misspelt_namespace_is_flagged_with_the_policy_its_namespace_gets_instead(mixed, tmp_path):
    _, kubeconfig, policies = mixed
    text = (policies / "cluster.yaml").read_text()
    (policies / "cluster.yaml").write_text(text.replace("[research]", "[reserch, lab-*]"))
    run = lint(policies, kubeconfig)
    assert (run.returncode, run.stderr) == (1, "")
    source = f"{policies}/cluster.yaml#3"
    assert run.stdout.splitlines()[-4:] == [
        "no policy drift: every policy agrees with the nodes its pods can land on (7 nodes read)",
        f'policy "research" ({source}) spec.namespaces: "reserch" is no namespace of the cluster (7 read); did you '
        'mean "research", which gets policy "default" (glob "*") instead? correct the entry',
        f'policy "research" ({source}) spec.namespaces: glob "lab-*" matches no namespace of the cluster (7 read): '
        "it selects nothing; correct it, or remove it until such a namespace exists",
        "unmatched namespaces: 2 entries in 1 policy match no namespace (7 namespaces read); the namespaces they "
        "were meant for get another policy",
    ]


def test_an_unverified_api_server_is_one_line_of_ours_not_a_warning_per_request(tmp_path, dev_certs):
    api = FakeKubeAPI().start(certificate=(dev_certs.tls_cert, dev_certs.tls_key))
    try:
        for item in gfd_cluster.nodes():
            api.put_node(item)
        api.add_namespaces(*gfd_cluster.NAMESPACES)
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", insecure=True))
        policies = tmp_path / "policies"
        policies.mkdir()
        (policies / "cluster.yaml").write_text(gfd_cluster.POLICIES)
        said = (
            f"gpu-webhook: warning: the API server's certificate is not verified ({api.url}): context fake sets "
            "insecure-skip-tls-verify; set certificate-authority(-data) in the kubeconfig instead\n"
        )
        run = lint(policies, kubeconfig)
        assert (run.returncode, run.stderr) == (0, said)
        audit = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", str(policies), "--page-size", "1")
        assert (audit.returncode, audit.stderr) == (0, said)  # ten pages and more: still one line
    finally:
        api.stop()


def test_check_cluster_gives_whole_gpu_pods_no_drift_warning(mixed, tmp_path):
    _, kubeconfig, policies = mixed
    manifest = tmp_path / "train.json"
    training = {**POD, "metadata": {"name": "big", "namespace": "training"}}
    manifest.write_text(json.dumps(training).replace('"12"', '"8"'))
    run = gpu_webhook("check", "--cluster", "--kubeconfig", kubeconfig, "--policies", str(policies), str(manifest))
    assert (run.returncode, run.stderr) == (0, "")
    assert [line for line in run.stdout.splitlines() if line.startswith("WARN")] == [
        f"WARN {manifest}#0 Pod/big: gpu-admission: pod: node affinity added on nvidia.com/gpu.sharing-strategy, "
        "nvidia.com/gpu.slices.gi"
    ]
