"""Node-pool steering: the node affinity that keeps a namespace's GPU pods on nodes whose GPUs are shared the
way its policy says, merged with the user's own constraints, and the user's constraints that contradict it.

Where the device plugin keeps the name `nvidia.com/gpu` for time-slicing or MPS replicas (renameByDefault:
false) or for MIG slices (migStrategy: single), the resource name no longer tells a whole GPU from a quarter
of one: only the node's labels do. GPU feature discovery sets them (NVIDIA/k8s-device-plugin):
- internal/lm/resource.go, baseLabeler: `nvidia.com/gpu.sharing-strategy` is `none` unless the resource has
  more than 1 replica, then the sharing config's strategy (`time-slicing` or `mps`); `nvidia.com/gpu.replicas`
  is the replica count (1 when not shared, 0 for MIG-enabled GPUs); `nvidia.com/gpu.product` gets a `-SHARED`
  suffix when shared and not renamed, and is `<model>-MIG-<profile>` for MIG slices under the single strategy.
- internal/lm/mig-strategy.go and strategy.go: `nvidia.com/mig.strategy` is `single` or `mixed` (absent for
  none) on every GPU node, MIG enabled or not: the GPU Operator's default strategy is `single`, so whole-GPU
  nodes carry `single` too. Only nodes whose GPUs are MIG-enabled under single have the slices labelled as
  `nvidia.com/gpu` itself, with the MIG device's attributes (`nvidia.com/gpu.slices.gi`, the GPU instance's
  compute slices, among them): that label, not the strategy, tells a MIG-single node from a whole-GPU one.
Node affinity cannot match a suffix, so the product label is not required: the sharing strategy, the replica
count, the MIG strategy and the slice count say the same in values that `In`/`NotIn` can match. A user's
nodeSelector or `In` on the product label is still judged by it: a product ending in `-SHARED` is a GPU shared
without renaming, one with `-MIG-` a MIG-single slice (the profile as NVML names it, `+` dropped by `sanitise`).

A pod with `spec.nodeName` is never steered: the scheduler does not place it, and the kubelet of that node
rejects it (NodeAffinity) if the affinity added does not match the node, as for the GPU Operator's validator,
which names the node itself. Where the node snapshot knows that node, clustercheck.bound_node judges the pod
against the node's labels instead; elsewhere its placement is left alone.

Nodes without these labels (no GPU feature discovery) match `NotIn` and not `In`: a whole-GPU namespace may
still use them, a shared or MIG-single one may not, since nothing says that they slice as its policy does.

Merging (a required node affinity's terms are ORed, its expressions ANDed): every requirement is added to every
term, so the result selects exactly the nodes both select; an empty term, which selects nothing, stays empty;
preferred terms, tolerations and the nodeSelector are never changed. A nodeSelector or a required affinity
that no node could satisfy together with the policy's requirements is a conflict: a `Violation`, and no patch
(under warn and audit the pod is admitted as the user wrote it: adding the policy's constraints would leave it
unschedulable, which is worse than where it would have landed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.admission.base.patch import index_token
from webhook.admission.base.podspec import asks_some, section_bodies
from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.base.violation import SHORT_LIMIT, Violation
from webhook.admission.cluster.nodes import ACK_PLACEMENT_LABEL
from webhook.admission.cluster.nodes import GI_SLICES_LABEL as GI_SLICES
from webhook.admission.cluster.nodes import MIG_STRATEGY_LABEL as MIG_STRATEGY
from webhook.admission.cluster.nodes import PRODUCT_LABEL as PRODUCT
from webhook.admission.cluster.nodes import REPLICAS_LABEL as REPLICAS
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.backend import LabelRequirement
from webhook.admission.sharing.registry import backend_of

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
STEERED_SECTIONS = ("containers", "initContainers")  # ephemeral containers hold no resources


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement (`matchExpressions` entry) that a policy implies."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()  # none for Exists and DoesNotExist (the API server refuses values there)

    @property
    def expression(self) -> dict[str, Any]:
        if not self.values:
            return {"key": self.key, "operator": self.operator}
        return {"key": self.key, "operator": self.operator, "values": list(self.values)}

    def __str__(self) -> str:
        """Label selector syntax, as kubectl reads it: `nvidia.com/gpu.replicas in (4)`, `!nvidia.com/gpu.slices.gi`."""
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"


# What version 0.1.0 added for whole-GPU namespaces. It selects no whole-GPU node where the cluster's MIG strategy
# is `single` (the GPU Operator's default), so a workload that still carries it never schedules there: steering a
# whole-GPU pod spec takes it out of every term (the requirements that replace it are added as always).
OBSOLETE = Requirement(MIG_STRATEGY, "NotIn", ("single",))


def requirements(policy: Policy) -> tuple[Requirement, ...]:
    """The requirements every GPU pod of the namespace gets (none where the policy does not steer)."""
    return policy.derived("steering-requirements", _requirements)


def _requirements(policy: Policy) -> tuple[Requirement, ...]:
    return _labels(policy, backend_of(policy).node_requirements)


def _labels(policy: Policy, read: Callable[[Policy], tuple[LabelRequirement, ...]]) -> tuple[Requirement, ...]:
    """The backend's label requirements as `Requirement`s; none where the policy does not steer."""
    return tuple(Requirement(*wanted) for wanted in read(policy)) if policy.steering else ()


