"""Which objects the native set claims to judge as the webhook does on CREATE: `outside` gives the gap (gaps.py)
that puts a Pod, a workload or a PodTemplate outside it, None where the compiled policies give the webhook's
verdict, resources, env and message.

The tests drive every object the set covers through both and require the same result; the gaps name what a
namespace without the webhook loses (docs/native-policies.md).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from webhook.admission.base.podspec import (
    DEVICE_LIST_MARK,
    DEVICE_PATH_MARK,
    POD_SPEC_PATHS,
    controller_reference,
    get_path,
    host_paths,
    is_device_list_mount,
    is_gpu_device_path,
    mentions_gpu,
    volume_mounts,
)
from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.resources import NVIDIA_GPU, NVIDIA_GPU_SHARED, is_managed
from webhook.admission.cluster.nodes import PRODUCT_LABEL as PRODUCT
from webhook.admission.dra.claimrules import CLAIM_SPEC_PATHS
from webhook.admission.native import userenv
from webhook.admission.native.devices import device_list_path, device_nodes_path
from webhook.admission.native.family import SECTIONS, Gap
from webhook.admission.native.fractions import fraction_gap
from webhook.admission.native.gaps import (
    BOTH_NAMES,
    CUSTOM_RESOURCES,
    DEVICE_PATHS,
    DRA,
    ENGINES,
    EPHEMERAL,
    OTHER_RESOURCES,
    RECORDED,
    SPACED_PRODUCT,
    STEERED_LABELS,
    STEERED_PRODUCT,
    USER_ENV,
    mode_gap,
    product_judged,
    shape,
)
from webhook.admission.native.migslices import slice_names
from webhook.admission.native.nodes import judged
from webhook.admission.phases import engines
from webhook.admission.phases.mutate import WATCHED_ENV, mutate
from webhook.admission.phases.reapply import RECORD
from webhook.admission.phases.steering import REQUIRED, bound_node, pod_requirements, requirements, restates
from webhook.admission.policy.model import Policy

POD_SPEC = POD_SPEC_PATHS["Pod"]


def outside(obj: dict[str, Any], policy: Policy) -> Gap | None:
    """The gap that keeps the native set from judging `obj` (an object the API server decodes, being created) as
    the webhook does under `policy`, or None."""
    kind = obj.get("kind")
    spec_path = POD_SPEC_PATHS.get(kind) if isinstance(kind, str) else None
    if spec_path is None:
        return DRA if kind in CLAIM_SPEC_PATHS else CUSTOM_RESOURCES
    if spec_path != POD_SPEC and controller_reference(obj) is not None:
        return None  # its controller's template was judged: both leave it alone
    if not mentions_gpu(obj, spec_path):
        return None
    if spec_path != POD_SPEC and RECORD in ((obj.get("metadata") or {}).get("annotations") or {}):
        return RECORDED
    spec = get_path(obj, spec_path)
    carried = shape(policy)
    if carried is None:
        return mode_gap(policy)
    if "ephemeralContainers" in spec:
        return EPHEMERAL
    if policy.steering:
        found = _steering(obj, spec, spec_path, policy)
        if found is not None:
            return found
    if (carried == "shared" or policy.steering) and _spaced_product(spec):
        return SPACED_PRODUCT
    if policy.block_visible_devices_override and _resolved_otherwise(spec):
        return DEVICE_PATHS
    # Whole GPUs: the shared replica is another pool's, said as validation says it (pools.py); MIG: the pool's
    # slices by name (migslices.py).
    if carried == "whole":
        served = {NVIDIA_GPU, NVIDIA_GPU_SHARED}
    elif carried == "mig":
        served = {NVIDIA_GPU, *slice_names(policy)}
    else:
        served = {NVIDIA_GPU, policy.sharing.resource_name}
    for section in SECTIONS:
        for body in spec.get(section) or ():
            found = _container(body, policy, served)
            if found is not None:
                return found
    return None


def _steering(obj: dict[str, Any], spec: dict[str, Any], spec_path: tuple[str, ...], policy: Policy) -> Gap | None:
    """What of steering (steering.steer) the compiled set does not carry for a pod the webhook steers (it names no
    node and holds the resource steered, as mutation leaves its containers): a required term's own `In` on the
    product label, and its own expression on a label the policy requires, where nodes.product_judged and
    nodes.judged say the compiled policies cannot tell whether it leaves a node of the pool."""
    wanted = requirements(policy)
    if not wanted or bound_node(spec):
        return None
    if not pod_requirements(get_path(mutate(obj, policy, spec_path).obj, spec_path), policy):
        return None
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(REQUIRED) or {}
    for term in required.get("nodeSelectorTerms") or ():
        own: dict[str, int] = {}  # a required label's expressions of the term's own
        for expression in term.get("matchExpressions") or ():
            key = expression.get("key")
            if key == PRODUCT and expression.get("operator") == "In" and not product_judged(policy):
                return STEERED_PRODUCT
            ours = [r for r in wanted if r.key == key]
            if not ours or any(restates(expression, r) for r in ours):
                continue
            own[key] = own.get(key, 0) + 1
            several = own[key] > 1 and any(r.operator == "NotIn" for r in ours)
            spaced = any(" " in value for value in expression.get("values") or ())
            if several or spaced or not all(judged(r) for r in ours) or expression.get("operator") in ("Gt", "Lt"):
                return STEERED_LABELS  # a satisfiability check nodes.py does not write
    return None


def _spaced_product(spec: dict[str, Any]) -> bool:
    """A required node affinity value on the product label with a space, which the compiled pin to a kept name
    (nodes.py) would read as two values."""
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(REQUIRED) or {}
    for term in required.get("nodeSelectorTerms") or ():
        for expression in term.get("matchExpressions") or ():
            if expression.get("key") == PRODUCT and any(" " in value for value in expression.get("values") or ()):
                return True
    return False


def _resolved_otherwise(spec: dict[str, Any]) -> bool:
    """A path that validation, resolving it as the node does, reads otherwise than the compiled policies, which
    read it as written (devices.py): a hostPath volume's, or a container's mount path."""
    for path in host_paths(spec).values():
        if (DEVICE_PATH_MARK in path and is_gpu_device_path(path)) != device_nodes_path(path):
            return True
    for section in SECTIONS:
        for body in spec.get(section) or ():
            for _, path in volume_mounts(body):
                if (DEVICE_LIST_MARK in path and is_device_list_mount(path)) != device_list_path(path):
                    return True
    return False


def _container(body: dict[str, Any], policy: Policy, served: set[str]) -> Gap | None:
    names = {entry.get("name") for entry in body.get("env") or () if type(entry) is dict}
    resources = body.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    managed = {name for name in (*requests, *limits) if is_managed(name)}
    if not managed:
        return None
    if not managed <= served:
        return OTHER_RESOURCES
    if len(managed) > 1:
        return BOTH_NAMES
    if shape(policy) == "shared":
        if names & WATCHED_ENV and userenv.outside(body.get("env") or []):
            return USER_ENV
        if engines.detect(body) is not None:
            return ENGINES
        values = [quantity_or_none(v) for v in (requests.get(NVIDIA_GPU), limits.get(NVIDIA_GPU))]
        return fraction_gap(policy, [Fraction(v) for v in values if v is not None and 0 < v < 1])
    return None
