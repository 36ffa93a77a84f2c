"""Dynamic Resource Allocation: a pod's ResourceClaims and ResourceClaimTemplates counted with its GPUs.

A pod that names claims (`spec.resourceClaims`) holds their devices as well as its extended resources, so its
total counts both, against `maxPerContainer` (a container that names a claim, or one of its requests, gets all
of its devices) and `maxPerPod`. The claims and templates reach the core as data (`ClaimsView`): the server's
watched cache (webhook/server/claims.py), or offline the claims in the same input files (`ClaimIndex`). A claim's
spec is immutable, so an entry once read stays right; a claim not in the view is counted as nothing, with a
warning (never denied for it). Each claim is read once into a policy-free `ClaimSummary` when it is listed or
watched, never per review, and a pod that names no claim does no claim work here. Under time-slicing or MPS
the whole GPUs of the claims a pod names must be shared the namespace's way (`_unshared_claims`), and the
cluster checks read what the claims ask of each DeviceClass (`claimed_by_class`).

This is apart from claimrules.py, which judges a claim or template itself when it is created: there the object is the
claim, here it is the pod, and what is read of a claim differs (a summary, not the manifest). The readers both
need (a claim's spec path, which DeviceClasses are GPUs, a GpuConfig's sharing strategy, a name as messages
show it) live in dra/claimrules.py, imported from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from webhook.admission.base.gpuconfig import config_covers, gpu_config_strategies
from webhook.admission.base.podspec import ContainerRef, get_path, spec_containers
from webhook.admission.base.resources import MIG_PREFIX, NVIDIA_GPU_CLASSES
from webhook.admission.base.violation import WARNING_PREFIX, Violation
from webhook.admission.cluster import celselect
from webhook.admission.cluster.celselect import ANY, Selector
from webhook.admission.dra.claimrules import (
    ALL,
    CLAIM_SPEC_PATHS,
    claim_spec_path,
    class_kind,
    cut_name,
)
from webhook.admission.phases.validate import (
    Rules,
    container_counts,
    container_violation,
    effective_total,
    pod_violation,
)
from webhook.admission.policy.model import Policy

# (request name, DeviceClass, count) per request and per `firstAvailable` alternative; count ALL_DEVICES for
# allocationMode All.
Devices = tuple[tuple[str, str, int], ...]
# A request whose selectors (or an alternative's) narrow the devices of its class: (request name, its
# alternatives as (subrequest name, "" for `exactly`; DeviceClass; count; the selectors, ANY where none)).
Selected = tuple[tuple[str, tuple[tuple[str, str, int, Selector], ...]], ...]
ALL_DEVICES = -1
NO_STRATEGY = "-"  # a claim's GpuConfig with no sharing strategy: its DeviceClass's config does not apply


def devices_of(obj: Any) -> Devices | None:
    """What a ResourceClaim or ResourceClaimTemplate asks for, reduced to counts; None for anything else.

    Policy-free (which classes are GPUs is the policy's to say, when a pod is judged), and lenient: an entry
    the API server would refuse is left out (the API server stores no such claim)."""
    path = claim_spec_path(obj)
    if path is None:
        return None
    spec = get_path(obj, path)
    devices = spec.get("devices") if type(spec) is dict else None
    requests = devices.get("requests") if type(devices) is dict else None
    found: list[tuple[str, str, int]] = []
    for request in requests if type(requests) is list else []:
        if type(request) is not dict or type(request.get("name")) is not str:
            continue
        exactly, alternatives = request.get("exactly"), request.get("firstAvailable")
        bodies = [exactly] if exactly is not None else alternatives if type(alternatives) is list else []
        for body in bodies:
            if type(body) is not dict or type(body.get("deviceClassName")) is not str:
                continue
            count = body.get("count")
            if body.get("allocationMode") == ALL:
                count = ALL_DEVICES
            elif count is None or count == 0:
                count = 1
            if type(count) is int:
                found.append((request["name"], body["deviceClassName"], count))
    return tuple(found)


def selected_of(requests: Any) -> Selected:
    """The requests (`spec.devices.requests`) whose selectors narrow their class's devices, for the cluster
    checks; () where none has selectors (the usual claim: it keeps nothing more). A request with an
    allocationMode All alternative is left out (it takes what is there)."""
    found: list[tuple[str, tuple[tuple[str, str, int, Selector], ...]]] = []
    for request in requests if type(requests) is list else []:
        if type(request) is not dict or type(request.get("name")) is not str:
            continue
        exactly, alternatives = request.get("exactly"), request.get("firstAvailable")
        bodies = [exactly] if exactly is not None else alternatives if type(alternatives) is list else []
        read: list[tuple[str, str, int, Selector]] = []
        narrowed, every = False, False
        for body in bodies:
            if type(body) is not dict or type(body.get("deviceClassName")) is not str:
                continue
            count = body.get("count")
            count = 1 if count is None or count == 0 else count
            every = every or body.get("allocationMode") == ALL or type(count) is not int
            selector = celselect.of_request(body.get("selectors"))
            narrowed = narrowed or selector is not None
            name = body.get("name") if exactly is None else ""
            name = name if type(name) is str else ""
            read.append((name, body["deviceClassName"], count, selector or ANY))
        if narrowed and not every and read:
            found.append((request["name"], tuple(read)))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class ClaimSummary:
    """What a pod's review reads of a claim or template, worked out once when the claim is read (listed,
    watched, or offline from the input), never per review. Policy-free: which classes are GPUs is the
    policy's to say, so `most` bounds the GPU devices of any policy and an exact count is asked for only when
    a pod is near its maximum. Equal summaries are held once (the claims made from one template are alike)."""

    devices: Devices
    most: int  # every request at its largest alternative, of any class, allocationMode All left out
    every: bool  # a request (of any class) with allocationMode All
    # per DeviceClass, the devices that must be on one node: a request with one class and an exact count (a
    # `firstAvailable` request may fall back to a smaller alternative; `All` takes what is there)
    on_one_node: tuple[tuple[str, int], ...]
    # per request (or alternative) of NVIDIA's whole GPUs (gpu.nvidia.com): its reference, count, and the sharing
    # strategy of the GpuConfig that covers it ("" where none does, NO_STRATEGY where one with no strategy does)
    gpu_sharing: tuple[tuple[str, int, str], ...] = ()
    # the requests whose own selectors narrow their class's devices (`selected_of`), for the cluster checks
    selected: Selected = ()

    @staticmethod
    def of(devices: Devices, configs: Any = None, selected: Selected = ()) -> ClaimSummary:
        """The summary of `devices`, with the sharing strategies that `configs` (spec.devices.config) set."""
        largest: dict[str, int] = {}  # request -> its largest alternative
        alternatives: dict[str, int] = {}  # request -> how many alternatives
        for ref, _, count in devices:
            largest[ref] = max(largest.get(ref, 0), count)
            alternatives[ref] = alternatives.get(ref, 0) + 1
        per_class: dict[str, int] = {}
        for ref, device_class, count in devices:
            if alternatives[ref] == 1 and count > 0:
                per_class[device_class] = per_class.get(device_class, 0) + count
        strategies = gpu_config_strategies(configs)
        bare = gpu_config_strategies(configs, "")  # a GpuConfig with no strategy stands over its class's config

        def written(ref: str) -> str:
            found = strategies.get(ref, strategies.get(ref.split("/")[0], strategies.get("", "")))
            return found or (NO_STRATEGY if config_covers(bare, ref) else "")

        return ClaimSummary(
            devices=devices,
            most=sum(largest.values()),
            every=any(count == ALL_DEVICES for _, _, count in devices),
            on_one_node=tuple(per_class.items()),
            gpu_sharing=tuple(
                (ref, count, written(ref)) for ref, device_class, count in devices if device_class in NVIDIA_GPU_CLASSES
            ),
            selected=selected,
        )


def summary_of(obj: Any) -> ClaimSummary | None:
    """The summary of a ResourceClaim or ResourceClaimTemplate; None for any other object."""
    devices = devices_of(obj)
    if devices is None:
        return None
    spec = get_path(obj, CLAIM_SPEC_PATHS[obj["kind"]])
    claimed = spec.get("devices") if type(spec) is dict else None
    if type(claimed) is not dict:
        return ClaimSummary.of(devices)
    return ClaimSummary.of(devices, claimed.get("config"), selected_of(claimed.get("requests")))


class ClaimsView(Protocol):
    """The claims and templates a pod may name: the summary of one, or None where it is not known."""

    def claim(self, kind: str, namespace: str, name: str) -> ClaimSummary | None: ...


@dataclass(slots=True)
class ClaimIndex:
    """A ClaimsView over dicts: namespace -> name -> summary, for ResourceClaims and for templates."""

    claims: dict[str, dict[str, ClaimSummary]] = field(default_factory=dict)
    templates: dict[str, dict[str, ClaimSummary]] = field(default_factory=dict)

    def claim(self, kind: str, namespace: str, name: str) -> ClaimSummary | None:
        held = (self.claims if kind == "ResourceClaim" else self.templates).get(namespace)
        return held.get(name) if held is not None else None

    def add(self, obj: dict[str, Any], namespace: str) -> bool:
        """Keep a claim or template (offline: those of the input files); False for any other object."""
        summary = summary_of(obj)
        metadata = obj.get("metadata")
        name = metadata.get("name") if type(metadata) is dict else None
        if summary is None or type(name) is not str:
            return False
        held = self.claims if obj.get("kind") == "ResourceClaim" else self.templates
        held.setdefault(namespace, {})[name] = summary
        return True


def claim_entries(obj: dict[str, Any], spec_path: tuple[str, ...]) -> list[Any]:
    """The pod spec's `spec.resourceClaims` (the claims and templates it names), or [] where there are none:
    read once per review, and a pod that names none does no more claim work."""
    spec = get_path(obj, spec_path)
    entries = spec.get("resourceClaims") if type(spec) is dict else None
    return entries if type(entries) is list else []


def claim_sources(entries: list[Any]) -> Iterator[tuple[str, str, str]]:
    """(entry name, kind, source) of each entry of `spec.resourceClaims` that names its source: a
    `resourceClaimName` (kind ResourceClaim), else a `resourceClaimTemplateName` (kind ResourceClaimTemplate).
    The one reader of the entries, for the DRA checks and the budget alike."""
    for entry in entries:
        name = entry.get("name") if type(entry) is dict else None
        if type(name) is not str:
            continue
        kind, source = "ResourceClaim", entry.get("resourceClaimName")
        if type(source) is not str or not source:
            kind, source = "ResourceClaimTemplate", entry.get("resourceClaimTemplateName")
            if type(source) is not str or not source:
                continue
        yield name, kind, source


def _counts(devices: Devices, policy: Policy, request: str | None) -> tuple[dict[str, int], str]:
    """GPU devices by kind ("gpu", "mig") of every request (or of `request`), each at its largest
    alternative; and the class of a request with allocationMode All, or "". Worked out once per policy and
    distinct value (the claims made from one template are alike); treat the result as read-only."""
    memo: dict[tuple[Devices, str | None], tuple[dict[str, int], str]]
    memo = policy.derived("dra-claim-counts", lambda _: {})
    key = (devices, request)
    found = memo.get(key)
    if found is None:
        if len(memo) >= 4096:  # a bound no cluster's distinct claims reach
            memo.clear()
        best: dict[str, tuple[int, str]] = {}  # request -> (count, kind)
        every = ""
        for ref, device_class, count in devices:
            kind = class_kind(device_class, policy)
            if not kind or (request is not None and ref != request):
                continue
            if count == ALL_DEVICES:
                every = every or device_class
                continue
            if count > best.get(ref, (0, ""))[0]:
                best[ref] = (count, kind)
        totals: dict[str, int] = {}
        for count, kind in best.values():
            totals[kind] = totals.get(kind, 0) + count
        found = memo[key] = (totals, every)
    return found


Found = tuple[str, str, str, ClaimSummary]  # a claim a pod names: (the pod's name for it, kind, its name, summary)


@dataclass(frozen=True, slots=True)
class _Named:
    """One entry of the pod's spec.resourceClaims, found in the view."""

    name: str  # the pod's name for it
    kind: str  # ResourceClaim or ResourceClaimTemplate
    source: str  # the claim's or the template's name
    devices: Devices

    def counts(self, policy: Policy, request: str | None = None) -> tuple[dict[str, int], str]:
        return _counts(self.devices, policy, request)

    @property
    def shown(self) -> str:
        return _shown(self.name, self.kind, self.source)


