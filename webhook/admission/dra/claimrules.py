"""Dynamic Resource Allocation: ResourceClaims and ResourceClaimTemplates judged by the namespace's policy.

A pod can get GPUs without naming `nvidia.com/gpu`: through a ResourceClaim (`resource.k8s.io/v1`) it names, or
a ResourceClaimTemplate that the API server turns into one claim per pod. So the claims and templates are judged
here, when they are created, by the policy of their namespace; they are never mutated (a claim's spec is
immutable, and what a claim asks for is the user's to say). Devices asked from a GPU DeviceClass (NVIDIA's
`gpu.nvidia.com` and `mig.nvidia.com`, and the policy's `deviceClasses`) count against the limits: a container
that names a request gets all of its devices (`maxPerContainer`), and a pod that names the claim gets all of
them (`maxPerPod`); `allocationMode: All` is not a number any cap can bound; a `firstAvailable` request counts
at its largest alternative; MIG devices are held to the policy's MIG profiles; a `GpuConfig` sharing strategy
must be the namespace's sharing mode, and under time-slicing and MPS NVIDIA's whole GPUs come only with one (the
driver's default config shares nothing); `adminAccess` (access to devices allocated to others) is not for
tenants. A pod that names claims is podclaims.py's: it counts their devices with the pod's extended resources,
with the readers defined here that both need (`claim_spec_path`, `class_kind`, `cut_name`); NVIDIA's GpuConfig
is read in base/gpuconfig.py.

The shapes and the API server's own rules (the `Refusal`s, denied by /mutate whatever the enforcement, as for
extended resources) are written from kubernetes/kubernetes: pkg/apis/resource/types.go (resource.k8s.io/v1:
`DeviceRequestsMaxSize` 32, `FirstAvailableDeviceRequestMaxSize` 8, `DeviceConfigMaxSize` 32, the allocation
modes ExactCount and All) and pkg/apis/resource/validation/validation.go (`validateDeviceRequest`: exactly one
of `exactly` and `firstAvailable`; request names are DNS labels, unique; `validateDeviceAllocationMode`: a
count with All is refused, an ExactCount count must be greater than zero; a class name is a DNS subdomain;
`validateDeviceClaimConfiguration`: a config names requests of the claim, as `req` or `req/sub`). NVIDIA's
side from NVIDIA/k8s-dra-driver-gpu: the DeviceClasses' selectors (`device.attributes['gpu.nvidia.com'].type`
`gpu` or `mig`, MIG devices carrying their `profile`), and api/nvidia.com/resource/v1beta1 (the opaque
`GpuConfig` and `MigDeviceConfig` of the driver `gpu.nvidia.com`, `sharing.strategy` TimeSlicing or MPS).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.admission.base.gpuconfig import NVIDIA_DRIVER, config_covers, config_strategy, gpu_config_strategies
from webhook.admission.base.memo import BoundedMemo
from webhook.admission.base.podspec import get_path
from webhook.admission.base.resources import NVIDIA_GPU_CLASSES
from webhook.admission.base.violation import APISERVER_TOO, SHORT_LIMIT, Refusal, Violation, cut
from webhook.admission.cluster import celselect
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of

# kind -> the keys from the object's root to its DeviceClaim's parent (the ResourceClaimSpec)
CLAIM_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "ResourceClaim": ("spec",),
    "ResourceClaimTemplate": ("spec", "spec"),
}
# The versions whose requests have `exactly` and `firstAvailable` (v1beta1's are flat). The webhook
# configurations ask for v1: the API server converts a request made in another version (matchPolicy Equivalent).
CLAIM_API_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")

REQUESTS_MAX = 32  # DeviceRequestsMaxSize
FIRST_AVAILABLE_MAX = 8  # FirstAvailableDeviceRequestMaxSize
CONFIG_MAX = 32  # DeviceConfigMaxSize
EXACT_COUNT, ALL = "ExactCount", "All"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def claim_spec_path(obj: Any) -> tuple[str, ...] | None:
    """Where a ResourceClaim's or ResourceClaimTemplate's ResourceClaimSpec is; None for any other object."""
    if type(obj) is not dict:
        return None
    kind = obj.get("kind")
    if type(kind) is not str or kind not in CLAIM_SPEC_PATHS or obj.get("apiVersion") not in CLAIM_API_VERSIONS:
        return None
    return CLAIM_SPEC_PATHS[kind]


def left_alone(obj: dict[str, Any], old: Any, path: tuple[str, ...]) -> str:
    """Why a claim or template is not judged, or "": being deleted (a denial would keep its finalizer), or an
    UPDATE that leaves the spec as it was (status, labels, finalizers: the API server keeps the spec immutable)."""
    metadata = obj.get("metadata")
    if type(metadata) is dict and metadata.get("deletionTimestamp"):
        return "it is being deleted"
    if type(old) is dict and get_path(old, path) == get_path(obj, path):
        return "this update leaves its spec as it was"
    return ""


@dataclass(frozen=True, slots=True)
class Asked:
    """One request (or one `firstAvailable` alternative) of a claim, as the policy reads it."""

    ref: str  # "gpu", or "gpu/big" for an alternative (the API server's reference syntax)
    device_class: str
    kind: str  # "gpu" (whole GPUs), "mig" (MIG devices), or "" (a class that is no GPU here)
    count: int  # the devices asked for; 0 where not valid or `All`
    every: bool  # allocationMode All
    body: dict[str, Any]


def cut_name(text: str, limit: int = 40) -> str:
    """A name or value as the DRA messages show it: `violation.cut` at 40 characters unless told."""
    return cut(text, limit)


def _problem(label: str, line: str, short: str, kind: type[Violation] = Violation) -> Violation:
    """`label: line`, and `label: short` within a warning's length (cut only where a name is absurdly long)."""
    brief = f"{label}: {short}"
    if len(brief) > SHORT_LIMIT:
        brief = cut(brief, SHORT_LIMIT)
    return kind(f"{label}: {line}", brief)


