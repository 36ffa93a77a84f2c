"""What a pod holds against its namespace's GPU budget, and the one rule that judges it.

`pod_ask` weighs a mutated pod in GPU-equivalents (weights.py, one function per form), counting what the
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

from webhook.admission import weights
from webhook.admission.base.podspec import ContainerRef
from webhook.admission.base.resources import (
    DEVICE_CLASS_PREFIX,
    MIG_PREFIX,
    NVIDIA_GPU,
    device_class_of,
    is_managed,
    mig_profile_of,
)
from webhook.admission.base.violation import SHORT_LIMIT, Violation, cut
from webhook.admission.dra.podclaims import ClaimsView, Found
from webhook.admission.phases.validate import effective_total
from webhook.admission.policy.model import Backend, Mode, Policy
from webhook.admission.quota import GpuQuota

ZERO = Fraction(0)
ROUTES = ("extended", "deviceclass", "claims", "templates")
TERMINAL_PHASES = ("Succeeded", "Failed")
_DECIMAL_PLACES = 9  # a quantity is exact to 1n: any exact decimal of the unit fits in this many places


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


def format_gpus(value: Fraction | int) -> str:
    """GPU-equivalents for people: a decimal where exact ("0.25", "3"), else the fraction ("1/7", "8/7")."""
    value = Fraction(value)
    scaled = value * 10**_DECIMAL_PLACES
    if scaled.denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    whole, rest = divmod(abs(scaled.numerator), 10**_DECIMAL_PLACES)
    text = f"{whole}.{rest:0{_DECIMAL_PLACES}d}".rstrip("0").rstrip(".")
    return ("-" if value < 0 else "") + text


def gpus_word(value: Fraction) -> str:
    """`1 GPU`, `0.5 GPU`, `2 GPUs`: the unit as people say it."""
    return f"{format_gpus(value)} GPU{'s' if value > 1 else ''}"


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
    the engine already looked them up (drapods.pod_claims), read instead of `claims`."""
    if type(pod) is not dict:
        return NOTHING
    status = pod.get("status")
    if type(status) is dict and status.get("phase") in TERMINAL_PHASES:
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
    """What the containers hold at the pod's peak: every container weighed (weights.container), the pod's
    effective request of the sum; NOTHING where none holds a GPU."""
    holders: list[tuple[ContainerRef, dict[str, int | Fraction]]] = []
    forms: dict[tuple[str, int], dict[str, Fraction]] = {}
    for section in ("initContainers", "containers"):
        containers = spec.get(section)
        for index, body in enumerate(containers if type(containers) is list else []):
            if type(body) is not dict:
                continue
            ref = ContainerRef(section, index, body)
            amounts = _gpu_amounts(ref)
            if not amounts:
                continue
            routes: dict[str, int | Fraction] = dict(weights.container(amounts, policy))
            if any(routes.values()):
                routes[""] = sum(routes.values(), ZERO)
                holders.append((ref, routes))
                forms[(section, index)] = amounts
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
    return weights.amounts_of(managed) if managed else {}


def _overhead(spec: dict[str, Any], policy: Policy) -> Fraction:
    """Pod overhead that names GPUs (a RuntimeClass's; it never should), weighed as a container would be."""
    overhead = spec.get("overhead")
    if type(overhead) is not dict:
        return ZERO
    amounts = weights.amounts_of({k: v for k, v in overhead.items() if type(k) is str and is_managed(k)})
    return sum(weights.container(amounts, policy).values(), ZERO) if amounts else ZERO


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
    """The claims and templates the pod names that `view` holds (as drapods.pod_claims finds them)."""
    found: list[Found] = []
    entries = spec.get("resourceClaims")
    for entry in entries if type(entries) is list and view is not None else []:
        name = entry.get("name") if type(entry) is dict else None
        if type(name) is not str:
            continue
        kind, source = "ResourceClaim", entry.get("resourceClaimName")
        if type(source) is not str or not source:
            kind, source = "ResourceClaimTemplate", entry.get("resourceClaimTemplateName")
            if type(source) is not str or not source:
                continue
        assert view is not None
        summary = view.claim(kind, namespace, source)
        if summary is not None:
            found.append((name, kind, source, summary))
    return found


def _claims(found: Sequence[Found], policy: Policy) -> list[tuple[str, str, str, Fraction]]:
    """(route, kind, name, weight) for each claim and template found that holds GPUs."""
    weighed: list[tuple[str, str, str, Fraction]] = []
    for _, kind, source, summary in found:
        value = weights.claim(summary, policy)
        if value:
            weighed.append(("claims" if kind == "ResourceClaim" else "templates", kind, source, value))
    return weighed


def _describe(amounts: dict[str, Fraction], policy: Policy) -> str:
    """The forms of the containers at the pod's peak, for messages: `2 replicas of 4`, `one 3g.40gb MIG slice`."""
    sharing = policy.sharing
    parts: list[str] = []
    backend = sharing.backend if sharing.mode is Mode.MEMORY else None
    for name, amount in amounts.items():
        count = format_gpus(amount)
        profile = mig_profile_of(name) if name.startswith(MIG_PREFIX) else None
        if profile is None and name == NVIDIA_GPU and sharing.is_mig_single and sharing.mig_profile:
            profile = sharing.mig_profile
        if profile is not None:
            parts.append(f"{'one' if amount == 1 else count} {profile} MIG slice{'s' if amount != 1 else ''}")
        elif name == sharing.shared_resource or (name.endswith(".shared") and name.startswith("nvidia.com/")):
            of = f" of {sharing.replicas}" if sharing.replicas else ""
            parts.append(f"{count} replica{'s' if amount != 1 else ''}{of}")
        elif backend is Backend.ACK and name == "aliyun.com/gpu-mem":
            parts.append(f"{count} GiB of GPU memory")
        elif backend is not None and backend is not Backend.ACK and name != NVIDIA_GPU:
            parts.append(f"{name} {count}")
        elif name.startswith(DEVICE_CLASS_PREFIX):
            parts.append(f"{count} {device_class_of(name)} device{'s' if amount != 1 else ''}")
        elif name == NVIDIA_GPU and backend in (Backend.HAMI, Backend.VOLCANO):
            parts.append(f"{count} vGPU{'s' if amount != 1 else ''}")
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
        if pod is not None and quota.requirements and not quota.counts(pod):
            continue
        hard_numerator, hard_denominator = quota.hard_ratio
        used_numerator, used_denominator = usage.used.as_integer_ratio()
        asked = (used_numerator * denominator + numerator * used_denominator) * hard_denominator
        if asked > hard_numerator * used_denominator * denominator:
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