@dataclass(frozen=True, slots=True)
class _PodRules:
    """What the quick answer on a pod's claims reads of a policy, worked out once per policy."""

    least_maximum: int  # the least of the whole-GPU, MIG and pod maxima (validation's)
    strategy: str | None  # the GpuConfig sharing strategy NVIDIA's whole GPUs need here (time-slicing, MPS)

    @staticmethod
    def of(policy: Policy) -> _PodRules:
        rules = Rules.of(policy)
        return _PodRules(rules.least_maximum, rules.gpu_config_strategy)


def _shown(name: str, kind: str, source: str) -> str:
    return f'claim "{cut_name(name)}" ({kind} "{cut_name(source, 63)}")'


def pod_claims(
    obj: dict[str, Any],
    namespace: str,
    policy: Policy,
    spec_path: tuple[str, ...],
    entries: list[Any],
    view: ClaimsView,
    pod_gpus: int | Fraction,
    named_out: list[Found] | None = None,
    classes: Mapping[str, str] | None = None,
) -> tuple[list[Violation], list[str]]:
    """The devices of the claims and templates a pod names (`entries`: `claim_entries`), counted with its
    extended resources against `maxPerContainer` and `maxPerPod`: the violations, and a warning for each one
    the view does not hold. `pod_gpus` is every GPU count of the pod, validation's (`validated`), for the
    quick answer; `named_out`, when given, receives the claims found (for the cluster checks:
    `claimed_by_class`); `classes`, the server's DeviceClasses with their own GpuConfig strategy (`judge`)."""
    found, warnings, most, unbounded = _looked_up(entries, namespace, view)
    problems: list[Violation] = []
    if not found:
        return problems, warnings
    if named_out is not None:
        named_out += found
    pod_rules = policy.derived("dra-pod-rules", _PodRules.of)
    if pod_rules.strategy is not None:
        problems += _unshared_claims(found, pod_rules.strategy, policy, classes)
    if not unbounded and pod_gpus + most <= pod_rules.least_maximum:
        # The usual case, answered from the summaries without counting container by container: every GPU
        # count of the pod plus the most its claims could hold is within the least maximum that could apply.
        return problems, warnings
    rules = Rules.of(policy)
    named = {name: _Named(name, kind, source, claim.devices) for name, kind, source, claim in found}
    groups = _Groups.of(rules)
    problems += _per_container(get_path(obj, spec_path), groups, named, rules)
    problems += _unbounded(named, rules)
    problems += _per_pod(groups, named, rules)
    return problems, warnings


