"""GPU budgets in a live cluster, for `audit` and `policy lint --cluster`.

Two views, both from the core's rules (budget.pod_ask weighs a pod, quota.gpu_quota reads a ResourceQuota):
- each namespace's GPU use in GPU-equivalents, by route (extended resources, DeviceClasses' extended
  resources, named ResourceClaims, claim templates), against each of its GPU ResourceQuotas;
- the ResourceQuota entries on GPU resources that the API server's own quota cannot hold as their author meant
  once the webhook has mapped the pods: an entry on a resource no pod of the namespace ends up asking (the
  API server then counts nothing), one that counts time-slicing replicas or MIG slices under the name
  `nvidia.com/gpu`, one that counts some of the namespace's GPU forms and not the others, one on `limits.`
  (the API server counts extended resources only as `requests.`). Each says what to write instead.

What the namespace's pods can end up asking is found by asking the engine: the mapping of `nvidia.com/gpu: 1`
and `0.5` under the namespace's policy (as `policy explain` shows it), and the live pods after mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TextIO

from webhook.admission.base.equivalents import format_gpus, gpus_word
from webhook.admission.base.podspec import POD_SPEC_PATHS, mentions_gpu
from webhook.admission.base.resources import is_managed
from webhook.admission.budgets.budget import (
    ROUTES,
    ZERO,
    PodAsk,
    has_ended,
    pod_ask,
    resource_weight,
)
from webhook.admission.cluster.quota import GPU_QUOTA_ENTRIES, GpuQuota, gpu_quota
from webhook.admission.sharing.registry import backend_of
from webhook.cli.common import local_evaluator, namespace_of
from webhook.cli.webhooks import EXCLUDED_NAMESPACES

if TYPE_CHECKING:
    from webhook.admission.cluster.nodes import ClusterView
    from webhook.admission.dra.podclaims import ClaimsView
    from webhook.admission.engine import Decision
    from webhook.admission.policy.model import Policy, PolicySet
    from webhook.cli.kube import KubeClient

    Evaluator = Callable[[dict[str, Any], str], Decision]

EXCLUDED = frozenset(name for name, _ in EXCLUDED_NAMESPACES)
PROBES = ("1", "0.5", "0.25")  # what a namespace's pods ask most: a GPU, a half, a quarter
REQUESTS, LIMITS = "requests.", "limits."


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """One GPU ResourceQuota and what the pods it counts hold now."""

    quota: GpuQuota
    used: Fraction
    pods: int

    @property
    def free(self) -> Fraction:
        return max(self.quota.hard - self.used, Fraction(0))


@dataclass(frozen=True, slots=True)
class NamespaceUse:
    """A namespace's GPU use: every non-terminal pod that holds a GPU, by route, and its GPU quotas."""

    namespace: str
    policy: str
    check: str  # the policy's spec.cluster.quota: deny, warn or off
    pods: int
    by_route: tuple[tuple[str, Fraction], ...]
    total: Fraction
    quotas: tuple[QuotaUse, ...]


@dataclass(frozen=True, slots=True)
class QuotaFinding:
    """A ResourceQuota entry on a GPU resource that the API server cannot hold as meant; `line` says it all."""

    namespace: str
    quota: str
    entry: str  # "requests.nvidia.com/gpu"
    hard: str  # as written
    problem: str  # uncounted | limits | replicas | partial
    write: str  # the entry (or entries) to write instead; "" where the entry stands
    held: bool  # the webhook holds the budget in GPU-equivalents (spec.cluster.quota deny or warn)
    line: str

    @property
    def failing(self) -> bool:
        """Nothing holds what the entry was meant to: neither the API server nor the webhook."""
        return self.problem in ("uncounted", "limits") and not self.held


def is_live(pod: dict[str, Any]) -> bool:
    """Counted by a quota: not Succeeded or Failed (a pod being deleted still holds its devices)."""
    return not has_ended(pod)


def asked_resources(pod: dict[str, Any]) -> set[str]:
    """The GPU resources a pod's containers (init containers too) request or limit."""
    spec = pod.get("spec")
    asked: set[str] = set()
    if not isinstance(spec, dict):
        return asked
    for section in ("containers", "initContainers"):
        containers = spec.get(section)
        for container in containers if isinstance(containers, list) else []:
            resources = container.get("resources") if isinstance(container, dict) else None
            for amounts in (resources.get(k) for k in ("requests", "limits")) if isinstance(resources, dict) else ():
                if isinstance(amounts, dict):
                    asked.update(name for name in amounts if is_managed(name))
    return asked


