"""What a pod holds against its namespace's GPU budget, and the one rule that judges it.

`pod_ask` weighs a mutated pod in GPU-equivalents (`resource_weight`: each form's weight asked of the code
that maps it, the sharing backend, mig.slice_weight or DRA's claimweights), counting what the
scheduler and the quota evaluator count: the pod's effective request (the largest init container with the
sidecars started before it, or the app containers with every sidecar, whichever is more), its overhead, and
the devices of the claims and claim templates it names. A pod in a terminal phase holds nothing.

`judge` is the rule, called by the engine (offline, with usage summed from the input) and by the server's
ledger inside its compare-and-swap: for every quota that counts the pod, used + ask <= hard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.admission.base.equivalents import format_gpus, gpus_word
from webhook.admission.base.podspec import ContainerRef, spec_containers
from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.resources import (
    DEVICE_CLASS_PREFIX,
    MIG_PREFIX,
    NVIDIA_GPU,
    device_class_of,
    is_managed,
    is_shared,
    mig_profile_of,
)
from webhook.admission.base.violation import SHORT_LIMIT, Violation, cut
from webhook.admission.cluster.quota import GpuQuota
from webhook.admission.dra.claimweights import claim_weight, class_units, device_class_weight
from webhook.admission.dra.podclaims import ClaimsView, Found, claim_sources
from webhook.admission.phases.validate import effective_total
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.mig import model_of, slice_weight, slice_words
from webhook.admission.sharing.registry import backend_of
from webhook.admission.sharing.replicas import replica_weight, replica_words

ZERO = Fraction(0)
ROUTES = ("extended", "deviceclass", "claims", "templates")
TERMINAL_PHASES = ("Succeeded", "Failed")  # a pod in one holds nothing any more (the quota controller agrees)


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What a pod holds while it runs, in GPU-equivalents."""

    total: Fraction
    by_route: tuple[tuple[str, Fraction], ...]  # routes: "extended", "deviceclass", "claims", "templates"
    detail: str  # for messages: "2 replicas of 4", "one 3g.40gb MIG slice", ...
    claims: tuple[tuple[str, Fraction], ...] = ()  # named ResourceClaims (shared ones count once per namespace)
    # `total` as (numerator, denominator), worked out once (asks are memoized): `judge` compares in integers
    total_ratio: tuple[int, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_ratio", self.total.as_integer_ratio())


NOTHING = PodAsk(ZERO, (), "nothing")


@dataclass(frozen=True, slots=True)
class Usage:
    """A quota and what it holds now, the pod being judged not included."""

    quota: GpuQuota
    used: Fraction


# --- What one unit of each form weighs ---------------------------------------------------------------------


def resource_weight(name: str, policy: Policy) -> Fraction | None:
    """What one unit of a container resource weighs under `policy`, where it weighs alone (None: no GPU, or a
    memory-sliced amount whose weight depends on the container's other amounts: the backend's `share_weight`).
    The one reading of a resource name into its form, for pods, `policy explain` and the schedulers' configs:
    a DeviceClass is DRA's, a MIG profile's resource its slice in any mode (a `.shared` one a replica of it),
    anything else the sharing backend's `unit_weight`."""
    claimed = device_class_of(name)
    if claimed is not None:
        return device_class_weight(claimed, policy) or None
    profile = mig_profile_of(name)
    if profile is not None:
        weight = slice_weight(profile, model_of(policy))
        return weight * replica_weight(policy.sharing.replicas) if is_shared(name) else weight
    return backend_of(policy).unit_weight(policy, name)


def units(policy: Policy) -> list[tuple[str, Fraction, str]]:
    """What one of each resource the policy's namespace is served weighs: (resource, weight, what it is), for
    `policy explain` and the schedulers' configurations (schedulers.py): the backend's, then DRA's classes."""
    return [*backend_of(policy).weight_units(policy), *class_units(policy)]


def amounts_of(resources: dict[str, Any]) -> dict[str, Fraction]:
    """A container's resource map as exact amounts (malformed values left out: validation says those)."""
    found: dict[str, Fraction] = {}
    for key, raw in resources.items():
        if type(key) is not str:
            continue
        value = quantity_or_none(raw)
        if value is not None and value > 0:
            found[key] = Fraction(value)
    return found


def container_weights(amounts: dict[str, Fraction], policy: Policy) -> dict[str, Fraction]:
    """One container's GPU-equivalents by route ("extended", "deviceclass"): the amounts its backend weighs
    together (a memory share), then each other GPU resource it holds at its unit weight."""
    routes: dict[str, Fraction] = {}
    shared, together = backend_of(policy).share_weight(policy, amounts)
    if together:
        routes["extended"] = shared
    for name, value in amounts.items():
        if name in together:
            continue
        weight = resource_weight(name, policy)
        if weight:
            route = "deviceclass" if device_class_of(name) is not None else "extended"
            routes[route] = routes.get(route, ZERO) + value * weight
    return routes


# --- The pod's ask -------------------------------------------------------------------------------------------


def pod_ask(
    pod: dict[str, Any],
    policy: Policy,
    claims: ClaimsView | None,
    namespace: str | None = None,
    found: Sequence[Found] | None = None,
) -> PodAsk:
    """What the (mutated) pod holds under `policy`; NOTHING for a terminal pod or one with no GPU. `claims`:
    the namespace's claims and templates (None: the claims it names are not counted); `namespace` stands in
    for a missing metadata.namespace (a CREATE's pod may carry none); `found`, the claims the pod names as
    the engine already looked them up (podclaims.pod_claims), read instead of `claims`."""
    if type(pod) is not dict:
        return NOTHING
    if has_ended(pod):
        return NOTHING
    spec = pod.get("spec")
    if type(spec) is not dict:
        return NOTHING
    listed = spec.get("containers")
    shape: Shape | None = None
    if "initContainers" not in spec and type(listed) is list and len(listed) == 1:  # the usual pod, inline
        body = listed[0]
        resources = body.get("resources") if type(body) is dict else None
        limits = resources.get("limits") if type(resources) is dict else None
        if type(limits) is dict:
            shape = (("containers", None, tuple(limits.items())),)
    if shape is None:
        shape = _shape(spec)
    memo: dict[Shape, PodAsk] | None = policy.memo.get(MEMO_KEY)  # policy.derived, without its call
    if memo is None:
        memo = policy.derived(MEMO_KEY, _new_memo)
    try:
        containers = memo.get(shape) if shape is not None else None
    except TypeError:  # a value that cannot be a key (a list where a quantity belongs): weighed without the memo
        shape, containers = None, None
    if containers is None:
        containers = _containers(spec, policy)
        if shape is not None:
            if len(memo) >= MEMO_SIZE:
                memo.clear()
            memo[shape] = containers
    if not (claims is not None or found is not None or "overhead" in spec):
        return containers  # the usual case: what the containers hold, worked out once per shape and policy
    total, by_route = containers.total, dict(containers.by_route)
    overhead = _overhead(spec, policy)
    if overhead:
        total += overhead
        by_route["extended"] = by_route.get("extended", ZERO) + overhead
    parts = [containers.detail] if containers.total else []
    named: list[tuple[str, Fraction]] = []
    if claims is not None or found is not None:
        looked_up = found if found is not None else _looked_up(spec, claims, namespace or _namespace(pod))
        for route, kind, source, value in _claims(looked_up, policy):
            total += value
            by_route[route] = by_route.get(route, ZERO) + value
            parts.append(f'{format_gpus(value)} in {kind} "{source}"')
            if route == "claims":
                named.append((source, value))
    if not total:
        return NOTHING
    ordered = tuple((route, by_route[route]) for route in ROUTES if by_route.get(route))
    return PodAsk(Fraction(total), ordered, " + ".join(part for part in parts if part), tuple(named))


# The limits of a pod's containers as written, in start order: (section, restartPolicy, limits).
Shape = tuple[tuple[str, Any, Any], ...]
MEMO_SIZE = 4096  # distinct container shapes per policy: a cluster's pods repeat a few templates
MEMO_KEY = "budget-containers"


def _new_memo(_: Policy) -> dict[Shape, PodAsk]:
    return {}


def _shape(spec: dict[str, Any]) -> Shape | None:
    """The key under which a pod's containers' ask is kept per policy: each container's section, restart
    policy and limits as written (all of them: copying a map's items is cheaper than picking its GPU resources
    out, on every budgeted review); None where the spec is malformed (weighed without the memo)."""
    found: list[Any] = []
    for section in _SECTIONS:
        containers = spec.get(section)
        if containers is None:
            continue
        if type(containers) is not list:
            return None
        for body in containers:
            if type(body) is not dict:
                return None
            resources = body.get("resources")
            if resources is None:
                continue
            if type(resources) is not dict:
                return None
            limits = resources.get("limits")
            found.append(
                (section, body.get("restartPolicy"), tuple(limits.items()) if type(limits) is dict else limits)
            )
    return tuple(found)


_SECTIONS = ("initContainers", "containers")


def _containers(spec: dict[str, Any], policy: Policy) -> PodAsk:
    """What the containers hold at the pod's peak: every container weighed (container_weights), the pod's
    effective request of the sum; NOTHING where none holds a GPU."""
    holders: list[tuple[ContainerRef, dict[str, int | Fraction]]] = []
    forms: dict[tuple[str, int], dict[str, Fraction]] = {}
    for ref in spec_containers(spec, _SECTIONS):
        amounts = _gpu_amounts(ref)
        if not amounts:
            continue
        routes: dict[str, int | Fraction] = dict(container_weights(amounts, policy))
        if any(routes.values()):
            routes[""] = sum(routes.values(), ZERO)
            holders.append((ref, routes))
            forms[(ref.section, ref.index)] = amounts
    total, running = effective_total(holders, "") if holders else (0, [])
    by_route: dict[str, Fraction] = {}
    shown: dict[str, Fraction] = {}
    peak = {(ref.section, ref.index) for ref, _ in running}
    for ref, routes in holders:
        if (ref.section, ref.index) not in peak:
            continue
        for route, value in routes.items():
            if route:
                by_route[route] = by_route.get(route, ZERO) + value
        for name, amount in forms[(ref.section, ref.index)].items():
            shown[name] = shown.get(name, ZERO) + amount
    if not total:
        return NOTHING
    ordered = tuple((route, by_route[route]) for route in ROUTES if by_route.get(route))
    return PodAsk(Fraction(total), ordered, _describe(shown, policy))


def _gpu_amounts(ref: ContainerRef) -> dict[str, Fraction]:
    """The container's GPU resources, its limits: an extended resource's request must equal its limit (the
    API server refuses any other pod, and defaults a missing request to the limit), so the limits are what the
    quota counts as requests; validation counts the same (validate.container_counts)."""
    limits = ref.resource_map("limits")
    managed = {k: v for k, v in limits.items() if type(k) is str and is_managed(k)}
    return amounts_of(managed) if managed else {}


def _overhead(spec: dict[str, Any], policy: Policy) -> Fraction:
    """Pod overhead that names GPUs (a RuntimeClass's; it never should), weighed as a container would be."""
    overhead = spec.get("overhead")
    if type(overhead) is not dict:
        return ZERO
    amounts = amounts_of({k: v for k, v in overhead.items() if type(k) is str and is_managed(k)})
    return sum(container_weights(amounts, policy).values(), ZERO) if amounts else ZERO


def has_ended(pod: dict[str, Any]) -> bool:
    """Whether the pod is in a terminal phase (Succeeded or Failed): counted by no quota, held by no budget."""
    status = pod.get("status")
    return type(status) is dict and status.get("phase") in TERMINAL_PHASES


def name_of(pod: dict[str, Any]) -> str:
    """The pod's name for messages: metadata.name, else its generateName with `*` (the name is set later)."""
    metadata = pod.get("metadata")
    metadata = metadata if type(metadata) is dict else {}
    name, prefix = metadata.get("name"), metadata.get("generateName")
    if type(name) is str and name:
        return name
    return f"{prefix}*" if type(prefix) is str and prefix else "<unnamed>"


def _namespace(pod: dict[str, Any]) -> str:
    metadata = pod.get("metadata")
    namespace = metadata.get("namespace") if type(metadata) is dict else None
    return namespace if type(namespace) is str else ""


def _looked_up(spec: dict[str, Any], view: ClaimsView | None, namespace: str) -> list[Found]:
    """The claims and templates the pod names that `view` holds (read as `pod_claims` reads them)."""
    found: list[Found] = []
    entries = spec.get("resourceClaims")
    if type(entries) is not list or view is None:
        return found
    for name, kind, source in claim_sources(entries):
        summary = view.claim(kind, namespace, source)
        if summary is not None:
            found.append((name, kind, source, summary))
    return found


def _claims(found: Sequence[Found], policy: Policy) -> list[tuple[str, str, str, Fraction]]:
    """(route, kind, name, weight) for each claim and template found that holds GPUs."""
    weighed: list[tuple[str, str, str, Fraction]] = []
    for _, kind, source, summary in found:
        value = claim_weight(summary, policy)
        if value:
            weighed.append(("claims" if kind == "ResourceClaim" else "templates", kind, source, value))
    return weighed


def _describe(amounts: dict[str, Fraction], policy: Policy) -> str:
    """The forms of the containers at the pod's peak, for messages: `2 replicas of 4`, `one 3g.40gb MIG slice`."""
    sharing, backend = policy.sharing, backend_of(policy)
    parts: list[str] = []
    for name, amount in amounts.items():
        count = format_gpus(amount)
        profile = mig_profile_of(name) if name.startswith(MIG_PREFIX) else None
        if profile is not None:
            parts.append(slice_words(profile, count, amount))
        elif name.endswith(".shared") and name.startswith("nvidia.com/"):
            parts.append(replica_words(count, amount, sharing.replicas))
        elif (words := backend.amount_words(policy, name, count, amount)) is not None:
            parts.append(words)
        elif name.startswith(DEVICE_CLASS_PREFIX):
            parts.append(f"{count} {device_class_of(name)} device{'s' if amount != 1 else ''}")
        elif name == NVIDIA_GPU:
            parts.append(f"{count} whole GPU{'s' if amount != 1 else ''}")
        else:
            parts.append(f"{name} {count}")
    return ", ".join(parts)


# --- The rule ------------------------------------------------------------------------------------------------


def judge(ask: PodAsk, usages: Sequence[Usage], pod_name: str, pod: dict[str, Any] | None = None) -> Violation | None:
    """The budget rule: for every quota that counts the pod, used + ask.total <= hard; else one line naming
    the quota that fits least. `pod`, where given, picks the quotas that count it (`GpuQuota.counts`); without
    it every usage given counts; `pod_name` "" names the pod from `pod` when it is refused. A pod that holds
    nothing is never refused, whatever the use."""
    # used + total > hard, in integers: Fraction arithmetic costs ten times as much, on every review.
    numerator, denominator = ask.total_ratio
    if not numerator:
        return None
    worst: tuple[Fraction, Usage] | None = None
    for usage in usages:
        quota = usage.quota
        hard_numerator, hard_denominator = quota.hard_ratio
        used_numerator, used_denominator = usage.used.as_integer_ratio()
        asked = (used_numerator * denominator + numerator * used_denominator) * hard_denominator
        # Whether the quota counts the pod matters only where the pod would exceed it: most reviews fit, and
        # read no scope.
        if asked > hard_numerator * used_denominator * denominator and (pod is None or quota.counts(pod)):
            room = quota.hard - usage.used
            if worst is None or room < worst[0]:
                worst = (room, usage)
    if worst is None:
        return None
    return refusal(ask, worst[1], pod_name or (name_of(pod) if pod is not None else "<unnamed>"))


def refusal(ask: PodAsk, usage: Usage, pod_name: str) -> Violation:
    """The one line of a refusal: the quota, its namespace, used of hard, the ask and its detail, what fits,
    and what to do."""
    quota = usage.quota
    fits = max(quota.hard - usage.used, ZERO)
    scoped = f" (scopes: {quota.scoped})" if quota.scoped else ""
    detail = f" ({ask.detail})" if ask.detail and ask.detail != "nothing" else ""
    fits_text = f"{format_gpus(fits)} fits" if fits else "nothing fits"
    advice = (
        f"ask for at most {format_gpus(fits)}, free some by ending pods, or raise the quota's {quota.entry}"
        if fits
        else f"free some by ending pods of the namespace, or raise the quota's {quota.entry}"
    )
    line = (
        f'pod "{cut(pod_name, 63)}": quota "{quota.name}" of namespace "{quota.namespace}"{scoped}: '
        f"{format_gpus(usage.used)} of {gpus_word(quota.hard)} used; this pod asks {format_gpus(ask.total)}{detail}; "
        f"{fits_text}; {advice}"
    )
    short = (
        f'quota "{cut(quota.name, 24)}": {format_gpus(usage.used)} of {format_gpus(quota.hard)} GPU used, '
        f"asks {format_gpus(ask.total)}, {fits_text}; "
    )
    short += "ask for less or raise it" if fits else "free some or raise it"
    return Violation(line, cut(short, SHORT_LIMIT))