def _looked_up(entries: list[Any], namespace: str, view: ClaimsView) -> tuple[list[Found], list[str], int, bool]:
    """The claims the pod names that the view holds, a warning for each it does not, and their summaries
    together: a bound on their GPU devices, and whether any asks for `All`."""
    found: list[Found] = []
    warnings: list[str] = []
    most, unbounded = 0, False
    for name, kind, source in claim_sources(entries):
        claim = view.claim(kind, namespace, source)
        if claim is None:
            word = "ResourceClaim" if kind == "ResourceClaim" else "template"  # within a warning's length
            warnings.append(
                f'{WARNING_PREFIX}claim "{cut_name(name, 18)}": {word} "{cut_name(source, 22)}" unknown yet; '
                "its GPUs are not counted"
            )
        else:
            found.append((name, kind, source, claim))
            most += claim.most
            unbounded = unbounded or claim.every
    return found, warnings, most, unbounded


@dataclass(slots=True)
class _Groups:
    """The two kinds of device a pod's claims are counted in (whole GPUs, MIG devices): which extended
    resources are of each, its per-container maximum and noun; and, as containers are read, the holders and
    the extended resources counted."""

    members: dict[str, tuple[Callable[[str], bool], int, str]]
    grouped: dict[str, list[tuple[ContainerRef, dict[str, Any]]]]
    resources: dict[str, set[str]]

    @staticmethod
    def of(rules: Rules) -> _Groups:
        def mig_names(name: str) -> bool:
            return name.startswith(MIG_PREFIX) or name in rules.class_migs or name == rules.mig_single_resource

        return _Groups(
            {
                "gpu": (rules.whole_gpus.__contains__, rules.max_whole_per_container, "GPUs"),
                "mig": (mig_names, rules.max_mig_per_container, "MIG devices"),
            },
            {"gpu": [], "mig": []},
            {"gpu": set(), "mig": set()},
        )


