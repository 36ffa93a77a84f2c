"""The one entry point of the admission decision: `evaluate(obj, namespace, policies, old, nodes)`.

The server's /mutate and /validate, the CLI's check, audit and policy explain, and the tests all call this, so
every rule lives once: mutate (mutate.py: requests into limits, fractions, mapping, env hints, steering; the
JSON Patch through patch.py), validate the result (validate.py), run the cluster checks where a node snapshot
is given (clustercheck.py), then turn the policy's enforcement into a `Decision` and its verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.admission.base.podspec import POD_SPEC_PATHS, controller_reference, get_path, mentions_gpu, pod_spec_path
from webhook.admission.base.violation import WARNING_PREFIX, Refusal, Violation
from webhook.admission.budgets.budget import NOTHING, PodAsk, Usage, judge, pod_ask
from webhook.admission.checks import clustercheck, policynodes
from webhook.admission.cluster.nodes import ClusterView
from webhook.admission.dra import claimrules, podclaims
from webhook.admission.phases.mutate import mutate
from webhook.admission.phases.validate import Holders, validate, validated
from webhook.admission.policy.model import Check, Enforcement, Policy, PolicySet
from webhook.admission.sharing.registry import backend_of

POD_SPEC = POD_SPEC_PATHS["Pod"]

# The engine's answer for one object, and the label of the reviews metric and log line: "warn" and "audit"
# allow the object with the policy's violations as warnings or in the audit annotation only.
Verdict = Literal["allow", "deny", "warn", "audit"]


@dataclass(slots=True)
class Decision:
    """What the webhook decides for one object (built once per review; treat it as read-only)."""

    allowed: bool
    verdict: Verdict
    policy: str  # the name of the policy that applied
    patch: list[dict[str, Any]] = field(default_factory=list)  # RFC 6902, against the original object
    warnings: list[str] = field(default_factory=list)  # shown to the user (admission warnings)
    violations: list[str] = field(default_factory=list)  # validation's lines, whatever the enforcement
    mutated: dict[str, Any] = field(default_factory=dict)  # the object after mutation
    mutation_kinds: list[str] = field(default_factory=list)  # one entry per change, e.g. "requests-into-limits"
    # The lines of what the API server's own validation refuses in the GPU resources after mutation: denied
    # whatever the enforcement, and by /mutate itself, so that kubectl shows these lines and not the API server's.
    refusals: list[str] = field(default_factory=list)
    refused_only: bool = False  # denied for the refusals alone (under `warn` or `audit`)
    skipped: bool = False  # allowed untouched, for `skip_reason`
    skip_reason: str = ""  # why the object was not judged (no pod spec, pod spec unchanged by an update, ...)
    # What a Pod holds against its namespace's GPU budget after mutation (budget.py), where `evaluate` was given a
    # budget (an empty one too); None where it holds no GPU, or no budget was given.
    ask: PodAsk | None = None

    @property
    def mutated_any(self) -> bool:
        return bool(self.patch)

    @property
    def denials(self) -> list[str]:
        """The lines that deny the object: validation's under `enforce`; else what the API server refuses."""
        if self.verdict != "deny":
            return []
        return self.refusals if self.refused_only else self.violations


def evaluate(
    obj: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    old: Any = None,
    nodes: ClusterView | None = None,
    claims: podclaims.ClaimsView | None = None,
    budget: Sequence[Usage] | None = None,
) -> Decision:
    """Mutate then validate `obj` (a Pod, a workload or a PodTemplate) under `namespace`'s policy.

    `old` is the object before an UPDATE (None for a CREATE, and offline). Templates are validated on the
    mutation result too: their pods will be mutated when created. `nodes` is the node inventory's latest
    trusted snapshot: with it, the policy's `auto` values come from the nodes and the cluster checks run
    (clustercheck.py); without it (offline, or an inventory not yet listed or gone stale) they are skipped.
    `claims` holds the namespace's ResourceClaims and templates: a pod's total counts those it names (podclaims.py).
    `budget` is the namespace's GPU quotas with what each holds now, this pod not included: a Pod is judged
    against them under `cluster.quota` (budget.py), and `Decision.ask` says what it holds (None where it holds
    no GPU). `budget=[]` asks for the ask alone; without a budget (None) no ask is worked out: a namespace with
    no GPU quota pays nothing for budgets.
    """
    policy = policies.for_namespace(namespace)
    spec_path = pod_spec_path(obj)
    if spec_path is None and (claim_path := claimrules.claim_spec_path(obj)) is not None:  # judged, never mutated
        return _judge_claim(obj, old, claim_path, policy, nodes)
    reason = "it has no pod spec" if spec_path is None else _left_alone(obj, old, spec_path)
    if reason or spec_path is None:
        return Decision(True, "allow", policy.name, mutated=obj, skipped=True, skip_reason=reason)
    if spec_path == POD_SPEC and _only_ephemeral_containers_change(obj, old):
        return _judge_added_ephemeral_containers(obj, old, policy)
    entries = podclaims.claim_entries(obj, spec_path) if claims is not None else []  # the claims the pod names
    if not mentions_gpu(obj, spec_path):
        if entries:  # claims alone: nothing to mutate, their devices to count
            assert claims is not None
            return _claims_alone(obj, namespace, policy, spec_path, entries, claims, nodes, budget)
        return Decision(True, "allow", policy.name, mutated=obj)
    return _gpu_pod(obj, namespace, policy, spec_path, entries, claims, nodes, budget)


