"""Which objects the native set claims to judge as the webhook does on CREATE: `outside` gives the gap (gaps.py)
that puts a Pod, a workload or a PodTemplate outside it, None where the compiled policies give the webhook's
verdict, resources, env and message.

The tests drive every object the set covers through both and require the same result; the gaps name what a
namespace without the webhook loses (docs/native-policies.md).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from webhook.admission.base.podspec import (
    DEVICE_LIST_MARK,
    DEVICE_PATH_MARK,
    POD_SPEC_PATHS,
    ContainerRef,
    controller_reference,
    get_path,
    host_paths,
    is_device_list_mount,
    is_gpu_device_path,
    mentions_gpu,
    volume_mounts,
)
from webhook.admission.base.quantity import quantity_or_none, whole_to_the_api_server
from webhook.admission.base.resources import (
    DEVICE_AMOUNTS,
    DEVICE_CLASS_PREFIX,
    INTEL_PREFIX,
    MANAGED_NAMES,
    MANAGED_PREFIXES,
    MIG_PREFIX,
    MIG_RESOURCE_RE2,
    NVIDIA_GPU,
    SHARED_SUFFIX,
    is_managed,
    mig_profile_of,
)
from webhook.admission.base.violation import Violation
from webhook.admission.cluster.nodes import PRODUCT_LABEL as PRODUCT
from webhook.admission.dra.claimrules import CLAIM_SPEC_PATHS
from webhook.admission.native import engineflags, memshares, userenv, wholes
from webhook.admission.native.containers import counted_prefixes
from webhook.admission.native.devices import device_list_path, device_nodes_path
from webhook.admission.native.family import SECTIONS, Gap
from webhook.admission.native.fractions import fraction_gap
from webhook.admission.native.gaps import (
    ACK_PODS,
    BOTH_NAMES,
    CUSTOM_RESOURCES,
    DEVICE_PATHS,
    DRA,
    EPHEMERAL,
    HUGE_COUNTS,
    MEMORY_COUNTS,
    MOST_ZEROS,
    NEAR_WHOLE,
    NUL_VALUES,
    OTHER_RESOURCES,
    PREFIXED_LIMITS,
    RECORDED,
    SAME_GPUS,
    SPACED_PRODUCT,
    STEERED_LABELS,
    STEERED_PRODUCT,
    mode_gap,
    product_judged,
    shape,
)
from webhook.admission.native.limits import copyable
from webhook.admission.native.maxima import device_counts
from webhook.admission.native.nodes import judged
from webhook.admission.native.pools import judged_names, other_pools
from webhook.admission.phases.mutate import WATCHED_ENV, mutate
from webhook.admission.phases.reapply import RECORD
from webhook.admission.phases.steering import (
    REQUIRED,
    bound_node,
    pod_requirements,
    requirements,
    restates,
)
from webhook.admission.phases.validate import Rules, container_counts
from webhook.admission.policy.model import Fractional, Policy
from webhook.admission.sharing import memshare
from webhook.admission.sharing.memshare import BackendSpec
from webhook.admission.sharing.registry import backend_of

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
    # The resources judged by name (the pool's own, AMD's, another pool's replica and memory slices, the amounts
    # of one GPU: pools.py), any other `nvidia.com/mig-*` and Intel's devices by prefix.
    by_name = judged_names(policy)
    mutated: dict[str, Any] | None = None  # the spec as mutation makes it, where a container holds several names
    for section in SECTIONS:
        for index, body in enumerate(spec.get(section) or ()):
            found = _container(body, policy, by_name)
            if found is None and _several(body):
                if mutated is None:
                    mutated = get_path(mutate(obj, policy, spec_path).obj, spec_path)
                found = _both_names(mutated[section][index], policy)
            if found is not None:
                return found
    if _same_gpus(obj, spec_path, policy):
        return SAME_GPUS
    if carried == "memory":
        spec = memshare.spec_of(policy)
        return _ack_pod(obj, spec_path, policy, spec) if spec is not None and spec.spread_label else None
    return None


def _same_gpus(obj: dict[str, Any], spec_path: tuple[str, ...], policy: Policy) -> bool:
    """Whether the pod (as mutation leaves it) names the same whole GPUs by two names (validate._whole_gpus:
    `nvidia.com/gpu` beside a GPU DeviceClass's resource, or two classes') with an amount that is not a whole
    number among them: validation sums it across names, the compiled lines (maxima._same_gpus) only whole ones."""
    rules = Rules.of(policy)
    spec = get_path(obj, spec_path)
    if not any(set(_names(body)) & rules.class_gpus for section in SECTIONS for body in spec.get(section) or ()):
        return False
    spec = get_path(mutate(obj, policy, spec_path).obj, spec_path)
    amounts = [
        (name, quantity_or_none(raw))
        for section in SECTIONS
        for body in spec.get(section) or ()
        for name, raw in ((body.get("resources") or {}).get("limits") or {}).items()
        if name in rules.whole_gpus
    ]
    return len({name for name, _ in amounts}) > 1 and any(
        value is None or Fraction(value).denominator != 1 for _, value in amounts
    )


def _names(body: dict[str, Any]) -> list[str]:
    """The resource names of a container's requests and limits."""
    resources = body.get("resources") or {}
    return [name for which in ("requests", "limits") for name in resources.get(which) or ()]


