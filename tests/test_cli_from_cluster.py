"""`--from-cluster` and `policy export`: the CLI reading GPUPolicy objects from tests/fake_kube_api.py.

Every command is run for real (main(), over HTTP to the fake API) twice: once with the cluster's objects and
once with `--policies DIR` holding the same policies as files, and the two outputs must be the same but for
how a policy's source is named (`gpupolicy/NAME` against `DIR/NAME.yaml#0`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fake_kube_api import COLLECTIONS, FakeKubeAPI
from webhook.admission.policy.loader import load_policies
from webhook.admission.policy.objects import judge_objects, policy_text
from webhook.cli import kube
from webhook.cli.main import main

MANIFESTS = Path(__file__).parent / "fixtures" / "cli" / "manifests"
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "annotations")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

SPECS: dict[str, dict[str, Any]] = {
    "default": {"namespaces": ["*"], "enforcement": "enforce"},
    "shared": {
        "namespaces": ["shared-*"],
        "sharing": {"mode": "time-slicing", "replicas": 4},
        "fractional": "shared",
        "memoryFraction": 0.2,
    },
    "lenient": {"namespaces": ["sandbox"], "enforcement": "warn"},
    "observe": {"namespaces": ["legacy"], "enforcement": "audit"},
}


def gpu_policy(name: str, spec: dict[str, Any], created: str) -> dict[str, Any]:
    """An object as the API server stores it: the spec, and the fields a policy file never holds."""
    return {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "GPUPolicy",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "17",
            "generation": 2,
            "creationTimestamp": created,
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"}],
            "annotations": {LAST_APPLIED: json.dumps({"kind": "GPUPolicy", "spec": spec})},
        },
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "observedGeneration": 2},
    }


def pod(name: str, namespace: str, gpu: str) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": gpu}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"containers": [container]},
    }


@pytest.fixture
def api() -> Any:
    server = FakeKubeAPI().start()
    for index, (name, spec) in enumerate(SPECS.items()):
        server.add(gpu_policy(name, spec, f"2025-01-0{index + 1}T00:00:00Z"))
    server.add(pod("notebook", "shared-a", "0.5"), pod("half", "research", "0.5"), pod("whole", "sandbox", "1"))
    yield server
    server.stop()


@pytest.fixture
def kubeconfig(api: FakeKubeAPI, tmp_path: Path) -> str:
    return str(api.write_kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    """The same policies as files, written by hand (not by `policy export`)."""
    policies = tmp_path / "pol"
    policies.mkdir()
    for name, spec in SPECS.items():
        document = {"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": {"name": name}, "spec": spec}
        (policies / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return policies


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def as_objects(text: str, directory: Path) -> str:
    """A directory run's output with each file named as the cluster run names its object."""
    for name in SPECS:
        text = text.replace(f"{directory}/{name}.yaml#0", f"gpupolicy/{name}")
    return text


def both(capsys: pytest.CaptureFixture[str], directory: Path, kubeconfig: str, *argv: str) -> tuple[Any, Any]:
    """The command run with --policies DIR (sources renamed) and with --from-cluster; `audit` reads the cluster's
    objects with the kubeconfig in both."""
    files = run(
        capsys, *argv, "--policies", str(directory), *(("--kubeconfig", kubeconfig) if argv[0] == "audit" else ())
    )
    cluster = run(capsys, *argv, "--from-cluster", "--kubeconfig", kubeconfig)
    return (files[0], as_objects(files[1], directory), as_objects(files[2], directory)), cluster


# --- the same output from either source ---------------------------------------------------------------------


def test_lint_from_the_cluster_describes_the_same_set(capsys, directory, kubeconfig) -> None:
    files, cluster = both(capsys, directory, kubeconfig, "policy", "lint")
    assert files[0] == cluster[0] == 0
    assert (files[2], cluster[2]) == ("", "")
    *described, summary = cluster[1].splitlines()
    assert described == files[1].splitlines()[:-1]
    assert "lenient  (gpupolicy/lenient)" in described
    assert summary == files[1].splitlines()[-1].replace("4 files", "4 GPUPolicy objects")
    assert summary.startswith("4 policies in 4 GPUPolicy objects: no errors")


