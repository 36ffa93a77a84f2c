"""`gpu-webhook audit` against tests/fake_kube_api.py, a local server speaking the Kubernetes list API.

The cluster: namespace `ml` holds a requests-only Deployment with its ReplicaSet and Pod, a Pod of an
operator's PyTorchJob, and CPU-only Pods; `research` holds a Pod asking for half a GPU (denied by the
`default` policy); `batch` holds a requests-only CronJob with its Job.
"""

from __future__ import annotations

import io
import json
import os
import pty
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_kube_api import COLLECTIONS, FakeKubeAPI
from webhook.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures" / "cli"
POLICIES = str(FIXTURES / "policies")
GPU_WEBHOOK = Path(sys.executable).parent / "gpu-webhook"


def container(gpu: Any = None, *, requests_only: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "main", "image": "busybox"}
    if gpu is not None:
        body["resources"] = {"requests" if requests_only else "limits": {"nvidia.com/gpu": gpu}}
    return body


def uid(kind: str, name: str) -> str:
    return f"uid-{kind.lower()}-{name}"


def owned(kind: str, name: str, api_version: str = "x/v1") -> dict[str, Any]:
    return {
        "ownerReferences": [
            {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid(kind, name), "controller": True}
        ]
    }


def pod(name: str, namespace: str, gpu: Any = None, *, owner: tuple[str, ...] | None = None) -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace, "uid": uid("Pod", name), **(owned(*owner) if owner else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [container(gpu)]}}


def template(gpu: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [container(gpu, requests_only=True)]},
    }


CLUSTER = [
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml", "uid": uid("Deployment", "web")},
        "spec": {"replicas": 1, "template": template(1)},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-1",
            "namespace": "ml",
            "uid": uid("ReplicaSet", "web-1"),
            **owned("Deployment", "web"),
        },
        "spec": {"replicas": 1, "template": template(1)},
    },
    pod("web-1-abc", "ml", 1, owner=("ReplicaSet", "web-1")),
    pod("train-worker-0", "ml", "500m", owner=("PyTorchJob", "train")),
    *[pod(f"cpu-{i}", "ml") for i in range(5)],
    pod("half", "research", "0.5"),
    {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "batch", "uid": uid("CronJob", "nightly")},
        "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template(2)}}},
    },
    {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "nightly-1",
            "namespace": "batch",
            "uid": uid("Job", "nightly-1"),
            **owned("CronJob", "nightly"),
        },
        "spec": {"template": template(2)},
    },
]


@pytest.fixture(scope="module")
def cluster():
    api = FakeKubeAPI()
    api.add(*CLUSTER)
    api.start()
    yield api
    api.stop()


@pytest.fixture
def api(cluster):
    """The module's cluster with no requests recorded and nothing forbidden."""
    cluster.requests.clear()
    cluster.forbidden.clear()
    return cluster


@pytest.fixture
def kubeconfig(api, tmp_path):
    return str(api.write_kubeconfig(tmp_path / "kubeconfig"))


def gpu_webhook(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "GPU_ADMISSION_POLICIES")}
    return subprocess.run([str(GPU_WEBHOOK), *args], capture_output=True, text=True, env=env, timeout=60)


