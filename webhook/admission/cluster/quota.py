"""A namespace's GPU budget: the GPU entries of its own ResourceQuota objects, read as GPU-equivalents.

The admin writes what every GPU cluster already has, `requests.nvidia.com/gpu: "1"`; the webhook reads it as
one GPU-equivalent whatever the namespace's policy turns `nvidia.com/gpu` into (budgets/budget.py), so the budget
holds on every route. Which pods a quota counts follows the API server's quota evaluator exactly
(kubernetes pkg/quota/v1/evaluator/core/pods.go, podMatchesScopeFunc, and apiserver's generic.Matches): every
scope in `spec.scopes` (operator Exists) and every `spec.scopeSelector.matchExpressions` entry must match;
Terminating is `activeDeadlineSeconds >= 0`, BestEffort the pod's QoS class, PriorityClass a label selector
over the one key `PriorityClass` (so NotIn and DoesNotExist match a pod without a priority class),
CrossNamespacePodAffinity an affinity term naming namespaces or a namespace selector; an unknown scope matches
nothing. Reading never raises: a malformed object is None, or a reason (`quota_problem`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from typing import Any

from webhook.admission.base.podspec import asks_some, section_bodies
from webhook.admission.base.quantity import QuantityError, parse_quantity

GPU_QUOTA_ENTRIES = ("requests.nvidia.com/gpu", "limits.nvidia.com/gpu")
SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
QOS_RESOURCES = ("cpu", "memory")  # what a pod's QoS class reads (v1 qos.ComputePodQOS)

# One scope selector requirement: (scope name, operator, values).
Requirement = tuple[str, str, tuple[str, ...]]
# Whether a quota counts a pod, worked out once per quota from its requirements (`predicate`).
PodTest = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class GpuQuota:
    """One ResourceQuota's GPU budget, in GPU-equivalents, and which pods it counts."""

    namespace: str
    name: str
    hard: Fraction  # the least of its GPU entries
    entry: str  # the entry that set `hard`
    requirements: tuple[Requirement, ...] = ()  # spec.scopes (as Exists) then spec.scopeSelector's
    # `hard` as (numerator, denominator), worked out once: budget.judge compares in integers on every review
    hard_ratio: tuple[int, int] = field(init=False, compare=False, repr=False)
    # Whether this quota counts a pod: every scope requirement matches it (none: every pod). The requirements
    # read as one ready test when the quota is read, not again on every budgeted review.
    counts: PodTest = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hard_ratio", self.hard.as_integer_ratio())
        object.__setattr__(self, "counts", predicate(self.requirements))

    @property
    def scoped(self) -> str:
        """The scopes as people read them, "" where none: `PriorityClass In (high)`."""
        parts = []
        for scope, operator, values in self.requirements:
            parts.append(f"{scope} {operator} ({', '.join(values)})" if values else f"{scope} {operator}")
        return ", ".join(parts)


def gpu_quota(obj: Any, namespace: str | None = None) -> GpuQuota | None:
    """The GPU budget of a ResourceQuota; None for anything else, a quota with no GPU entry, or one that cannot
    be read (`quota_problem` says why). `namespace` stands in for a missing metadata.namespace (offline input)."""
    read = _read(obj, namespace)
    return read if isinstance(read, GpuQuota) else None


def quota_problem(obj: Any, namespace: str | None = None) -> str | None:
    """Why a ResourceQuota with a GPU entry cannot be read as a budget, or None (read, or no GPU entry)."""
    read = _read(obj, namespace)
    return read if isinstance(read, str) else None


def _read(obj: Any, namespace: str | None) -> GpuQuota | str | None:
    if type(obj) is not dict or obj.get("kind") != "ResourceQuota":
        return None
    metadata = obj.get("metadata")
    metadata = metadata if type(metadata) is dict else {}
    spec = obj.get("spec")
    hard = spec.get("hard") if type(spec) is dict else None
    if type(hard) is not dict or not any(entry in hard for entry in GPU_QUOTA_ENTRIES):
        return None
    name = metadata.get("name")
    where = f'ResourceQuota "{name}"' if type(name) is str and name else "a ResourceQuota without a name"
    if type(name) is not str or not name:
        return f"{where}: metadata.name is required; name the quota"
    ns = metadata.get("namespace") if type(metadata.get("namespace")) is str else None
    ns = ns or namespace or ""
    least: tuple[Fraction, str] | None = None
    for entry in GPU_QUOTA_ENTRIES:
        if entry not in hard:
            continue
        try:
            value = parse_quantity(hard[entry])
        except QuantityError as error:
            return f'{where}: spec.hard["{entry}"] {error}; write GPUs as a quantity such as "2" or "1.5"'
        if value < 0:
            return f'{where}: spec.hard["{entry}"] is negative; write the GPUs the namespace may hold, 0 or more'
        if least is None or value < least[0]:
            least = (Fraction(value), entry)
    assert least is not None
    assert type(spec) is dict  # hard was read from it
    requirements = _requirements(spec)
    if isinstance(requirements, str):
        return f"{where}: {requirements}"
    return GpuQuota(ns, name, least[0], least[1], requirements)