def _label(ref: str) -> str:
    return f'request "{cut_name(ref, 70)}"'


def _class_kinds(policy: Policy) -> dict[str, str]:
    """class name -> "gpu" or "mig", worked out once per policy."""
    classes = policy.device_classes
    return {**{name: "mig" for name in classes.mig_classes}, **{name: "gpu" for name in classes.gpu_classes}}


def class_kind(name: str, policy: Policy) -> str:
    """What the policy counts a DeviceClass's devices as: "gpu" (whole GPUs), "mig", or "" (no GPU here)."""
    return policy.derived("dra-classes", _class_kinds).get(name, "")


# The API server's name rules, memoized: the same few names come in claim after claim.
_is_label: Any = BoundedMemo(lambda name: len(name) <= 63 and _DNS_LABEL.match(name) is not None).__getitem__
_is_subdomain: Any = BoundedMemo(lambda name: len(name) <= 253 and _DNS_SUBDOMAIN.match(name) is not None).__getitem__


def judge(
    obj: dict[str, Any], policy: Policy, path: tuple[str, ...], classes: Mapping[str, str] | None = None
) -> list[Violation]:
    """Every problem of a claim or template under `policy`, one Violation each (Refusals: the API server's).
    `classes`: each DeviceClass the server knows, with its own GpuConfig's strategy (`_unshared`)."""
    what = "template" if obj.get("kind") == "ResourceClaimTemplate" else "claim"
    spec = get_path(obj, path)
    devices = spec.get("devices") if type(spec) is dict else None
    problems: list[Violation] = []
    if devices is None:
        return problems  # a claim for no device
    if type(devices) is not dict:
        problems.append(
            _problem(
                what,
                f"spec.devices must be a map ({APISERVER_TOO}); fix the manifest",
                "spec.devices must be a map; fix the manifest",
                Refusal,
            )
        )
        return problems
    requests = devices.get("requests")
    if requests is None:
        requests = []
    if type(requests) is not list:
        problems.append(
            _problem(
                what,
                f"spec.devices.requests must be a list ({APISERVER_TOO}); fix the manifest",
                "devices.requests must be a list; fix the manifest",
                Refusal,
            )
        )
        return problems
    if len(requests) > REQUESTS_MAX:
        problems.append(
            _problem(
                what,
                f"{len(requests)} device requests, more than the {REQUESTS_MAX} a claim may hold ({APISERVER_TOO}); "
                "split it into several claims",
                f"{len(requests)} device requests, at most {REQUESTS_MAX}; split the claim",
                Refusal,
            )
        )
    rules = Rules.of(policy)
    names: dict[str, set[str]] = {}  # request name -> its alternatives' names (config references)
    contributions: list[Asked] = []  # per request: the alternative with the most GPU devices
    whole: list[Asked] = []  # NVIDIA's whole GPUs (gpu.nvidia.com), for the sharing mode
    for index, request in enumerate(requests):
        asked = _request(index, request, names, policy, problems)
        counted = [a for a in asked if a.kind]
        for one in counted:
            _judge_asked(one, what, rules, problems)
            if one.device_class in NVIDIA_GPU_CLASSES:
                whole.append(one)
        if counted:
            top = max(counted, key=lambda a: a.count)
            if top.count:
                contributions.append(top)
    _claim_total(what, contributions, rules, problems)
    _configs(what, devices.get("config"), names, policy, problems)
    if whole and backend_of(policy).gpu_config_strategy() is not None:  # time-slicing, MPS
        _unshared(whole, devices.get("config"), policy, problems, classes)
    return problems


