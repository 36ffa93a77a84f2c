"""The API server's admission of one object through a native set (MutatingAdmissionPolicy and
ValidatingAdmissionPolicy objects with their bindings), simulated with the tests' CEL evaluator (kube_cel.py): the
model the differential tests (test_native_policies.py) and the native policies' benchmark (bench/native.py) share.

On CREATE (or UPDATE), as the API server runs them:
1. the policies' matchConstraints (the object's group, resource and operation), the bindings' namespaceSelector
   (the excluded namespaces, the ignore label) and each policy's matchConditions;
2. the MAP's mutations in order, each a JSON Patch applied as evanphx/json-patch does (its variables evaluated
   anew for each, on the object as patched so far), then (in the tests) the MAP again, which must change nothing;
3. the API server's own validation of extended resources in the pod spec (apiserver_rules.py);
4. the VAP's variables and validation, its message (validating/validator.go's rules) and the binding's
   validationAction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests import apiserver_rules, evanphx, kube_cel
from webhook.admission.base.podspec import POD_SPEC_PATHS, get_path
from webhook.admission.native.compile import MESSAGE_LIMIT, NativeSet


@dataclass
class Outcome:
    allowed: bool
    verdict: str  # allow, deny, warn, audit (the VAP's action), or "refused" (the API server's own validation)
    obj: dict[str, Any]
    message: str = ""
    errors: list[str] = field(default_factory=list)


def by_name(native: NativeSet, kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in native.objects if obj["kind"] == kind}


def bound(binding: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    """The binding's namespaceSelector: the namespace's labels (kubernetes.io/metadata.name is always one)."""
    labels = {**labels, "kubernetes.io/metadata.name": namespace}
    for expression in binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]:
        assert expression["operator"] == "NotIn"
        if labels.get(expression["key"]) in expression["values"]:
            return False
    return True


def constrained(policy: dict[str, Any], request: dict[str, Any]) -> bool:
    """The policy's matchConstraints: a rule naming the request's group, version, resource and operation."""
    kind = request["kind"]
    return any(
        kind["group"] in rule["apiGroups"]
        and kind["version"] in rule["apiVersions"]
        and request["resource"]["resource"] in rule["resources"]
        and request["operation"] in rule["operations"]
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
    )


def matches(policy: dict[str, Any], scope: kube_cel.Scope) -> bool:
    """The policy's matchConditions, on a scope of the object and the request (one for every policy)."""
    return all(scope.evaluate(c["expression"]) is True for c in policy["spec"]["matchConditions"])


def variables_of(policy: dict[str, Any], obj: dict[str, Any], request: dict[str, Any]) -> kube_cel.Scope:
    """The policy's variables, in order, each reading those before it."""
    scope = kube_cel.Scope({"object": obj, "request": request})
    for variable in policy["spec"].get("variables", []):
        scope.set_variable(variable["name"], scope.evaluate(variable["expression"]))
    return scope


def mutate_with(policy: dict[str, Any], obj: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The MAP's mutations in order, each on the object as the ones before left it. The variables are worked out
    again only after a patch: on an object no patch changed they would come out the same."""
    scope: kube_cel.Scope | None = None
    for mutation in policy["spec"]["mutations"]:
        assert mutation["patchType"] == "JSONPatch"
        scope = scope or variables_of(policy, obj, request)
        ops = scope.evaluate(mutation["jsonPatch"]["expression"])
        if ops:
            obj, scope = evanphx.apply(obj, ops), None
    return obj


def request_for(obj: dict[str, Any], namespace: str, operation: str = "CREATE") -> dict[str, Any]:
    """The admission request's attributes the policies read, written from the object's apiVersion and kind (the
    resource as Kubernetes names them: the kind in lower case, plural)."""
    group, _, version = obj["apiVersion"].rpartition("/")
    return {
        "namespace": namespace,
        "operation": operation,
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
    }


def admit(
    native: NativeSet,
    namespace: str,
    obj: dict[str, Any],
    labels: dict[str, str] | None = None,
    operation: str = "CREATE",
    reinvoked: bool = True,
) -> Outcome:
    """`obj` through the native set in `namespace`; `reinvoked`: the MAP run again on its own output, which must
    change nothing (the tests' check of reinvocationPolicy IfNeeded; the API server reinvokes only where a later
    plugin changed the object)."""
    request = request_for(obj, namespace, operation)
    mutating, validating = by_name(native, "MutatingAdmissionPolicy"), by_name(native, "ValidatingAdmissionPolicy")
    bindings = by_name(native, "MutatingAdmissionPolicyBinding")
    chosen = [name for name, policy in mutating.items() if bound(bindings[name], namespace, labels or {})]
    matching = kube_cel.Scope({"object": obj, "request": request})
    chosen = [name for name in chosen if matches(mutating[name], matching)]
    if not chosen:
        return Outcome(True, "allow", obj)
    assert len(chosen) == 1, f"{namespace}: selected by {chosen}"
    name = chosen[0]
    policy = validating.get(name)
    mutates = constrained(mutating[name], request)
    validates = policy is not None and constrained(policy, request)
    if not (mutates or validates):
        return Outcome(True, "allow", obj)
    mutated = obj
    if mutates:
        mutated = mutate_with(mutating[name], obj, request)
        if reinvoked:
            assert mutate_with(mutating[name], mutated, request) == mutated, "the MAP is not idempotent on reinvocation"
    errors = apiserver_rules.pod_spec_errors(get_path(mutated, POD_SPEC_PATHS[obj["kind"]]))
    if errors:
        return Outcome(False, "refused", mutated, errors=errors)
    if policy is None or not validates:
        return Outcome(True, "allow", mutated)
    assert matches(policy, kube_cel.Scope({"object": mutated, "request": request}))
    scope = variables_of(policy, mutated, request)
    (validation,) = policy["spec"]["validations"]
    if scope.evaluate(validation["expression"]) is True:
        return Outcome(True, "allow", mutated)
    message = shown(scope.evaluate(validation["messageExpression"]), validation)
    binding = by_name(native, "ValidatingAdmissionPolicyBinding")[name]
    (action,) = binding["spec"]["validationActions"]
    return Outcome(action != "Deny", action.lower(), mutated, message)


def shown(result: Any, validation: dict[str, Any]) -> str:
    """What the API server says of a failed validation (k8s.io/apiserver validating/validator.go): the
    messageExpression's string, trimmed, unless it has a line break or is over 5 KiB; then the static message;
    then the expression."""
    message = result.strip() if isinstance(result, str) else ""
    if "\n" in message or len(message.encode()) > MESSAGE_LIMIT:
        message = ""
    return message or validation.get("message", "").strip() or f"failed expression: {validation['expression']}"