def _gpu_pod(
    obj: dict[str, Any],
    namespace: str,
    policy: Policy,
    spec_path: tuple[str, ...],
    entries: list[Any],
    claims: podclaims.ClaimsView | None,
    nodes: ClusterView | None,
    budget: Sequence[Usage] | None,
) -> Decision:
    """An object whose pod spec asks for GPUs: mutated, then validated as mutated, its claims counted with
    it, and the cluster checks run where there is a snapshot."""
    if nodes is not None and policy.cluster_checks.auto:
        policy = policynodes.resolve(policy, nodes)  # `auto` values from the nodes (the same name)
    spread = backend_of(policy).pod_gpus(obj, spec_path, policy)  # the pod's GPUs, read once per review
    result = mutate(obj, policy, spec_path, spread[0])
    counted: Holders | None = [] if nodes is not None else None  # for the cluster checks
    found, extended = validated(result.obj, policy, spec_path, counted, spread)
    if result.conflicts:  # steering's: user constraints that contradict the policy's node pool
        found = found + result.conflicts
    if result.edits:  # the webhook's output edited by hand: said first, since it explains the rest
        found = result.edits + found
    warnings = result.warnings
    named: list[podclaims.Found] = []  # the claims the pod names, looked up once: the checks and the budget read them
    if entries:
        assert claims is not None
        classes = nodes.class_sharing if nodes is not None else None
        claimed, missing = podclaims.pod_claims(
            result.obj, namespace, policy, spec_path, entries, claims, extended, named, classes
        )
        if claimed or missing:
            found, warnings = found + claimed, warnings + missing
        if named and nodes is not None:
            found = found + _claims_fit(named, counted or [], policy, nodes, warnings)
    if nodes is not None and spec_path is not None:
        # A pod that names its node is never steered (steering.py): it is judged against that node instead.
        spec = get_path(result.obj, spec_path)
        if type(spec) is dict and spec.get("nodeName"):
            found = found + clustercheck.bound_node(spec, policy, nodes)
    if counted and nodes is not None:
        # The one call site of the cluster checks: `deny` ones join validation's (the policy's enforcement
        # decides), `warn` ones are warnings whatever the enforcement.
        checked = clustercheck.check(counted, policy, nodes, not found, spread[0])
        if checked:
            found = found + [v for level, v in checked if level is Check.DENY]
            warnings = warnings + [WARNING_PREFIX + v.short for level, v in checked if level is Check.WARN]
    ask, over = _budget(result.obj, namespace, policy, spec_path, named, budget)
    if over is not None:
        found, warnings = _over_budget(over, policy, found, warnings)
    decision = _verdict(policy, result.patch, warnings, found, result.obj, result.kinds, len(result.warnings))
    decision.ask = ask
    return decision


def _budget(
    pod: dict[str, Any],
    namespace: str,
    policy: Policy,
    spec_path: tuple[str, ...],
    named: list[podclaims.Found],
    budget: Sequence[Usage] | None,
) -> tuple[PodAsk | None, Violation | None]:
    """What the (mutated) Pod holds, its claims' devices among it (`named`: those podclaims.pod_claims found,
    each looked up once per review), and the line that refuses it where it exceeds a quota of `budget` that
    counts it (`cluster.quota` off: never judged). Only Pods are budgeted, and only where a budget is given:
    a namespace without a GPU quota pays nothing for budgets."""
    if budget is None or spec_path != POD_SPEC:
        return None, None
    ask = pod_ask(pod, policy, None, namespace, named or None)
    if ask is NOTHING:  # pod_ask's answer for a pod that holds no GPU
        return None, None
    if not budget or policy.cluster_checks.quota is Check.OFF:
        return ask, None
    return ask, judge(ask, budget, "", pod)


