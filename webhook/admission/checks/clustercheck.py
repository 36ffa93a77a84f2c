"""Cluster-aware admission checks: a GPU pod that no node can ever run, or that a policy's drift affects.

Three checks, each `deny | warn | off` in the policy's `cluster:` section (policy.ClusterChecks), run by
`engine.evaluate` on the object after mutation when it has a `ClusterView`, and skipped when it has none:
- fits: each container's managed resources, and the pod's effective total (counted as the scheduler counts,
  validate.effective_total), must fit on the largest node for that resource (ACK's aliyun.com/gpu-mem on the
  largest GPU, cluster.per_container, the pod's total as the extender places it on one GPU; under the pod
  label aliyun.com/gpu-count "M", N/M on each of M GPUs of a node with at least M of them: _ack_spread). HAMi's
  and Volcano's vGPUs each on a GPU of their own among those one node registers (_Vgpus, memshare.vgpus).
  A pod's DRA devices of one DeviceClass, all ways of asking together, on one node (`claims_fit`, _pooled);
  a claim request with selectors, the devices of its class they also match on one node (_narrowed).
  Cordoned nodes count: they come back. Node pools that scale from zero are invisible until they scale:
  `assumeNodes` describes them (policynodes.assumed_nodes).
- offered: a shared or MIG resource (what the policy maps or converts `nvidia.com/gpu` to) that no node
  advertises: the pod would stay Pending.
- drift: the policy's drift (clusterdrift.py) that affects the GPUs the pod holds, one line each.

`bound_node` judges a pod that names its node (`spec.nodeName`) against that node's labels. The nodes, the
`auto` values and the drift come from checks/policynodes.py and clusterdrift.py; this module holds what a review
asks of them, and its lines. What the checks need of a policy is worked out once per snapshot (`_plan`): a
valid pod that fits is a few set look-ups. Pure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.admission.base.podspec import ContainerRef
from webhook.admission.base.quantity import format_fraction, quantity_text
from webhook.admission.base.resources import (
    ACK_MEMORY,
    DEVICE_CLASS_PREFIX,
    HAMI_MEMORY,
    MIG_PREFIX,
    NVIDIA_GPU,
    VOLCANO_MEMORY,
    is_shared,
)
from webhook.admission.base.violation import SHORT_LIMIT, Violation, cut
from webhook.admission.checks.clusterdrift import Drift, drift, unshared_dra
from webhook.admission.checks.policynodes import assumed_nodes, names_shown, policy_nodes
from webhook.admission.cluster.celselect import Selector
from webhook.admission.cluster.devices import DraDevices
from webhook.admission.cluster.nodes import ACK_COUNT, PRODUCT_LABEL, ClusterView, Registered, nodes_text, per_container
from webhook.admission.dra.claimrules import cut_name
from webhook.admission.phases import steering
from webhook.admission.phases.validate import Holders, container_violation, effective_total, pod_violation
from webhook.admission.policy.model import Check, Policy
from webhook.admission.sharing import memshare
from webhook.admission.sharing.registry import backend_of

VGPU_MEMORY = frozenset({HAMI_MEMORY, VOLCANO_MEMORY})  # one vGPU's memory, on one registered GPU (_Vgpus)


# --- A pod bound to a node --------------------------------------------------------------------------------


def bound_node(spec: Any, policy: Policy, view: ClusterView) -> list[Violation]:
    """A pod that names its node (`spec.nodeName`) and holds the GPU the policy steers, against that node's GPU
    feature discovery labels: the node affinity it is never given (steering.py), checked here instead. Only
    the labels the node has are judged (a node without GPU feature discovery says nothing), and a node the
    snapshot does not know leaves the pod alone."""
    name = steering.bound_node(spec) if type(spec) is dict else None
    node = view.nodes.get(name) if name else None
    wanted = steering.pod_requirements(spec, policy) if node is not None else ()
    if node is None or not wanted:
        return []
    labels = node.labels
    clashes = [
        (f"{r.key}={labels[r.key]}", str(r))
        for r in wanted
        if r.key in labels and not steering.matches(r.expression, labels)
    ]
    product = labels.get(PRODUCT_LABEL)
    if product is not None and not steering.product_fits(policy, product):
        clashes.append((f"{PRODUCT_LABEL}={product}", steering.product_rule(policy) or ""))
    if not clashes:
        return []
    found, needed = ", ".join(label for label, _ in clashes), "; ".join(rule for _, rule in clashes)
    line = (
        f'pod: spec.nodeName binds it to node "{node.name}", whose label{"s" if len(clashes) > 1 else ""} {found} '
        "does not match "
        f"{steering.policy_words(policy)}, whose GPU pods run only on nodes with {needed}; bind it to a node "
        "of the policy's pool, or leave spec.nodeName out and let the scheduler place it"
    )
    short = f'pod: spec.nodeName "{node.name}" is outside the policy\'s GPU pool; bind it to a node in the pool'
    if len(short) > SHORT_LIMIT:
        short = "pod: spec.nodeName names a node outside the policy's GPU pool; bind it to one in the pool"
    return [Violation(line, short)]


# --- Fits, offered and drift ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pools:
    """The DRA devices a pod's resources draw on together (KEP-5004: the scheduler allocates a pod's extended
    resources served by a DeviceClass, its `deviceclass.resource.kubernetes.io/<class>` resources and its
    claims from the same devices of one node). Worked out once per snapshot and policy."""

    # resource -> the DeviceClasses it may draw devices from, on some node
    classes_of: dict[str, frozenset[str]]
    # class -> (its devices, the resources drawing on them there, node) for each distinct set of those
    # resources, the node with the most devices for that set; the most devices first
    shapes: dict[str, tuple[tuple[int, frozenset[str], str], ...]]


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the checks need of one policy against one snapshot, worked out once: the hot path is then a few
    set look-ups for a pod that fits."""

    view: ClusterView
    roomy: frozenset[str]  # resources whose largest node holds the policy's per-pod maximum: a valid pod fits
    drift: tuple[Drift, ...]
    pools: _Pools
    vgpus: _Vgpus | None  # HAMi's or Volcano's registered GPUs, where the policy is of that backend
    per_gpu: bool  # a valid container's vGPUs may fit on no node's registered GPUs: _vgpu_fits judges them
    whole_only: dict[str, tuple[str, ...]]  # the replica resource no node shares the policy's way (_whole_only)
    # ACK's multi-GPU sharing: for M GPUs, the most GiB one GPU holds on a node of at least M GPUs and the
    # most GPUs a node has (_ack_spread), worked out on the first pod labelled with that M
    spread: dict[int, tuple[tuple[int, str] | None, tuple[int, str] | None]] = dataclasses.field(default_factory=dict)