def _requirements(spec: dict[str, Any]) -> tuple[Requirement, ...] | str:
    """spec.scopes as Exists requirements, then spec.scopeSelector.matchExpressions (generic's
    GetScopeSelectorsFromQuota order); a reason where one is malformed as the API server would refuse it."""
    found: list[Requirement] = []
    scopes = spec.get("scopes")
    if scopes is not None:
        if type(scopes) is not list or not all(type(s) is str for s in scopes):
            return "spec.scopes must be a list of scope names"
        found += [(scope, "Exists", ()) for scope in scopes]
    selector = spec.get("scopeSelector")
    if selector is None:
        return tuple(found)
    expressions = selector.get("matchExpressions") if type(selector) is dict else None
    if type(expressions) is not list:
        return "spec.scopeSelector.matchExpressions must be a list"
    for index, expression in enumerate(expressions):
        where = f"spec.scopeSelector.matchExpressions[{index}]"
        if type(expression) is not dict:
            return f"{where} must be a map of scopeName, operator and values"
        scope, operator, values = expression.get("scopeName"), expression.get("operator"), expression.get("values")
        values = [] if values is None else values
        if type(scope) is not str or type(operator) is not str or operator not in OPERATORS:
            return f"{where}: operator must be one of {', '.join(OPERATORS)}, with a scopeName"
        if type(values) is not list or not all(type(v) is str for v in values):
            return f"{where}.values must be a list of strings"
        if operator in ("In", "NotIn") and not values:
            return f"{where}: operator {operator} needs at least one value"
        if operator in ("Exists", "DoesNotExist") and values:
            return f"{where}: operator {operator} takes no values"
        found.append((scope, operator, tuple(values)))
    return tuple(found)


def matches(requirement: Requirement, pod: dict[str, Any]) -> bool:
    """One scope requirement against a pod, as podMatchesScopeFunc decides it."""
    return _test(requirement)(pod)


def predicate(requirements: tuple[Requirement, ...]) -> PodTest:
    """The test that every requirement matches a pod, built once per quota: each requirement's scope and
    operator are decided here, so a review runs only the test its pod needs."""
    tests = tuple(_test(requirement) for requirement in requirements)
    if not tests:
        return _every_pod
    if len(tests) == 1:
        return tests[0]
    return partial(_all_of, tests)


def _test(requirement: Requirement) -> PodTest:
    """One requirement as a test of a pod (module functions and partials: a quota stays picklable)."""
    scope, operator, values = requirement
    if scope == "PriorityClass":
        return partial(_priority_class, operator, values)
    return _SCOPE_TESTS.get(scope, _no_pod)


def _all_of(tests: tuple[PodTest, ...], pod: dict[str, Any]) -> bool:
    return all(test(pod) for test in tests)


def _every_pod(pod: dict[str, Any]) -> bool:
    return True


def _no_pod(pod: dict[str, Any]) -> bool:
    return False  # an unknown scope matches nothing


def _spec(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec") if type(pod) is dict else None
    return spec if type(spec) is dict else {}


def _is_terminating(pod: dict[str, Any]) -> bool:
    """Terminating: spec.activeDeadlineSeconds >= 0."""
    spec = pod.get("spec") if type(pod) is dict else None
    deadline = spec.get("activeDeadlineSeconds") if type(spec) is dict else None
    return type(deadline) is int and deadline >= 0


def _is_not_terminating(pod: dict[str, Any]) -> bool:
    """NotTerminating, the usual scope: read out in full rather than through _is_terminating (every review)."""
    spec = pod.get("spec") if type(pod) is dict else None
    deadline = spec.get("activeDeadlineSeconds") if type(spec) is dict else None
    return not (type(deadline) is int and deadline >= 0)


def _is_best_effort(pod: dict[str, Any]) -> bool:
    return _best_effort(pod, _spec(pod))


def _is_not_best_effort(pod: dict[str, Any]) -> bool:
    return not _best_effort(pod, _spec(pod))


def _is_cross_namespace(pod: dict[str, Any]) -> bool:
    return _cross_namespace(_spec(pod))


def _priority_class(operator: str, values: tuple[str, ...], pod: dict[str, Any]) -> bool:
    """PriorityClass: a label selector over the one key, so NotIn and DoesNotExist match a pod without one."""
    priority = _spec(pod).get("priorityClassName")
    priority = priority if type(priority) is str and priority else None
    if operator == "Exists":
        return priority is not None
    if operator == "DoesNotExist":
        return priority is None
    if operator == "In":
        return priority is not None and priority in values
    if operator == "NotIn":
        return priority is None or priority not in values
    return False


def _best_effort(pod: dict[str, Any], spec: dict[str, Any]) -> bool:
    """The pod's QoS class is BestEffort: status.qosClass where set (v1 qos.GetPodQOS), else no container, init
    container or pod-level resources with a positive cpu or memory request or limit."""
    status = pod.get("status")
    qos = status.get("qosClass") if type(status) is dict else None
    if type(qos) is str and qos:
        return qos == "BestEffort"
    bodies = [spec, *section_bodies(spec, ("initContainers", "containers"))]  # spec: pod-level resources
    return not asks_some(bodies, QOS_RESOURCES, ("requests", "limits"))


def _cross_namespace(spec: dict[str, Any]) -> bool:
    """An affinity or anti-affinity term, required or preferred, that names namespaces or a namespaceSelector."""
    affinity = spec.get("affinity")
    if type(affinity) is not dict:
        return False
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        if type(section) is not dict:
            continue
        required = section.get("requiredDuringSchedulingIgnoredDuringExecution")
        preferred = section.get("preferredDuringSchedulingIgnoredDuringExecution")
        terms = list(required) if type(required) is list else []
        for weighted in preferred if type(preferred) is list else []:
            if type(weighted) is dict:
                terms.append(weighted.get("podAffinityTerm"))
        for term in terms:
            if type(term) is dict and (term.get("namespaces") or term.get("namespaceSelector") is not None):
                return True
    return False


# The scopes whose test reads the pod alone (Exists: their only operator the API server allows).
_SCOPE_TESTS: dict[str, PodTest] = {
    "Terminating": _is_terminating,
    "NotTerminating": _is_not_terminating,
    "BestEffort": _is_best_effort,
    "NotBestEffort": _is_not_best_effort,
    "CrossNamespacePodAffinity": _is_cross_namespace,
}