def _several(body: dict[str, Any]) -> bool:
    """The container names more than one managed resource (in its requests or limits)."""
    resources = body.get("resources") or {}
    names = {name for which in ("requests", "limits") for name in resources.get(which) or () if is_managed(name)}
    return len(names) > 1


def _says_line(name: str, requests: dict[str, Any], limits: dict[str, Any], policy: Policy) -> bool:
    """Whether validation says a line of the resource `name` of a container (its limit and request alone: what
    `_resource` says of one name does not depend on the others)."""
    alone = {"limits": {name: limits[name]}, **({"requests": {name: requests[name]}} if name in requests else {})}
    problems: list[Violation] = []
    container_counts(ContainerRef("containers", 0, {"name": "c", "resources": alone}), Rules.of(policy), problems)
    return bool(problems)


def _both_names(body: dict[str, Any], policy: Policy) -> Gap | None:
    """BOTH_NAMES for a container (as mutation leaves it) whose lines the compiled policies would say in another
    order: validation says them resource by resource, by name (the order in which the API server sends a map's
    keys), the compiled rules rule by rule, so two resources that each say a line of their own are
    outside unless the rules say them by name too (`_said_by_name`). The lines of zeros beside a GPU come in the
    order of their names, in both, but the compiled rule orders only up to MOST_ZEROS of one prefix
    (maxima.zeros_in_order): outside where there are more."""
    rules = Rules.of(policy)
    resources = body.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    saying = [name for name in limits if is_managed(name) and _says_line(name, requests, limits, policy)]
    counts = container_counts(ContainerRef("containers", 0, body), rules, [])
    held = any(counts.values())
    zeros = [name for name, count in counts.items() if not count]
    crowded = any(sum(name.startswith(prefix) for name in zeros) > MOST_ZEROS for prefix in counted_prefixes())
    fractional = {name for name in saying if Fraction(quantity_or_none(limits[name]) or 0).denominator != 1}
    if (len(saying) > 1 and not _said_by_name(saying, fractional, policy)) or (held and crowded):
        return BOTH_NAMES
    return None


def _said_by_name(saying: list[str], fractional: set[str], policy: Policy) -> bool:
    """Whether the compiled rules say the lines of the resources `saying` in the order of their names, as
    validation does: each is judged by name (a count: maxima.device_counts, one rule each, the lines of
    `nvidia.com/gpu` left unmapped right after its own; another pool's resource; or any managed name at a value
    the API server takes as whole, `fractional`: wholes.py), or at most one judged by prefix of each prefix
    (a MIG slice's, Intel's, at such a value a DeviceClass's: its rules at the prefix's place among them), or up
    to MOST_ZEROS of MIG's or Intel's names (their rule puts them in order: maxima.mig_rule, intel_rule), beside
    none judged by name that begins with the same prefix (under mode `memory` too: the memory lines come after
    every count's, memshares.py, as validation says them)."""
    judged = {*other_pools(policy), *device_counts(policy)}  # each with rules of its own, at its name's place
    by_name = [name for name in saying if name in judged or (name in fractional and name in MANAGED_NAMES)]
    prefixed = [name for name in saying if name not in by_name]
    if not all(name.startswith(MANAGED_PREFIXES if name in fractional else counted_prefixes()) for name in prefixed):
        return False
    for prefix in MANAGED_PREFIXES:  # each prefix's rules at its place, up to MOST_ZEROS names put in order
        mine = [name for name in prefixed if name.startswith(prefix)]
        most = MOST_ZEROS if prefix in counted_prefixes() else 1
        if len(mine) > most or (mine and any(name.startswith(prefix) for name in by_name)):
            return False
    return True