def _over_budget(
    over: Violation, policy: Policy, found: list[Violation], warnings: list[str]
) -> tuple[list[Violation], list[str]]:
    """`cluster.quota: deny` joins the violations (the policy's enforcement decides); `warn` is a warning."""
    if policy.cluster_checks.quota is Check.DENY:
        return [*found, over], warnings
    return found, [*warnings, WARNING_PREFIX + over.short]


def _judge_claim(
    obj: dict[str, Any], old: Any, claim_path: tuple[str, ...], policy: Policy, nodes: ClusterView | None
) -> Decision:
    """A ResourceClaim or ResourceClaimTemplate: judged by the policy when created, never mutated."""
    if reason := claimrules.left_alone(obj, old, claim_path):
        return Decision(True, "allow", policy.name, mutated=obj, skipped=True, skip_reason=reason)
    if nodes is not None and policy.cluster_checks.auto:
        policy = policynodes.resolve(policy, nodes)
    classes = nodes.class_sharing if nodes is not None else None  # a class's own GpuConfig: the server's
    return _verdict(policy, [], [], claimrules.judge(obj, policy, claim_path, classes), obj, [])


def _claims_alone(
    obj: dict[str, Any],
    namespace: str,
    policy: Policy,
    spec_path: tuple[str, ...],
    entries: list[Any],
    claims: podclaims.ClaimsView,
    nodes: ClusterView | None,
    budget: Sequence[Usage] | None,
) -> Decision:
    """A pod that asks for GPUs through its claims alone: nothing to mutate, their devices to count."""
    found_claims: list[podclaims.Found] = []
    classes = nodes.class_sharing if nodes is not None else None
    found, warnings = podclaims.pod_claims(obj, namespace, policy, spec_path, entries, claims, 0, found_claims, classes)
    if nodes is not None and found_claims:
        found = found + _claims_fit(found_claims, [], policy, nodes, warnings)
    ask, over = _budget(obj, namespace, policy, spec_path, found_claims, budget)
    if over is not None:
        found, warnings = _over_budget(over, policy, found, warnings)
    decision = _verdict(policy, [], warnings, found, obj, [])
    decision.ask = ask
    return decision


def _claims_fit(
    named: list[podclaims.Found], counted: Holders, policy: Policy, cluster: ClusterView, warnings: list[str]
) -> list[Violation]:
    """The cluster checks on a pod's claims: `deny` ones returned, `warn` ones added to `warnings`."""
    claimed = podclaims.claimed_by_class(named)
    selected = podclaims.selected_by_request(named)
    checked = clustercheck.claims_fit(claimed, counted, policy, cluster, selected) if claimed or selected else []
    warnings += [WARNING_PREFIX + v.short for level, v in checked if level is Check.WARN]
    return [v for level, v in checked if level is Check.DENY]


def _verdict(
    policy: Policy,
    patch: list[dict[str, Any]],
    warnings: list[str],
    found: list[Violation],
    mutated: dict[str, Any],
    kinds: list[str],
    mutation_lines: int = 0,
) -> Decision:
    """Turn the policy's enforcement and the violations found into the decision.

    The first `mutation_lines` of `warnings` are mutation's (what it changed, or kept as the user wrote it):
    a denied object is not changed, so a denial carries none of them, only the other warnings.
    """
    if not found:  # the usual case
        return Decision(
            allowed=True, verdict="allow", policy=policy.name, patch=patch, warnings=warnings, mutated=mutated,
            mutation_kinds=kinds,
        )  # fmt: skip
    violations = [violation.line for violation in found]
    refusals = [violation.line for violation in found if type(violation) is Refusal]
    refused_only = False
    verdict: Verdict
    if policy.enforcement is Enforcement.ENFORCE:
        verdict = "deny"
    else:
        # Under warn and audit, what the API server refuses is denied all the same (it would be anyway), and
        # the policy's own violations are judged as usual: warnings carry their short forms.
        if policy.enforcement is Enforcement.WARN:
            shown = [WARNING_PREFIX + violation.short for violation in found if type(violation) is not Refusal]
            warnings = warnings + shown
        if refusals:
            verdict, refused_only = "deny", True
        else:
            verdict = "warn" if policy.enforcement is Enforcement.WARN else "audit"
    if verdict == "deny" and mutation_lines:
        warnings = warnings[mutation_lines:]
    return Decision(
        allowed=verdict != "deny",
        verdict=verdict,
        policy=policy.name,
        patch=patch,
        warnings=warnings,
        violations=violations,
        mutated=mutated,
        mutation_kinds=kinds,
        refusals=refusals,
        refused_only=refused_only,
    )


