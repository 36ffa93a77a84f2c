"""The native objects as the API server validates them on create, before any CEL is compiled: the rules of its
admissionregistration validation (ValidatingAdmissionPolicy and its binding, read at the source; the
MutatingAdmissionPolicy's spec follows the same rules for the fields the two share, and its own fields are checked
against the values its API reference allows), after the defaults its decoding sets (matchPolicy Equivalent, empty
selectors, scope `*`). Every set the project renders is checked: the shipped one, the examples', the default
policy's, and the tests' own (every mode and option the differential tests compile), alone and beside the webhook.

The CEL in them is compiled by the API server's own code outside the suite (docs/native-policies.md, Cost); this
file holds what a mistyped field or name would break.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests import yamldocs
from tests.test_native_policies import BESIDE, FRACTION_BESIDE, FRACTION_NATIVE, NATIVE
from webhook.admission.policy.loader import load_policies
from webhook.cli.webhooks import native_documents

ROOT = Path(__file__).resolve().parent.parent

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
CEL_IDENTIFIER = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
CEL_RESERVED = {
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function", "if", "import",
    "let", "loop", "package", "namespace", "return", "var", "void", "while",
}  # fmt: skip
FAILURE_POLICIES = {"Ignore", "Fail"}
MATCH_POLICIES = {"Exact", "Equivalent"}
OPERATIONS = {"*", "CREATE", "UPDATE", "DELETE", "CONNECT"}
REASONS = {"Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"}
ACTIONS = {"Deny", "Warn", "Audit"}
SELECTOR_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}
REINVOCATION = {"Never", "IfNeeded"}
PATCH_TYPES = {"ApplyConfiguration": "applyConfiguration", "JSONPatch": "jsonPatch"}
POLICY_KINDS = {"ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"}
BINDINGS = {"ValidatingAdmissionPolicyBinding": "ValidatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding": "MutatingAdmissionPolicy"}  # fmt: skip


def dns_subdomain(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name) is not None


def qualified_name(name: Any) -> bool:
    """A label key or matchCondition name: an optional DNS-subdomain prefix and `/`, then a name of at most 63."""
    if not isinstance(name, str):
        return False
    prefix, _, short = name.rpartition("/")
    if prefix and not dns_subdomain(prefix):
        return False
    return 0 < len(short) <= 63 and QUALIFIED_NAME.fullmatch(short) is not None


def label_selector_errors(selector: dict[str, Any], where: str) -> list[str]:
    errors = []
    for key, value in (selector.get("matchLabels") or {}).items():
        if not qualified_name(key) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            errors.append(f"{where}.matchLabels: {key}={value}")
    for i, expression in enumerate(selector.get("matchExpressions") or ()):
        operator, values = expression.get("operator"), expression.get("values") or []
        if not qualified_name(expression.get("key")) or operator not in SELECTOR_OPERATORS:
            errors.append(f"{where}.matchExpressions[{i}]: key or operator")
        if (operator in ("In", "NotIn")) != bool(values):
            errors.append(f"{where}.matchExpressions[{i}]: values must be given for In and NotIn only")
        errors += [
            f"{where}.matchExpressions[{i}]: value {v!r}" for v in values if len(v) > 63 or not LABEL_VALUE.fullmatch(v)
        ]
    return errors


def match_resources_errors(match: dict[str, Any], where: str, rules_required: bool) -> list[str]:
    """validateMatchResources, after defaulting (matchPolicy Equivalent, empty selectors, scope `*`)."""
    errors = []
    if match.get("matchPolicy", "Equivalent") not in MATCH_POLICIES:
        errors.append(f"{where}.matchPolicy")
    for selector in ("namespaceSelector", "objectSelector"):
        errors += label_selector_errors(match.get(selector) or {}, f"{where}.{selector}")
    rules = match.get("resourceRules") or []
    if rules_required and not rules:
        errors.append(f"{where}.resourceRules: at least one rule gives the policy its types")
    for i, rule in enumerate([*rules, *(match.get("excludeResourceRules") or [])]):
        at = f"{where}.rules[{i}]"
        groups, versions, resources = rule.get("apiGroups"), rule.get("apiVersions"), rule.get("resources")
        if not groups or (len(groups) > 1 and "*" in groups):
            errors.append(f"{at}.apiGroups")
        if not versions or "" in versions or (len(versions) > 1 and "*" in versions):
            errors.append(f"{at}.apiVersions")
        if not resources or "" in resources or (len(resources) > 1 and "*/*" in resources):
            errors.append(f"{at}.resources")
        if "*" in resources and any("/" not in r and r != "*" for r in resources):
            errors.append(f"{at}.resources: '*' beside a resource")
        operations = rule.get("operations") or []
        if not operations or not set(operations) <= OPERATIONS or (len(operations) > 1 and "*" in operations):
            errors.append(f"{at}.operations")
        if rule.get("scope", "*") not in ("Cluster", "Namespaced", "*"):
            errors.append(f"{at}.scope")
    return errors


def policy_errors(obj: dict[str, Any]) -> list[str]:
    """A policy's spec: failurePolicy, matchConstraints with a resource rule, matchConditions (at most 64, named
    once each, qualified names), variables (CEL identifiers, named once), and the kind's own fields."""
    spec, errors = obj["spec"], []
    if spec.get("failurePolicy", "Fail") not in FAILURE_POLICIES:
        errors.append("failurePolicy")
    if "matchConstraints" not in spec:
        errors.append("matchConstraints is required")
    else:
        errors += match_resources_errors(spec["matchConstraints"], "matchConstraints", rules_required=True)
    conditions = spec.get("matchConditions") or []
    names = [c.get("name") for c in conditions]
    if len(conditions) > 64 or len(set(names)) != len(names):
        errors.append("matchConditions: at most 64, each named once")
    errors += [f"matchConditions name {n!r}" for n in names if not qualified_name(n)]
    errors += [f"matchCondition {c.get('name')}: no expression" for c in conditions if not c["expression"].strip()]
    variables = [v.get("name") for v in spec.get("variables") or ()]
    if len(set(variables)) != len(variables):
        errors.append("variables: each named once")
    errors += [f"variable name {n!r}" for n in variables if not CEL_IDENTIFIER.fullmatch(n or "") or n in CEL_RESERVED]
    if obj["kind"] == "ValidatingAdmissionPolicy":
        validations = spec.get("validations") or []
        if not validations and not spec.get("auditAnnotations"):
            errors.append("validations or auditAnnotations: at least one")
        for i, validation in enumerate(validations):
            message = validation.get("message", "")
            if not validation.get("expression", "").strip():
                errors.append(f"validations[{i}].expression")
            if "messageExpression" in validation and not validation["messageExpression"].strip():
                errors.append(f"validations[{i}].messageExpression: non-empty if given")
            if message and (not message.strip() or re.search(r"[\n\r]", message.strip())):
                errors.append(f"validations[{i}].message: non-empty, no line breaks")
            if validation.get("reason", "Invalid") not in REASONS:
                errors.append(f"validations[{i}].reason")
    else:
        if spec.get("reinvocationPolicy") not in REINVOCATION:
            errors.append("reinvocationPolicy")
        mutations = spec.get("mutations") or []
        if not mutations:
            errors.append("mutations: at least one")
        for i, mutation in enumerate(mutations):
            field = PATCH_TYPES.get(mutation.get("patchType", ""))
            given = [name for name in PATCH_TYPES.values() if name in mutation]
            if field is None or given != [field] or not mutation[field].get("expression", "").strip():
                errors.append(f"mutations[{i}]: patchType and its one expression")
    return errors