def probe_pod(namespace: str, resources: dict[str, str]) -> dict[str, Any]:
    """One container asking `resources` (requests = limits, as the API server defaults them)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-budget-probe", "namespace": namespace},
        "spec": {
            "containers": [
                {"name": "app", "image": "probe", "resources": {"limits": dict(resources), "requests": dict(resources)}}
            ]
        },
    }


@dataclass(slots=True)
class _Namespace:
    """What the pods of one namespace hold, as they are read."""

    policy: Policy
    pods: int = 0  # pods holding a GPU
    routes: dict[str, Fraction] = field(default_factory=dict)  # named claims left out: `claims` has them
    claims: dict[str, Fraction] = field(default_factory=dict)  # named ResourceClaims: a shared one counts once
    asked: set[str] = field(default_factory=set)  # the GPU resources its pods ask after mapping

    def add(self, ask: PodAsk) -> None:
        self.pods += 1
        for route, share in ask.by_route:
            self.routes[route] = self.routes.get(route, ZERO) + share
        for name, share in ask.claims:
            self.routes["claims"] -= share
            self.claims[name] = share

    def by_route(self) -> tuple[tuple[str, Fraction], ...]:
        routes = {**self.routes, "claims": self.routes.get("claims", ZERO) + sum(self.claims.values(), ZERO)}
        return tuple((route, routes.get(route, ZERO)) for route in ROUTES)


def held_by(asks: Sequence[PodAsk]) -> Fraction:
    """What pods hold together: a ResourceClaim that several of them name counts once."""
    claims = {name: share for ask in asks for name, share in ask.claims}
    alone = sum((ask.total - sum((share for _, share in ask.claims), ZERO) for ask in asks), ZERO)
    return alone + sum(claims.values(), ZERO)


class BudgetReport:
    """The budgets of the namespaces read: `uses` and `findings`, built from the listed objects."""

    def __init__(
        self,
        policies: PolicySet,
        quota_objects: Iterable[dict[str, Any]],
        pods: Iterable[dict[str, Any]],
        evaluator: Evaluator,
        claims: ClaimsView | None = None,
        mapped: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda pod: None,
    ) -> None:
        """`mapped(pod)` gives a pod as the webhook maps it where the caller has it already (audit judged it);
        else the pod goes through `evaluator`. Each mapped pod is weighed by the core (`budget.pod_ask`), its
        DRA claims found in `claims`."""
        self._policies = policies
        self._evaluator = evaluator
        # The namespaces never sent to the webhook: nothing there is mapped, and no budget is held by it.
        self.quota_objects = [q for q in quota_objects if isinstance(q, dict) and namespace_of(q, None) not in EXCLUDED]
        self.quotas = [q for q in map(gpu_quota, self.quota_objects) if q is not None]
        self._namespaces: dict[str, _Namespace] = {}
        self._mapped: dict[int, set[str]] = {}  # by policy: the GPU resources the engine admits nvidia.com/gpu as
        self._by_namespace: dict[str, list[GpuQuota]] = {}
        for quota in self.quotas:
            self._by_namespace.setdefault(quota.namespace, []).append(quota)
        counted: dict[int, list[PodAsk]] = {id(q): [] for q in self.quotas}  # each quota's pods
        for pod in pods:
            if not isinstance(pod, dict) or not is_live(pod) or not _may_hold_gpus(pod):
                continue
            namespace = namespace_of(pod, None)
            if namespace in EXCLUDED:
                continue
            state = self._namespace(namespace)
            after = mapped(pod)
            if after is None:
                after = evaluator(pod, namespace).mutated or pod
            ask = pod_ask(after, state.policy, claims, namespace)
            state.asked |= asked_resources(after)
            if not ask.total:
                continue
            state.add(ask)
            for quota in self._by_namespace.get(namespace, ()):
                if quota.counts(after):
                    counted[id(quota)].append(ask)
        self.uses = self._uses(counted)
        self.findings = self._findings()
        # Shown in the tables where the namespaces read have a GPU quota, or a quota entry on a GPU resource.
        self.shown = bool(self.quotas or self.findings)

    def _namespace(self, namespace: str) -> _Namespace:
        state = self._namespaces.get(namespace)
        if state is None:
            state = self._namespaces[namespace] = _Namespace(self._policies.select(namespace).policy)
        return state

    # --- use ----------------------------------------------------------------------------------------------

    def _uses(self, counted: dict[int, list[PodAsk]]) -> list[NamespaceUse]:
        uses = []
        for namespace in sorted({*self._namespaces, *self._by_namespace}):
            state = self._namespace(namespace)
            quotas = tuple(
                QuotaUse(q, held_by(counted[id(q)]), len(counted[id(q)])) for q in self._by_namespace.get(namespace, ())
            )
            if not state.pods and not quotas:
                continue
            by_route = state.by_route()
            uses.append(
                NamespaceUse(
                    namespace,
                    state.policy.name,
                    _quota_check(state.policy),
                    state.pods,
                    by_route,
                    sum((share for _, share in by_route), ZERO),
                    quotas,
                )
            )
        return uses

    # --- entries the API server cannot hold -----------------------------------------------------------------

    def reachable(self, namespace: str) -> set[str]:
        """The GPU resources pods of `namespace` can end up asking after the webhook's mapping: what the engine
        admits `nvidia.com/gpu` as (PROBES), and what its live pods ask."""
        state = self._namespace(namespace)
        mapped = self._mapped.get(id(state.policy))  # the mapping is the policy's: probed once per policy
        if mapped is None:
            mapped = set()
            for quantity in PROBES:
                decision = self._evaluator(probe_pod(namespace, {"nvidia.com/gpu": quantity}), namespace)
                if not decision.violations and not decision.refusals:
                    mapped |= asked_resources(decision.mutated)
            self._mapped[id(state.policy)] = mapped
        return mapped | state.asked

    def weight(self, namespace: str, policy: Policy, resource: str) -> Fraction:
        """GPU-equivalents of one unit of `resource` in `namespace`: the core's weight of the resource, or of a
        pod asking one unit where the weight depends on the container (memory shares)."""
        unit = resource_weight(resource, policy)
        return unit if unit is not None else pod_ask(probe_pod(namespace, {resource: "1"}), policy, None).total

    def _findings(self) -> list[QuotaFinding]:
        findings: list[QuotaFinding] = []
        for obj in self.quota_objects:
            metadata = obj.get("metadata")
            name = str(metadata.get("name", "")) if isinstance(metadata, dict) else ""
            namespace = namespace_of(obj, None)
            spec = obj.get("spec")
            hard = spec.get("hard") if isinstance(spec, dict) else None
            if not isinstance(hard, dict):
                continue
            entries = [(k, v) for k, v in hard.items() if isinstance(k, str) and is_managed(_resource_of(k))]
            if not entries:
                continue
            policy = self._policies.select(namespace).policy
            reachable = self.reachable(namespace)
            budget = gpu_quota(obj)
            for entry, value in entries:
                finding = self._finding(namespace, name, entry, str(value), policy, reachable, budget, hard)
                if finding is not None:
                    findings.append(finding)
        return findings

    def _finding(
        self,
        namespace: str,
        name: str,
        entry: str,
        value: str,
        policy: Policy,
        reachable: set[str],
        budget: GpuQuota | None,
        hard: dict[str, Any],
    ) -> QuotaFinding | None:
        resource = _resource_of(entry)
        held = entry in GPU_QUOTA_ENTRIES and _quota_check(policy) != "off"
        where = f'quota "{name}" of namespace "{namespace}": {entry}: {value}'
        gpus = self._gpus_of(namespace, policy, entry, value, budget)
        holder = (
            f'; the webhook holds this budget in GPU-equivalents (policy "{policy.name}", spec.cluster.quota: '
            f"{_quota_check(policy)})"
            if held
            else ""
        )
        if entry.startswith(LIMITS):
            beside = REQUESTS + resource in hard
            write = "" if beside else f'{REQUESTS}{resource}: "{value}"'
            instead = f"{REQUESTS}{resource} beside it is what it counts" if beside else f"write {write}"
            line = (
                f"{where} counts nothing in the API server, which counts extended resources only under "
                f"requests.; {instead}{holder}"
            )
            return QuotaFinding(namespace, name, entry, value, "limits", write, held or beside, line)
        others = sorted(reachable - {resource})
        if resource not in reachable:
            write = self._write(namespace, policy, others, gpus)
            asks = ", ".join(others) if others else "no GPU resource the policy admits"
            line = (
                f'{where} counts nothing: under policy "{policy.name}" the namespace\'s pods ask {asks}, never '
                f"{resource}" + (f"; write {write}" if write else "") + _mixed(others) + holder
            )
            return QuotaFinding(namespace, name, entry, value, "uncounted", write, held, line)
        unit = self.weight(namespace, policy, resource)
        if (
            resource == "nvidia.com/gpu"
            and backend_of(policy).replica_resource(policy.sharing) == "nvidia.com/gpu"
            and unit != 1
        ):
            # The device plugin keeps the name: the API server counts replicas (or MIG slices) as nvidia.com/gpu.
            what = backend_of(policy).kept_name_units(policy)
            count = _whole(value)
            native = f"{format_gpus(count * unit)} GPU" if count is not None else "?"
            line = (
                f'{where} counts {what}, not GPUs: under policy "{policy.name}" the device plugin keeps the name '
                f"nvidia.com/gpu for one of {format_gpus(1 / unit)} per GPU, so the API server holds the namespace "
                f"to {native}; write {format_gpus(1 / unit)} per GPU meant"
            )
            if held:
                line += (
                    f" (the webhook reads the entry as {gpus_word(count or Fraction(0))} under spec.cluster.quota: "
                    "the API server's count, the tighter, decides)"
                )
            return QuotaFinding(namespace, name, entry, value, "replicas", "", held, line)
        if others:
            write = self._write(namespace, policy, others, gpus)
            line = (
                f"{where} counts only {resource}; the namespace's pods also ask {', '.join(others)}, which it "
                "does not count" + (f"; add {write}" if write else "") + _mixed([resource, *others]) + holder
            )
            return QuotaFinding(namespace, name, entry, value, "partial", write, held, line)
        return None

    def _gpus_of(
        self, namespace: str, policy: Policy, entry: str, value: str, budget: GpuQuota | None
    ) -> Fraction | None:
        """The GPU-equivalents the entry stands for: the budget where it is a GPU budget entry, else its value
        in units of its resource."""
        if budget is not None and entry == budget.entry:
            return budget.hard
        if entry in GPU_QUOTA_ENTRIES:
            return _whole(value)
        count = _whole(value)
        return None if count is None else count * self.weight(namespace, policy, _resource_of(entry))

    def _write(self, namespace: str, policy: Policy, resources: Sequence[str], gpus: Fraction | None) -> str:
        """The requests.<resource> entries that hold `gpus` GPU-equivalents in each of `resources`."""
        if gpus is None:
            return ""
        written = []
        for resource in resources:
            unit = self.weight(namespace, policy, resource)
            if unit <= 0:
                continue
            count = gpus / unit
            text = str(count.numerator // count.denominator)
            note = "" if count.denominator == 1 else f" (rounded down from {format_gpus(count)})"
            written.append(f'{REQUESTS}{resource}: "{text}"{note}')
        return ", ".join(written)


def _may_hold_gpus(pod: dict[str, Any]) -> bool:
    """The engine's pre-filter, and DRA claims: a CPU pod is not mapped, nor weighed (most pods of a cluster)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    return bool(spec.get("resourceClaims")) or mentions_gpu(pod, POD_SPEC_PATHS["Pod"])