def test_audit_pages_through_the_cluster_and_reports_what_would_be_denied_or_changed(cluster, kubeconfig):
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-o", "json", "--page-size", "2")
    assert run.returncode == 1, run.stderr
    assert run.stderr == "", "no progress output when stderr is not a terminal"
    report = json.loads(run.stdout)
    listed = [(r["kind"], r["namespace"], r["name"]) for r in report["results"]]
    # Workloads first; objects owned by a listed workload (the ReplicaSet, its Pod, the CronJob's Job) are
    # left to their owner; CPU-only Pods would be left alone, so they are counted, not listed.
    assert listed == [
        ("Deployment", "ml", "web"),
        ("CronJob", "batch", "nightly"),
        ("Pod", "ml", "train-worker-0"),
        ("Pod", "research", "half"),
    ]
    assert report["summary"] == {"objects": 9, "allowed": 7, "denied": 2, "mutated": 2, "skipped": 0}
    results = {r["name"]: r for r in report["results"]}
    assert all(r["source"] == "fake" for r in report["results"]), "the source is the kubeconfig context"
    web = results["web"]
    assert web["mutated"] and web["allowed"]
    assert web["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert results["half"]["allowed"] is False and "fractional" in results["half"]["denials"][0]
    assert results["train-worker-0"]["allowed"] is False, "an operator's Pod is judged like any other"

    # Every collection was listed cluster-wide, 2 per page, following continue tokens to the end.
    pods = list(cluster.list_requests("pods"))
    assert pods[0] == "GET /api/v1/pods?limit=2"
    assert len(pods) == 4 and all("continue=" in r for r in pods[1:]), "8 Pods, 2 per page"
    for plural in ("deployments", "statefulsets", "daemonsets", "replicasets", "replicationcontrollers"):
        assert cluster.list_requests(plural), plural
    for plural in ("jobs", "cronjobs", "podtemplates"):
        assert cluster.list_requests(plural), plural


def test_audit_one_namespace_with_owned_objects_lists_everything_with_its_owner(cluster, kubeconfig):
    run = gpu_webhook(
        "audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-n", "ml", "--include-owned", "--all"
    )
    assert run.returncode == 1, run.stderr
    rows = [line.split(" ml ")[0].split(maxsplit=1)[1].strip() for line in run.stdout.splitlines()[1:10]]
    assert rows == [
        "Deployment/web",
        "ReplicaSet/web-1 (owner Deployment/web)",
        *[f"Pod/cpu-{i}" for i in range(5)],
        "Pod/train-worker-0 (owner PyTorchJob/train)",
        "Pod/web-1-abc (owner ReplicaSet/web-1)",
    ]
    assert "research" not in run.stdout and "nightly" not in run.stdout
    # The nodes and DRA's (cluster checks) and API discovery (which custom resources the cluster serves) are
    # not lists of what is judged.
    cluster_scoped = ("GET /api/v1/nodes?", "GET /apis/resource.k8s.io/v1/resourceslices?",
                      "GET /apis/resource.k8s.io/v1/deviceclasses?")  # fmt: skip
    listed = [r for r in cluster.requests if not r.startswith(cluster_scoped) and r != "GET /apis"]
    assert all("/namespaces/ml/" in r for r in listed), "namespaced list calls only"
    # The ReplicaSet's template is its Deployment's: the webhook leaves it alone, and so does the audit.
    assert run.stdout.splitlines()[-1].startswith("9 objects: 8 allowed, 1 denied, 1 mutated, 1 skipped")


def test_the_pods_of_workloads_that_an_operator_owns_are_reported(tmp_path):
    """The webhook leaves a controller-owned workload alone and judges its Pods: so does the audit. Owners are
    matched by uid: Volcano's `Job` is not a batch Job that the audit judged."""
    notebook = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "lab", "namespace": "nb", "uid": uid("StatefulSet", "lab"), **owned("Notebook", "lab")},
        "spec": {"template": template("0.5")},
    }  # fmt: skip
    api = FakeKubeAPI()
    api.add(
        notebook,
        pod("lab-0", "nb", "0.5", owner=("StatefulSet", "lab")),
        pod("vc-0", "nb", "500m", owner=("Job", "vc", "batch.volcano.sh/v1alpha1")),
    )
    api.start()
    try:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        run = gpu_webhook("audit", "--kubeconfig", str(config), "--policies", POLICIES, "-o", "json")
    finally:
        api.stop()
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    denied = {r["name"]: r for r in report["results"] if not r["allowed"]}
    assert set(denied) == {"lab-0", "vc-0"}
    assert report["summary"]["skipped"] == 1, "the StatefulSet: its template is its Notebook's"


# --- resources the identity may not list: skipped, the rest reported, exit 2 -------------------------------


def skip_line(resource: str, group: str, where: str, scope: str) -> str:
    qualified = f"{resource}.{group}" if group else resource
    return (
        f"gpu-webhook audit: skipped {qualified} {where}: forbidden (403): {qualified} is forbidden: "
        f'User "auditor" cannot list resource "{resource}" in API group "{group}" {scope}; '
        f"grant list on {qualified} for a complete report"
    )


