"""Where the policies no longer match the cluster: drift against their nodes, and namespaces they miss.

- drift: the policy's replicas, sharing mode, GPU model or memory and MIG profiles against what the GPU
  feature discovery labels (cluster/nodes.py; the GPUs HAMi or Volcano registers where a node has no GFD memory
  label, read through the policy's deviceMemoryScaling or gpuMemoryFactor, and those against the model their
  type names, memshare.unit_drift; ACK's own labels and resources, memshare.node_drift) of the nodes its pods
  can land on say (policynodes.policy_nodes). A mismatch makes the memory fractions wrong. Under
  time-slicing or MPS, a DeviceClass that serves the replica resource without sharing it the policy's way is
  drift too (`unshared_dra`).
- `unmatched_namespaces` (for `policy lint --cluster`) names the policies' namespace entries that match none
  of the cluster's namespaces.

Apart from the admission checks because most of its readers are not reviews: /readyz, the drift metric,
`policy lint --cluster` and `audit` (`drift_of`); the `cluster.drift` check (clustercheck.py) turns a drift
into a pod's line. A rule about what counts as drift, and its words, is changed here. Worked out once per
snapshot (`ClusterView.derived`). Pure.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from webhook.admission.checks.policynodes import (
    names_shown,
    node_memory_mib,
    node_model,
    policy_nodes,
    product_model,
    registered_product,
)
from webhook.admission.cluster.nodes import (
    MEMORY_LABEL,
    MEMORY_TOLERANCE,
    ClusterView,
    NodeInfo,
    nodes_text,
)
from webhook.admission.policy.globs import is_glob
from webhook.admission.policy.model import Policy, PolicySet
from webhook.admission.sharing import memshare
from webhook.admission.sharing.backend import NodeDrift
from webhook.admission.sharing.registry import backend_of

# --- Drift ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Drift:
    """One way a policy disagrees with some of its nodes (for /readyz, the metric, `policy lint --cluster`,
    `audit` and the `drift` check)."""

    policy: str
    field: str  # the policy's field, as written in the file: "sharing.replicas"
    policy_says: str
    nodes_say: str
    nodes: tuple[str, ...]  # the nodes that say so, sorted
    effect: str  # what goes wrong
    fix: str

    @property
    def where(self) -> str:
        """`3 nodes (a, b, c)`, `12 nodes (a, b, c, ...)`."""
        return f"{nodes_text(len(self.nodes))} ({names_shown(self.nodes)})"

    @property
    def verb(self) -> str:
        return "says" if len(self.nodes) == 1 else "say"

    @property
    def line(self) -> str:
        return (
            f'policy "{self.policy}" {self.field} is {self.policy_says}, but {self.where} {self.verb} '
            f"{self.nodes_say}: {self.effect}; {self.fix}"
        )


def drift(policy: Policy, view: ClusterView) -> tuple[Drift, ...]:
    """Every disagreement between `policy` and its nodes, worked out once per snapshot."""
    return view.derived("cluster-drift", policy, lambda: _drift(policy, view))


def drift_of(policies: PolicySet, view: ClusterView) -> list[Drift]:
    """Every policy's drift, in the set's order (for /readyz, the metric, `policy lint --cluster` and `audit`)."""
    return [item for policy in policies.policies for item in drift(policy, view)]


def _drift(policy: Policy, view: ClusterView) -> tuple[Drift, ...]:
    nodes = policy_nodes(policy, view)
    # (field, nodes_say) -> (policy_says, effect, fix, node names): the first three follow from the key
    found: dict[tuple[str, str], tuple[str, str, str, list[str]]] = {}

    def note(field: str, says: str, node: NodeInfo, policy_says: str, effect: str, fix: str) -> None:
        found.setdefault((field, says), (policy_says, effect, fix, []))[3].append(node.name)

    sharing, backend = policy.sharing, backend_of(policy)
    for node in nodes:
        for field, says, policy_says, effect, fix in backend.node_drift(policy, node):  # strategy, replicas
            note(field, says, node, policy_says, effect, fix)
        units = _unit_drift(policy, node) if node.devices else []
        for field, says, policy_says, effect, fix in units:
            note(field, says, node, policy_says, effect, fix)
        # Memory read through another scaling or factor than the device plugin's is not another GPU: said once
        registered = bool(units) and not node.labels.get(MEMORY_LABEL, "").isdigit()
        model = None if registered else node_model(node, policy)
        fixed_model = not policy.cluster_checks.auto_model
        if policy.gpu.model and fixed_model and model is not None and model.name != policy.gpu.model:
            note(
                "gpu.model",
                model.name,
                node,
                policy.gpu.model,
                f"memory limits are worked out for {policy.gpu.model}'s memory",
                f"set gpu.model: {model.name} (or auto), or give these nodes' namespaces their own policy",
            )
        memory = None if registered else node_memory_mib(node, policy)
        if policy.gpu.memory_mib and memory and abs(memory - policy.gpu.memory_mib) > MEMORY_TOLERANCE * memory:
            note(
                "gpu.memoryMiB",
                str(memory),
                node,
                str(policy.gpu.memory_mib),
                "memory limits are worked out for another GPU's memory",
                f"set gpu.memoryMiB: {memory}",
            )
        for field, says, policy_says, effect, fix in backend.layout_drift(policy, node):  # MIG, memory backends
            note(field, says, node, policy_says, effect, fix)
    for node, (field, says, policy_says, effect, fix) in backend.pool_drift(policy, nodes):
        note(field, says, node, policy_says, effect, fix)
    for class_name, (written, held) in unshared_dra(policy, view).items():
        resource, strategy, mode = sharing.resource_name, backend.gpu_config_strategy(), sharing.mode
        says = f'DeviceClass "{class_name}" serves {resource} with ' + (
            f"a {written} GpuConfig" if written else "no GpuConfig"
        )
        found[("sharing.mode", says)] = (
            str(mode),
            f"pods asking {resource} there get GPUs not shared by {mode}, through a claim the scheduler makes "
            "with no config but the class's",
            f"add a GpuConfig with sharing.strategy {strategy} (opaque driver gpu.nvidia.com) to DeviceClass "
            f'"{class_name}" spec.config, or serve {resource} from the device plugin on these nodes',
            list(held),
        )
    drifts = []
    for (field, says), (policy_says, effect, fix, names) in sorted(found.items()):
        drifts.append(Drift(policy.name, field, policy_says, says, tuple(sorted(names)), effect, fix))
    return tuple(drifts)


def unshared_dra(policy: Policy, view: ClusterView) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Under time-slicing or MPS: each DeviceClass that serves the policy's replica resource (`sharing.
    resourceName`) on some of its nodes (KEP-5004, slices.merge) and whose own config (`spec.config`) does not
    share NVIDIA's GPUs by the policy's strategy -> (the strategy it sets, "" none; those nodes). The claim the
    scheduler makes for the resource carries the class's config alone, so a pod there gets GPUs not shared
    the policy's way. Worked out once per snapshot."""
    return view.derived("cluster-unshared-dra", policy, lambda: _unshared_dra(policy, view))