def test_explain_from_the_cluster_is_the_same(capsys, directory, kubeconfig) -> None:
    files, cluster = both(capsys, directory, kubeconfig, "policy", "explain", "shared-a", "sandbox", "research")
    assert files == cluster
    assert cluster[0] == 0 and "policy    shared (gpupolicy/shared)" in cluster[1]


@pytest.mark.parametrize("target", ["kueue", "quota"])
def test_render_from_the_cluster_is_the_same(capsys, directory, kubeconfig, target) -> None:
    files, cluster = both(capsys, directory, kubeconfig, "policy", "render", target, "--gpus", "4")
    assert files == cluster
    assert cluster[0] == 0 and cluster[1] + cluster[2]


@pytest.mark.parametrize("output", ["yaml", "json", "table"])
def test_check_from_the_cluster_is_the_same(capsys, directory, kubeconfig, output) -> None:
    manifests = [str(MANIFESTS / name) for name in ("pods.yaml", "denied.yaml", "warn.yaml")]
    files, cluster = both(capsys, directory, kubeconfig, "check", *manifests, "-n", "shared-a", "-o", output)
    assert files == cluster
    assert cluster[0] == 1  # denied.yaml


def test_audit_from_the_cluster_is_the_same(capsys, directory, kubeconfig) -> None:
    files, cluster = both(capsys, directory, kubeconfig, "audit", "-o", "json", "--allow-incomplete")
    assert files == cluster
    reported = {item["name"]: item["allowed"] for item in json.loads(cluster[1])["results"]}
    assert reported["half"] is False and cluster[0] == 1


# --- objects the webhook does not serve ----------------------------------------------------------------------

MISSPELT = 'gpupolicy/broken spec.enforcment: unknown field (did you mean "enforcement"?)'


def add_unserved(api: FakeKubeAPI) -> FakeKubeAPI:
    """One object with a misspelt field, and one created after `lenient` that claims its namespace."""
    api.add(
        gpu_policy("broken", {"namespaces": ["team-x"], "enforcment": "warn"}, "2025-02-01T00:00:00Z"),
        gpu_policy("late", {"namespaces": ["sandbox"]}, "2025-02-02T00:00:00Z"),
    )
    return api


@pytest.fixture
def broken(api: FakeKubeAPI) -> FakeKubeAPI:
    return add_unserved(api)


def test_lint_fails_on_each_line_of_an_object_not_served(capsys, broken, kubeconfig) -> None:
    code, out, err = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig)
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0] == MISSPELT
    assert lines[1].startswith("gpupolicy/late ") and "sandbox" in lines[1] and "lenient" in lines[1]
    assert lines[2:] == ["2 problems in cluster fake: 2 of 6 GPUPolicy objects not served (the webhook serves the "
                         "other 4)"]  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ("check", str(MANIFESTS / "pods.yaml"), "-o", "yaml"),
        ("audit", "-o", "json"),
        ("policy", "explain", "sandbox"),
        ("policy", "render", "kueue"),
    ],
    ids=["check", "audit", "explain", "render"],
)
def test_the_others_warn_once_per_object_and_apply_the_served_set(capsys, api, kubeconfig, argv) -> None:
    before = run(capsys, *argv, "--from-cluster", "--kubeconfig", kubeconfig)
    add_unserved(api)
    after = run(capsys, *argv, "--from-cluster", "--kubeconfig", kubeconfig)
    assert after[:2] == before[:2]  # stdout stays machine-readable: the warnings are on stderr only
    command = " ".join(argv[:2]) if argv[0] == "policy" else argv[0]
    warnings = [line for line in after[2].splitlines() if line not in before[2].splitlines()]
    assert len(warnings) == 2
    assert warnings[0] == (
        f"gpu-webhook {command}: warning: GPUPolicy broken is not served by the webhook: {MISSPELT}; left out"
    )
    assert warnings[1].startswith(f"gpu-webhook {command}: warning: GPUPolicy late is not served by the webhook: ")


# --- the cluster refuses ---------------------------------------------------------------------------------------