def binding_errors(obj: dict[str, Any], policies: set[tuple[str, str]]) -> list[str]:
    spec, errors = obj["spec"], []
    if (BINDINGS[obj["kind"]], spec.get("policyName")) not in policies:
        errors.append(f"policyName {spec.get('policyName')!r} names no {BINDINGS[obj['kind']]} of the set")
    if "paramRef" in spec:
        errors.append("paramRef: the native set has no parameters")
    errors += match_resources_errors(spec.get("matchResources") or {}, "matchResources", rules_required=False)
    if obj["kind"] == "ValidatingAdmissionPolicyBinding":
        actions = spec.get("validationActions") or []
        if not actions or not set(actions) <= ACTIONS or len(set(actions)) != len(actions):
            errors.append(f"validationActions {actions}")
        if {"Deny", "Warn"} <= set(actions):
            errors.append("validationActions: Deny and Warn together")
    return errors


def errors_of(objects: list[dict[str, Any]]) -> list[str]:
    policies = {(o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] in POLICY_KINDS}
    found = []
    for obj in objects:
        where = f"{obj['kind']} {obj['metadata'].get('name')}"
        if not dns_subdomain(obj["metadata"].get("name")):
            found.append(f"{where}: metadata.name is no DNS subdomain")
        found += [f"{where}: label {k}={v}" for k, v in (obj["metadata"].get("labels") or {}).items()
                  if not qualified_name(k) or len(v) > 63 or not LABEL_VALUE.fullmatch(v)]  # fmt: skip
        if obj["kind"] in POLICY_KINDS:
            found += [f"{where}: {e}" for e in policy_errors(obj)]
        elif obj["kind"] in BINDINGS:
            found += [f"{where}: {e}" for e in binding_errors(obj, policies)]
        else:
            found.append(f"{where}: not an admission policy or binding")
    return found