def _per_container(spec: Any, groups: _Groups, named: dict[str, _Named], rules: Rules) -> list[Violation]:
    """Each container's extended resources with the devices of the claims it names, against the per-container
    maximum of each kind; fills `groups` with the holders the per-pod count reads."""
    policy = rules.policy
    where = f'policy "{policy.name}"'
    problems: list[Violation] = []
    for ref in spec_containers(spec, ("initContainers", "containers")):
        counts = container_counts(ref, rules, [])  # validation said its problems: only the counts here
        asked = _container_claims(ref, named, policy)
        for group, (member, maximum, noun) in groups.members.items():
            extended = {name: value for name, value in counts.items() if member(name) and value}
            if extended:
                groups.grouped[group].append((ref, {"": sum(extended.values())}))
                groups.resources[group].update(extended)
            claimed = [(one, got[group]) for one, got in asked if got.get(group)]
            total = sum(extended.values()) + sum(count for _, count in claimed)
            if not claimed or total <= maximum or sum(extended.values()) > maximum:
                continue
            parts = [f"{value} from {name}" for name, value in extended.items()]
            parts += [f"{count} from {one.shown}" for one, count in claimed]
            problems.append(
                container_violation(
                    ref,
                    f"{total} {noun} in all ({', '.join(parts)}) exceed the per-container maximum of {maximum} "
                    f"({where}): a claim's devices count with the extended resources; ask for at most {maximum} "
                    "in all",
                    f"{total} {noun} with its claims: at most {maximum} per container; ask for fewer",
                )
            )
    return problems