COMMANDS = [
    ("check", str(MANIFESTS / "pods.yaml"), "--from-cluster"),
    ("audit", "--from-cluster"),
    ("policy", "lint", "--from-cluster"),
    ("policy", "explain", "sandbox", "--from-cluster"),
    ("policy", "render", "quota", "--from-cluster"),
    ("policy", "export", "--out", "exported"),
]
IDS = ["check", "audit", "lint", "explain", "render", "export"]


def refusal(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], kubeconfig: str) -> str:
    code, out, err = run(capsys, *argv, "--kubeconfig", kubeconfig)
    assert (code, out) == (2, "")
    command = " ".join(argv[:2]) if argv[0] == "policy" else argv[0]
    prefix = f"gpu-webhook {command}: "
    assert err.startswith(prefix) and err.count("\n") == 1, err
    return err[len(prefix) : -1]


@pytest.mark.parametrize("argv", COMMANDS, ids=IDS)
def test_a_cluster_without_the_crd_says_so(capsys, api, kubeconfig, argv, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(COLLECTIONS, "GPUPolicy")  # the fake API then answers 404, as without the CRD
    assert refusal(capsys, argv, kubeconfig) == (
        "the GPUPolicy API is not installed in this cluster (no CustomResourceDefinition "
        "gpupolicies.gpu-admission.io); install it or use --policies DIR"
    )
    assert not (tmp_path / "exported").exists()


@pytest.mark.parametrize("argv", COMMANDS, ids=IDS)
def test_forbidden_is_one_line(capsys, api, kubeconfig, argv, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    api.forbidden.add("gpupolicies")
    said = refusal(capsys, argv, kubeconfig)
    assert said.startswith("forbidden (403) to list gpupolicies.gpu-admission.io at cluster scope: ")
    assert 'cannot list resource "gpupolicies" in API group "gpu-admission.io"' in said


def test_wrong_credentials_and_an_unreachable_cluster_are_one_line(capsys, api, tmp_path) -> None:
    wrong = str(api.write_kubeconfig(tmp_path / "wrong", token="nope"))
    assert "rejected the credentials (401 Unauthorized)" in refusal(capsys, COMMANDS[2], wrong)
    kubeconfig, url = str(api.write_kubeconfig(tmp_path / "kubeconfig")), api.url
    api.stop()
    assert refusal(capsys, COMMANDS[3], kubeconfig).startswith(f"cannot reach the cluster at {url}")


def test_objects_are_listed_page_by_page(capsys, api, kubeconfig, monkeypatch) -> None:
    monkeypatch.setattr(kube, "PAGE_SIZE", 3)
    code, out, _ = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig)
    assert code == 0 and "4 policies in 4 GPUPolicy objects" in out
    listed = list(api.list_requests("gpupolicies"))
    assert len(listed) == 2 and "limit=3" in listed[0] and "continue=" in listed[1]


# --- usage -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("policy", "lint", "pol", "--from-cluster"), "a directory (pol) and --from-cluster given; give one"),
        (
            ("check", "x.yaml", "--from-cluster", "--server", "https://webhook:8443"),
            "--from-cluster and --server: a running webhook applies its own policies; drop one",
        ),
        (
            ("policy", "explain", "a", "--kubeconfig", "kc"),
            "--kubeconfig and --context only apply with --from-cluster",
        ),
        (
            ("policy", "render", "kueue", "--context", "prod"),
            "--kubeconfig and --context only apply with --from-cluster",
        ),
        (
            ("policy", "lint", "--context", "prod"),
            "--kubeconfig and --context only apply with --cluster or --from-cluster",
        ),
    ],
)
def test_misuse_is_one_line(capsys, argv, said) -> None:
    code, out, err = run(capsys, *argv)
    command = " ".join(argv[:2]) if argv[0] == "policy" else argv[0]
    assert (code, out, err) == (2, "", f"gpu-webhook {command}: {said}\n")


@pytest.mark.parametrize("command", [("check", "x.yaml"), ("audit",), ("policy", "explain", "a")])
def test_policies_and_from_cluster_exclude_each_other(capsys, command) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--policies", "pol", "--from-cluster"])
    assert exited.value.code == 2
    assert "argument --from-cluster: not allowed with argument --policies" in capsys.readouterr().err


