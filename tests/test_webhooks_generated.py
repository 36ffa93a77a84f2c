"""The webhook configurations, the older clusters' patches, the excluded namespaces and the chart's entries are
written from the engine's tables (`make manifests`, webhook/cli/webhooks.py): the committed files are what the
generator writes, and the custom resources' matchConditions select exactly the objects whose templates the
engine judges (evaluated with the `common-expression-language` package, cel-go's semantics)."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests import yamldocs
from webhook.admission.customresources import BUILTIN, BUILTIN_KINDS, templates
from webhook.cli import webhooks

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "custom-resources"


def test_the_committed_files_are_what_make_manifests_writes() -> None:
    for path, content in webhooks.files().items():
        assert (ROOT / path).read_text() == content, f"{path} differs from the tables: run `make manifests`"


def test_the_generator_writes_every_file_into_a_repository(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "webhook.cli.webhooks", "--root", str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    count = 7 + len(BUILTIN_KINDS) + 1  # the pod-spec places and claims, the custom resources, GPUPolicy objects
    assert run.stdout == f"wrote {len(webhooks.files())} files from the webhook tables ({count} webhooks)\n"
    for path, content in webhooks.files().items():
        assert (tmp_path / path).read_text() == content


def _validating() -> list[dict[str, Any]]:
    return copy.deepcopy(_shipped_validating())


@cache
def _shipped_validating() -> list[dict[str, Any]]:
    (configuration,) = yamldocs.load_all((ROOT / webhooks.VALIDATING).read_text())
    return configuration["webhooks"]


def test_each_custom_resource_kind_has_one_validating_entry_and_no_mutating_one() -> None:
    custom = {hook["name"]: hook for hook in _validating() if hook["rules"][0]["apiVersions"] == ["*"]}
    assert list(custom) == [f"{k.resource}.{k.group}.gpu-admission.io" for k in BUILTIN_KINDS]
    for kind in BUILTIN_KINDS:
        (rule,) = custom[f"{kind.resource}.{kind.group}.gpu-admission.io"]["rules"]
        assert rule == {
            "apiGroups": [kind.group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
            "resources": [kind.resource], "scope": "Namespaced",
        }  # fmt: skip
    (mutating,) = yamldocs.load_all((ROOT / webhooks.MUTATING).read_text())
    assert not [hook for hook in mutating["webhooks"] if hook["name"] in custom]


def test_gpupolicy_objects_have_one_validating_entry_that_fails_closed_on_every_change() -> None:
    """A policy edit waits while no replica answers: the CRD's schema cannot check what the loader checks across
    policies. Cluster-scoped objects have no namespace to select, and every one is reviewed (no condition), so
    the older clusters' patch has nothing to remove from it."""
    (hook,) = [hook for hook in _validating() if hook["name"] == "gpupolicies.gpu-admission.io"]
    assert hook["rules"] == [
        {"apiGroups": ["gpu-admission.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["gpupolicies"], "scope": "Cluster"},
    ]  # fmt: skip
    assert (hook["failurePolicy"], hook["sideEffects"], hook["clientConfig"]["service"]["path"]) == (
        "Fail", "None", "/validate",
    )  # fmt: skip
    assert "namespaceSelector" not in hook and "matchConditions" not in hook
    assert hook == _validating()[-1]  # last: the older clusters' patches keep their indexes
    (mutating,) = yamldocs.load_all((ROOT / webhooks.MUTATING).read_text())
    assert hook["name"] not in [h["name"] for h in mutating["webhooks"]]
    patch = yamldocs.load((ROOT / webhooks.REMOVE.format("validating")).read_text())
    assert [op["path"] for op in patch] == [f"/webhooks/{i}/matchConditions" for i in range(len(_validating()) - 1)]
    (chart,) = [e for e in yamldocs.load((ROOT / webhooks.CHART).read_text()) if e["name"] == hook["name"]]
    assert (chart["validatingOnly"], chart["namespaced"], "expression" in chart) == (True, False, False)


def test_the_excluded_namespaces_file_and_the_charts_values_hold_the_table() -> None:
    names = [name for name, _ in webhooks.EXCLUDED_NAMESPACES]
    (listing,) = yamldocs.load_all((ROOT / webhooks.EXCLUDED).read_text())
    assert listing["namespaces"] == names
    values = yamldocs.load((ROOT / "charts" / "gpu-admission" / "values.yaml").read_text())
    assert values["excludedNamespaces"] == names


def test_adding_a_kind_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the lead does to fold in another kind: one CustomKind, and both configurations and the chart follow."""
    from webhook.admission import customresources

    extra = customresources.CustomKind(
        "example.com", "TrainingRun", "trainingruns", (customresources.Site("spec.workers[*].template.spec"),)
    )
    monkeypatch.setattr(webhooks, "BUILTIN_KINDS", (*BUILTIN_KINDS, extra))
    written = webhooks.files()
    assert "trainingruns.example.com.gpu-admission.io" in written[webhooks.VALIDATING]
    assert "trainingruns.example.com.gpu-admission.io" in written[webhooks.CHART]
    assert "trainingruns" not in written[webhooks.MUTATING]


# ------------------------------------------------------------------------------------ the conditions, evaluated


def _cel(expression: str, obj: dict[str, Any]) -> Any:
    import cel

    return cel.evaluate(expression, {"object": obj})


def _condition(kind: str, group: str) -> str:
    (hook,) = [h for h in _validating() if h["rules"][0]["apiGroups"] == [group] and h["name"].split(".")[0]
               == next(k.resource for k in BUILTIN_KINDS if k.kind == kind and k.group == group)]  # fmt: skip
    (condition,) = hook["matchConditions"]
    return condition["expression"]


def _fixtures() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        for index, doc in enumerate(yamldocs.load_all(path.read_text())):
            if doc is not None:
                found.append((f"{path.name}#{index}", doc))
    return found


def _without_gpus(node: Any) -> Any:
    """A copy with every managed GPU resource taken out of every resource map (and the hostPaths and device
    variables the fixtures do not use anyway)."""
    from webhook.admission.base.resources import is_managed

    if isinstance(node, dict):
        return {k: _without_gpus(v) for k, v in node.items() if not (isinstance(k, str) and is_managed(k))}
    if isinstance(node, list):
        return [_without_gpus(item) for item in node]
    return node


@pytest.mark.parametrize(("name", "obj"), _fixtures(), ids=[name for name, _ in _fixtures()])
def test_the_condition_selects_a_custom_resource_exactly_when_a_template_asks_for_gpus(
    name: str, obj: dict[str, Any]
) -> None:
    from webhook.admission.base.podspec import mentions_gpu

    kind = BUILTIN.lookup(obj)
    assert kind is not None, name
    expression = _condition(kind.kind, kind.group)
    found = templates(obj, kind)
    assert found, f"{name}: no template found"
    views = [{"spec": t.spec} for t in found]
    expected = any(mentions_gpu(view, ("spec",)) for view in views)
    assert _cel(expression, copy.deepcopy(obj)) is expected is True, name
    stripped = _without_gpus(obj)
    assert _cel(expression, stripped) is False, name
    # Missing and null parents at every step: false, never an error.
    assert _cel(expression, {"metadata": {"name": "x"}}) is False
    assert _cel(expression, {"metadata": {"name": "x"}, "spec": {}}) is False


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=[k.kind + "." + k.group for k in BUILTIN_KINDS])
def test_every_kinds_condition_is_false_on_empty_and_null_parents(kind: Any) -> None:
    expression = _condition(kind.kind, kind.group)
    for spec in ({}, {"templates": None, "tasks": None, "replicatedJobs": None, "workerGroupSpecs": None}):
        assert _cel(expression, {"metadata": {"name": "x"}, "spec": spec}) is False


def test_an_admins_kinds_get_an_overlay_patch_whose_entries_render_and_select(tmp_path: Path) -> None:
    """`python -m webhook.cli.webhooks --custom-resources FILE` prints a JSON patch; in a component listed before
    the excluded-namespaces one, it adds a validating entry that excludes the listed namespaces and whose
    condition selects a GPU object of the kind (and nothing else)."""
    from tests.test_manifests import KUBECTL, MANIFESTS, excluded_namespaces, kubectl_kustomize, render

    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(
        "kind: CustomResourceTemplates\nkinds:\n  - group: example.com\n    kind: TrainingRun\n"
        "    resource: trainingruns\n    templates: [spec.launcher.template.spec, 'spec.workers[*].template.spec']\n"
    )
    run = subprocess.run([sys.executable, "-m", "webhook.cli.webhooks", "--custom-resources", str(kinds)],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    site = tmp_path / "repo" / "site"
    shutil.copytree(MANIFESTS, tmp_path / "repo" / "manifests")
    component = site / "training-runs"
    component.mkdir(parents=True)
    (component / "entries.yaml").write_text(run.stdout)
    (component / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n"
        "  - path: entries.yaml\n    target: {kind: ValidatingWebhookConfiguration, name: gpu-admission}\n"
    )
    (site / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../manifests/base]\n"
        "components: [../manifests/ca-bundle, training-runs, ../manifests/excluded-namespaces]\n"
    )
    outputs = [render(site)] + ([kubectl_kustomize(site)] if KUBECTL else [])
    for objects in outputs:
        (validating,) = [o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"]
        hook = validating["webhooks"][-1]
        assert hook["name"] == "trainingruns.example.com.gpu-admission.io"
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == excluded_namespaces()
    expression = hook["matchConditions"][0]["expression"]
    gpu = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    assert _cel(expression, {"spec": {"workers": [{"template": {"spec": gpu}}]}}) is True
    assert _cel(expression, {"spec": {"launcher": {"template": {"spec": gpu}}}}) is True
    assert _cel(expression, {"spec": {"workers": [{"template": {"spec": {"containers": [{"name": "w"}]}}}]}}) is False
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Other\n")
    run = subprocess.run([sys.executable, "-m", "webhook.cli.webhooks", "--custom-resources", str(bad)],
                         capture_output=True, text=True)  # fmt: skip
    assert (run.returncode, run.stderr) == (
        2, f"python -m webhook.cli.webhooks: {bad}: not a CustomResourceTemplates document (kind: "
        "CustomResourceTemplates)\n",
    )  # fmt: skip


def test_the_shipped_native_policies_are_the_first_day_default_compiled() -> None:
    """manifests/native-policies/ and the chart's copy hold `policy render native --beside-webhook` of the audit
    copy the installers apply (they install the webhook with it), so the floor the API server holds audits, as
    the webhook does, on the first day, and its MutatingAdmissionPolicies change Pods only."""
    import io

    from webhook.admission.policy.loader import parse_policy_sources
    from webhook.cli.policy_cmd import render_native

    rendered = io.StringIO()
    audit_copy = (ROOT / webhooks.NATIVE_SOURCE).read_text()
    policies = parse_policy_sources({"default.yaml": audit_copy})
    assert render_native(policies, rendered, io.StringIO(), beside_webhook=True) == 0
    for path in webhooks.NATIVE_COPIES:
        shipped = list(yamldocs.load_all((ROOT / path).read_text()))
        assert shipped == list(yamldocs.load_all(rendered.getvalue()))
        bindings = [obj for obj in shipped if obj["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert [binding["spec"]["validationActions"] for binding in bindings] == [["Audit"], ["Deny"]]
        maps = [obj for obj in shipped if obj["kind"] == "MutatingAdmissionPolicy"]
        assert {rule["resources"][0] for m in maps for rule in m["spec"]["matchConstraints"]["resourceRules"]} == {
            "pods"
        }
        assert {obj["metadata"]["name"] for obj in shipped} == {
            "gpu-admission-default",
            "gpu-admission-built-in-default",
        }