def whole_requirements(policy: Policy) -> tuple[Requirement, ...]:
    """The requirements of a memory namespace's pods that hold whole GPUs and no share (ACK's exclusive pool,
    the backend's whole_requirements); none elsewhere, and where the policy does not steer."""
    return policy.derived("steering-whole-requirements", _whole_requirements)


def _whole_requirements(policy: Policy) -> tuple[Requirement, ...]:
    return _labels(policy, backend_of(policy).whole_requirements)


def multi_requirements(policy: Policy) -> tuple[Requirement, ...]:
    """The requirements of a memory namespace's shares spread over several GPUs (ACK's multi-GPU sharing, the
    pod label aliyun.com/gpu-count: the backend's multi_requirements)."""
    return policy.derived("steering-multi-requirements", _multi_requirements)


def _multi_requirements(policy: Policy) -> tuple[Requirement, ...]:
    return _labels(policy, backend_of(policy).multi_requirements)


def pod_requirements(spec: dict[str, Any], policy: Policy, gpus: int = 1) -> tuple[Requirement, ...]:
    """The requirements that a pod spec gets: the policy's where a container holds the resource it steers (a
    memory namespace's multi-GPU ones where the pod spreads it over `gpus` > 1, the backend's pod_gpus), a memory
    namespace's whole-GPU ones where a container holds `nvidia.com/gpu` and none holds a share (ACK: a node
    serves shares or whole GPUs, never both), else none."""
    wanted = requirements(policy)
    if not wanted:
        return ()  # whole-GPU requirements come only with the shares' (ACK)
    if _holds(spec, steered_resource(policy)):
        return multi_requirements(policy) or wanted if gpus > 1 else wanted
    whole = whole_requirements(policy)
    return whole if whole and _holds(spec, NVIDIA_GPU) else ()


def reaches(policy: Policy, labels: Mapping[str, str], *, values: bool = True) -> bool:
    """Whether the policy's steering lets its GPU pods onto a node with `labels` (True where it does not steer).
    With `values=False` only the kind of pool counts (its sharing or MIG strategy), not its replica count or
    slice size: the nodes whose values clusterdrift.drift compares with the policy's."""
    node = dict(labels)
    return all(matches(r.expression, node) for r in requirements(policy) if values or not _is_value(r))


def _is_value(requirement: Requirement) -> bool:
    """A requirement on a pool's values rather than its kind: a replica count, a slice size, ACK's placement."""
    key = requirement.key
    return (requirement.operator == "In" and key in (REPLICAS, GI_SLICES)) or key == ACK_PLACEMENT_LABEL


def steered_resource(policy: Policy) -> str:
    """The resource whose holders are steered: the shared replica's name, the memory backend's, else
    `nvidia.com/gpu`."""
    return backend_of(policy).steered_resource(policy)


# --- Label selection, as the scheduler evaluates it (k8s.io/apimachinery labels.Requirement.Matches) --------