# --- export ----------------------------------------------------------------------------------------------------


def test_export_writes_files_that_load_to_the_served_set(capsys, api, kubeconfig, tmp_path) -> None:
    out_dir = tmp_path / "repo" / "policies"
    code, out, err = run(capsys, "policy", "export", "--out", str(out_dir), "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"wrote {out_dir}/{name}.yaml" for name in sorted(SPECS)]
    listed = [obj for (_, _), obj in sorted(api.objects["GPUPolicy"].items())]
    for obj in listed:
        text = (out_dir / f"{obj['metadata']['name']}.yaml").read_text()
        document = yaml.safe_load(text)
        assert document == {
            "apiVersion": "gpu-admission.io/v1",
            "kind": "GPUPolicy",
            "metadata": {"name": obj["metadata"]["name"]},
            "spec": obj["spec"],  # what `kubectl apply` compares: unchanged
        }
        assert not [field for field in (*SERVER_FIELDS, "status", LAST_APPLIED) if field in text]
        assert policy_text(document) == text  # read back and written again: the same file
    from_files = load_policies(out_dir).policies
    from_cluster = judge_objects(listed).policies.policies
    unsourced = [dataclasses.replace(policy, source="") for policy in from_files]
    assert unsourced == [dataclasses.replace(policy, source="") for policy in from_cluster]
    # ...and the CLI reads both the same way.
    files = run(capsys, "policy", "lint", "--policies", str(out_dir))
    cluster = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig)
    assert as_objects(files[1], out_dir).splitlines()[:-1] == cluster[1].splitlines()[:-1]


def test_export_writes_over_keeps_other_files_and_writes_unserved_objects_with_a_warning(
    capsys, broken, kubeconfig, tmp_path
) -> None:
    out_dir = tmp_path / "policies"
    out_dir.mkdir()
    (out_dir / "default.yaml").write_text("# an older copy\n")
    (out_dir / "retired.yaml").write_text(yaml.safe_dump({"kind": "GPUPolicy"}))
    (out_dir / "README.md").write_text("policies of the cluster\n")
    code, out, err = run(capsys, "policy", "export", "--out", str(out_dir), "--kubeconfig", kubeconfig)
    assert code == 0
    assert out.splitlines() == [f"wrote {out_dir}/{name}.yaml" for name in sorted([*SPECS, "broken", "late"])]
    assert err.splitlines()[0] == (
        f"gpu-webhook policy export: warning: GPUPolicy broken is not served by the webhook: {MISSPELT}; "
        "written as it is"
    )
    assert err.splitlines()[1].startswith("gpu-webhook policy export: warning: GPUPolicy late is not served")
    assert err.splitlines()[2:] == [
        f"gpu-webhook policy export: warning: {out_dir}/retired.yaml holds no GPUPolicy of the cluster (left as it "
        "is; --policies reads it too)"
    ]
    assert (out_dir / "default.yaml").read_text().startswith("apiVersion: gpu-admission.io/v1\n")
    assert "enforcment: warn" in (out_dir / "broken.yaml").read_text()
    assert (out_dir / "README.md").exists() and (out_dir / "retired.yaml").exists()


