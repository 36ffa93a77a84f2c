"""The nodes a policy's GPU pods can land on, and the values `auto` takes from them.

Both the drift (clusterdrift.py) and the admission checks (clustercheck.py) start from the same question: which
nodes of the snapshot, `cluster.assumeNodes` included, are this policy's (`policy_nodes`: the resource its pods
hold after mutation, the pool its steering selects), and what they say of their GPUs: GPU feature discovery's
labels (cluster/nodes.py), or where a node has no GFD memory label the GPUs HAMi or Volcano registers, read through
the policy's deviceMemoryScaling or gpuMemoryFactor (replicas, model, memory, MIG layout). This module answers
it once, so that what a node says is read in one place; a rule about which nodes are a policy's, or what a
label means, is changed here.

`resolve` turns `replicas: auto` and `gpu.model: auto` into the nodes' values (the smallest share wins).
Everything per policy is worked out once per snapshot (`ClusterView.derived`), never per review. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from webhook.admission.base.resources import GPU_MODELS, GPUModel
from webhook.admission.cluster.nodes import (
    MEMORY_LABEL,
    PRODUCT_LABEL,
    ClusterView,
    NodeInfo,
    node_replicas,
)
from webhook.admission.phases import steering
from webhook.admission.policy.model import GPU, AssumedNode, Policy
from webhook.admission.sharing import memshare
from webhook.admission.sharing.registry import backend_of

NAMED_NODES = 3  # nodes named in one line; the count says how many more


def names_shown(names: Sequence[str]) -> str:
    """At most NAMED_NODES of `names` for a line, `...` where there are more: `a, b, c, ...`."""
    return ", ".join(names[:NAMED_NODES]) + (", ..." if len(names) > NAMED_NODES else "")


def assumed_nodes(policy: Policy) -> tuple[NodeInfo, ...]:
    """`cluster.assumeNodes` as nodes (worked out once per policy)."""
    return policy.derived("cluster-assumed-nodes", _assumed)


def _assumed(policy: Policy) -> tuple[NodeInfo, ...]:
    return tuple(_assumed_node(shape) for shape in policy.cluster_checks.assume_nodes)


def _assumed_node(shape: AssumedNode) -> NodeInfo:
    return NodeInfo(f"{shape.name} (assumed)", dict(shape.allocatable), dict(shape.labels))


def policy_nodes(policy: Policy, view: ClusterView) -> tuple[NodeInfo, ...]:
    """The nodes (assumed ones included) that the policy's GPU pods can land on: those advertising a resource
    its pods hold after mutation (`_holds`) that its steering lets them onto (steering.reaches, by the kind of
    pool only: a pool whose replica count or slice size changed is still the policy's, and its drift).

    Where the policy reaches no node, the nodes of its kind stand in (shared GPUs for a shared policy, MIG nodes
    for a MIG one), so that a policy whose pods can run nowhere is still compared with the nodes it was
    probably written for (a renamed resource that the device plugin keeps, a sharing mode that changed)."""
    return view.derived("cluster-policy-nodes", policy, lambda: _policy_nodes(policy, view))


def _policy_nodes(policy: Policy, view: ClusterView) -> tuple[NodeInfo, ...]:
    nodes = [*view.nodes.values(), *assumed_nodes(policy)]
    holds = _holds(policy)
    reached = tuple(
        n for n in nodes if any(map(holds, n.allocatable)) and steering.reaches(policy, n.labels, values=False)
    )
    if reached:
        return reached
    return backend_of(policy).node_pool(policy, nodes)


def _holds(policy: Policy) -> Callable[[str], bool]:
    """Whether a resource is one the policy's GPU pods hold after mutation: the shared replica, the MIG slices
    it converts to (those of `migProfiles`; any MIG slice where it lists none: a fraction may become any
    profile), else `nvidia.com/gpu` (whole GPUs, and MIG slices under the single strategy)."""
    return backend_of(policy).holds(policy)


def node_memory_mib(node: NodeInfo, policy: Policy) -> int | None:
    """The GPU's memory in MiB; None under MIG single, where GFD labels the slice's memory. A node without GFD's
    memory label says it in the GPUs HAMi or Volcano registers (the smallest, where it has GPUs of several
    sizes), read through the policy's deviceMemoryScaling or gpuMemoryFactor (memshare.registered_mib)."""
    if "-MIG-" in node.labels.get(PRODUCT_LABEL, ""):
        return None
    text = node.labels.get(MEMORY_LABEL, "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    return _smallest_device(node, policy)[1] if node.devices else None


def _smallest_device(node: NodeInfo, policy: Policy) -> tuple[str, int]:
    """The registered GPU with the least memory, in MiB as the policy reads it, its type as GFD writes a
    product (spaces as "-")."""
    kind, amount = min(node.devices, key=lambda device: (device[1], device[0]))
    return registered_product(kind), int(memshare.registered_mib(policy, node.registrar, amount))


def registered_product(kind: str) -> str:
    """The type HAMi or Volcano registers a GPU under, written as GFD writes a product (spaces as "-")."""
    return kind.replace(" ", "-")


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


def node_model(node: NodeInfo, policy: Policy) -> GPUModel | None:
    """The node's GPU model: GFD's product label, else the type HAMi or Volcano registers its GPUs under."""
    product = node.labels.get(PRODUCT_LABEL)
    if product:
        return product_model(product, node_memory_mib(node, policy))
    return product_model(*_smallest_device(node, policy)) if node.devices else None


def resolve(policy: Policy, view: ClusterView) -> Policy:
    """The policy with `replicas: auto` and `gpu.model: auto` taken from its nodes, once per snapshot: the
    most replicas and the smallest GPU (the smallest share, so that no pod is told it has more than it has).
    Left unknown (None) where no node says."""
    if not policy.cluster_checks.auto:
        return policy
    return view.derived("cluster-resolved", policy, lambda: _resolve(policy, view))


def _resolve(policy: Policy, view: ClusterView) -> Policy:
    nodes = policy_nodes(policy, view)
    sharing, gpu = policy.sharing, policy.gpu
    if policy.cluster_checks.auto_replicas:
        replicas = max((r for r in map(node_replicas, nodes) if r > 1), default=None)
        sharing = dataclasses.replace(sharing, replicas=replicas)
    if policy.cluster_checks.auto_model:
        models = [m for m in (node_model(n, policy) for n in nodes) if m is not None]
        if models:
            gpu = GPU(model=min(models, key=lambda m: m.memory_mib).name, memory_mib=gpu.memory_mib)
        else:
            memory = min(
                (m for m in (node_memory_mib(n, policy) for n in nodes) if m is not None), default=gpu.memory_mib
            )
            gpu = GPU(model=None, memory_mib=memory)
    return dataclasses.replace(policy, sharing=sharing, gpu=gpu, memo={})