def test_a_resource_the_auditor_may_not_list_is_skipped_and_the_rest_is_reported(cluster, kubeconfig):
    """Kubernetes' `view` role grants no podtemplates: a read-only auditor gets a report, and exit 2 (not the
    report's 1) so that an incomplete audit never passes a CI gate."""
    cluster.forbidden.add("podtemplates")
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-o", "json")
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [skip_line("podtemplates", "", "at cluster scope", "at the cluster scope")]
    report = json.loads(run.stdout)
    assert [r["name"] for r in report["results"]] == ["web", "nightly", "train-worker-0", "half"]
    assert report["summary"] == {"objects": 9, "allowed": 7, "denied": 2, "mutated": 2, "skipped": 0}
    assert report["skipped_resources"] == [
        {
            "resource": "podtemplates",
            "namespace": None,
            "status": 403,
            "message": 'podtemplates is forbidden: User "auditor" cannot list resource "podtemplates" '
            'in API group "" at the cluster scope',
        }
    ]
    assert cluster.list_requests("pods"), "the resources after the forbidden one are still listed"

    # The table: the same one line per skipped resource on stderr, the report as usual on stdout.
    cluster.forbidden.add("statefulsets")
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-n", "ml")
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [
        skip_line("statefulsets", "apps", 'in namespace "ml"', 'in the namespace "ml"'),
        skip_line("podtemplates", "", 'in namespace "ml"', 'in the namespace "ml"'),
    ]
    assert run.stdout.splitlines()[-2:] == [
        "7 objects: 6 allowed, 1 denied, 1 mutated, 0 skipped, 1 with warnings",
        "incomplete: statefulsets.apps, podtemplates could not be listed (forbidden), so the report leaves them out",
    ]


def test_allow_incomplete_keeps_the_reports_exit_code_and_still_names_what_was_skipped(cluster, kubeconfig):
    cluster.forbidden.add("podtemplates")
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "--allow-incomplete")
    assert run.returncode == 1, run.stderr  # the report's own: a Pod would be denied
    assert run.stderr.splitlines() == [skip_line("podtemplates", "", "at cluster scope", "at the cluster scope")]
    assert run.stdout.splitlines()[-1].startswith("incomplete: podtemplates could not be listed")


def test_a_complete_audit_has_no_skipped_resources(cluster, kubeconfig):
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-o", "json", "-n", "batch")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["skipped_resources"] == []


def test_what_a_forbidden_owner_owns_is_judged_on_its_own(cluster, kubeconfig):
    """With deployments and cronjobs unlisted, their ReplicaSet and Job are what the audit sees: the webhook leaves
    those alone (they are controller-owned), so they cover nothing, and the ReplicaSet's Pod is judged."""
    cluster.forbidden.update({"deployments", "cronjobs"})
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "--all")
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.splitlines()) == 2, run.stderr
    rows = {line.split()[1]: line.split() for line in run.stdout.splitlines()[1:] if line.startswith("fake#")}
    assert "Deployment/web" not in rows and "CronJob/nightly" not in rows
    assert rows["ReplicaSet/web-1"][-2:] == ["skipped", "-"]
    assert "(owner Deployment/web)" in " ".join(rows["ReplicaSet/web-1"])
    assert rows["Job/nightly-1"][-2:] == ["skipped", "-"]
    assert "(owner ReplicaSet/web-1)" in " ".join(rows["Pod/web-1-abc"]), "judged on its own, with its owner"
    assert rows["Pod/web-1-abc"][-2:] == ["allowed", "0"]

    # ReplicaSets unlisted: the Deployment is judged, and its Pod too (whose owner is a ReplicaSet the audit
    # could not see, so it cannot know the Pod is the Deployment's): reported twice rather than not at all.
    cluster.forbidden.clear()
    cluster.forbidden.add("replicasets")
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-o", "json", "--all")
    assert run.returncode == 2, run.stderr
    names = [r["name"] for r in json.loads(run.stdout)["results"]]
    assert "web" in names and "web-1-abc" in names and "web-1" not in names


# --- cluster errors: one line, exit 2 ---------------------------------------------------------------------