def _whole_only(policy: Policy, view: ClusterView) -> dict[str, tuple[str, ...]]:
    """The policy's replica resource -> the DeviceClasses serving it, where every node of the policy's that
    offers it serves it through such a class (`unshared_dra`): a pod asking it gets GPUs of its own wherever
    it runs. Empty where any node offering it shares it (a device plugin's replicas, a class with the config)."""
    unshared = unshared_dra(policy, view)
    if not unshared:
        return {}
    resource = policy.sharing.resource_name
    bad = {node for _, nodes in unshared.values() for node in nodes}
    offering = [node.name for node in policy_nodes(policy, view) if resource in node.allocatable]
    if not offering or any(name not in bad for name in offering):
        return {}
    return {resource: tuple(unshared)}


def _plan(policy: Policy, view: ClusterView) -> _Plan:
    plan = policy.memo.get("cluster-plan")
    if plan is None or plan.view is not view:  # a new snapshot (or policy): once per pair
        maximum = policy.limits.max_per_pod
        resources = {*view.resources(), *(r for node in assumed_nodes(policy) for r in node.allocatable)}
        # A valid pod holds at most the per-pod maximum of GPUs in all, whichever names it asks them by
        # (validation counts a class's resource with the extended resource it serves): where one node has that
        # many devices of a class, every way of asking for them fits there together.
        roomy = frozenset(
            r for r in resources if (_largest(policy, view, r) or (0, ""))[0] >= _most(policy, r, maximum)
        )
        vgpus, per_gpu = _vgpus(policy, view), False
        spec = memshare.spec_of(policy)
        if spec is not None and spec.count is not None:  # HAMi, Volcano: one vGPU's memory is not a node's
            roomy = roomy | {spec.memory} if spec.count in roomy else roomy - {spec.memory}
        if vgpus is not None and spec is not None and policy.cluster_checks.fits is not Check.OFF:
            # whether a valid container's vGPUs, as many and as large as it may ask, fit on one node
            gpu_mib, unit_mib = memshare.units_of(spec, policy)
            most = backend_of(policy).max_per_container(policy, "whole")
            per_gpu = gpu_mib is None or vgpus.best(most, gpu_mib // unit_mib) is not None
        drift_found = drift(policy, view) if policy.cluster_checks.drift is not Check.OFF else ()
        whole_only = _whole_only(policy, view) if policy.cluster_checks.fits is not Check.OFF else {}
        roomy = roomy.difference(whole_only)  # a pod holding it is searched (_search says why)
        plan = _Plan(view, roomy, drift_found, _pools(policy, view), vgpus, per_gpu, whole_only)
        policy.memo["cluster-plan"] = plan
    return plan


@dataclass(frozen=True, slots=True)
class _Vgpus:
    """The GPUs that HAMi's or Volcano's device plugin registers on the nodes (cluster.registered_devices), for
    a policy of that backend: its scheduler puts each vGPU of a container on a GPU of its own of one node, whose
    registered memory must hold the vGPU's (memshare.vgpus). Both sides in the device plugin's units (HAMi's
    MiB times deviceMemoryScaling, Volcano's units of gpuMemoryFactor MiB), compared as the scheduler compares
    them, whatever the policy reads them as (drift says where it reads them wrong). A node of the backend that
    registers no GPU (no annotation, or one that does not read) is not judged per GPU: it holds as many vGPUs
    as it advertises, of any memory, as before. Worked out once per snapshot and policy."""

    count: str  # the resource counting vGPUs
    memory: str  # one vGPU's memory
    # each distinct registration: (amount, GPUs of it) the most first, and the first node registering it
    shapes: tuple[tuple[tuple[tuple[int, int], ...], str], ...]
    unregistered: int  # the most vGPUs a node that registers none advertises (as before: any memory); 0: none
    largest: tuple[int, str]  # the most memory one registered GPU has, and its node
    most: tuple[int, str]  # the most GPUs one node registers, and the node
    advertised: int  # the most vGPUs one node advertises: a container asking more has its line (_too_big)
    containers_only: bool  # Volcano's scheduler reads no init container's vGPUs (ExtractResourceRequest)

    def best(self, count: int, memory: int) -> tuple[int, str] | None:
        """None where `count` vGPUs of `memory` each fit on one node; else the most GPUs of at least `memory`
        that one node registers, and that node."""
        if count <= self.unregistered:
            return None
        best = (0, "")
        for per_gpu, node in self.shapes:
            gpus = sum(number for amount, number in per_gpu if amount >= memory)
            if gpus >= count:
                return None
            if gpus > best[0] or not best[1]:
                best = (gpus, node)
        return best


def _vgpus(policy: Policy, view: ClusterView) -> _Vgpus | None:
    """The registered GPUs of the policy's backend (HAMi, Volcano); None under any other, or where no node
    registers any."""
    spec = memshare.spec_of(policy)
    if spec is None or spec.count is None:
        return None
    shapes: dict[tuple[tuple[int, int], ...], str] = {}
    seen: set[int] = set()  # registrations are interned: a few distinct among thousands of nodes
    unregistered = 0
    for node in (*view.nodes.values(), *assumed_nodes(policy)):
        devices = node.devices
        if node.registrar == spec.backend.value and isinstance(devices, Registered):
            if id(devices) not in seen:
                seen.add(id(devices))
                shapes.setdefault(devices.per_gpu(), node.name)
        else:
            unregistered = max(unregistered, node.allocatable.get(spec.count, 0))
    if not shapes:
        return None
    found = tuple(shapes.items())
    largest = max(((per_gpu[0][0], node) for per_gpu, node in found), key=lambda item: item[0])
    most = max(((sum(n for _, n in per_gpu), node) for per_gpu, node in found), key=lambda item: item[0])
    advertised = (_largest(policy, view, spec.count) or (0, ""))[0]
    return _Vgpus(spec.count, spec.memory, found, unregistered, largest, most, advertised, spec.containers_only)


def _pools(policy: Policy, view: ClusterView) -> _Pools:
    classes_of: dict[str, set[str]] = {}
    best: dict[str, dict[frozenset[str], tuple[int, str]]] = {}
    for node in (*view.nodes.values(), *assumed_nodes(policy)):
        for resource, amount in node.allocatable.items():
            if not resource.startswith(DEVICE_CLASS_PREFIX):
                continue
            name = resource[len(DEVICE_CLASS_PREFIX) :]
            drawing = frozenset((resource, *(r for r, served_by in node.served if served_by == name)))
            for one in drawing:
                classes_of.setdefault(one, set()).add(name)
            found = best.setdefault(name, {}).get(drawing)
            if found is None or amount > found[0]:
                best[name][drawing] = (amount, node.name)
    shapes = {
        name: tuple(sorted(((amount, drawing, node) for drawing, (amount, node) in found.items()), key=_most_first))
        for name, found in best.items()
    }
    return _Pools({r: frozenset(names) for r, names in classes_of.items()}, shapes)


def _most_first(shape: tuple[int, frozenset[str], str]) -> tuple[int, int, str]:
    return (-shape[0], len(shape[1]), shape[2])


def _most(policy: Policy, resource: str, maximum: int) -> int | float:
    """The most of `resource` a valid pod's container holds: the per-pod maximum of GPUs, but for ACK's
    aliyun.com/gpu-mem the GiB of the policy's GPU (memshare.held refuses more), unbounded where it is unknown."""
    if resource == ACK_MEMORY:
        gpu_mib = policy.gpu_memory_mib
        return gpu_mib // 1024 if gpu_mib else float("inf")
    return maximum


def check(
    holders: Holders, policy: Policy, view: ClusterView, valid: bool, gpus: int = 1
) -> list[tuple[Check, Violation]]:
    """What the cluster checks find in a pod (after mutation), each with the level its check is set to.

    `holders` are validation's: the containers holding GPUs with their counts, in start order. `valid`: the
    pod passed validation, so no resource's effective total exceeds the per-pod maximum, and a pod holding
    only resources whose largest node holds that maximum fits (the common case, decided without a search).
    `gpus`: ACK, the GPUs of one node that the pod label aliyun.com/gpu-count spreads its memory over
    (memshare.pod_gpus; validation's amounts of aliyun.com/gpu-mem are already those of one of them).
    """
    plan = _plan(policy, view)
    if valid and not plan.drift and gpus == 1:
        roomy = plan.roomy
        for _, counts in holders:  # loops, not all() over a generator: this runs on every GPU review
            for name in counts:
                if name not in roomy:
                    return _search(holders, policy, view, plan)
        if plan.per_gpu:
            assert plan.vgpus is not None
            lines = _vgpu_fits(holders, policy, plan.vgpus, f'policy "{policy.name}"', view)
            return [(policy.cluster_checks.fits, line) for line in lines]
        return []
    return _search(holders, policy, view, plan, gpus)


def _search(
    holders: Holders, policy: Policy, view: ClusterView, plan: _Plan, gpus: int = 1
) -> list[tuple[Check, Violation]]:
    rules = policy.cluster_checks
    found: list[tuple[Check, Violation]] = []
    where = f'policy "{policy.name}"'
    covered: set[str] = set()  # resources whose one container already has a line
    held = {name for _, counts in holders for name in counts}
    spread = None  # ACK's multi-GPU sharing: the most of one GPU on nodes of at least `gpus` GPUs
    if gpus > 1 and ACK_MEMORY in held:
        spread, most_gpus = _ack_spread(policy, view, plan, gpus)
        if spread is None and most_gpus is not None:  # nodes of ACK's GPUs, none with that many
            covered.add(ACK_MEMORY)
            if rules.fits is not Check.OFF:
                found.append((rules.fits, _too_few_gpus(gpus, most_gpus, view, where)))
    for ref, counts in holders:
        for resource, value in counts.items():
            if resource in VGPU_MEMORY or resource in covered:
                continue  # one vGPU's memory: on one registered GPU (_vgpu_fits), or not judged
            raw = ref.resource_map("limits").get(resource, value)
            largest = spread if spread is not None and resource == ACK_MEMORY else _largest(policy, view, resource)
            if largest is None and resource.startswith(DEVICE_CLASS_PREFIX):
                continue  # a DeviceClass no slice shows: its selector may be one not read here (cluster/slices.py)
            if largest is None:
                offered = is_shared(resource) or resource.startswith(MIG_PREFIX)  # a shared or MIG resource
                level = rules.offered if offered else rules.fits
                if level is not Check.OFF:
                    check_name = "cluster.offered" if offered else "cluster.fits"
                    found.append((level, _not_offered(ref, resource, raw, policy, f"{where}, {check_name}")))
                covered.add(resource)
            elif value > largest[0] and rules.fits is not Check.OFF:
                unit = "GiB" if resource == ACK_MEMORY else ""  # of one GPU (cluster.per_container)
                over = (gpus, value) if spread is not None and resource == ACK_MEMORY else None
                found.append((rules.fits, _too_big(ref, resource, raw, largest, view, where, unit, spread=over)))
                covered.add(resource)
    if rules.fits is not Check.OFF:
        for resource in sorted(held - covered - VGPU_MEMORY):  # ACK: a pod's memory on one GPU, or M; vGPUs apart
            ack_spread = spread is not None and resource == ACK_MEMORY
            largest = spread if ack_spread else _largest(policy, view, resource)
            total, running = effective_total(holders, resource)
            if largest is not None and total > largest[0] and len(running) > 1:
                pod_gpus = gpus if ack_spread else 1
                found.append((rules.fits, _pod_too_big(resource, total, running, largest, view, where, pod_gpus)))
        if plan.vgpus is not None:
            found += [(rules.fits, line) for line in _vgpu_fits(holders, policy, plan.vgpus, where, view)]
    if plan.pools.shapes and rules.fits is not Check.OFF:
        found += _pooled(holders, {}, policy, view, plan.pools)
    for resource, classes in plan.whole_only.items():
        for ref, counts in holders:
            if resource in counts:
                raw = ref.resource_map("limits").get(resource, counts[resource])
                found.append((rules.fits, _whole_gpus(ref, resource, raw, classes, policy, view)))
    for item in plan.drift:
        if _affects(item, held):
            found.append((rules.drift, _drift_violation(item)))
    return found


def _largest(policy: Policy, view: ClusterView, resource: str) -> tuple[int, str] | None:
    """The most of `resource` one container can get on one node (cluster.per_container), assumed nodes included."""
    best = view.largest(resource)
    for node in assumed_nodes(policy):
        total = node.allocatable.get(resource)
        amount = None if total is None else per_container(node.allocatable, resource, total)
        if amount is not None and (best is None or amount > best[0]):
            best = (amount, node.name)
    return best


def _ack_spread(
    policy: Policy, view: ClusterView, plan: _Plan, gpus: int
) -> tuple[tuple[int, str] | None, tuple[int, str] | None]:
    """ACK's multi-GPU sharing puts N/M GiB on each of M GPUs of one node (its documentation: "All M GPU cards
    must be on the same Kubernetes node"): the most GiB one GPU holds among the nodes (assumed ones included)
    with at least `gpus` of them (aliyun.com/gpu-mem over aliyun.com/gpu-count, cluster.per_container), and
    the most GPUs any node advertising aliyun.com/gpu-mem has; each with its node, None where no node has any."""
    found = plan.spread.get(gpus)
    if found is None:
        best: tuple[int, str] | None = None
        most: tuple[int, str] | None = None
        for node in (*view.nodes.values(), *assumed_nodes(policy)):
            total = node.allocatable.get(ACK_MEMORY)
            if not total:
                continue
            count = node.allocatable.get(ACK_COUNT) or 1
            if most is None or count > most[0]:
                most = (count, node.name)
            each = per_container(node.allocatable, ACK_MEMORY, total)
            if count >= gpus and (best is None or each > best[0]):
                best = (each, node.name)
        found = (best, most)
        if len(plan.spread) < 64:  # a label is up to six digits: kept for the first few values only
            plan.spread[gpus] = found
    return found


def _too_few_gpus(gpus: int, most: tuple[int, str], view: ClusterView, where: str) -> Violation:
    return pod_violation(
        f'the pod label {ACK_COUNT} "{gpus}" spreads its {ACK_MEMORY} over {gpus} GPUs of one node, and no node '
        f'has that many: the most one node has is {most[0]} ({_node(most, view)}); set at most "{most[0]}", or '
        f"list a larger node pool in cluster.assumeNodes ({where}, cluster.fits)",
        f'{ACK_COUNT} {gpus}: no node has {gpus} GPUs (most: {most[0]}); set at most "{most[0]}"',
    )


def _over_gpus(gpus: int) -> str:
    """ACK's multi-GPU sharing in a fits line: ` over 2 GPUs (the pod label aliyun.com/gpu-count "2")`."""
    return f' over {gpus} GPUs (the pod label {ACK_COUNT} "{gpus}")'


def _node(largest: tuple[int, str], view: ClusterView) -> str:
    node = view.nodes.get(largest[1])
    return f'node "{largest[1]}"' + (", cordoned" if node is not None and node.unschedulable else "")


def _too_big(
    ref: ContainerRef,
    resource: str,
    raw: Any,
    largest: tuple[int, str],
    view: ClusterView,
    where: str,
    unit: str = "",
    holder: str = "",
    why: str = "",
    each: str = "",
    spread: tuple[int, int | Fraction] | None = None,
) -> Violation:
    """`resource` (as written: `raw`) more than `largest` holds: a node's, or where `unit` is given (GiB, MiB,
    units of 10 MiB) one GPU's; `holder`, `why` and `each` for another measure (the vGPUs' GPUs, _vgpu_fits);
    `spread`: ACK's multi-GPU sharing, (the GPUs of one node the pod's memory spreads over, the container's
    amount of each)."""
    amount, shown = largest[0], quantity_text(raw) + each
    if spread is not None:
        gpus, share = spread[0], format_fraction(Fraction(spread[1]))
        return container_violation(
            ref,
            f"{resource} {shown}{_over_gpus(gpus)} is {share} GiB from each, which fits on no node: the most one "
            f"GPU of a node with {gpus} GPUs or more holds is {amount} GiB ({_node(largest, view)}); request at "
            f"most {amount * gpus} ({amount} GiB of each of {gpus} GPUs), or list a larger node pool in "
            f"cluster.assumeNodes ({where}, cluster.fits)",
            f"{resource} {shown} over {gpus} GPUs fits on no node; request at most {amount * gpus}",
        )
    holder = holder or ("one GPU of a node holds is" if unit else "one node holds is")
    return container_violation(
        ref,
        f"{resource} {shown} fits on no node: {why}the most {holder} {amount}{' ' if unit else ''}{unit} "
        f"({_node(largest, view)}); request at most {amount}, or list a larger node pool in cluster.assumeNodes "
        f"({where}, cluster.fits)",
        f"{resource} {shown} fits on no node (most: {amount}); request at most {amount}",
    )


def _vgpu_fits(holders: Holders, policy: Policy, vgpus: _Vgpus, where: str, view: ClusterView) -> list[Violation]:
    """Each container whose HAMi or Volcano vGPUs (memshare.vgpus) fit on no node's registered GPUs, one each on
    a GPU of its own (_Vgpus): memory more than the largest GPU has, more vGPUs than a node has GPUs, or, where
    neither alone, not that many GPUs of that memory on one node. A container asking more vGPUs than any node
    advertises has its line already (_too_big). Volcano's scheduler places the vGPUs of a pod's containers
    only (ExtractResourceRequest reads no init container): its init containers are not judged."""
    found: list[Violation] = []
    judged: set[tuple[str, int]] = set()
    for ref, counts in holders:
        if (vgpus.count not in counts and vgpus.memory not in counts) or (ref.section, ref.index) in judged:
            continue
        if vgpus.containers_only and ref.section != "containers":
            continue
        judged.add((ref.section, ref.index))
        limits = ref.resource_map("limits")
        asked = memshare.vgpus(limits, policy)
        if asked is None or asked[0] > vgpus.advertised:
            continue
        count, memory = asked
        best = vgpus.best(count, memory)
        if best is None:
            continue
        spec = memshare.spec_of(policy)
        assert spec is not None
        unit = memshare.unit_text(spec, memshare.units_of(spec, policy)[1])
        own = f"{spec.title} puts each vGPU of a container on a GPU of its own, and "
        if memory > vgpus.largest[0]:
            found.append(_too_big(ref, vgpus.memory, limits[vgpus.memory], vgpus.largest, view, where, unit))
        if count > vgpus.most[0]:
            found.append(
                _too_big(ref, vgpus.count, limits[vgpus.count], vgpus.most, view, where,
                         holder="GPUs one node registers is", why=own)
            )  # fmt: skip
        elif memory <= vgpus.largest[0]:
            each = f" with {vgpus.memory} {quantity_text(limits[vgpus.memory])} each"
            found.append(
                _too_big(ref, vgpus.count, limits[vgpus.count], best, view, where,
                         holder=f"GPUs of {memory} {unit} or more one node registers is", why=own, each=each)
            )  # fmt: skip
    return found


def _pod_too_big(
    resource: str,
    total: int | Fraction,
    running: list[tuple[ContainerRef, int | Fraction]],
    largest: tuple[int, str],
    view: ClusterView,
    where: str,
    gpus: int = 1,
) -> Violation:
    """`gpus`: ACK's multi-GPU sharing, the amounts (of one GPU) spread over that many GPUs of one node."""
    amount = largest[0]
    if gpus > 1:
        named = ", ".join(f'"{ref.name}"={format_fraction(Fraction(value * gpus))}' for ref, value in running)
        in_all = format_fraction(Fraction(total * gpus))
        return pod_violation(
            f"{resource} effective total {in_all} (containers running together: {named}){_over_gpus(gpus)} is "
            f"{format_fraction(Fraction(total))} GiB from each, which fits on no node: the most one GPU of a node "
            f"with {gpus} GPUs or more holds is {amount} GiB ({_node(largest, view)}); request at most "
            f"{amount * gpus} in all, or split the pod ({where}, cluster.fits)",
            f"{resource} total {in_all} over {gpus} GPUs fits on no node; request at most {amount * gpus} in all",
        )
    named = ", ".join(f'"{ref.name}"={value}' for ref, value in running)
    holder = "one GPU of a node holds is" if resource == ACK_MEMORY else "one node holds is"
    unit = " GiB" if resource == ACK_MEMORY else ""
    return pod_violation(
        f"{resource} effective total {total} (containers running together: {named}) fits on no node: the "
        f"most {holder} {amount}{unit} ({_node(largest, view)}); request at most {amount} in all, or split the "
        f"pod ({where}, cluster.fits)",
        f"{resource} total {total} fits on no node; request at most {amount} in all",
    )


def _whole_gpus(
    ref: ContainerRef, resource: str, raw: Any, classes: tuple[str, ...], policy: Policy, view: ClusterView
) -> Violation:
    mode = policy.sharing.mode
    strategy = backend_of(policy).gpu_config_strategy()
    nodes = sorted(node for _, held in (unshared_dra(policy, view)[name] for name in classes) for node in held)
    shown = names_shown(nodes)
    named = " and ".join(f'"{name}"' for name in classes)
    noun = "DeviceClass" if len(classes) == 1 else "DeviceClasses"
    return container_violation(
        ref,
        f"{resource} {quantity_text(raw)} would be GPUs of its own: every node offering it ({nodes_text(len(nodes))} "
        f"({shown})) serves it through {noun} {named}, whose own config does not share GPUs by {mode}, and the "
        f'claim the scheduler makes for it carries no other; policy "{policy.name}" shares GPUs by {mode}; ask an '
        f"admin to add a GpuConfig with sharing.strategy {strategy} to the DeviceClass's spec.config, or to serve "
        f'{resource} from the device plugin (policy "{policy.name}", cluster.fits)',
        f"{resource}: DRA serves it unshared ({cut(named, 32)}); ask an admin",
    )


def _not_offered(ref: ContainerRef, resource: str, raw: Any, policy: Policy, where: str) -> Violation:
    shown = quantity_text(raw)
    own = backend_of(policy).not_offered(policy, resource)  # the resource the policy maps or converts to
    if own is not None:
        why, fix, short_fix = own
    else:
        why = ""
        fix = "request a resource the nodes advertise, or list the autoscaled pool that has it in cluster.assumeNodes"
        short_fix = "request one the nodes have"
    return container_violation(
        ref,
        f"{resource} {shown}{why}: no node advertises it, so the pod would stay Pending; {fix} ({where})",
        f"no node offers {resource}; {short_fix}",
    )


def _affects(item: Drift, held: set[str]) -> bool:
    """Whether a drift matters to a pod holding `held`: replicas and mode to shared GPUs, the MIG profile to
    MIG devices, the model and memory to any GPU."""
    if item.field in ("sharing.replicas", "sharing.mode"):
        return any(is_shared(name) for name in held) or NVIDIA_GPU in held
    if item.field in ("sharing.migProfile", "sharing.migProfiles"):
        return any(name.startswith(MIG_PREFIX) for name in held)
    return True


def _drift_violation(item: Drift) -> Violation:
    nodes = nodes_text(len(item.nodes))
    short = f"policy {item.field} {item.policy_says} but {nodes} {item.verb} {item.nodes_say}; ask an admin"
    if len(f"pod: {short}") > SHORT_LIMIT:  # the values are the user's: shown whole in the long line
        short = f"policy {item.field} disagrees with {nodes}; ask an admin to fix the policy"
    return pod_violation(f"{item.line} (cluster.drift)", short)


Alternatives = tuple[tuple[str, str, int, Selector], ...]  # podclaims.Selected: (subrequest, class, count, selector)


def claims_fit(
    claimed: dict[str, list[tuple[str, int]]],
    holders: Holders,
    policy: Policy,
    view: ClusterView,
    selected: list[tuple[str, str, Alternatives]] | None = None,
) -> list[tuple[Check, Violation]]:
    """`cluster.fits` for a pod's claims (podclaims.claimed_by_class): the devices it asks of each DeviceClass, with
    its resources that draw on the same devices, must be on one node (`_pooled`); and the requests whose own
    selectors narrow their class's devices (podclaims.selected_by_request), the devices they match (`_narrowed`)."""
    if policy.cluster_checks.fits is Check.OFF:
        return []
    plan = _plan(policy, view)
    found = _pooled(holders, claimed, policy, view, plan.pools)
    if selected and view.dra is not None:
        found += [(policy.cluster_checks.fits, line) for line in _narrowed(selected, policy, view, view.dra)]
    return found


SELECTOR_SHOWN = 120  # characters of a request's selector in a line


def _narrowed(
    selected: list[tuple[str, str, Alternatives]], policy: Policy, view: ClusterView, dra: DraDevices
) -> list[Violation]:
    """The claim requests whose selectors match fewer devices of their class on every node than they ask:
    an `exactly` request's, summed over the pod's requests of one class and selector (they are allocated on
    one node; not where they ask more than any node has of the class, which `_pooled` says), and a
    `firstAvailable` request none of whose alternatives fits alone. A class no slice shows,
    or one an assumed node (cluster.assumeNodes) has enough of, is not judged (nothing is known of its
    devices); a selector part not read matches (celselect): the count is the most that could match."""
    where = f'policy "{policy.name}"'

    def most(device_class: str, selector: Selector, need: int) -> tuple[int, int, str] | None:
        """(matching, of the class, node) on the best node; None where `need` may fit."""
        best = dra.most(device_class, selector)
        assumed = max((n.allocatable.get(DEVICE_CLASS_PREFIX + device_class, 0) for n in assumed_nodes(policy)),
                      default=0)  # fmt: skip
        return None if best is None or best[0] >= need or assumed >= need else best

    def node_text(best: tuple[int, int, str], device_class: str) -> str:
        """`4 of the 8 gpu.nvidia.com devices of node "mixed-1"`."""
        return f"{best[0]} of the {best[1]} {device_class} devices of {_node((best[0], best[2]), view)}"

    groups: dict[tuple[str, Selector], list[tuple[str, int]]] = {}
    found: list[Violation] = []
    for shown, request, alternatives in selected:
        named = f'{shown} request "{cut_name(request, 63)}"'
        if len(alternatives) == 1:
            _, device_class, count, selector = alternatives[0]
            groups.setdefault((device_class, selector), []).append((named, count))
            continue
        misses = [(alternative, most(alternative[1], alternative[3], alternative[2])) for alternative in alternatives]
        if any(best is None for _, best in misses):
            continue
        parts = []
        for (name, device_class, count, selector), best in misses:
            assert best is not None
            matched = f' matching "{cut(selector.text, SELECTOR_SHOWN)}"' if selector.text else ""
            parts.append(f'"{cut_name(name, 63)}": {count} {device_class} devices{matched} (the most on one node: '
                         f"{node_text(best, device_class)})")  # fmt: skip
        found.append(
            pod_violation(
                f"{named}: none of its firstAvailable alternatives fits on a node: {'; '.join(parts)}; ask for "
                f"devices the nodes have, or change the selectors ({where}, cluster.fits)",
                f"{cut_name(request, 40)}: no firstAvailable alternative fits on a node; change the selectors",
            )
        )
    for (device_class, selector), asking in groups.items():
        if not selector.text:
            continue  # no selector: the class's devices, which `_pooled` counts
        total = sum(count for _, count in asking)
        best = most(device_class, selector, total)
        largest = _largest(policy, view, DEVICE_CLASS_PREFIX + device_class)
        if best is None or (largest is not None and total > largest[0]):
            continue  # fits, or more than any node has of the class: `_pooled`'s line says it
        text = cut(selector.text, SELECTOR_SHOWN)
        listed = ", ".join(f"{count} from {named}" for named, count in asking)
        if best[0]:
            fix = f"ask for at most {best[0]}{' in all' if len(asking) > 1 else ''}, or change the selector"
        else:
            fix = "change the selector to one the nodes' devices match"
        found.append(
            pod_violation(
                f'{total} {device_class} devices matching "{text}" ({listed}) fit on no node: the most on one node is '
                f"{node_text(best, device_class)}; {fix} ({where}, cluster.fits)",
                f"{total} {device_class} devices its selector matches fit on no node (most: {best[0]}); change it",
            )
        )
    return found


def _pooled(
    holders: Holders, claimed: dict[str, list[tuple[str, int]]], policy: Policy, view: ClusterView, pools: _Pools
) -> list[tuple[Check, Violation]]:
    """The devices a pod draws from each DeviceClass on one node, all ways together: its extended resources
    the class serves there (not where a device plugin serves them), its `deviceclass.resource.kubernetes.io/
    <class>` resources (each its effective total, as the scheduler's requests count them) and its claims'
    exact-count requests of the class. Judged where the pod draws on a class in two ways or more, or through a
    claim; a class no slice shows is not (nothing is known of it). What one resource asks alone, and what
    the resources ask without the claims, are said by their own lines: not again here."""
    held = {name for _, counts in holders for name in counts}
    names = {c for r in held for c in pools.classes_of.get(r, ())} | claimed.keys()
    found: list[tuple[Check, Violation]] = []
    for device_class in sorted(names):
        shapes = pools.shapes.get(device_class)
        claims = claimed.get(device_class, [])
        routes = sorted(r for r in held if device_class in pools.classes_of.get(r, ()))
        if not shapes or (not claims and len(routes) < 2):
            continue
        totals = {r: effective_total(holders, r)[0] for r in routes}
        in_claims = sum(count for _, count in claims)
        if any(_need(totals, drawing, in_claims) <= amount for amount, drawing, _ in shapes):
            continue
        if claims and len(routes) > 1 and not any(_need(totals, drawing, 0) <= amount for amount, drawing, _ in shapes):
            continue  # the resources alone fit on no node: their own line says it
        if any(totals[r] > (_largest(policy, view, r) or (totals[r], ""))[0] for r in routes):
            continue  # one resource alone fits on no node: its own line says it
        amount, drawing, node = shapes[0]
        total = _need(totals, drawing, in_claims)
        parts = [f"{totals[r]} from {r}" for r in routes if r in drawing and totals[r]]
        parts += [f"{count} from {shown}" for shown, count in claims]
        line = (
            f"{total} {device_class} devices in all ({', '.join(parts)}) fit on no node: the most one node holds "
            f"is {amount} ({_node((amount, node), view)}); ask for at most {amount} in all, or split the pod "
            f'(policy "{policy.name}", cluster.fits)'
        )
        short = f"{total} {device_class} devices fit on no node (most: {amount}); ask for at most {amount}"
        found.append((policy.cluster_checks.fits, pod_violation(line, short)))
    return found


def _need(totals: dict[str, int | Fraction], drawing: frozenset[str], claimed: int) -> int | Fraction:
    """The devices of a class a pod draws on a node where `drawing` are the resources served from them."""
    return sum((total for r, total in totals.items() if r in drawing), start=claimed)