def _request(
    index: int, request: Any, names: dict[str, set[str]], policy: Policy, problems: list[Violation]
) -> list[Asked]:
    """Check one entry of spec.devices.requests as the API server does; what it asks for, where valid."""
    where = f"requests[{index}]"
    if type(request) is not dict:
        problems.append(
            _problem(
                where, f"must be a map ({APISERVER_TOO}); fix the manifest", "must be a map; fix the manifest", Refusal
            )
        )
        return []
    name: Any = request.get("name")  # as written: checked by _name_ok
    label = where
    if not _name_ok(name, where, problems):
        name = None
    elif name in names:
        problems.append(
            _problem(
                _label(name),
                f"the name is used by another request too ({APISERVER_TOO}); give each request its own name",
                "the name is used twice; give each request its own name",
                Refusal,
            )
        )
    else:
        label = _label(name)
    exactly, alternatives = request.get("exactly"), request.get("firstAvailable")
    has_exactly, has_alternatives = exactly is not None, alternatives not in (None, [])
    if has_exactly == has_alternatives:
        which = "both" if has_exactly else "neither"
        problems.append(
            _problem(
                label,
                f"sets {which} of exactly and firstAvailable; a request sets exactly one ({APISERVER_TOO}): use "
                "exactly for one kind of device, firstAvailable for alternatives",
                f"sets {which} of exactly and firstAvailable; set exactly one",
                Refusal,
            )
        )
        return []
    ref = name or where
    if has_exactly:
        if name is not None:
            names.setdefault(name, set())
        one = _device_request(ref, label, exactly, "exactly", policy, problems)
        return [one] if one else []
    if type(alternatives) is not list:
        problems.append(
            _problem(
                label,
                f"firstAvailable must be a list ({APISERVER_TOO}); fix the manifest",
                "firstAvailable must be a list; fix the manifest",
                Refusal,
            )
        )
        return []
    if len(alternatives) > FIRST_AVAILABLE_MAX:
        problems.append(
            _problem(
                label,
                f"firstAvailable lists {len(alternatives)} alternatives, more than {FIRST_AVAILABLE_MAX} "
                f"({APISERVER_TOO}); keep the {FIRST_AVAILABLE_MAX} you prefer",
                f"{len(alternatives)} alternatives, at most {FIRST_AVAILABLE_MAX}; keep fewer",
                Refusal,
            )
        )
    subnames: set[str] = set()
    found: list[Asked] = []
    for position, alternative in enumerate(alternatives):
        sub_where = f"{label} firstAvailable[{position}]"
        if type(alternative) is not dict:
            problems.append(
                _problem(
                    sub_where,
                    f"must be a map ({APISERVER_TOO}); fix the manifest",
                    "must be a map; fix the manifest",
                    Refusal,
                )
            )
            continue
        sub: Any = alternative.get("name")  # as written
        if not _name_ok(sub, sub_where, problems):
            continue
        if sub in subnames:
            problems.append(
                _problem(
                    sub_where,
                    f'the name "{cut_name(sub)}" is used by another alternative too ({APISERVER_TOO}); give each '
                    "its own name",
                    "the name is used twice; give each alternative its own",
                    Refusal,
                )
            )
            continue
        subnames.add(sub)
        sub_ref = f"{ref}/{sub}"
        one = _device_request(sub_ref, _label(sub_ref), alternative, "alternative", policy, problems)
        if one:
            found.append(one)
    if name is not None:
        names.setdefault(name, set()).update(subnames)
    return found