def _mixed(resources: Sequence[str]) -> str:
    """Where a namespace's pods get several forms, no one native entry holds their sum: say so."""
    if len(resources) < 2:
        return ""
    return " (each entry caps one form at the whole budget; only the webhook's budget holds the forms together)"


def _resource_of(entry: str) -> str:
    for prefix in (REQUESTS, LIMITS):
        if entry.startswith(prefix):
            return entry[len(prefix) :]
    return entry


def _whole(value: str) -> Fraction | None:
    from webhook.admission.base.quantity import parse_quantity

    try:
        return Fraction(parse_quantity(value))
    except (ValueError, TypeError):
        return None


def _quota_check(policy: Policy) -> str:
    """The policy's spec.cluster.quota (deny, warn or off)."""
    return str(policy.cluster_checks.quota)


# --- output -----------------------------------------------------------------------------------------------

HEADERS = ("NAMESPACE", "POLICY", "PODS", *(r.upper() for r in ROUTES), "TOTAL", "QUOTA", "HARD", "USED", "FREE")


def print_budgets(report: BudgetReport, out: TextIO) -> None:
    """One row per namespace and GPU quota (a namespace without one shows its use alone), then the findings,
    then a summary line."""
    rows = []
    for use in report.uses:
        head = [use.namespace, use.policy, str(use.pods), *(format_gpus(s) for _, s in use.by_route)]
        head.append(format_gpus(use.total))
        for quota in use.quotas or (None,):
            if quota is None:
                rows.append([*head, "-", "-", "-", "-"])
                continue
            cells = [quota.quota.name, format_gpus(quota.quota.hard), format_gpus(quota.used), format_gpus(quota.free)]
            rows.append([*head, *cells])
    if rows:
        widths = [max(len(row[i]) for row in [list(HEADERS), *rows]) for i in range(len(HEADERS))]
        for row in [list(HEADERS), *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out)
    for finding in report.findings:
        print(finding.line, file=out)
    quotas = len(report.quotas)
    failing = sum(1 for f in report.findings if f.failing)
    summary = (
        f"GPU budgets: {len(report.uses)} namespace{'s' if len(report.uses) != 1 else ''} with GPU pods or GPU "
        f"quotas, {quotas} GPU quota{'s' if quotas != 1 else ''} (GPU-equivalents: a GPU 1, a replica "
        "1/replicas, a MIG slice or memory share its larger fraction of one GPU)"
    )
    if report.findings:
        summary += (
            f"; {len(report.findings)} quota entr{'ies' if len(report.findings) != 1 else 'y'} the API server "
            "cannot hold as meant"
        )
        if failing:
            summary += f", {failing} of them held by neither it nor the webhook"
    print(summary, file=out)