def _unbounded(named: dict[str, _Named], rules: Rules) -> list[Violation]:
    """A claim that asks for every matching device of a node: no cap bounds it."""
    policy = rules.policy
    where = f'policy "{policy.name}"'
    problems: list[Violation] = []
    for one in named.values():
        _, every = one.counts(policy)
        if every:
            problems.append(
                pod_violation(
                    f"{one.shown} asks for every matching {every} device of a node (allocationMode All), which no cap "
                    f"can bound ({where} allows at most {rules.max_per_pod} per pod); name a claim with an exact count",
                    f"{cut_name(one.name)}: allocationMode All is unbounded; use a claim with a count",
                )
            )
    return problems


def _per_pod(groups: _Groups, named: dict[str, _Named], rules: Rules) -> list[Violation]:
    """The pod's extended resources (its effective total) with every claim's devices, against `maxPerPod`."""
    policy = rules.policy
    where = f'policy "{policy.name}"'
    problems: list[Violation] = []
    for group, (_, _, noun) in groups.members.items():
        claimed = [(one, one.counts(policy)[0].get(group, 0)) for one in named.values()]
        claimed = [(one, count) for one, count in claimed if count]
        in_pod, _ = effective_total(groups.grouped[group], "")
        total = in_pod + sum(count for _, count in claimed)
        if not claimed or total <= rules.max_per_pod or in_pod > rules.max_per_pod:
            continue
        parts = [f"{in_pod} from {' and '.join(sorted(groups.resources[group]))}"] if in_pod else []
        parts += [f"{count} from {one.shown}" for one, count in claimed]
        problems.append(
            pod_violation(
                f"{total} {noun} in all ({', '.join(parts)}) exceed the per-pod maximum of {rules.max_per_pod} "
                f"({where}): a pod's claims count with its extended resources; ask for at most {rules.max_per_pod} in "
                "all, or split the pod",
                f"{total} {noun} with its claims: at most {rules.max_per_pod} per pod; ask for fewer",
            )
        )
    return problems