def _name_ok(name: Any, where: str, problems: list[Violation]) -> bool:
    if type(name) is str and _is_label(name):
        return True
    shown = "no name" if name in (None, "") else f'name "{cut_name(str(name))}"'
    problems.append(
        _problem(
            where,
            f"has {shown}; a request's name is a DNS label: lowercase letters, digits and '-', at most 63 "
            f"({APISERVER_TOO}); name it, e.g. gpu",
            f"has {shown}; name it with a DNS label, e.g. gpu",
            Refusal,
        )
    )
    return False


def _device_request(
    ref: str, label: str, body: Any, field: str, policy: Policy, problems: list[Violation]
) -> Asked | None:
    """`exactly` or one `firstAvailable` alternative: its class, mode and count, as the API server checks them."""
    if type(body) is not dict:
        problems.append(
            _problem(
                label,
                f"{field} must be a map ({APISERVER_TOO}); fix the manifest",
                f"{field} must be a map; fix the manifest",
                Refusal,
            )
        )
        return None
    device_class = body.get("deviceClassName")
    if type(device_class) is not str or not _is_subdomain(device_class):
        shown = (
            "no deviceClassName" if device_class in (None, "") else f'deviceClassName "{cut_name(str(device_class))}"'
        )
        problems.append(
            _problem(
                label,
                f"has {shown}; a request names its DeviceClass, a DNS subdomain ({APISERVER_TOO}); set it, e.g. "
                "gpu.nvidia.com",
                f"has {shown}; set a DeviceClass, e.g. gpu.nvidia.com",
                Refusal,
            )
        )
        return None
    mode = body.get("allocationMode", EXACT_COUNT)  # the API server's default, set before any webhook
    count = body.get("count")
    kind = class_kind(device_class, policy)
    if mode == ALL:
        if count not in (None, 0):
            problems.append(
                _problem(
                    label,
                    f"{device_class} count {cut_name(str(count), 20)} is set with allocationMode All "
                    f"({APISERVER_TOO}); remove count, or use allocationMode ExactCount",
                    "count is set with allocationMode All; remove one of them",
                    Refusal,
                )
            )
            return None
        return Asked(ref, device_class, kind, 0, True, body)
    if mode != EXACT_COUNT:
        problems.append(
            _problem(
                label,
                f'{device_class} allocationMode "{cut_name(str(mode), 20)}" is neither ExactCount nor All '
                f"({APISERVER_TOO}); use ExactCount with a count",
                "unknown allocationMode; use ExactCount",
                Refusal,
            )
        )
        return None
    if count is None or (type(count) is int and count == 0):
        count = 1  # the API server's default for ExactCount (count is omitempty: 0 reads as absent)
    if type(count) is not int or count <= 0:
        problems.append(
            _problem(
                label,
                f"{device_class} count {cut_name(str(count), 20)} is not a whole number greater than zero "
                f"({APISERVER_TOO}); ask for 1 or more devices",
                "count must be a whole number > 0",
                Refusal,
            )
        )
        return None
    return Asked(ref, device_class, kind, count, False, body)