def _ack_pod(obj: dict[str, Any], spec_path: tuple[str, ...], policy: Policy, spec: BackendSpec) -> Gap | None:
    """ACK_PODS where validation reads the pod as a whole under ACK otherwise than the compiled set
    (spreads.py; memshare.pod_gpus, held, ack_pod), asked of the engine on the pod as
    mutation leaves it: a pod judged for a device path or variable alone whose label or limits say a line (the
    compiled lines read the resources: spreads.HOLDS_GPU), a label value the API server refuses, a GPU of less
    than one GiB under several containers' memory."""
    label = spec.spread_label
    assert label is not None
    _, label_lines = backend_of(policy).pod_gpus(obj, spec_path, policy)
    metadata = get_path(obj, (*spec_path[:-1], "metadata")) or {}
    raw = (metadata.get("labels") or {}).get(label)
    if isinstance(raw, str) and not _LABEL_VALUE.fullmatch(raw):
        return ACK_PODS  # the API server refuses it after the webhook has said its line
    mutated = get_path(mutate(obj, policy, spec_path).obj, spec_path)
    managed = counted_label = False  # a container holds a managed resource; the label among its limits
    holding = 0  # the app containers that hold memory
    for section in SECTIONS:
        for body in mutated.get(section) or ():
            resources = body.get("resources") or {}
            limits = resources.get("limits") or {}
            counted_label |= label in limits
            managed |= any(is_managed(name) for which in ("requests", "limits") for name in resources.get(which) or ())
            amount = quantity_or_none(limits[spec.memory]) if spec.memory in limits else None
            holding += section == "containers" and amount is not None and amount > 0
    if (counted_label or label_lines) and not managed:
        return ACK_PODS
    gpu_mib, unit_mib = memshare.units_of(spec, policy)
    if gpu_mib is not None and gpu_mib < unit_mib and holding > 1:
        return ACK_PODS  # ack_pod divides by the GPU's whole GiB, none (spreads._over_gpus)
    return None


_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")  # apimachinery IsValidLabelValue


def _steering(obj: dict[str, Any], spec: dict[str, Any], spec_path: tuple[str, ...], policy: Policy) -> Gap | None:
    """What of steering (steering.steer) the compiled set does not carry for a pod the webhook steers (it names no
    node and holds the resource steered, as mutation leaves its containers): a required term's own `In` on the
    product label, and its own expressions on a label the policy requires, where gaps.product_judged and
    nodes.judged say the compiled policies cannot tell whether they leave a node of the pool."""
    if not requirements(policy) or bound_node(spec):
        return None
    gpus, _ = backend_of(policy).pod_gpus(obj, spec_path, policy)
    wanted = pod_requirements(get_path(mutate(obj, policy, spec_path).obj, spec_path), policy, gpus)
    if not wanted:
        return None
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(REQUIRED) or {}
    for term in required.get("nodeSelectorTerms") or ():
        copied = [*(term.get("matchExpressions") or ()), *(term.get("matchFields") or ())]
        if any(isinstance(v, str) and "\x00" in v for e in copied for v in (e.get("values") or ())):
            return NUL_VALUES  # steering copies the term's values joined and split at NUL (nodes._copied)
        expressions = term.get("matchExpressions") or ()
        product_in = any(e.get("key") == PRODUCT and e.get("operator") == "In" for e in expressions)
        if product_in and not product_judged(policy):
            return STEERED_PRODUCT
        for r in wanted:
            on_key = [e for e in expressions if e.get("key") == r.key]
            own = [e for e in on_key if not restates(e, r)]
            if own and not judged(r, own, on_key):
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


# Below this, a count is an int64 to the API server's CEL, and memshares.MOST_CONTAINERS of them sum within int64.
HUGE_COUNT = 10**12


def _huge(value: Any) -> bool:
    amount = quantity_or_none(value)
    return amount is not None and not -HUGE_COUNT < amount < HUGE_COUNT


