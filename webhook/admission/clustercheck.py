"""Cluster-aware checks: a GPU pod that no node can ever run, and a policy that no longer matches the nodes.

Three checks, each `deny | warn | off` in the policy's `cluster:` section (policy.ClusterChecks), run by
`engine.evaluate` on the object after mutation when it has a `ClusterView`, and skipped when it has none:
- fits: each container's managed resources, and the pod's effective total (counted as the scheduler counts,
  validate.effective_total), must fit on the largest node for that resource. Cordoned nodes count: they
  come back. Node pools that scale from zero are invisible until they scale: `assumeNodes` describes them.
- offered: a shared or MIG resource (what the policy maps or converts `nvidia.com/gpu` to) that no node
  advertises: the pod would stay Pending.
- drift: the policy's replicas, sharing mode, GPU model or memory and MIG profile against what the nodes'
  GPU feature discovery labels say (labels: cluster.py). A mismatch makes the memory fractions wrong.

`resolve` turns `replicas: auto` and `gpu.model: auto` into the nodes' values (the smallest share wins).
Everything per policy is worked out once per snapshot (`ClusterView.derived`), never per review. Pure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.admission import steering
from webhook.admission.cluster import (
    MEMORY_LABEL,
    MIG_STRATEGY_LABEL,
    PRODUCT_LABEL,
    REPLICAS_LABEL,
    STRATEGY_LABEL,
    ClusterView,
    NodeInfo,
)
from webhook.admission.podspec import ContainerRef
from webhook.admission.policy import GPU, AssumedNode, Check, Mode, Policy, PolicySet
from webhook.admission.quantity import quantity_text
from webhook.admission.resources import (
    GPU_MODELS,
    MIG_PREFIX,
    NVIDIA_GPU,
    GPUModel,
    is_shared,
    mig_profile_of,
    mig_resource,
)
from webhook.admission.validate import Holders, container_violation, effective_total, pod_violation
from webhook.admission.violation import SHORT_LIMIT, Violation

MEMORY_TOLERANCE = Fraction(2, 100)  # NVML reports a little less than the nominal size: not drift
NAMED_NODES = 3  # nodes named in one line; the count says how many more


# --- The nodes a policy's pods can land on, and the values `auto` takes from them ----------------------------


def assumed_nodes(policy: Policy) -> tuple[NodeInfo, ...]:
    """`cluster.assumeNodes` as nodes (worked out once per policy)."""
    return policy.derived("cluster-assumed-nodes", _assumed)


def _assumed(policy: Policy) -> tuple[NodeInfo, ...]:
    return tuple(_assumed_node(shape) for shape in policy.cluster.assume_nodes)


def _assumed_node(shape: AssumedNode) -> NodeInfo:
    return NodeInfo(f"{shape.name} (assumed)", dict(shape.allocatable), dict(shape.labels))


def policy_nodes(policy: Policy, view: ClusterView) -> tuple[NodeInfo, ...]:
    """The nodes (assumed ones included) whose GPUs the policy's pods get, by what they advertise: the shared
    resource under time-slicing and MPS (else `nvidia.com/gpu` on nodes that replicate it without renaming),
    MIG devices under mig, `nvidia.com/gpu` otherwise. Pods' node selectors are not known here."""
    return view.derived("cluster-policy-nodes", policy, lambda: _policy_nodes(policy, view))


def _policy_nodes(policy: Policy, view: ClusterView) -> tuple[NodeInfo, ...]:
    nodes = [*view.nodes.values(), *assumed_nodes(policy)]
    mode = policy.sharing.mode
    if mode.is_shared:
        named = [n for n in nodes if policy.sharing.resource_name in n.allocatable]
        return tuple(named or [n for n in nodes if NVIDIA_GPU in n.allocatable and _replicas(n) > 1])
    if mode is Mode.MIG:
        return tuple(n for n in nodes if n.labels.get(MIG_STRATEGY_LABEL) in ("single", "mixed") or _mig_counts(n))
    return tuple(n for n in nodes if NVIDIA_GPU in n.allocatable)


def _replicas(node: NodeInfo) -> int:
    text = node.labels.get(REPLICAS_LABEL, "")
    return int(text) if text.isdigit() else 0