def matches(expression: dict[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` satisfies one `matchExpressions` entry."""
    key: Any = expression.get("key")  # as the user wrote it: not always a string
    operator = expression.get("operator")
    values = expression.get("values")
    values = values if type(values) is list else []  # malformed: the API server rejects it; never a substring test
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        label, bound = label_integer(labels[key]), label_integer(values[0])
        if label is None or bound is None:
            return False
        return label > bound if operator == "Gt" else label < bound
    return False


def term_matches(term: Any, labels: dict[str, str]) -> bool:
    """A node selector term's `matchExpressions` (ANDed); an empty term matches no node (its API docs)."""
    if type(term) is not dict:
        return False
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(type(e) is dict and matches(e, labels) for e in expressions)


def label_integer(text: Any) -> int | None:
    """A label value (or a `Gt`/`Lt` bound) as an integer, or None where it reads as none (Python's int(): the
    native policies keep outside a bound it reads otherwise than CEL's)."""
    try:
        return int(text) if type(text) is str else None
    except ValueError:
        return None


UNNAMED = "\x00 none of them"  # a label value no expression names, and no integer (`_satisfiable` tries it)


def _satisfiable(expressions: list[dict[str, Any]]) -> bool:
    """Whether one label value (or its absence) satisfies every expression, all on the same key: tried on
    every value that can decide it (each value named, integers just past each bound, one named by none)."""
    named = [str(v) for e in expressions for v in (e.get("values") or [])]
    candidates: list[str | None] = [None, UNNAMED, *named]
    for expression in expressions:
        bound = label_integer((expression.get("values") or [None])[0])
        if expression.get("operator") in ("Gt", "Lt") and bound is not None:
            step = 1 if expression["operator"] == "Gt" else -1
            candidates += [str(bound + step * n) for n in range(1, len(named) + 2)]
    key: Any = expressions[0].get("key")
    return any(all(matches(e, {} if value is None else {key: value}) for e in expressions) for value in candidates)


def _term_conflicts(expressions: list[Any], wanted: Iterable[Requirement], policy: Policy) -> list[str]:
    """The labels on which no node matching `expressions` can also satisfy the policy (one requirement alone
    always can: only the user's expressions on the same label are looked at)."""
    clashing = []
    for requirement in wanted:
        ours = requirement.expression  # itself again (a second pass) adds nothing to look at
        same = [e for e in expressions if type(e) is dict and e.get("key") == requirement.key and e != ours]
        if same and not _satisfiable([*same, ours]):
            clashing.append(requirement.key)
    for e in expressions:
        values = e.get("values") if type(e) is dict and e.get("key") == PRODUCT and e.get("operator") == "In" else None
        if type(values) is list and not any(product_fits(policy, str(value)) for value in values):
            clashing.append(PRODUCT)
            break
    return clashing


def product_rule(policy: Policy) -> str | None:
    """What GPU feature discovery's product label says on the policy's nodes, or None where it says nothing."""
    return backend_of(policy).product_rule(policy, PRODUCT)


def product_fits(policy: Policy, product: str) -> bool:
    return backend_of(policy).product_fits(policy, product)


# --- Merging into a pod spec ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Steered:
    """What steering does to one pod spec: its new `affinity` and the patch that sets it, or its conflicts."""

    affinity: Any = None
    patch: list[dict[str, Any]] | None = None
    conflicts: list[Violation] | None = None
    added: tuple[Requirement, ...] = ()
    removed: tuple[Requirement, ...] = ()  # OBSOLETE, where a term carried it


def steer(spec: dict[str, Any], spec_at: str, policy: Policy, gpus: int = 1) -> Steered | None:
    """Merge the policy's requirements into `spec` (the pod spec after mutation, at JSON Pointer `spec_at`).

    None when nothing is to be done: the policy does not steer, no container holds its GPU, the constraints
    are already there, or the affinity is malformed (the API server rejects it; nothing is added to it).
    """
    if bound_node(spec):
        return None
    wanted = pod_requirements(spec, policy, gpus)
    if not wanted:
        return None
    conflicts = _selector_conflicts(spec.get("nodeSelector"), wanted, policy)
    affinity = spec.get("affinity")
    at = f"{spec_at}/affinity"
    if affinity is None:
        value: dict[str, Any] = {"nodeAffinity": required_affinity(wanted)}
        return _done(conflicts, value, [_add(at, value)], wanted)
    if type(affinity) is not dict:
        return _done(conflicts, None, None, wanted)
    node_affinity = affinity.get("nodeAffinity")
    if node_affinity is None:
        value = required_affinity(wanted)
        return _done(conflicts, {**affinity, "nodeAffinity": value}, [_add(f"{at}/nodeAffinity", value)], wanted)
    if type(node_affinity) is not dict:
        return _done(conflicts, None, None, wanted)
    at = f"{at}/nodeAffinity/{REQUIRED}"
    required = node_affinity.get(REQUIRED)
    terms = required.get("nodeSelectorTerms") if type(required) is dict else None
    if required is None or (type(required) is dict and not terms):
        value = {**(required or {}), "nodeSelectorTerms": [{"matchExpressions": [r.expression for r in wanted]}]}
        new = {**affinity, "nodeAffinity": {**node_affinity, REQUIRED: value}}
        return _done(conflicts, new, [_add(at, value)], wanted)
    if type(terms) is not list or not all(type(term) is dict for term in terms):
        return _done(conflicts, None, None, wanted)
    new_terms, patch, contradicted, live = [], [], [], 0
    obsolete = OBSOLETE.expression if backend_of(policy).drops_single_strategy() else None
    removed = False
    for index, term in enumerate(terms):
        expressions = term.get("matchExpressions")
        if expressions is not None and type(expressions) is not list:
            return _done(conflicts, None, None, wanted)
        if not expressions and not term.get("matchFields"):
            new_terms.append(term)  # selects no node, and still none with more requirements
            continue
        live += 1
        term_at = f"{at}/nodeSelectorTerms/{index_token(index)}/matchExpressions"
        stale = _places(expressions or [], obsolete) if obsolete else []
        if stale:
            patch += [{"op": "remove", "path": f"{term_at}/{i}"} for i in reversed(stale)]
            expressions = [e for i, e in enumerate(expressions or []) if i not in stale]
            term = {**term, "matchExpressions": expressions}
            removed = True
        clash = _term_conflicts(expressions or [], wanted, policy)
        if clash:
            contradicted.append((index, clash))
        missing = [r.expression for r in wanted if r.expression not in _normalised(expressions or [], r.key)]
        if not missing:
            new_terms.append(term)
        elif expressions is None:
            patch.append(_add(term_at, missing))
            new_terms.append({**term, "matchExpressions": missing})
        else:
            patch += [_add(f"{term_at}/-", expression) for expression in missing]
            new_terms.append({**term, "matchExpressions": [*expressions, *missing]})
    if live and len(contradicted) == live:
        conflicts.append(_affinity_conflict(contradicted, wanted, policy))
    new = {**affinity, "nodeAffinity": {**node_affinity, REQUIRED: {**required, "nodeSelectorTerms": new_terms}}}
    added = any(op["op"] == "add" for op in patch)
    return _done(conflicts, new, patch, wanted if added else (), (OBSOLETE,) if removed else ())


def kept_name_pin(spec: dict[str, Any]) -> str | None:
    """How the pod spec pins itself to GPUs shared without renaming, or None: a nodeSelector on a product ending
    in `-SHARED`, or a required node affinity each of whose terms selects only such products. The text names it
    as the user wrote it (`nodeSelector nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED`)."""
    selector = spec.get("nodeSelector")
    product = selector.get(PRODUCT) if type(selector) is dict else None
    if type(product) is str and product.endswith("-SHARED"):
        return selector_pin_words(product)
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if type(affinity) is dict else None
    required = node_affinity.get(REQUIRED) if type(node_affinity) is dict else None
    terms = required.get("nodeSelectorTerms") if type(required) is dict else None
    if type(terms) is not list or not terms:
        return None
    pinned = []
    for term in terms:
        expressions = term.get("matchExpressions") if type(term) is dict else None
        values = [
            e.get("values")
            for e in (expressions if type(expressions) is list else [])
            if type(e) is dict and e.get("key") == PRODUCT and e.get("operator") == "In"
        ]
        shared = [v for v in values if type(v) is list and v and all(str(x).endswith("-SHARED") for x in v)]
        if not shared:
            return None  # this term can select other nodes
        pinned += shared[0]
    return affinity_pin_words(",".join(map(str, pinned)))


def selector_pin_words(product: str) -> str:
    """A nodeSelector pin on the product label, as `kept_name_pin` names it (template: the native policies fill
    it too)."""
    return f"nodeSelector {PRODUCT}={product}"


def affinity_pin_words(products: str) -> str:
    """A required node affinity pin on the product label (`products` joined by commas), as `kept_name_pin` names
    it (template: the native policies fill it too)."""
    return f"required node affinity {PRODUCT} in ({products})"


def bound_node(spec: dict[str, Any]) -> str | None:
    """The node a pod spec names itself (`spec.nodeName`), or None: such a pod is placed by nobody else."""
    name = spec.get("nodeName")
    return name if type(name) is str and name else None


def _done(
    conflicts: list[Violation],
    affinity: Any,
    patch: list[dict[str, Any]] | None,
    added: tuple[Requirement, ...],
    removed: tuple[Requirement, ...] = (),
) -> Steered | None:
    if conflicts:
        return Steered(conflicts=conflicts)  # no patch: see the module's docstring
    if not patch:
        return None
    return Steered(affinity=affinity, patch=patch, added=added, removed=removed)


def _add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def required_affinity(wanted: tuple[Requirement, ...]) -> dict[str, Any]:
    """A node affinity of one required term: the policy's requirements (the native policies add it too)."""
    return {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [r.expression for r in wanted]}]}}


def _normalised(expressions: list[Any], key: str) -> list[dict[str, Any]]:
    """The term's expressions on `key` as the policy writes its own (values sorted), to find ours among them."""
    found = []
    for e in expressions:
        if type(e) is dict and e.get("key") == key and type(e.get("values")) is list and e["values"]:
            found.append({"key": key, "operator": e.get("operator"), "values": sorted(map(str, e["values"]))})
        elif type(e) is dict and e.get("key") == key and e.get("operator") in ("Exists", "DoesNotExist"):
            found.append({"key": key, "operator": e["operator"]})
    return found


def restates(expression: Any, requirement: Requirement) -> bool:
    """Whether a term's expression is `requirement` itself, as steering finds its own (values in any order)."""
    return _normalised([expression], requirement.key) == [requirement.expression]


def _places(expressions: list[Any], expression: dict[str, Any]) -> list[int]:
    """The indexes in a term's expressions of `expression` (as `_normalised` writes it)."""
    return [i for i, e in enumerate(expressions) if _normalised([e], expression["key"]) == [expression]]


def _holds(spec: dict[str, Any], resource: str) -> bool:
    """Whether a container or init container asks for some of `resource`."""
    return asks_some(section_bodies(spec, STEERED_SECTIONS), (resource,), ("limits", "requests"))


# --- Conflicts ---------------------------------------------------------------------------------------------


def policy_words(policy: Policy) -> str:
    return backend_of(policy).describe(policy)


def advice(policy: Policy) -> str:
    return backend_of(policy).steering_advice()


def _selector_conflicts(selector: Any, wanted: tuple[Requirement, ...], policy: Policy) -> list[Violation]:
    if type(selector) is not dict:
        return []
    clashes = [
        (requirement.key, str(requirement))
        for requirement in wanted
        if requirement.key in selector
        and not matches(requirement.expression, {requirement.key: str(selector[requirement.key])})
    ]
    if PRODUCT in selector and not product_fits(policy, str(selector[PRODUCT])):
        clashes.append((PRODUCT, product_rule(policy) or ""))
    conflicts = []
    for key, needed in clashes:
        shown = f"{key}={selector[key]}"
        line = selector_conflict_line(shown, policy_words(policy), needed, advice(policy))
        conflicts.append(Violation(line, _short(f"pod: nodeSelector {shown}", policy)))
    return conflicts


def selector_conflict_line(shown: str, words: str, needed: str, advice: str) -> str:
    """A nodeSelector entry (`shown`: key=value) that no node of the policy's pool (`words`) carries (template:
    the native policies fill it too)."""
    return f"pod: nodeSelector {shown} conflicts with {words}, whose GPU pods run only on nodes with {needed}; {advice}"


def _affinity_conflict(
    contradicted: list[tuple[int, list[str]]], wanted: tuple[Requirement, ...], policy: Policy
) -> Violation:
    labels = sorted({label for _, clash in contradicted for label in clash})
    needed = "; ".join(str(r) for r in wanted if r.key in labels)
    if PRODUCT in labels:
        needed = "; ".join(filter(None, (needed, product_rule(policy))))
    which = terms_words(len(contradicted))
    line = affinity_conflict_line(", ".join(labels), policy_words(policy), which, needed, advice(policy))
    return Violation(line, _short(f"pod: node affinity on {', '.join(labels)}", policy))


def terms_words(count: int | str) -> str:
    """The contradicted terms of a required node affinity, by their count (a CEL slot in the native policies)."""
    return "its only term" if count == 1 else f"each of its {count} terms"


def affinity_conflict_line(labels: str, words: str, which: str, needed: str, advice: str) -> str:
    """A required node affinity every live term of which excludes the policy's pool (template: the native
    policies fill it too)."""
    return (
        f"pod: required node affinity on {labels} conflicts with {words}: {which} excludes the nodes with "
        f"{needed}, where its GPU pods must run; {advice}"
    )


def _short(what: str, policy: Policy) -> str:
    short = f'{what} conflicts with policy "{policy.name}"\'s GPU pool; remove it'
    if len(short) <= SHORT_LIMIT:
        return short
    tail = "... conflicts with the policy's GPU pool; remove it"
    return what[: SHORT_LIMIT - len(tail)] + tail


def describe(policy: Policy) -> str:
    """The constraints a namespace's GPU pods get, for `policy explain`."""
    wanted = requirements(policy)
    if not wanted:
        return "none"
    text = f"pods holding {steered_resource(policy)} need node labels " + ", ".join(map(str, wanted))
    whole = whole_requirements(policy)
    if whole:
        text += f"; pods holding whole {NVIDIA_GPU} and no share need " + ", ".join(map(str, whole))
    return text