def budgets_json(report: BudgetReport) -> dict[str, Any]:
    return {
        "namespaces": [
            {
                "namespace": use.namespace,
                "policy": use.policy,
                "quotaCheck": use.check,
                "pods": use.pods,
                "byRoute": {route: format_gpus(share) for route, share in use.by_route},
                "total": format_gpus(use.total),
                "quotas": [
                    {
                        "name": q.quota.name,
                        "entry": q.quota.entry,
                        "hard": format_gpus(q.quota.hard),
                        "used": format_gpus(q.used),
                        "free": format_gpus(q.free),
                        "pods": q.pods,
                    }
                    for q in use.quotas
                ],
            }
            for use in report.uses
        ],
        "quotaFindings": [
            {
                "namespace": f.namespace,
                "quota": f.quota,
                "entry": f.entry,
                "hard": f.hard,
                "problem": f.problem,
                "write": f.write,
                "heldByWebhook": f.held,
                "line": f.line,
            }
            for f in report.findings
        ],
    }


# --- listing (policy lint --cluster; audit lists the pods and claims itself) -------------------------------


@dataclass(frozen=True, slots=True)
class BudgetObjects:
    """What the budgets read from a cluster: ResourceQuotas, Pods, and the claims and templates pods name."""

    quotas: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    claims: list[dict[str, Any]]