def _container_claims(
    ref: ContainerRef, named: dict[str, _Named], policy: Policy
) -> list[tuple[_Named, dict[str, int]]]:
    """The claims a container names (`resources.claims`): all of a claim's devices, or one request's."""
    resources = ref.body.get("resources")
    entries = resources.get("claims") if type(resources) is dict else None
    found: dict[tuple[str, str | None], tuple[_Named, dict[str, int]]] = {}
    for entry in entries if type(entries) is list else []:
        claim = entry.get("name") if type(entry) is dict else None
        one = named.get(claim) if type(claim) is str else None
        if one is None:
            continue
        request = entry.get("request") if type(entry.get("request")) is str and entry.get("request") else None
        found[(one.name, request)] = (one, one.counts(policy, request)[0])
    return list(found.values())


def _unshared_claims(
    found: list[Found], strategy: str, policy: Policy, classes: Mapping[str, str] | None
) -> list[Violation]:
    """Under time-slicing or MPS, the claims a pod names whose NVIDIA whole GPUs no GpuConfig shares with the
    namespace's strategy: the pod would hold them alone (the claims are judged when created: these are ones
    made before the policy said so, or admitted under warn or audit). A request no GpuConfig of the claim
    covers gets its DeviceClass's own config, where the server knows the class (`classes`)."""
    problems: list[Violation] = []
    mode = policy.sharing.mode
    by_class = classes.get(NVIDIA_GPU_CLASSES[0]) == strategy if classes else False
    for name, kind, source, claim in found:
        for ref, count, written in claim.gpu_sharing:
            if written == strategy or (by_class and not written):
                continue
            if written == NO_STRATEGY:
                written = ""
            what = "allocationMode All" if count == ALL_DEVICES else f"count {count}"
            how = (
                f"shared by {written} (its GpuConfig)"
                if written
                else "that no GpuConfig shares: the pod would hold them alone"
            )
            problems.append(
                pod_violation(
                    f'{_shown(name, kind, source)} request "{cut_name(ref, 70)}": {NVIDIA_GPU_CLASSES[0]} {what} '
                    f'asks for whole GPUs {how}, and policy "{policy.name}" shares GPUs by {mode}; name a claim whose '
                    f"GpuConfig sets sharing.strategy {strategy}",
                    f"{cut_name(name)}: GPUs not shared by {mode}; name a claim with a {strategy} GpuConfig",
                )
            )
    return problems


def claimed_by_class(found: list[Found]) -> dict[str, list[tuple[str, int]]]:
    """For the cluster checks: the devices the claims a pod names (`pod_claims`' `named_out`) ask of each
    DeviceClass, as (the claim as messages show it, count): each summary's `on_one_node`."""
    claimed: dict[str, list[tuple[str, int]]] = {}
    for name, kind, source, claim in found:
        for device_class, count in claim.on_one_node:
            claimed.setdefault(device_class, []).append((_shown(name, kind, source), count))
    return claimed


def selected_by_request(found: list[Found]) -> list[tuple[str, str, tuple[tuple[str, str, int, Selector], ...]]]:
    """For the cluster checks: the requests of the claims a pod names whose selectors narrow their class's
    devices, as (the claim as messages show it, request, alternatives): each summary's `selected`."""
    return [(_shown(name, kind, source), ref, alternatives) for name, kind, source, claim in found
            for ref, alternatives in claim.selected]  # fmt: skip