def test_export_into_a_path_that_is_a_file_is_one_line(capsys, api, kubeconfig, tmp_path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    code, out, err = run(capsys, "policy", "export", "--out", str(blocked), "--kubeconfig", kubeconfig)
    assert (code, out) == (2, "")
    assert err == f"gpu-webhook policy export: --out {blocked}: File exists\n"


def test_a_glob_tie_falls_the_same_way_from_the_exported_files(capsys, tmp_path) -> None:
    """ "a-b.yaml" is read before "a.yaml": the cluster's set is in that order too, not in name order."""
    tied = FakeKubeAPI().start()
    try:
        tied.add(gpu_policy("a", {"namespaces": ["x-*"]}, "2025-01-01T00:00:00Z"))
        tied.add(gpu_policy("a-b", {"namespaces": ["*-y"]}, "2025-01-02T00:00:00Z"))
        kubeconfig = str(tied.write_kubeconfig(tmp_path / "kubeconfig"))
        assert run(capsys, "policy", "export", "--out", str(tmp_path / "pol"), "--kubeconfig", kubeconfig)[0] == 0
        cluster = run(capsys, "policy", "explain", "x-y", "--from-cluster", "--kubeconfig", kubeconfig)
    finally:
        tied.stop()
    files = run(capsys, "policy", "explain", "x-y", "--policies", str(tmp_path / "pol"))
    for name in ("a", "a-b"):
        files = tuple(str(part).replace(f"{tmp_path}/pol/{name}.yaml#0", f"gpupolicy/{name}") for part in files)
    assert files == tuple(map(str, cluster))
    assert "  policy    a-b (gpupolicy/a-b)" in cluster[1]


def test_an_empty_cluster_lints_as_an_empty_directory_does(capsys, tmp_path) -> None:
    empty = FakeKubeAPI().start()
    try:
        kubeconfig = str(empty.write_kubeconfig(tmp_path / "kubeconfig"))
        code, out, _ = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig)
    finally:
        empty.stop()
    assert code == 0
    assert out.splitlines()[0] == "cluster fake: no GPUPolicy objects: every namespace gets the built-in defaults"


# --- the native policies ---------------------------------------------------------------------------------------


def native_policy(name: str, component: str = "native-policies") -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/component": component}},
        "spec": {"validations": [{"expression": "true"}]},
    }


def test_lint_from_a_cluster_holding_native_policies_warns_what_they_cannot_carry(capsys, api, kubeconfig) -> None:
    """Where `policy render native`'s objects are installed, lint says unasked what `--native` says; elsewhere
    (another tool's admission policies only) nothing."""
    api.add(native_policy("another-tools", component="guard"))
    code, plain, _ = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig)
    assert code == 0 and "native" not in plain
    code, asked, _ = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig, "--native")
    assert code == 0
    warnings = [line for line in asked.splitlines() if line.startswith("warning: ")]
    assert warnings and all("its native policies do not carry" in line for line in warnings)
    assert "warning: policy shared (gpupolicy/shared): its native policies do not carry" in asked

    api.add(native_policy("gpu-admission-shared"), native_policy("gpu-admission-built-in-default"))
    code, unasked, _ = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig)
    assert code == 0
    note = (
        "note: native admission policies are installed (app.kubernetes.io/component=native-policies: 2 "
        "ValidatingAdmissionPolicy objects): a warning follows for each policy with rules they cannot carry"
    )
    assert unasked.splitlines() == [*asked.splitlines()[: -len(warnings)], note, *warnings]


def test_lint_from_a_cluster_that_hides_its_admission_policies_says_so_and_lints(capsys, api, kubeconfig) -> None:
    api.forbidden.add("validatingadmissionpolicies")
    code, out, err = run(capsys, "policy", "lint", "--from-cluster", "--kubeconfig", kubeconfig)
    assert code == 0 and err == ""
    (note,) = [line for line in out.splitlines() if line.startswith("note: ")]
    assert note.startswith("note: whether native policies are installed is not known (forbidden (403) to list ")
    assert note.endswith("; --native warns regardless")


def test_lint_logs_in_once_for_all_its_reads_of_the_cluster(capsys, api, tmp_path) -> None:
    """`policy lint --from-cluster --cluster` reads the policies, whether native policies are installed, and the
    nodes, namespaces and budgets through one connection: a cloud kubeconfig's exec credential plugin (a login,
    often a second or more) runs once."""
    runs = tmp_path / "runs"
    answer = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}
    script = tmp_path / "login-plugin"
    script.write_text(
        f"#!/bin/sh\necho run >> {runs}\necho '{json.dumps({**answer, 'status': {'token': api.token}})}'\n"
    )
    script.chmod(0o755)
    user = {"exec": {"command": str(script), "apiVersion": answer["apiVersion"]}}
    config = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    code, out, err = run(capsys, "policy", "lint", "--from-cluster", "--cluster", "--kubeconfig", config)
    assert code in (0, 1), err
    assert "drift" in out.lower() or "no drift" in out.lower(), out
    assert runs.read_text().splitlines() == ["run"]