def list_budget_objects(cluster: KubeClient, err: TextIO, page_size: int = 500) -> BudgetObjects | None:
    """Every ResourceQuota, Pod, ResourceClaim and ResourceClaimTemplate; None (said on `err`) when the
    ResourceQuotas may not be listed; Pods or claims that may not be listed are said and left out."""
    from webhook.cli.kube import RESOURCE_QUOTAS, RESOURCES, Forbidden

    try:
        quotas = cluster.list_objects(RESOURCE_QUOTAS, None, page_size=page_size)
    except Forbidden as exc:
        err.write(f"note: GPU budgets not shown: {exc}; grant list on resourcequotas\n")
        return None
    found: dict[str, list[dict[str, Any]]] = {}
    for resource in (r for r in RESOURCES if r.kind in ("ResourceClaimTemplate", "ResourceClaim", "Pod")):
        try:
            found[resource.kind] = cluster.list_objects(resource, None, page_size=page_size)
        except Forbidden as exc:
            err.write(f"note: GPU use leaves out {resource.name}: {exc}; grant list on {resource.name}\n")
            found[resource.kind] = []
    claims = found["ResourceClaimTemplate"] + found["ResourceClaim"]
    return BudgetObjects(quotas, found["Pod"], claims)


def budget_report(policies: PolicySet, view: ClusterView | None, objects: BudgetObjects) -> BudgetReport:
    """The budgets of `objects`, each pod mapped by the engine as the webhook would (with the nodes' view)."""
    from webhook.admission.dra.podclaims import ClaimIndex

    index = ClaimIndex()
    for claim in objects.claims:
        index.add(claim, namespace_of(claim, None))
    return BudgetReport(policies, objects.quotas, objects.pods, local_evaluator(policies, view, None, index), index)