def _memory(node: NodeInfo) -> int | None:
    text = node.labels.get(MEMORY_LABEL, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def _mig_counts(node: NodeInfo) -> dict[str, int]:
    """`{profile: count}` from the mixed strategy's `nvidia.com/mig-<profile>.count` labels."""
    counts = {}
    for key, value in node.labels.items():
        if key.startswith(MIG_PREFIX) and key.endswith(".count") and value.isdigit() and int(value) > 0:
            profile = mig_profile_of(key.removesuffix(".count"))
            if profile is not None:
                counts[profile] = int(value)
    return counts


def product_model(product: str, memory_mib: int | None) -> GPUModel | None:
    """GFD's product label (`NVIDIA-A100-SXM4-80GB`, `NVIDIA-H100-NVL`, `...-SHARED`, `...-MIG-1g.10gb`) and
    memory label -> a model of resources.GPU_MODELS: its family as a word of the product, then the memory
    closest to the node's (or the nominal size named in the product)."""
    words = set(product.upper().split("-"))
    family = [m for m in GPU_MODELS.values() if m.name.split("-")[0] in words]
    if not family:
        return None
    if memory_mib is not None:
        return min(family, key=lambda m: abs(m.memory_mib - memory_mib))
    named = [m for m in family if f"{m.memory_gb}GB" in words]
    return named[0] if len(named) == 1 else (family[0] if len(family) == 1 else None)


def node_model(node: NodeInfo) -> GPUModel | None:
    product = node.labels.get(PRODUCT_LABEL)
    return product_model(product, _memory(node)) if product else None


def resolve(policy: Policy, view: ClusterView) -> Policy:
    """The policy with `replicas: auto` and `gpu.model: auto` taken from its nodes, once per snapshot: the
    most replicas and the smallest GPU (the smallest share, so that no pod is told it has more than it has).
    Left unknown (None) where no node says."""
    if not policy.cluster.auto:
        return policy
    return view.derived("cluster-resolved", policy, lambda: _resolve(policy, view))


def _resolve(policy: Policy, view: ClusterView) -> Policy:
    nodes = policy_nodes(policy, view)
    sharing, gpu = policy.sharing, policy.gpu
    if policy.cluster.auto_replicas:
        replicas = max((r for r in map(_replicas, nodes) if r > 1), default=None)
        sharing = dataclasses.replace(sharing, replicas=replicas)
    if policy.cluster.auto_model:
        models = [m for m in map(node_model, nodes) if m is not None]
        if models:
            gpu = GPU(model=min(models, key=lambda m: m.memory_mib).name, memory_mib=gpu.memory_mib)
        else:
            memory = min((m for m in map(_memory, nodes) if m is not None), default=gpu.memory_mib)
            gpu = GPU(model=None, memory_mib=memory)
    return dataclasses.replace(policy, sharing=sharing, gpu=gpu, memo={})


# --- A pod bound to a node ----------------------------------------------------------------------------------


def bound_node(spec: Any, policy: Policy, view: ClusterView) -> list[Violation]:
    """A pod that names its node (`spec.nodeName`) and holds the GPU the policy steers, against that node's GPU
    feature discovery labels: the node affinity it is never given (steering.py), checked here instead. Only
    the labels the node has are judged (a node without GPU feature discovery says nothing), and a node the
    snapshot does not know leaves the pod alone."""
    name = steering.bound_node(spec) if type(spec) is dict else None
    node = view.nodes.get(name) if name else None
    if node is None or not steering.requirements(policy) or not steering.holds_steered(spec, policy):
        return []
    labels = node.labels
    clashes = [
        (f"{r.key}={labels[r.key]}", str(r))
        for r in steering.requirements(policy)
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
        shown = ", ".join(self.nodes[:NAMED_NODES]) + (", ..." if len(self.nodes) > NAMED_NODES else "")
        return f"{len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''} ({shown})"

    @property
    def line(self) -> str:
        return (
            f'policy "{self.policy}" {self.field} is {self.policy_says}, but {self.where} say {self.nodes_say}: '
            f"{self.effect}; {self.fix}"
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

    sharing, mode = policy.sharing, policy.sharing.mode
    fixed_replicas = sharing.replicas if mode.is_shared and not policy.cluster.auto_replicas else None
    for node in nodes:
        replicas = _replicas(node)
        if fixed_replicas and REPLICAS_LABEL in node.labels and replicas != fixed_replicas:
            note(
                "sharing.replicas",
                str(replicas),
                node,
                str(sharing.replicas),
                f"each pod is told it has 1/{sharing.replicas} of a GPU, but the GPU is shared "
                + (f"{replicas} ways" if replicas > 1 else "by none"),
                f"set sharing.replicas: {replicas} (or auto), or change the device plugin's sharing config"
                if replicas > 1
                else "set replicas in the device plugin's sharing config, or use mode exclusive",
            )
        strategy = node.labels.get(STRATEGY_LABEL)  # older device plugins set none: never drift
        expected = str(mode) if mode.is_shared else "none"
        if strategy is not None and strategy != expected and mode is not Mode.MIG:
            note(
                "sharing.mode",
                f"sharing-strategy {strategy}",
                node,
                str(mode),
                "the environment the webhook sets is for another sharing mode",
                f"set sharing.mode: {'exclusive' if strategy == 'none' else strategy}, or change the device "
                "plugin's sharing config",
            )
        model = node_model(node)
        if policy.gpu.model and not policy.cluster.auto_model and model is not None and model.name != policy.gpu.model:
            note(
                "gpu.model",
                model.name,
                node,
                policy.gpu.model,
                f"memory limits are worked out for {policy.gpu.model}'s memory",
                f"set gpu.model: {model.name} (or auto), or give these nodes' namespaces their own policy",
            )
        memory = _memory(node)
        if policy.gpu.memory_mib and memory and abs(memory - policy.gpu.memory_mib) > MEMORY_TOLERANCE * memory:
            note(
                "gpu.memoryMiB",
                str(memory),
                node,
                str(policy.gpu.memory_mib),
                "memory limits are worked out for another GPU's memory",
                f"set gpu.memoryMiB: {memory}",
            )
        if mode is Mode.MIG and sharing.mig_profile:
            strategy = node.labels.get(MIG_STRATEGY_LABEL)
            counts = _mig_counts(node)
            if strategy == "single":
                says = f"mig.strategy single (MIG devices advertised as {NVIDIA_GPU})"
            elif counts and sharing.mig_profile not in counts:
                says = ", ".join(f"{profile} x{count}" for profile, count in sorted(counts.items()))
            else:
                continue
            note(
                "sharing.migProfile",
                says,
                node,
                sharing.mig_profile,
                f"pods converted to {mig_resource(sharing.mig_profile)} cannot run there",
                "set sharing.migProfile to a profile the nodes have, or change their MIG layout (mig-parted) "
                "and use mig.strategy mixed",
            )
    drifts = []
    for (field, says), (policy_says, effect, fix, names) in sorted(found.items()):
        drifts.append(Drift(policy.name, field, policy_says, says, tuple(sorted(names)), effect, fix))
    return tuple(drifts)


# --- The admission checks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the checks need of one policy against one snapshot, worked out once: the hot path is then a few
    set look-ups for a pod that fits."""

    view: ClusterView
    roomy: frozenset[str]  # resources whose largest node holds the policy's per-pod maximum: a valid pod fits
    drift: tuple[Drift, ...]


def _plan(policy: Policy, view: ClusterView) -> _Plan:
    plan = policy.memo.get("cluster-plan")
    if plan is None or plan.view is not view:  # a new snapshot (or policy): once per pair
        maximum = policy.limits.max_per_pod
        resources = {*view.resources(), *(r for node in assumed_nodes(policy) for r in node.allocatable)}
        roomy = frozenset(r for r in resources if (_largest(policy, view, r) or (0, ""))[0] >= maximum)
        drift_found = drift(policy, view) if policy.cluster.drift is not Check.OFF else ()
        plan = policy.memo["cluster-plan"] = _Plan(view, roomy, drift_found)
    return plan


def check(holders: Holders, policy: Policy, view: ClusterView, valid: bool) -> list[tuple[Check, Violation]]:
    """What the cluster checks find in a pod (after mutation), each with the level its check is set to.

    `holders` are validation's: the containers holding GPUs with their counts, in start order. `valid`: the
    pod passed validation, so no resource's effective total exceeds the per-pod maximum, and a pod holding
    only resources whose largest node holds that maximum fits (the common case, decided without a search).
    """
    plan = _plan(policy, view)
    if valid and not plan.drift:
        roomy = plan.roomy
        for _, counts in holders:  # loops, not all() over a generator: this runs on every GPU review
            for name in counts:
                if name not in roomy:
                    return _search(holders, policy, view, plan)
        return []
    return _search(holders, policy, view, plan)


def _search(holders: Holders, policy: Policy, view: ClusterView, plan: _Plan) -> list[tuple[Check, Violation]]:
    rules = policy.cluster
    found: list[tuple[Check, Violation]] = []
    where = f'policy "{policy.name}"'
    covered: set[str] = set()  # resources whose one container already has a line
    held = {name for _, counts in holders for name in counts}
    for ref, counts in holders:
        for resource, value in counts.items():
            raw = ref.resource_map("limits").get(resource, value)
            largest = _largest(policy, view, resource)
            if largest is None:
                offered = is_shared(resource) or resource.startswith(MIG_PREFIX)  # a shared or MIG resource
                level = rules.offered if offered else rules.fits
                if level is not Check.OFF:
                    check_name = "cluster.offered" if offered else "cluster.fits"
                    found.append((level, _not_offered(ref, resource, raw, policy, f"{where}, {check_name}")))
                covered.add(resource)
            elif value > largest[0] and rules.fits is not Check.OFF:
                found.append((rules.fits, _too_big(ref, resource, raw, largest, view, where)))
                covered.add(resource)
    if rules.fits is not Check.OFF:
        for resource in sorted(held - covered):
            largest = _largest(policy, view, resource)
            total, running = effective_total(holders, resource)
            if largest is not None and total > largest[0] and len(running) > 1:
                found.append((rules.fits, _pod_too_big(resource, total, running, largest, view, where)))
    for item in plan.drift:
        if _affects(item, held):
            found.append((rules.drift, _drift_violation(item)))
    return found


def _largest(policy: Policy, view: ClusterView, resource: str) -> tuple[int, str] | None:
    """The most of `resource` one node holds, assumed nodes included."""
    best = view.largest(resource)
    for node in assumed_nodes(policy):
        amount = node.allocatable.get(resource)
        if amount is not None and (best is None or amount > best[0]):
            best = (amount, node.name)
    return best


def _node(largest: tuple[int, str], view: ClusterView) -> str:
    node = view.nodes.get(largest[1])
    return f'node "{largest[1]}"' + (", cordoned" if node is not None and node.unschedulable else "")


def _too_big(
    ref: ContainerRef, resource: str, raw: Any, largest: tuple[int, str], view: ClusterView, where: str
) -> Violation:
    amount, shown = largest[0], quantity_text(raw)
    return container_violation(
        ref,
        f"{resource} {shown} fits on no node: the most one node holds is {amount} ({_node(largest, view)}); "
        f"request at most {amount}, or list a larger node pool in cluster.assumeNodes ({where}, cluster.fits)",
        f"{resource} {shown} fits on no node (most: {amount}); request at most {amount}",
    )


def _pod_too_big(
    resource: str,
    total: int | Fraction,
    running: list[tuple[ContainerRef, int | Fraction]],
    largest: tuple[int, str],
    view: ClusterView,
    where: str,
) -> Violation:
    amount = largest[0]
    named = ", ".join(f'"{ref.name}"={value}' for ref, value in running)
    return pod_violation(
        f"{resource} effective total {total} (containers running together: {named}) fits on no node: the "
        f"most one node holds is {amount} ({_node(largest, view)}); request at most {amount} in all, or split the "
        f"pod ({where}, cluster.fits)",
        f"{resource} total {total} fits on no node; request at most {amount} in all",
    )


def _not_offered(ref: ContainerRef, resource: str, raw: Any, policy: Policy, where: str) -> Violation:
    sharing, shown = policy.sharing, quantity_text(raw)
    if sharing.mode.is_shared and resource == sharing.resource_name:
        why = f", which the policy maps {NVIDIA_GPU} to"
        fix = "check the device plugin's sharing config (replicas, renameByDefault) or set sharing.resourceName"
        short_fix = "check the device plugin config"
    elif sharing.mode is Mode.MIG and sharing.mig_profile and resource == mig_resource(sharing.mig_profile):
        why = f", which the policy converts {NVIDIA_GPU} to"
        fix = "check the nodes' MIG layout and mig.strategy (mixed), or set sharing.migProfile to one they have"
        short_fix = "check the nodes' MIG layout"
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
    if item.field == "sharing.migProfile":
        return any(name.startswith(MIG_PREFIX) for name in held)
    return True


def _drift_violation(item: Drift) -> Violation:
    nodes = len(item.nodes)
    short = f"policy {item.field} {item.policy_says} but {nodes} nodes say {item.nodes_say}; ask an admin"
    if len(f"pod: {short}") > SHORT_LIMIT:  # the values are the user's: shown whole in the long line
        short = f"policy {item.field} disagrees with {nodes} nodes; ask an admin to fix the policy"
    return pod_violation(f"{item.line} (cluster.drift)", short)