def audit_error(capsys, *args: str) -> str:
    assert main(["audit", "--policies", POLICIES, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gpu-webhook audit: ")
    return lines[0].removeprefix("gpu-webhook audit: ")


def test_wrong_credentials_are_one_line(cluster, tmp_path, capsys):
    config = cluster.write_kubeconfig(tmp_path / "kubeconfig", token="expired")
    assert audit_error(capsys, "--kubeconfig", str(config)) == (
        f"{cluster.url} rejected the credentials (401 Unauthorized): log in again or fix the user of context fake"
    )


def exec_user(command: str | Path) -> dict[str, Any]:
    """A kubeconfig user whose credentials come from an exec plugin, as cloud kubeconfigs have them."""
    return {"exec": {"command": str(command), "apiVersion": "client.authentication.k8s.io/v1beta1"}}


def plugin(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def credential(**status: str) -> str:
    """The shell line that prints an ExecCredential, what a plugin answers on success."""
    answer = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": status}
    return f"echo '{json.dumps(answer)}'\n"


@pytest.mark.parametrize(
    ("script", "said"),
    [
        (
            "echo 'error: token expired' >&2\necho \"  run 'corp-login' to sign in again\" >&2\nexit 1\n",
            "exited with status 1: error: token expired; run 'corp-login' to sign in again",
        ),
        ("exit 3\n", "exited with status 3; run it by hand to see why"),
    ],
)
def test_a_failing_exec_credential_plugin_is_one_line_with_its_reason(api, tmp_path, script, said):
    """The client logs the plugin's failure and carries on without credentials: the user would see its log line
    and then a 401 that hides the cause."""
    failing = plugin(tmp_path / "corp-login-plugin", script)
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(failing))
    run = gpu_webhook("audit", "--kubeconfig", str(config), "--policies", POLICIES)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == f'gpu-webhook audit: kubeconfig user "auditor": exec credential plugin {failing} {said}\n'
    assert api.requests == [], "no request is sent without credentials"


def test_a_plugin_that_talks_to_the_terminal_keeps_its_say_and_the_audit_adds_one_line(api, tmp_path):
    """With stdout on a terminal, the client hands the plugin our stderr and stdin (a login prompt): the plugin's
    own lines are already there, so the audit's line points at them."""
    prompting = plugin(tmp_path / "device-login-plugin", "echo 'open the login page and enter ABCD' >&2\nexit 1\n")
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(prompting))
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "GPU_ADMISSION_POLICIES")}
    leader, follower = pty.openpty()
    try:
        run = subprocess.run(
            [str(GPU_WEBHOOK), "audit", "--kubeconfig", str(config), "--policies", POLICIES],
            stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE, text=True, env=env, timeout=60,
        )  # fmt: skip
    finally:
        os.close(follower)
        os.close(leader)
    assert run.returncode == 2
    assert run.stderr == (
        "open the login page and enter ABCD\n"
        f'gpu-webhook audit: kubeconfig user "auditor": exec credential plugin {prompting} failed; '
        "see its output above\n"
    )


def test_a_missing_exec_credential_plugin_is_one_line(api, tmp_path):
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user("no-such-credential-plugin"))
    run = gpu_webhook("audit", "--kubeconfig", str(config), "--policies", POLICIES)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (
        'gpu-webhook audit: kubeconfig user "auditor": cannot run exec credential plugin no-such-credential-plugin: '
        "No such file or directory; install it, or fix the exec command in the kubeconfig\n"
    )


def test_an_exec_plugin_that_fails_when_its_token_expires_is_named_not_a_bare_401(api, tmp_path):
    """The client runs the plugin again when its token expires, before a request: a failure there is the
    plugin's too."""
    expiring = plugin(
        tmp_path / "sso-plugin",
        'if [ -e "$0.ran" ]; then echo "error: SSO session expired" >&2; exit 1; fi\ntouch "$0.ran"\n'
        + credential(token="stale", expirationTimestamp="2000-01-01T00:00:00Z"),
    )
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(expiring))
    run = gpu_webhook("audit", "--kubeconfig", str(config), "--policies", POLICIES)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (
        f'gpu-webhook audit: kubeconfig user "auditor": exec credential plugin {expiring} exited with status 1: '
        "error: SSO session expired\n"
    )
    assert len(api.requests) == 1, "the stale token was sent once and rejected"


def test_a_working_exec_credential_plugin_gives_the_audit_its_token(api, tmp_path):
    working = plugin(tmp_path / "token-plugin", credential(token="fake-token"))
    config = api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(working))
    run = gpu_webhook("audit", "--kubeconfig", str(config), "--policies", POLICIES, "-o", "json")
    assert run.returncode == 1, run.stderr
    assert run.stderr == ""
    assert json.loads(run.stdout)["summary"]["objects"] == 9


