"""The entry point: a policy set as the API server's admission policies (`compile_native`).

One MutatingAdmissionPolicy and one ValidatingAdmissionPolicy per GPU policy (the built-in defaults among
them, for namespaces no policy selects), each with its binding: the policy's values written into the
expressions (no parameter resources), its namespaces as a matchCondition (selection.py), and the bindings'
namespaceSelector leaving out the namespaces the webhook configurations leave out. The MAP's mutations run in
order in one policy (separate MAPs have no order), each idempotent, under `reinvocationPolicy: IfNeeded`. The
VAP has one validation whose message is every line of the webhook's denial, in its order, on one line: the API
server drops a message with a line break, and one over 5 KiB, for the validation's static `message` (MESSAGE_LIMIT).

Both match every kind whose pod spec the webhook judges (Pods, workloads' templates, PodTemplates) on CREATE
(beside the webhook, the MAP Pods only), and find the spec by the request's kind (containers.spec_variables):
the same rules, the same sentences.

Cost: each expression goes over a section's containers once per rule (one filter per resource name the limits
step knows), and the pod totals over the app containers once per resource; the API server's own estimate
needs a v1.36 API server (not measured here).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.base.podspec import POD_SPEC_PATHS, container_label, resources_by_group
from webhook.admission.native.cel import bind, fill, lit, slot
from webhook.admission.native.containers import KIND, every, spec_variables
from webhook.admission.native.family import SECTIONS, ContainerRule, Gap, Lines, Mutation
from webhook.admission.native.gaps import EVERY_POLICY
from webhook.admission.native.registry import FAMILIES
from webhook.admission.native.selection import selects
from webhook.admission.phases.validate import labelled
from webhook.admission.policy.model import DEFAULT_POLICY, Enforcement, Policy, PolicySet

API_VERSION = "admissionregistration.k8s.io/v1"
PREFIX = "gpu-admission-"
IGNORE_LABEL = "gpu-admission.io/ignore"
NAME_LABEL = "kubernetes.io/metadata.name"


def _created(kinds: Iterable[str]) -> dict[str, Any]:
    """matchConstraints: the objects of `kinds` (podspec.POD_SPEC_RESOURCES), on CREATE."""
    rules = [
        {"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": list(resources)}
        for group, resources in resources_by_group(kinds)
    ]
    return {"resourceRules": rules}


# Every kind with a pod spec that the webhook judges, on CREATE (a workload's UPDATE: gaps.WORKLOAD_UPDATES).
MATCHED = _created(POD_SPEC_PATHS)
# Beside the webhook: the MAPs change Pods only, and the webhook the templates, with its re-apply record (a
# template the MAPs changed first reaches the webhook with no record: docs/native-policies.md, Both).
PODS = _created(["Pod"])
# The engine leaves alone a workload whose controller is another object (a Job of a CronJob, a ReplicaSet of a
# Deployment: engine._left_alone): the controller's template was judged. Every Pod is judged.
OWN_TEMPLATE = (
    f"{KIND} == 'Pod' || !has(object.metadata.ownerReferences) || "
    "!object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true)"
)
ACTIONS = {Enforcement.ENFORCE: ["Deny"], Enforcement.WARN: ["Warn"], Enforcement.AUDIT: ["Audit"]}
LINES = "lines"
SAID = "said"
GROUP_MOST = 16_000  # characters of a group of container rules (`_split`): its variable stays under 20,000
INLINE = 2_000  # the most characters of a list of lines written into `lines` itself (each variable costs a little)
# The API server shows a messageExpression's result only when it is one line of at most 5 KiB, trimmed
# (k8s.io/apiserver validating/validator.go: celconfig.MaxEvaluatedMessageExpressionSizeBytes); past that it
# shows the validation's `message`. The webhook's lines are joined with SEPARATOR where the webhook joins them
# with a line break.
SEPARATOR = " | "
MESSAGE_LIMIT = 5 * 1024


@dataclass(frozen=True, slots=True)
class Compiled:
    """One GPU policy's admission policies and bindings, and what of it they do not carry."""

    policy: Policy
    selector: str  # the matchCondition on the namespace
    mutations: list[Mutation]
    objects: list[dict[str, Any]]
    gaps: list[Gap]


@dataclass(frozen=True, slots=True)
class NativeSet:
    compiled: list[Compiled]
    every: tuple[Gap, ...] = field(default=EVERY_POLICY)  # what no native policy carries

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [obj for one in self.compiled for obj in one.objects]

    def gaps_of(self, policy_name: str) -> list[Gap]:
        """Everything the named policy's native set does not carry (its own gaps and every policy's)."""
        own = next(one.gaps for one in self.compiled if one.policy.name == policy_name)
        return [*own, *self.every]


def compile_native(policies: PolicySet, excluded: Sequence[str], beside_webhook: bool = False) -> NativeSet:
    """The native set for `policies`; `excluded`: the namespaces the webhook never judges; `beside_webhook`: for a
    cluster that runs the webhook too (the MAPs then leave the workloads' templates to it)."""
    selector = {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": list(excluded)},
            {"key": IGNORE_LABEL, "operator": "NotIn", "values": ["true"]},
        ]
    }
    mutated = PODS if beside_webhook else MATCHED
    compiled = [_one(policy, selects(policies, policy), selector, mutated) for policy in policies.policies]
    compiled.append(_one(DEFAULT_POLICY, selects(policies, None), selector, mutated))
    return NativeSet(compiled)