def _judge_asked(asked: Asked, what: str, rules: Rules, problems: list[Violation]) -> None:
    """The policy's rules on one request for GPU devices."""
    policy = rules.policy
    where = f'policy "{policy.name}"'
    label, cls = _label(asked.ref), asked.device_class
    if asked.body.get("adminAccess") is True:
        problems.append(
            _problem(
                label,
                f"{cls} adminAccess gives access to devices allocated to others, outside every GPU limit "
                f"({where} does not allow it for tenants); remove adminAccess",
                f"{cut_name(cls, 24)} adminAccess is not for tenants; remove it",
            )
        )
    if asked.every:
        problems.append(
            _problem(
                label,
                f"{cls} allocationMode All asks for every matching device of a node, which no cap can bound "
                f"({where} allows at most {rules.max_per_pod} per pod); use allocationMode ExactCount with a count of "
                f"at most {min(rules.max_per_pod, _container_maximum(asked, rules))}",
                f"{cut_name(cls, 24)} allocationMode All is unbounded; ask for an ExactCount",
            )
        )
    maximum = _container_maximum(asked, rules)
    if asked.count > maximum:
        if asked.kind == "mig" and rules.one_mig_slice:
            problems.append(
                _problem(
                    label,
                    f"{cls} count {asked.count} is more than one MIG slice per container ({where}): CUDA sees "
                    "one MIG device per process, and slices have no NVLink or P2P between them; ask for one bigger "
                    "profile, or whole GPUs in a namespace that has them",
                    f"{cut_name(cls, 24)} count {asked.count}: one MIG slice per container; ask for a bigger profile",
                )
            )
        else:
            problems.append(
                _problem(
                    label,
                    f"{cls} count {asked.count} exceeds the per-container maximum of {maximum} ({where}): a "
                    f"container naming this request gets all {asked.count}; ask for at most {maximum}",
                    f"{cut_name(cls, 24)} count {asked.count}: at most {maximum} per container; ask for fewer",
                )
            )
    if asked.kind == "mig":
        _profile(asked, label, rules, problems)


def _container_maximum(asked: Asked, rules: Rules) -> int:
    return rules.max_mig_per_container if asked.kind == "mig" else rules.max_whole_per_container


def _profile(asked: Asked, label: str, rules: Rules, problems: list[Violation]) -> None:
    """A MIG device's profile, where a selector names it (`...profile == '3g.40gb'`, read by celselect), against
    the policy's model and offered profiles. A selector not read in full is judged on what was read."""
    policy, model = rules.policy, rules.mig_model
    for profile in celselect.of_selectors(asked.body.get("selectors")).equal_to("profile"):
        if model is not None and model.profile(profile) is None:
            problems.append(
                _problem(
                    label,
                    f"{asked.device_class} selects MIG profile {profile}, which {model.name} does not have "
                    f'(policy "{policy.name}"); use one of {", ".join(model.profile_names())}',
                    f"MIG profile {cut_name(profile, 16)} is not on {model.name}; ask for one it has",
                )
            )
        elif rules.offered is not None and profile not in rules.offered:
            problems.append(
                _problem(
                    label,
                    f"{asked.device_class} selects MIG profile {profile}, which the nodes' MIG layout does "
                    f'not offer (policy "{policy.name}" offers {", ".join(rules.offered)}): the claim would '
                    "never be allocated; use one of those",
                    f"MIG profile {cut_name(profile, 16)} is not offered here; ask for one the policy lists",
                )
            )


def _claim_total(what: str, contributions: list[Asked], rules: Rules, problems: list[Violation]) -> None:
    """A pod that names the claim (or gets its own from the template) holds every device of it: the sum of
    the requests, each `firstAvailable` at its largest alternative."""
    total = sum(asked.count for asked in contributions)
    maximum = rules.max_per_pod
    if total <= maximum:
        return
    if len(contributions) == 1 and total > _container_maximum(contributions[0], rules):
        return  # one request over the per-container maximum: its own line says it
    named = ", ".join(f'request "{cut_name(a.ref, 70)}": {a.count} from {a.device_class}' for a in contributions)
    pod = "each pod made from this template gets its own" if what == "template" else "a pod naming this claim gets"
    problems.append(
        _problem(
            what,
            f"{total} GPU devices ({named}) exceed the per-pod maximum of {maximum} "
            f'(policy "{rules.policy.name}"): {pod} {total}; ask for at most {maximum}, or split the work',
            f"{total} GPU devices, at most {maximum} per pod; ask for fewer",
        )
    )