def _rendered(directory: str, beside_webhook: bool = False) -> list[dict[str, Any]]:
    return yamldocs.load_all(native_documents(load_policies(str(ROOT / directory)), beside_webhook=beside_webhook))


SETS = {
    "shipped": lambda: [
        d for d in yamldocs.load_all((ROOT / "manifests/native-policies/native-policies.yaml").read_text()) if d
    ],
    "examples": lambda: _rendered("examples/policies"),
    "default": lambda: _rendered("policies"),
    "tests' policies": lambda: NATIVE.objects,
    "tests' policies beside the webhook": lambda: BESIDE.objects,
    "tests' fractions": lambda: FRACTION_NATIVE.objects,
    "tests' fractions beside the webhook": lambda: FRACTION_BESIDE.objects,
}


@pytest.mark.parametrize("name", SETS)
def test_every_object_is_what_the_api_server_validates_on_create(name: str) -> None:
    objects = SETS[name]()
    assert objects and errors_of(objects) == []


def test_the_checks_catch_what_the_api_server_refuses() -> None:
    """Each rule refuses a mistake of the kind it checks for (the checks are not vacuous)."""
    vap = next(o for o in NATIVE.objects if o["kind"] == "ValidatingAdmissionPolicy")
    map_ = next(o for o in NATIVE.objects if o["kind"] == "MutatingAdmissionPolicy")
    binding = next(o for o in NATIVE.objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    two_lines = {**vap["spec"]["validations"][0], "message": "two\nlines"}
    broken_vap = {**vap, "spec": {**vap["spec"], "variables": [{"name": "in", "expression": "1"}]}}
    broken_vap["spec"]["validations"] = [two_lines]
    mutations = [{"patchType": "JSONPatch", "applyConfiguration": {}}]
    broken_map = {**map_, "spec": {**map_["spec"], "reinvocationPolicy": "Always", "mutations": mutations}}
    actions = {"validationActions": ["Deny", "Warn"], "policyName": "nothing"}
    broken_binding = {**binding, "spec": {**binding["spec"], **actions}}
    named = {**vap, "metadata": {"name": "Capital_Letters"}}
    assert errors_of([broken_vap, broken_map, broken_binding, named]) == [
        f"ValidatingAdmissionPolicy {vap['metadata']['name']}: variable name 'in'",
        f"ValidatingAdmissionPolicy {vap['metadata']['name']}: validations[0].message: non-empty, no line breaks",
        f"MutatingAdmissionPolicy {map_['metadata']['name']}: reinvocationPolicy",
        f"MutatingAdmissionPolicy {map_['metadata']['name']}: mutations[0]: patchType and its one expression",
        f"ValidatingAdmissionPolicyBinding {binding['metadata']['name']}: policyName 'nothing' names no "
        "ValidatingAdmissionPolicy of the set",
        f"ValidatingAdmissionPolicyBinding {binding['metadata']['name']}: validationActions: Deny and Warn together",
        "ValidatingAdmissionPolicy Capital_Letters: metadata.name is no DNS subdomain",
    ]