def _unshared_dra(policy: Policy, view: ClusterView) -> dict[str, tuple[str, tuple[str, ...]]]:
    strategy = backend_of(policy).gpu_config_strategy()
    if strategy is None:  # a mode that DRA's GpuConfig does not share by: no class can serve it unshared
        return {}
    resource = policy.sharing.resource_name
    found: dict[str, list[str]] = {}
    for node in policy_nodes(policy, view):
        for served, class_name in node.served:
            if served == resource and view.class_sharing.get(class_name, "") != strategy:
                found.setdefault(class_name, []).append(node.name)
    return {name: (view.class_sharing.get(name, ""), tuple(sorted(nodes))) for name, nodes in sorted(found.items())}


def _unit_drift(policy: Policy, node: NodeInfo) -> list[NodeDrift]:
    """memshare.unit_drift for each GPU kind the node registers whose type names a model of
    resources.GPU_MODELS (`NVIDIA-NVIDIA H100 80GB HBM3`), against that model's memory."""
    found = []
    for kind, amount in node.devices:
        model = product_model(registered_product(kind), None)
        if model is None:
            continue
        item = memshare.unit_drift(policy, node.registrar, amount, model.memory_mib, model.name)
        if item is not None and item not in found:
            found.append(item)
    return found


# --- Namespaces -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnmatchedNamespace:
    """A policy's `namespaces` entry that no namespace of the cluster has (for `policy lint --cluster`): a
    misspelt name selects nothing, and the namespace meant falls to another policy, silently."""

    policy: str
    source: str
    entry: str
    glob: bool
    meant: str | None  # the cluster's namespace the entry most likely means
    meant_gets: str | None  # what that namespace gets now: `policy "default" (glob "*")`
    read: int  # the namespaces read

    @property
    def line(self) -> str:
        what = f'glob "{self.entry}" matches' if self.glob else f'"{self.entry}" is'
        head = (
            f'policy "{self.policy}" ({self.source}) spec.namespaces: {what} no namespace of the cluster '
            f"({self.read} read)"
        )
        if self.meant is not None:
            return f'{head}; did you mean "{self.meant}", which gets {self.meant_gets} instead? correct the entry'
        return f"{head}: it selects nothing; correct it, or remove it until such a namespace exists"


def unmatched_namespaces(policies: PolicySet, namespaces: Iterable[str]) -> list[UnmatchedNamespace]:
    """Every policy's `namespaces` entries that match none of `namespaces`, in the set's order; an exact name
    with the closest namespace it may have meant (difflib), and the policy that namespace gets now."""
    import difflib

    names = sorted(set(namespaces))
    found = []
    for policy in policies.policies:
        for entry in policy.namespaces:
            glob = is_glob(entry)
            if any(fnmatch.fnmatchcase(name, entry) for name in names) if glob else entry in names:
                continue
            close = [] if glob else difflib.get_close_matches(entry, names, n=1, cutoff=0.75)
            meant = close[0] if close else None
            gets = None
            selection = policies.select(meant) if meant is not None else None
            if selection is not None and selection.policy is policy:  # it has that namespace already
                meant = None
            elif selection is not None:
                gets = f'policy "{selection.policy.name}"'
                if selection.pattern is not None:
                    kind = "glob" if is_glob(selection.pattern) else "namespace"
                    gets += f' ({kind} "{selection.pattern}")'
            found.append(UnmatchedNamespace(policy.name, policy.source, entry, glob, meant, gets, len(names)))
    return found