def _configs(what: str, configs: Any, names: dict[str, set[str]], policy: Policy, problems: list[Violation]) -> None:
    """spec.devices.config: references to the claim's requests (the API server's rule) and NVIDIA's sharing."""
    if configs is None:
        return
    if type(configs) is not list:
        problems.append(
            _problem(
                what,
                f"spec.devices.config must be a list ({APISERVER_TOO}); fix the manifest",
                "devices.config must be a list; fix the manifest",
                Refusal,
            )
        )
        return
    if len(configs) > CONFIG_MAX:
        problems.append(
            _problem(
                what,
                f"{len(configs)} device configs, more than the {CONFIG_MAX} a claim may hold ({APISERVER_TOO}); "
                "merge them",
                f"{len(configs)} device configs, at most {CONFIG_MAX}; merge them",
                Refusal,
            )
        )
    for index, config in enumerate(configs):
        where = f"config[{index}]"
        if type(config) is not dict:
            continue
        refs = config.get("requests")
        for ref in refs if type(refs) is list else []:
            if not _names_request(ref, names):
                known = ", ".join(sorted(names)) or "none"
                problems.append(
                    _problem(
                        where,
                        f'names request "{cut_name(str(ref))}", which this {what} does not have ({APISERVER_TOO}); '
                        f"name one of its requests ({known})",
                        "names a request the claim does not have",
                        Refusal,
                    )
                )
        _sharing(where, config.get("opaque"), policy, problems)


def _names_request(ref: Any, names: dict[str, set[str]]) -> bool:
    """`req` or `req/sub`, as the API server's requestNames.Has reads it."""
    if type(ref) is not str:
        return False
    parts = ref.split("/")
    if len(parts) > 2 or parts[0] not in names:
        return False
    return len(parts) == 1 or parts[1] in names[parts[0]]


def _sharing(where: str, opaque: Any, policy: Policy, problems: list[Violation]) -> None:
    """NVIDIA's GpuConfig or MigDeviceConfig: an explicit sharing strategy must be the namespace's mode."""
    strategy = config_strategy(opaque)
    if strategy is None:
        return
    mode, backend = policy.sharing.mode, backend_of(policy)
    if strategy == backend.gpu_config_strategy():
        return
    kind = opaque["parameters"]["kind"]
    why, fix = backend.config_mismatch(policy)
    problems.append(
        _problem(
            where,
            f"{kind} sharing strategy {cut_name(strategy, 20)} does not match the namespace: {why}; {fix}",
            f"{kind} sharing {cut_name(strategy, 12)} is not this namespace's ({mode}); {fix}",
        )
    )


def _unshared(
    whole: list[Asked], configs: Any, policy: Policy, problems: list[Violation], classes: Mapping[str, str] | None
) -> None:
    """Under time-slicing or MPS, NVIDIA's whole GPUs come shared only through a `GpuConfig` sharing strategy:
    a request that no such config covers gets GPUs of its own (the driver's default config shares nothing),
    which the namespace's policy does not give. A config with another strategy is `_sharing`'s to say.
    `classes` (each known DeviceClass's own GpuConfig strategy, `class_strategy`) is the server's: a request
    that no GpuConfig of the claim covers gets its class's, so a class sharing the namespace's way covers it;
    offline (None) the claim must say it itself."""
    covered = gpu_config_strategies(configs)  # a request's, its alternative's, or every request's ("")
    if "" in covered:
        return
    mode = policy.sharing.mode
    strategy = backend_of(policy).gpu_config_strategy()
    bare = gpu_config_strategies(configs, "") if classes else {}  # GpuConfigs without a strategy: the class's is over
    for asked in whole:
        if asked.ref in covered or asked.ref.split("/")[0] in covered:
            continue
        if classes and classes.get(asked.device_class) == strategy and not config_covers(bare, asked.ref):
            continue
        what = "allocationMode All" if asked.every else f"count {asked.count}"
        problems.append(
            _problem(
                _label(asked.ref),
                f"{asked.device_class} {what} asks for whole GPUs with no GpuConfig to share them: the claim would "
                f'hold them alone, and policy "{policy.name}" shares GPUs by {mode}; add a config for this request '
                f"with opaque driver {NVIDIA_DRIVER} and parameters apiVersion resource.nvidia.com/v1beta1, kind "
                f"GpuConfig, sharing.strategy {strategy}",
                f"{cut_name(asked.device_class, 24)} unshared under {mode}; add a GpuConfig with strategy {strategy}",
            )
        )