def _split(rules: list[ContainerRule]) -> list[list[ContainerRule]]:
    """A family's rules in consecutive groups of at most GROUP_MOST characters of CEL (a rule's condition is
    written twice in its group's variable, its sentence once), so that no group's variable nears the parser's
    limit however many names a family judges; the lines keep their order across the groups."""
    groups: list[list[ContainerRule]] = [[]]
    size = 0
    for rule in rules:
        length = 2 * len(rule.condition) + len(rule.sentence)
        if groups[-1] and size + length > GROUP_MOST:
            groups.append([])
            size = 0
        groups[-1].append(rule)
        size += length
    return groups


def _container_lines(groups: list[list[ContainerRule]]) -> list[Lines]:
    """Each section's containers that break a rule, one element each: its lines, each with the container's
    label in front, joined with SEPARATOR as the denial's lines are (so the message reads the webhook's).

    `groups` are the rules, a family's each, in the registry's order. A group's lines are a variable of their
    own (a list with one element per container of the section, its lines of the group), so that no expression
    grows with every family's rules (cel-go's parser refuses one over 100,000 characters); each container's
    lines are then joined group by group, the container found in each group's list by its place among the
    section's names (the API server refuses a pod spec whose names repeat or are missing)."""
    groups = [group for group in groups if group]
    if not groups:
        return []
    found = []
    for section in SECTIONS:
        prefix = fill(labelled(container_label(section, 0, {"name": slot("name")}), ""), {"name": "c.name"})
        names = f"{section}Names"
        variables = [(names, every(section, "has(c.name) ? c.name : ''"))]
        for index, rules in enumerate(groups):
            said = " + ".join(
                f"(({rule.condition}) ? "
                + (f"({rule.sentence}).map(s, {prefix} + s)" if rule.many else f"[{prefix} + {rule.sentence}]")
                + " : [])"
                for rule in rules
            )
            broken = " || ".join(f"({rule.condition})" for rule in rules)
            variables.append((f"{section}Said{index}", every(section, f"({broken}) ? ({said}) : []")))
        joined = " + ".join(f"variables.{section}Said{index}[i]" for index in range(len(groups)))
        per_container = bind(f"variables.{names}.indexOf(n)", "i", f"({joined}).join({lit(SEPARATOR)})")
        lines = f"variables.{names}.map(n, {per_container}).filter(s, s != '')"
        found.append(Lines(lines, tuple(variables)))
    return found


def too_long(policy: Policy) -> str:
    """The validation's static message: what the API server shows where the lines are over MESSAGE_LIMIT."""
    return (
        f'denied by GPU policy "{policy.name}": its reasons are longer than the API server shows (5 KiB); '
        "`gpu-webhook check -n NAMESPACE FILE` prints them"
    )


def _one(policy: Policy, condition: str, selector: dict[str, Any], mutated: dict[str, Any]) -> Compiled:
    name = PREFIX + policy.name
    mutations = [mutation for family in FAMILIES for mutation in family.mutations(policy)]
    groups = [group for family in FAMILIES for group in _split(family.container_rules(policy))]
    containers = _container_lines(groups)
    pod = [line for family in FAMILIES for line in family.lines(policy)]
    lines = [*containers, *pod]
    gaps = [gap for family in FAMILIES for gap in family.gaps(policy)]
    match = [
        {"name": "namespace-policy", "expression": condition},
        {"name": "own-pod-template", "expression": OWN_TEMPLATE},
    ]
    spec = [{"name": n, "expression": e} for n, e in spec_variables()]
    resources = {"namespaceSelector": selector}
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": mutated,
                "matchConditions": match,
                "variables": spec,
                "mutations": [
                    {"patchType": "JSONPatch", "jsonPatch": {"expression": mutation.expression}}
                    for mutation in mutations
                ],
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "matchResources": resources},
        },
    ]
    if lines:
        # the pod's variables first: a container's rule may read them (the pod's GPUs, say)
        declared = [*(line.variables for line in pod), *(line.variables for line in containers)]
        variables = [*spec, *({"name": n, "expression": e} for pairs in declared for n, e in pairs)]
        # a long list of lines is a variable of its own (`said0`, ...), so that no expression holds every family's
        said = []
        for index, line in enumerate(lines):
            if len(line.lines) > INLINE:
                variables.append({"name": f"{SAID}{index}", "expression": line.lines})
            said.append(f"variables.{SAID}{index}" if len(line.lines) > INLINE else f"({line.lines})")
        variables.append({"name": LINES, "expression": " + ".join(said)})
        objects += [
            {
                "apiVersion": API_VERSION,
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": MATCHED,
                    "matchConditions": match,
                    "variables": variables,
                    "validations": [
                        {
                            "expression": f"size(variables.{LINES}) == 0",
                            "messageExpression": f"variables.{LINES}.join({lit(SEPARATOR)})",
                            "message": too_long(policy),
                            "reason": "Forbidden",
                        }
                    ],
                },
            },
            {
                "apiVersion": API_VERSION,
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {
                    "policyName": name,
                    "validationActions": ACTIONS[policy.enforcement],
                    "matchResources": resources,
                },
            },
        ]
    return Compiled(policy, condition, mutations, objects, gaps)