def _only_ephemeral_containers_change(obj: dict[str, Any], old: Any) -> bool:
    """Whether a Pod UPDATE changes its spec's ephemeralContainers and nothing else in the spec: what the
    `pods/ephemeralcontainers` subresource can do. Any other update (and a malformed old object, which no API
    server sends) is judged whole, as a CREATE is."""
    old_spec = get_path(old, POD_SPEC) if type(old) is dict else None
    new_spec = get_path(obj, POD_SPEC)
    if type(old_spec) is not dict or type(new_spec) is not dict:
        return False
    rest = "ephemeralContainers"
    return {k: v for k, v in new_spec.items() if k != rest} == {k: v for k, v in old_spec.items() if k != rest}


def _judge_added_ephemeral_containers(obj: dict[str, Any], old: dict[str, Any], policy: Policy) -> Decision:
    """A Pod UPDATE that changes only ephemeralContainers: `kubectl debug`, through `pods/ephemeralcontainers`.

    The rest of the Pod was judged when it was created (a Pod's containers and init containers cannot change
    afterwards; the webhook configurations send Pod UPDATEs only for that subresource), so only the ephemeral
    containers the update adds are judged: a policy tightened since must not keep anyone from debugging a
    running Pod, and nothing is patched (ephemeral containers hold no resources, and the API server accepts
    only ephemeralContainers changes through this subresource, and no change to one already added:
    kubernetes/kubernetes pkg/apis/core/validation/validation.go, ValidatePodEphemeralContainersUpdate).
    """
    old_list = get_path(old, POD_SPEC).get("ephemeralContainers")
    existing = {c.get("name") for c in old_list if type(c) is dict} if type(old_list) is list else set()
    new_list = get_path(obj, POD_SPEC).get("ephemeralContainers")
    added = (
        [c for c in new_list if type(c) is not dict or c.get("name") not in existing] if type(new_list) is list else []
    )
    # The pod's volumes come along: a debug container may mount one of them (validate's device rules).
    spec = {"ephemeralContainers": added, "volumes": get_path(obj, POD_SPEC).get("volumes")}
    view = {"kind": "Pod", "metadata": obj.get("metadata"), "spec": spec}
    if not added or not mentions_gpu(view, POD_SPEC):
        return Decision(True, "allow", policy.name, mutated=obj)
    return _verdict(policy, [], [], validate(view, policy, POD_SPEC), obj, [])


def _left_alone(obj: dict[str, Any], old: Any, spec_path: tuple[str, ...]) -> str:
    """Why an object with a pod spec is not judged at all, or "" when it is.

    Every Pod is judged when it is created, whatever made it; workloads are judged for early feedback, and
    judging them where nobody asked for their pod spec to change does harm:
    - an object being deleted: a denied update would keep its finalizers, and it would never go away. Only an
      UPDATE of a stored object that has a deletionTimestamp counts: the API server clears a client's on CREATE
      only after the mutating webhooks ran, so the one in a CREATE (where `old` is None) is the client's own;
    - an UPDATE that leaves the pod spec as it was (a scale, a label, a finalizer): denying it would stop
      controllers from scaling down a workload that no longer fits the policy, and patching it would change
      a Job's immutable template (rejected) or start a Deployment rollout that nobody asked for;
    - a workload whose controller is another object (a ReplicaSet of a Deployment, a Job of a CronJob): its
      template is the controller's, which was judged; a patched copy would no longer match it, and the
      Deployment controller would make new ReplicaSets, one after another.
    """
    if type(old) is dict and _being_deleted(old):
        return "it is being deleted"
    if spec_path != POD_SPEC and controller_reference(obj) is not None:
        return "its pod template comes from its controller"
    if type(old) is dict and get_path(old, spec_path) == get_path(obj, spec_path):
        return "this update leaves its pod spec as it was"
    return ""


def _being_deleted(obj: dict[str, Any]) -> bool:
    metadata = obj.get("metadata")
    return type(metadata) is dict and bool(metadata.get("deletionTimestamp"))
