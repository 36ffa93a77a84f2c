"""`gpu-webhook check`: the console script on fixture manifests, its output formats and exit codes.

Fixtures live in tests/fixtures/cli: `policies/` (enforce everywhere, time-slicing in `shared-*`, warn in
`sandbox`, audit in `legacy`) and `manifests/`. Commands run from that directory so sources read
`manifests/pods.yaml`.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main
from webhook.cli.output import use_colour

FIXTURES = Path(__file__).parent / "fixtures" / "cli"
GPU_WEBHOOK = Path(sys.executable).parent / "gpu-webhook"
RESULT_KEYS = [
    "source", "document", "kind", "name", "namespace", "policy", "allowed", "mutated", "skipped",
    "patch", "warnings", "denials", "object",
]  # fmt: skip


def gpu_webhook(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The installed console script, as CI runs it."""
    environ = {k: v for k, v in os.environ.items() if k not in ("GPU_ADMISSION_POLICIES", "NO_COLOR")}
    environ.update(env or {})
    return subprocess.run(
        [str(GPU_WEBHOOK), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=FIXTURES,
        env=environ,
        timeout=60,
    )


def by_name(report: dict) -> dict[tuple[str, str], dict]:
    return {(r["source"].rsplit("/", 1)[-1] + f"#{r['document']}", r["name"]): r for r in report["results"]}


# --- table ----------------------------------------------------------------------------------------------


def test_table_lists_every_object_then_each_denial_and_warning_and_exits_1_on_a_denial():
    run = gpu_webhook("check", "--policies", "policies", "manifests")
    assert run.returncode == 1, run.stderr
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["SOURCE", "KIND/NAME", "NAMESPACE", "POLICY", "VERDICT", "MUTATIONS"]
    rows = {}
    for line in lines[1:]:
        if not line.startswith("manifests/"):
            break
        cells = line.split()
        rows[cells[0] if "items[" not in line else f"{cells[0]} {cells[1]}"] = cells[-5:]
    # source#document -> KIND/NAME, NAMESPACE, POLICY, VERDICT, MUTATIONS; directories read in sorted order
    assert list(rows) == [
        "manifests/clean.yaml#0",
        "manifests/clean.yaml#1",
        "manifests/cronjob.json#0",
        "manifests/denied.yaml#0",
        "manifests/list.yaml#0 items[0]",
        "manifests/list.yaml#0 items[1]",
        "manifests/pods.yaml#0",
        "manifests/pods.yaml#1",
        "manifests/pods.yaml#3",  # #2 is an empty document
        "manifests/warn.yaml#0",
        "manifests/warn.yaml#1",
    ]
    assert rows["manifests/clean.yaml#0"] == ["Pod/whole-gpu", "default", "default", "allowed", "0"]
    assert rows["manifests/denied.yaml#0"] == ["Pod/half", "research", "default", "denied", "0"]
    assert rows["manifests/list.yaml#0 items[1]"] == ["Service/serve", "default", "default", "skipped", "-"]
    assert rows["manifests/pods.yaml#3"] == ["ConfigMap/settings", "default", "default", "skipped", "-"]
    assert rows["manifests/warn.yaml#0"][2:4] == ["lenient", "warned"]
    assert rows["manifests/warn.yaml#1"][2:4] == ["observe", "audit"]
    assert rows["manifests/pods.yaml#1"][1:4] == ["shared-ml", "shared", "allowed"]
    assert int(rows["manifests/pods.yaml#1"][4]) > 0

    deny = [line for line in lines if line.startswith("DENY ")]
    assert len(deny) == 1
    assert deny[0].startswith('DENY manifests/denied.yaml#0 Pod/half: container "train": nvidia.com/gpu 0.5')
    warn = [line for line in lines if line.startswith("WARN ")]
    assert any(line.startswith("WARN manifests/warn.yaml#1 Pod/nine: ") for line in warn), "audit violations show"
    assert lines[-1] == "11 objects: 10 allowed, 1 denied, 4 mutated, 2 skipped, 6 with warnings"
    assert "\033[" not in run.stdout, "no colour when stdout is not a terminal"


def test_admitted_manifests_exit_0_and_namespace_and_policies_come_from_flags_and_environment():
    run = gpu_webhook(
        "check", "-n", "shared-ml", "-o", "json", "manifests/clean.yaml", "manifests/pods.yaml",
        env={"GPU_ADMISSION_POLICIES": "policies"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    results = by_name(json.loads(run.stdout))
    # No metadata.namespace: --namespace applies; a manifest's own namespace always wins.
    assert results[("clean.yaml#0", "whole-gpu")]["namespace"] == "shared-ml"
    assert results[("clean.yaml#0", "whole-gpu")]["policy"] == "shared"
    assert results[("pods.yaml#1", "quarter")]["namespace"] == "shared-ml"


# --- json -----------------------------------------------------------------------------------------------


def test_json_has_exactly_the_documented_shape():
    run = gpu_webhook("check", "--policies", "policies", "-o", "json", "manifests")
    assert run.returncode == 1
    report = json.loads(run.stdout)
    assert list(report) == ["results", "summary"]
    assert report["summary"] == {"objects": 11, "allowed": 10, "denied": 1, "mutated": 4, "skipped": 2}
    for result in report["results"]:
        assert list(result) == RESULT_KEYS
    results = by_name(report)

    denied = results[("denied.yaml#0", "half")]
    assert (denied["allowed"], denied["mutated"], denied["skipped"], denied["patch"]) == (
        False,
        False,
        False,
        [],
    )
    assert len(denied["denials"]) == 1 and "0.5 is fractional" in denied["denials"][0]

    # A requests-only Pod: the API server would reject it; the webhook copies requests into limits.
    fixed = results[("pods.yaml#0", "requests-only")]
    assert fixed["allowed"] and fixed["mutated"] and not fixed["denials"]
    container = fixed["object"]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}
    assert {"op": "replace", "path": "/spec/containers/0/resources", "value": container["resources"]} in (
        fixed["patch"]
    )
    assert fixed["warnings"], "each mutation is announced as an admission warning"

    # A quarter of a GPU (one replica's share) in a time-slicing namespace becomes one shared replica with
    # memory-fraction env vars.
    half = results[("pods.yaml#1", "quarter")]
    resources = half["object"]["spec"]["containers"][0]["resources"]
    assert set(resources["limits"]) == {"nvidia.com/gpu.shared"}
    env = {e["name"]: e["value"] for e in half["object"]["spec"]["containers"][0]["env"]}
    assert env["GPU_MEMORY_FRACTION"] == "0.25"

    # A List's items are evaluated one by one: the Deployment's template is mutated, the Service skipped.
    items = [r for r in report["results"] if r["source"] == "manifests/list.yaml"]
    assert [(r["kind"], r["skipped"], r["mutated"]) for r in items] == [
        ("Deployment", False, True),
        ("Service", True, False),
    ]
    deployment = items[0]
    template = deployment["object"]["spec"]["template"]["spec"]["containers"][0]
    assert set(template["resources"]["limits"]) == {"nvidia.com/gpu.shared"}

    skipped = results[("pods.yaml#3", "settings")]
    assert skipped["skipped"] and skipped["allowed"] and not skipped["mutated"]
    assert skipped["object"]["data"] == {"created": "2024-01-01"}, "timestamps stay strings, as in Kubernetes"

    cronjob = results[("cronjob.json#0", "nightly")]
    assert cronjob["namespace"] == "batch" and cronjob["mutated"]

    # warn: admitted, the violation is a warning; audit: admitted quietly, yet the CLI shows the violation.
    warned = results[("warn.yaml#0", "nine")]
    audited = results[("warn.yaml#1", "nine")]
    assert warned["allowed"] and warned["denials"] == [] and any("per container" in w for w in warned["warnings"])
    assert (
        audited["allowed"]
        and audited["denials"] == []
        and any("per-container maximum" in w for w in audited["warnings"])
    )


# --- yaml: the post-renderer ------------------------------------------------------------------------------


def test_yaml_from_stdin_is_every_document_mutated_and_checking_it_again_changes_nothing():
    manifests = FIXTURES / "manifests"
    stream = (manifests / "pods.yaml").read_text() + "---\n" + (manifests / "list.yaml").read_text()
    run = gpu_webhook("check", "--policies", "policies", "-o", "yaml", "-", stdin=stream)
    assert run.returncode == 0, run.stderr
    documents = list(yaml.safe_load_all(run.stdout))
    assert [d["kind"] for d in documents] == ["Pod", "Pod", "ConfigMap", "List"], "empty documents are dropped"
    assert documents[0]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert documents[2]["data"] == {"created": "2024-01-01"}
    listed = documents[3]["items"]
    assert [i["kind"] for i in listed] == ["Deployment", "Service"], "a List keeps its shape"
    assert "nvidia.com/gpu.shared" in listed[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    # Only YAML on stdout; the notices go to stderr, one line each.
    assert run.stderr and all(line.startswith(("WARN <stdin>#", "DENY <stdin>#")) for line in run.stderr.splitlines())

    # Fixing manifests at their source: the webhook has nothing left to do on the output.
    again = gpu_webhook("check", "--policies", "policies", "-o", "json", "-", stdin=run.stdout)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["summary"] == {"objects": 5, "allowed": 5, "denied": 0, "mutated": 0, "skipped": 2}


# --- diff -----------------------------------------------------------------------------------------------


def test_diff_shows_each_mutated_object_before_and_after():
    run = gpu_webhook("check", "--policies", "policies", "--diff", "manifests/pods.yaml", "manifests/clean.yaml")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert out.startswith(
        "--- a/manifests/pods.yaml#0 Pod/requests-only\n+++ b/manifests/pods.yaml#0 Pod/requests-only\n@@"
    )
    assert "--- a/manifests/pods.yaml#1 Pod/quarter\n" in out
    assert "clean.yaml" not in out and "settings" not in out, "unchanged objects have no diff"
    assert "+      limits:\n+        nvidia.com/gpu: 1\n" in out
    assert "-        nvidia.com/gpu: 250m\n" in out
    assert run.stderr.splitlines()[-1] == "5 objects: 5 allowed, 0 denied, 2 mutated, 1 skipped, 2 with warnings"


# --- warnings as failures -------------------------------------------------------------------------------


def test_fail_on_warn_turns_warnings_into_exit_1():
    assert gpu_webhook("check", "--policies", "policies", "manifests/warn.yaml").returncode == 0
    run = gpu_webhook("check", "--policies", "policies", "--fail-on-warn", "manifests/warn.yaml")
    assert run.returncode == 1
    assert "VERDICT" in run.stdout


# --- errors: exit 2, one line each, naming file, document and line ------------------------------------


def test_parse_errors_name_file_document_and_line_after_the_rest_is_judged():
    """A file that does not parse (a sample with a `{username}` placeholder) stops nothing: the others are
    judged and reported, then each unreadable file is named with its line, and the exit code is 2."""
    run = gpu_webhook("check", "--policies", "policies", "broken", "manifests/clean.yaml", "missing.yaml")
    assert run.returncode == 2
    assert "manifests/clean.yaml#0  Pod/whole-gpu" in run.stdout
    assert run.stdout.splitlines()[-1] == "2 objects: 2 allowed, 0 denied, 0 mutated, 0 skipped, 0 with warnings"
    assert run.stderr.splitlines() == [
        "gpu-webhook check: missing.yaml: no such file or directory",
        "gpu-webhook check: broken/bad.json#0 line 2: invalid JSON: Expecting property name enclosed in "
        "double quotes (column 27)",
        "gpu-webhook check: broken/bad.yaml#1 line 10: mapping values are not allowed in this context",
        "gpu-webhook check: broken/not-object.yaml#0: the document is a list, not a Kubernetes object "
        "(a mapping with a kind)",
    ]
    # Nothing readable at all: the errors alone.
    run = gpu_webhook("check", "--policies", "policies", "broken")
    assert (run.returncode, run.stdout) == (2, "")


def test_a_placeholder_in_one_file_does_not_stop_the_others(tmp_path):
    (tmp_path / "a-sample.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {username}-notebook\n  labels: {app: x\n"
    )
    (tmp_path / "b-denied.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: shared-a}\nspec:\n  containers:\n"
        "    - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 2}}}\n"
    )
    run = gpu_webhook("check", "--policies", "policies", str(tmp_path))
    assert run.returncode == 2  # a denial, and a file that could not be read: the file wins
    assert [line.split(":")[0] for line in run.stdout.splitlines() if line.startswith("DENY")] == [
        f"DENY {tmp_path}/b-denied.yaml#0 Pod/big"
    ]
    (error,) = run.stderr.splitlines()
    assert error == (
        f"gpu-webhook check: {tmp_path}/a-sample.yaml#0 line 4: did not find expected key (while parsing a block "
        "mapping at line 4)"
    )


def test_policies_pointed_at_manifests_say_so_once():
    run = gpu_webhook("check", "--policies", "manifests", "manifests/clean.yaml")
    assert (run.returncode, run.stdout) == (2, "")
    (first, said, *rest) = run.stderr.splitlines()
    assert first == "gpu-webhook check: invalid policies in manifests:"
    assert said.startswith("  manifests: ") and "hold Kubernetes manifests (" in said
    assert said.endswith("not GPUPolicy documents: --policies takes a directory of policies; give manifests as "
                         "the paths to check")  # fmt: skip
    assert not [line for line in rest if "is not supported; use GPUPolicy" in line]


def test_policy_errors_exit_2_naming_the_problem(tmp_path):
    bad = tmp_path / "policies"
    bad.mkdir()
    (bad / "p.yaml").write_text(
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: p}\nspec: {enforcment: warn}\n"
    )
    run = gpu_webhook("check", "--policies", str(bad), "manifests/clean.yaml")
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.startswith(f"gpu-webhook check: invalid policies in {bad}:\n  ")
    assert "p.yaml#0" in run.stderr and "enforcment" in run.stderr


def test_usage_errors_exit_2(capsys, monkeypatch):
    monkeypatch.chdir(FIXTURES)
    monkeypatch.delenv("GPU_ADMISSION_POLICIES", raising=False)
    cases = [
        ([], "no input: give manifest files, directories, or - to read stdin"),
        (["--diff", "-o", "json", "manifests"], "--diff is an output format of its own; drop -o/--output"),
        (["--insecure", "manifests"], "--ca-file and --insecure only apply with --server URL"),
        (["--policies", "nowhere", "manifests"], "policy directory nowhere not found"),
        (["empty-dir-that-does-not-exist/"], "empty-dir-that-does-not-exist/: no such file or directory"),
    ]
    for args, message in cases:
        assert main(["check", *args]) == 2, args
        assert capsys.readouterr().err == f"gpu-webhook check: {message}\n"
    monkeypatch.chdir(FIXTURES / "manifests")  # no ./policies here
    assert main(["check", "clean.yaml"]) == 2
    assert capsys.readouterr().err == (
        "gpu-webhook check: policy directory policies not found (pass --policies DIR or set GPU_ADMISSION_POLICIES)\n"
    )


def test_a_directory_without_manifests_is_an_error(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert main(["check", "--policies", str(FIXTURES / "policies"), str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith(": no *.yaml, *.yml or *.json files in this directory\n")


# --- policies among the manifests: a GPUPolicy is read by --policies, not judged as a workload -----------

ROOT = FIXTURES.parent.parent.parent
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team-a}\nspec: {containers: [{name: c, image: i}]}\n"


def test_check_examples_skips_the_example_policies_with_one_line_each(monkeypatch, capsys):
    """`check examples/` meets examples/policies/: each policy is left out of the report with one line saying
    so, here as the policies this run applies."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("GPU_ADMISSION_POLICIES", raising=False)
    assert main(["check", "-o", "json", "--policies", "examples/policies", "examples/"]) == 1  # pod-denied.yaml
    out, err = capsys.readouterr()
    assert not any(r["kind"] == "GPUPolicy" for r in json.loads(out)["results"])
    assert err.splitlines() == [
        "SKIP examples/policies/memory-ack.yaml#0 GPUPolicy/notebooks-ack-sharing: a policy (read from --policies "
        "examples/policies), not a workload",
        "SKIP examples/policies/memory-hami.yaml#0 GPUPolicy/inference-hami: a policy (read from --policies "
        "examples/policies), not a workload",
        "SKIP examples/policies/memory-volcano.yaml#0 GPUPolicy/batch-volcano-vgpu: a policy (read from --policies "
        "examples/policies), not a workload",
        "SKIP examples/policies/mig.yaml#0 GPUPolicy/batch-mig: a policy (read from --policies examples/policies), "
        "not a workload",
        "SKIP examples/policies/mps.yaml#0 GPUPolicy/inference-mps: a policy (read from --policies "
        "examples/policies), not a workload",
        "SKIP examples/policies/time-slicing.yaml#0 GPUPolicy/notebooks-time-slicing: a policy (read from "
        "--policies examples/policies), not a workload",
    ]


@pytest.mark.parametrize("output", ["table", "json", "yaml"])
def test_a_policy_that_this_run_does_not_apply_says_how_to_apply_it(tmp_path, monkeypatch, capsys, output):
    policy = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: lab}\nspec: {namespaces: [lab]}\n"
    (tmp_path / "lab.yaml").write_text(policy + "---\n" + POD)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "-o", output, "--policies", str(FIXTURES / "policies"), "lab.yaml"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == (
        "SKIP lab.yaml#0 GPUPolicy/lab: a gpu-admission policy, not a workload; to apply it, give its directory "
        "to --policies"
    )
    if output == "json":
        assert [r["kind"] for r in json.loads(out)["results"]] == ["Pod"]
    elif output == "yaml":  # a post-renderer passes every document on: the policy unchanged
        assert next(yaml.safe_load_all(out)) == yaml.safe_load(policy)
    else:
        assert out.splitlines()[-1] == "1 object: 1 allowed, 0 denied, 0 mutated, 0 skipped, 0 with warnings"


def test_only_the_gpu_admission_group_makes_a_policy(tmp_path, monkeypatch, capsys):
    """Another group's kind GPUPolicy is someone else's object: judged (skipped: no pod spec) like any other."""
    (tmp_path / "other.yaml").write_text("apiVersion: example.com/v1\nkind: GPUPolicy\nmetadata: {name: x}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "-o", "json", "--policies", str(FIXTURES / "policies"), "other.yaml"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    ((result,),) = [json.loads(out)["results"]]
    assert (result["kind"], result["skipped"]) == ("GPUPolicy", True)


# --- start-up and terminals -------------------------------------------------------------------------------


def test_check_loads_no_heavy_modules():
    """`check` runs in CI on every commit: the cluster client, the server and crypto stay unloaded."""
    code = (
        "import sys\n"
        "from webhook.cli.main import main\n"
        "rc = main(['check', '--policies', 'policies', '-o', 'json', 'manifests/pods.yaml'])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'flask', 'jsonpatch', "
        "'cryptography', 'gunicorn', 'urllib3', 'requests'})\n"
        "print(rc, heavy, file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=FIXTURES, timeout=60)
    assert run.stderr.strip() == "0 []"


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Terminal()) is True
    assert use_colour(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_colour(Terminal()) is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [1\n", "<stdin>#0 line 2: "),
        ("kind: Pod\n---\n'unterminated\n", "<stdin>#1 line 4: found unexpected end of stream"),
        ("kind: List\nitems: [1]\n", "<stdin>#0: items[0] is a number, not a Kubernetes object"),
        ("just a string\n", "<stdin>#0: the document is a string, not a Kubernetes object"),
        # What kubectl's YAML-to-JSON step refuses, named where it is.
        ("kind: Pod\nspec: {a: !!binary aGk=}\n", "<stdin>#0: spec.a: binary data (!!binary) has no JSON form"),
        ("kind: Pod\nspec: {a: [1, .inf]}\n", "<stdin>#0: spec.a[1]: inf is not a number JSON can carry"),
        ("kind: Pod\nmetadata: {labels: {null: x}}\n", "<stdin>#0: metadata.labels: the key null has no JSON form"),
        ("kind: Pod\nspec: !!set {a, b}\n", "<stdin>#0: spec: a set has no JSON form"),
    ],
)
def test_stdin_parse_errors(monkeypatch, capsys, text, message):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["check", "--policies", str(FIXTURES / "policies"), "-"]) == 2
    assert capsys.readouterr().err.startswith(f"gpu-webhook check: {message}")


def test_number_and_boolean_keys_become_strings_as_kubectl_sends_them(monkeypatch, capsys):
    """YAML allows `5: 3` as a key; kubectl's YAML-to-JSON step writes it as "5", and so does check."""
    text = (
        "kind: Pod\napiVersion: v1\nmetadata: {name: p, namespace: shared-a, labels: {true: yes}}\n"
        "spec:\n  containers:\n  - name: a\n    image: x\n    resources: {limits: {5: 3, nvidia.com/gpu: 1}}\n"
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["check", "--policies", str(FIXTURES / "policies"), "-o", "json", "-"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["object"]["metadata"]["labels"] == {"true": True}
    assert result["object"]["spec"]["containers"][0]["resources"]["limits"]["5"] == 3
    assert result["mutated"], "the GPU is still mapped to the namespace's shared resource"


def test_only_pods_get_requests_from_limits_before_the_engine_as_the_api_server_does(monkeypatch, capsys):
    """SetDefaults_Pod copies limits into requests "on a v1.Pod and not a v1.PodTemplate": a Deployment's
    template reaches the webhook with limits alone, and the patch check prints applies to the manifest."""
    from tests import evanphx

    container = "containers: [{name: a, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]"
    text = (
        f"kind: Deployment\napiVersion: apps/v1\nmetadata: {{name: d, namespace: shared-a}}\n"
        f"spec: {{template: {{spec: {{{container}}}}}}}\n---\n"
        f"kind: Pod\napiVersion: v1\nmetadata: {{name: p, namespace: shared-a}}\nspec: {{{container}}}\n"
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["check", "--policies", str(FIXTURES / "policies"), "-o", "json", "-"]) == 0
    deployment, pod = json.loads(capsys.readouterr().out)["results"]
    as_written = yaml.safe_load(text.split("---")[0])
    assert evanphx.apply(as_written, deployment["patch"]) == deployment["object"]
    assert "requests" not in deployment["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert pod["object"]["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu.shared": 1}


def test_yaml_output_writes_every_value_out_without_anchors_or_aliases():
    """The containers of a mutated pod get the same env entries; each is written where it is, as kubectl shows
    objects, and so is a value that the input's own anchors shared."""
    manifest = """\
apiVersion: v1
kind: Pod
metadata: {name: two, namespace: shared-x}
spec:
  containers:
  - {name: a, image: x, resources: {limits: {nvidia.com/gpu: 1}}, env: [&e {name: A, value: "1"}]}
  - {name: b, image: x, resources: {limits: {nvidia.com/gpu: 1}}, env: [*e]}
"""
    run = gpu_webhook("check", "--policies", "policies", "-o", "yaml", "-", stdin=manifest)
    assert run.returncode == 0, run.stderr
    assert "&" not in run.stdout and "*" not in run.stdout
    first, second = (c["env"] for c in yaml.safe_load(run.stdout)["spec"]["containers"])
    assert first == second and len(first) > 1 and first[0] == {"name": "A", "value": "1"}


def test_yaml_output_means_to_kubectl_what_the_input_meant(monkeypatch, capsys):
    """A Helm post-renderer's output is read by kubectl (go-yaml v2): a string stays a string, and values
    that go-yaml reads differently from PyYAML (`12:30:00`, `=`, `y`) are read as kubectl reads them."""
    from webhook.cli import goyaml

    tricky = ["y", "n", "1e-5", "0o17", "08", "+.5", "12:30:00", "=", "yes", "~", "1_000"]
    env = "".join(f"      - {{name: V{i}, value: '{v}'}}\n" for i, v in enumerate(tricky))
    text = (
        "kind: Pod\napiVersion: v1\nmetadata: {name: p, namespace: shared-a}\nspec:\n  containers:\n"
        f"    - name: a\n      image: x\n      resources: {{limits: {{nvidia.com/gpu: 1}}}}\n      env:\n{env}"
        "---\nkind: ConfigMap\napiVersion: v1\nmetadata: {name: c}\n"
        "data: {at: 12:30:00, eq: =, flag: y, rate: 1e-4}\n"
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["check", "--policies", str(FIXTURES / "policies"), "-o", "yaml", "-"]) == 0
    pod, configmap = yaml.load_all(capsys.readouterr().out, Loader=goyaml.Loader)
    values = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert [values[f"V{i}"] for i in range(len(tricky))] == tricky
    assert configmap["data"] == {"at": "12:30:00", "eq": "=", "flag": True, "rate": 0.0001}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: " + "[" * 50_000 + "]" * 50_000 + "\n", "<stdin>#0: nested too deeply to be a Kubernetes object"),
        ("- " * 30_000 + "x\n", "<stdin>#0: nested too deeply to be a Kubernetes object"),
        ("a: " + "[" * 3_000 + "]" * 3_000 + "\n", "<stdin>#0: nested too deeply to be a Kubernetes object"),
        (  # a "billion laughs": 1 KB of aliases that expand to 10**9 values
            "kind: ConfigMap\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"{chr(c + 1)}: &{chr(c + 1)} [{', '.join([f'*{chr(c)}'] * 10)}]\n" for c in range(97, 105)),
            "<stdin>#0: YAML aliases expand to more than 1,000,000 values (line 7): kubectl refuses such excessive "
            "aliasing too",
        ),
    ],
)
def test_hostile_yaml_is_a_one_line_error_not_a_crash_or_a_hang(text, message):
    run = gpu_webhook("check", "--policies", "policies", "-", stdin=text)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.startswith(f"gpu-webhook check: {message}") and run.stderr.count("\n") == 1


def test_a_json_file_may_hold_several_objects_one_after_another(tmp_path):
    # kubectl reads a JSON stream; a JSON document nested too deeply is a one-line error.
    stream = tmp_path / "stream.json"
    stream.write_text('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}\n'
                      '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}\n')  # fmt: skip
    run = gpu_webhook("check", "--policies", "policies", "-o", "json", str(stream))
    assert run.returncode == 0, run.stderr
    assert [(r["document"], r["name"]) for r in json.loads(run.stdout)["results"]] == [(0, "a"), (1, "b")]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    run = gpu_webhook("check", "--policies", "policies", str(deep))
    assert run.returncode == 2
    assert run.stderr == f"gpu-webhook check: {deep}#0: nested too deeply to be a Kubernetes object\n"


# --- --server: the same report from a running webhook -------------------------------------------------------


def comparable(report: dict) -> list[dict]:
    """What a webhook's answers carry. Not the warnings: the server cuts them to 120 characters as the API
    server advises, and `audit` enforcement keeps violations out of them. Not the policy name, which an
    AdmissionReview response names only on objects it changes (the `gpu-admission.io/policy` annotation)."""
    return [{k: v for k, v in r.items() if k not in ("warnings", "policy")} for r in report["results"]]


@pytest.fixture(scope="module")
def server(start_server):
    """The real `gpu-webhook serve` (gunicorn, TLS) with the CLI fixtures' policies."""
    return start_server(policies_dir=FIXTURES / "policies")


def test_server_answers_give_the_same_report_as_the_engine_in_process(server, capsys):
    local = gpu_webhook("check", "--policies", "policies", "-o", "json", "manifests")
    remote = gpu_webhook("check", "--server", server.url, "--ca-file", str(server.ca_file), "-o", "json", "manifests")
    assert remote.returncode == local.returncode == 1, remote.stderr
    assert remote.stderr == ""
    local_report, remote_report = json.loads(local.stdout), json.loads(remote.stdout)
    assert remote_report["summary"] == local_report["summary"]
    assert comparable(remote_report) == comparable(local_report)
    for mine, theirs in zip(local_report["results"], remote_report["results"], strict=True):
        if mine["mutated"]:
            assert theirs["policy"] == mine["policy"]

    # Without the CA, TLS verification fails: one line saying what to pass.
    unverified = gpu_webhook("check", "--server", server.url, "manifests/denied.yaml")
    assert unverified.returncode == 2 and unverified.stdout == ""
    assert unverified.stderr.startswith(f"gpu-webhook check: {server.url}: TLS verification failed (")
    assert "pass --ca-file" in unverified.stderr and len(unverified.stderr.splitlines()) == 1

    # --insecure skips verification (a development server); a wrong path is a clear HTTP error.
    assert main(["check", "--server", server.url, "--insecure", str(FIXTURES / "manifests/denied.yaml")]) == 1
    wrong = f"{server.url}/nowhere"
    assert main(["check", "--server", wrong, "--insecure", str(FIXTURES / "manifests/denied.yaml")]) == 2
    assert capsys.readouterr().err.startswith(f"gpu-webhook check: {wrong}/mutate answered HTTP 404")


def test_one_kept_alive_connection_serves_every_review(server, monkeypatch, capsys):
    """A TLS handshake costs far more than a review: --server opens one connection, as the API server does."""
    connects = []
    original = http.client.HTTPSConnection.connect

    def counting_connect(self: http.client.HTTPSConnection) -> None:
        connects.append(self.port)
        original(self)

    monkeypatch.setattr(http.client.HTTPSConnection, "connect", counting_connect)
    monkeypatch.chdir(FIXTURES)
    assert main(["check", "--server", server.url, "--ca-file", str(server.ca_file), "manifests"]) == 1
    assert "11 objects: 10 allowed, 1 denied, 4 mutated, 2 skipped" in capsys.readouterr().out
    assert len(connects) == 1, "16 reviews (8 objects with a pod spec, /mutate and /validate each)"


def test_server_connection_errors_are_one_line(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    denied = str(FIXTURES / "manifests/denied.yaml")
    assert main(["check", "--server", f"https://127.0.0.1:{port}", denied]) == 2
    assert capsys.readouterr().err == (
        f"gpu-webhook check: https://127.0.0.1:{port}: connection refused (is the webhook running there?)\n"
    )
    assert main(["check", "--server", "ftp://example", denied]) == 2
    assert capsys.readouterr().err == (
        "gpu-webhook check: --server ftp://example: expected https://HOST[:PORT] (the webhook's address)\n"
    )
    assert main(["check", "--server", f"https://127.0.0.1:{port}", "--ca-file", "missing.pem", denied]) == 2
    assert capsys.readouterr().err == "gpu-webhook check: --ca-file missing.pem: no such file\n"


def test_a_fraction_in_a_warn_namespace_is_denied_with_the_line_the_server_sends(server):
    """The API server refuses a fraction of an extended resource whatever the policy, so /mutate denies it under
    `warn` too, and `check` shows the same verdict and line, offline and through --server."""
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: half, namespace: sandbox}\nspec:\n  containers:\n"
        "    - name: train\n      image: busybox\n      resources: {limits: {nvidia.com/gpu: 0.5}}\n"
    )
    line = (
        'DENY <stdin>#0 Pod/half: container "train": nvidia.com/gpu 0.5 is fractional, but GPUs are whole devices '
        '(the API server refuses it anyway); request a whole number of GPUs (policy "lenient" gives whole GPUs '
        "only; ask for a namespace with sharing)"
    )
    local = gpu_webhook("check", "--policies", "policies", "-", stdin=pod)
    remote = gpu_webhook("check", "--server", server.url, "--ca-file", str(server.ca_file), "-", stdin=pod)
    for run in (local, remote):
        assert run.returncode == 1, run.stderr
        assert line in run.stdout.splitlines()