def test_when_nothing_may_be_listed_there_is_one_line_and_no_report(cluster, kubeconfig, capsys):
    cluster.forbidden.update(plural for _, plural in COLLECTIONS.values())
    assert audit_error(capsys, "--kubeconfig", kubeconfig, "-n", "ml") == (
        'forbidden (403) to list any of the resources the audit reads in namespace "ml" (deployments.apps is '
        'forbidden: User "auditor" cannot list resource "deployments" in API group "apps" in the namespace "ml"); '
        "grant list on deployments.apps, statefulsets.apps, daemonsets.apps, replicasets.apps, "
        "replicationcontrollers, cronjobs.batch, jobs.batch, resourceclaimtemplates.resource.k8s.io, "
        "resourceclaims.resource.k8s.io, podtemplates and pods"
    )


def test_an_unreachable_cluster_is_one_line(cluster, tmp_path, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = json.loads(Path(cluster.write_kubeconfig(tmp_path / "kubeconfig")).read_text())
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    message = audit_error(capsys, "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert message.startswith(f"cannot reach the cluster at http://127.0.0.1:{port}: ")


def test_a_server_that_is_not_a_kubernetes_api_is_an_error_not_a_clean_report(cluster, tmp_path, capsys):
    # A wrong path after the server address (a proxy, another cluster's prefix) answers 404 to everything.
    config = json.loads(Path(cluster.write_kubeconfig(tmp_path / "kubeconfig")).read_text())
    config["clusters"][0]["cluster"]["server"] = f"{cluster.url}/wrong-prefix"
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    assert audit_error(capsys, "--kubeconfig", str(tmp_path / "kubeconfig")) == (
        f"{cluster.url}/wrong-prefix does not serve deployments.apps (404), which every Kubernetes API server does: "
        "check the "
        "server address (and any path after it) of the kubeconfig's cluster"
    )


def test_kubeconfig_from_the_environment_is_a_list_whose_missing_files_are_skipped(
    cluster, kubeconfig, tmp_path, monkeypatch, capsys
):
    real = Path(kubeconfig)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "missing"), str(real)]))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["audit", "--policies", POLICIES, "-o", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["summary"]["objects"] == 9


def test_kubeconfig_problems_are_one_line(cluster, tmp_path, capsys):
    assert audit_error(capsys, "--kubeconfig", str(tmp_path / "missing")) == (
        f"--kubeconfig {tmp_path / 'missing'}: no such file"
    )
    garbage = tmp_path / "garbage"
    garbage.write_text("this is not a kubeconfig\n")
    assert audit_error(capsys, "--kubeconfig", str(garbage)).startswith(
        f"kubeconfig {garbage}: not a valid kubeconfig ("
    )
    config = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    assert audit_error(capsys, "--kubeconfig", str(config), "--context", "nope").startswith(
        "kubeconfig: Invalid kube-config file. Expected object with name nope in "
    )


def test_progress_is_shown_on_a_terminal_and_cleared(kubeconfig, monkeypatch, capsys):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["audit", "--policies", POLICIES, "--kubeconfig", kubeconfig, "-o", "json"]) == 1
    progress = terminal.getvalue()
    assert "\r\033[Klisting deployments.apps: 1" in progress
    assert "\r\033[Klisting pods: 8" in progress
    assert progress.endswith("\r\033[K"), "the progress line is cleared before the report"
    assert json.loads(capsys.readouterr().out)["summary"]["objects"] == 9


def test_skipped_resources_are_said_after_the_progress_line_is_cleared(api, kubeconfig, monkeypatch, capsys):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    api.forbidden.add("podtemplates")
    assert main(["audit", "--policies", POLICIES, "--kubeconfig", kubeconfig, "-o", "json"]) == 2
    progress, skipped = terminal.getvalue().rsplit("\r\033[K", 1)
    assert "listing pods: 8" in progress
    assert skipped == skip_line("podtemplates", "", "at cluster scope", "at the cluster scope") + "\n"
    assert json.loads(capsys.readouterr().out)["summary"]["objects"] == 9