def _container(body: dict[str, Any], policy: Policy, by_name: set[str]) -> Gap | None:
    names = {entry.get("name") for entry in body.get("env") or () if type(entry) is dict}
    resources = body.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    managed = {name for name in (*requests, *limits) if is_managed(name)}
    if not managed:
        return None
    if any(_huge(amounts.get(name)) for amounts in (requests, limits) for name in managed):
        return HUGE_COUNTS
    classes = Rules.of(policy).class_names
    # the limits as mutation leaves them, each managed request without a limit copied (limits.py)
    copied = {name: requests[name] for name in managed if name in requests and limits.get(name) is None}
    if not all(map(copyable, copied)):
        return PREFIXED_LIMITS  # not copied by the MAP; the API server refuses such a name either way
    limits = {**limits, **copied}
    for name in sorted(managed & classes):
        value = quantity_or_none(limits.get(name))
        asked = quantity_or_none(requests[name]) if name in requests else value
        if value is None or Fraction(value).denominator != 1 or value < 0 or asked != value:
            # a name the API server takes as written (it holds kubernetes.io/): validation's own lines
            return OTHER_RESOURCES
    for name in sorted(managed - by_name):
        if name.startswith(MIG_PREFIX):
            # read by CEL's pattern as by resources.mig_profile_of
            if (re.fullmatch(MIG_RESOURCE_RE2, name) is None) != (mig_profile_of(name) is None):
                return OTHER_RESOURCES
        elif name.startswith(INTEL_PREFIX):
            if name.endswith(SHARED_SUFFIX):  # a replica to validation, held to the replicas' maximum
                return OTHER_RESOURCES
        elif not name.startswith(DEVICE_CLASS_PREFIX) or name in classes:
            return OTHER_RESOURCES
        elif name in limits and _says_line(name, requests, limits, policy):
            # A DeviceClass whose devices are no GPU here: validation says nothing of a whole one, and refuses
            # a fraction, or a request that differs, which the API server takes (a name of "kubernetes.io/" is
            # no extended resource to it)
            return OTHER_RESOURCES
    if shape(policy) == "memory":
        return _memory_container(requests, limits, managed, policy)
    if _near_whole(policy, {**requests, **limits}, wholes.gpu_line(policy) is not None):
        return NEAR_WHOLE
    if shape(policy) == "shared":
        user = userenv.outside(body.get("env") or [], policy) if names & WATCHED_ENV else None
        if user is not None:
            return user
        engine_gap = engineflags.outside(body, policy)
        if engine_gap is not None:
            return engine_gap
        values = [quantity_or_none(v) for v in (requests.get(NVIDIA_GPU), limits.get(NVIDIA_GPU))]
        return fraction_gap(policy, [Fraction(v) for v in values if v is not None and 0 < v < 1])
    return None


def _memory_container(
    requests: dict[str, Any], limits: dict[str, Any], managed: set[str], policy: Policy
) -> Gap | None:
    """Mode memory (memshares.py): NEAR_WHOLE where the API server takes a value as whole that mutation does not
    convert and the compiled set does not refuse (`nvidia.com/gpu` but past one GPU where wholes.gpu_line says it,
    or a text not canonical; the backend's own resources are wholes.py's); MEMORY_COUNTS for a count past the
    compiled integers."""
    counts = [name for name in managed if name not in DEVICE_AMOUNTS]
    amounts = {**requests, **limits}
    gpu_compiled = wholes.gpu_line(policy) is not None and _above_one(amounts.get(NVIDIA_GPU))
    if _near_whole(policy, amounts, gpu_compiled) and not memshares.converts(requests, limits, policy):
        return NEAR_WHOLE
    most = memshares.most_count(policy)
    for name in sorted({*counts, *(managed & memshares.unbounded(policy))}):
        value = quantity_or_none(amounts[name])
        if value is not None and value >= most:
            return MEMORY_COUNTS
    return None


def _above_one(raw: Any) -> bool:
    """`nvidia.com/gpu`'s text is past one GPU (wholes.above_one: where the compiled line says it under mode
    memory)."""
    value = quantity_or_none(raw) if raw is not None else None
    return value is not None and value > 1


def _near_whole(policy: Policy, amounts: dict[str, Any], gpu_compiled: bool) -> bool:
    """A value the API server takes as whole and the webhook refuses as fractional (within a thousandth below a
    whole number, and not a fraction below 1 of `nvidia.com/gpu` that the policy converts to a shared replica:
    both convert it; a MIG slice may hold none of it) whose line the compiled set does not say (wholes.py): its
    text is not the API server's canonical form, or it is `nvidia.com/gpu` and not `gpu_compiled` (never under mode
    memory). `amounts`: the container's requests and limits, a limit's text for a
    name in both (the text mutation keeps)."""
    for name, raw in amounts.items():
        value = quantity_or_none(raw)
        if value is None or Fraction(value).denominator == 1 or not whole_to_the_api_server(value):
            continue
        if name == NVIDIA_GPU and value < 1 and policy.fractional is Fractional.SHARED:
            continue
        if not wholes.fractional_text(raw) or (name == NVIDIA_GPU and not gpu_compiled):
            return True
    return False
