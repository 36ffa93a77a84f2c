"""Validation: every reason the object (as it stands after mutation) cannot be admitted, one `Violation` each.

Each line names the container, the resource as the user wrote it, the value, the rule and what to do
instead; each short form says what is wrong and what to do within an admission warning's 120 characters. All
problems are listed, not just the first, so a user fixes a manifest in one round.

Two kinds of rule. `Refusal`s are what the API server's own validation refuses in the GPU resources, whatever
the namespace's policy: it validates the object between the mutating and the validating webhooks, so /mutate
denies these itself (otherwise kubectl shows the API server's message, not ours). They are written from
kubernetes/kubernetes pkg/apis/core/validation/validation.go: `ValidateResourceRequirements` (an extended
resource is not overcommitable, `helper.IsOvercommitAllowed`: a request needs a limit and must equal it),
`validateBasicResource` / `ValidateResourceQuantityValue` (`helper.IsIntegerResourceName`: an extended
resource is a whole number; `ValidateNonnegativeQuantity`). Every other violation is the policy's, judged
per enforcement.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.admission.mutate import RECORDED_FRACTION, mapping_target, recorded_fraction
from webhook.admission.podspec import (
    ALL_SECTIONS,
    VISIBLE_DEVICES,
    ContainerRef,
    get_path,
    pod_spec_path,
    visible_devices_prefix,
)
from webhook.admission.policy import DEFAULT_MAX_PER_CONTAINER, Mode, Policy
from webhook.admission.quantity import QuantityError, format_fraction, parse_quantity, quantity_text
from webhook.admission.resources import (
    DEVICE_AMOUNTS,
    DEVICE_CLASS_PREFIX,
    GPU_MODELS,
    MIG_PREFIX,
    NVIDIA_GPU,
    GPUModel,
    is_managed,
    is_shared,
    mig_profile_of,
    mig_resource,
    offered_profiles,
)
from webhook.admission.violation import SHORT_LIMIT, Violation


@dataclass(frozen=True, slots=True)
class Refusal(Violation):
    """A violation that the API server's own validation refuses too, whatever the policy's enforcement."""


APISERVER_TOO = "the API server refuses it anyway"


def _violation(label: str, compact: str, line: str, short: str, kind: type[Violation] = Violation) -> Violation:
    """`label: line`, and `label: short` for warnings; with a long container name, the short form names the
    container by its place (`initContainers[1]`) so that the advice is never cut."""
    brief = f"{label}: {short}"
    if len(brief) > SHORT_LIMIT:
        brief = f"{compact}: {short}"
        if len(brief) > SHORT_LIMIT:  # a value or resource name far longer than any real one
            brief = brief[: SHORT_LIMIT - 3] + "..."
    return kind(f"{label}: {line}", brief)


def _brief(text: str, limit: int = 24) -> str:
    """A value or name in a short form: cut, since it is shown whole in the long line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def offer(policy: Policy) -> str:
    """What this namespace gives instead of a fraction, as advice."""
    mode = policy.sharing.mode
    where = f'policy "{policy.name}"'
    share = policy.share
    if mode.is_shared:
        replica = f"one of {policy.sharing.replicas} {mode} shares" if policy.sharing.replicas else f"a {mode} share"
        if policy.sharing.resource_name == NVIDIA_GPU:  # the device plugin keeps the name: no renaming
            what = f"is {replica} of a GPU under {where}"
        else:
            what = f"{where} turns into {replica} of a GPU ({policy.sharing.resource_name})"
        if share is not None and policy.fractional.value == "shared":
            return (
                f"request {format_fraction(share)} or less (up to one replica's share), or {NVIDIA_GPU}: 1, which "
                f"{what}"
            )
        return f"request {NVIDIA_GPU}: 1, which {what}"
    if policy.sharing.is_mig_single:
        return f"request {NVIDIA_GPU}: 1, which is one {policy.sharing.mig_profile} MIG slice under {where}"
    if mode is Mode.MIG and policy.sharing.mig_profile:
        return f"request {NVIDIA_GPU}: 1, which {where} turns into {mig_resource(policy.sharing.mig_profile)}"
    return f"request a whole number of GPUs ({where} gives whole GPUs only; ask for a namespace with sharing)"


def short_offer(policy: Policy) -> str:
    """`offer` in a few words, for the short forms."""
    mode = policy.sharing.mode
    if mode.is_shared:
        share = policy.share
        if share is not None and policy.fractional.value == "shared":
            return f"ask for {format_fraction(share)} or less, or {NVIDIA_GPU}: 1"
        return f"ask for {NVIDIA_GPU}: 1 instead"
    if mode is Mode.MIG and policy.sharing.mig_profile:
        return f"ask for {NVIDIA_GPU}: 1 instead"
    return "ask for whole GPUs (none are shared here)"


NO_REQUEST: Any = object()  # the request is absent (the API server defaults it to the limit), not null

Holders = list[tuple[ContainerRef, dict[str, "int | Fraction"]]]
Problems = list[Violation]


@dataclass(frozen=True, slots=True)
class _Rules:
    """What a policy means for validation, worked out once per policy (this runs on every review)."""

    policy: Policy
    max_per_container: int  # shared replicas (`*.shared`): 1 under time-slicing and MPS unless set
    max_mig_per_container: int  # MIG slices: `maxPerContainer`, else 1 under mig (8 elsewhere)
    max_whole_per_container: int  # whole devices: `maxPerContainer`, else 8 in every mode
    max_per_pod: int
    exclusive: bool  # whole GPUs only: shared resources are not handed out
    mig_model: GPUModel | None  # MIG mode on a known model: only its profiles are handed out
    offered: tuple[str, ...] | None  # MIG mode: the profiles the nodes offer (None: every profile of the model)
    one_shared_replica: bool  # the maximum of 1 is the device plugin's (shared mode, no explicit maximum)
    one_mig_slice: bool  # the maximum of 1 is MIG's (mig mode, no explicit maximum)
    mapping_target: str | None  # what mutation makes of `nvidia.com/gpu: N` here, if anything
    share: Fraction | None  # one replica's share of a GPU (time-slicing and MPS)
    converts_to_shared: bool  # fractional: shared, which records the fraction it converted in the container
    block_visible_devices: bool
    shared_resource: str | None  # the policy's shared replica (`nvidia.com/gpu` where the plugin keeps the name)
    mig_single_resource: str | None  # `nvidia.com/gpu` where it is one MIG slice (migStrategy: single)
    # DRA: the GPU DeviceClasses' extended resources (`deviceclass.resource.kubernetes.io/<class>`), and those
    # counted with them as the same whole GPUs (`nvidia.com/gpu` where it is whole GPUs).
    class_gpus: frozenset[str]
    class_migs: frozenset[str]
    class_names: frozenset[str]  # both
    whole_gpus: frozenset[str]

    def is_replica(self, resource: str) -> bool:
        """A shared replica: `*.shared`, or the policy's replica that keeps another name."""
        return is_shared(resource) or resource == self.shared_resource

    def container_maximum(self, resource: str) -> int:
        """The most of `resource` one container may hold: shared replicas and MIG slices have their own."""
        if self.is_replica(resource):
            return self.max_per_container
        if resource.startswith(MIG_PREFIX) or resource == self.mig_single_resource or resource in self.class_migs:
            return self.max_mig_per_container
        return self.max_whole_per_container

    @staticmethod
    def of(policy: Policy) -> _Rules:
        # The memo read here, not through `derived`: a call fewer on every review once the rules are made.
        return policy.memo.get("validation-rules") or policy.derived("validation-rules", _Rules._build)

    @staticmethod
    def _build(policy: Policy) -> _Rules:
        sharing = policy.sharing
        mode = sharing.mode
        explicit = policy.limits.max_per_container
        mig_model = GPU_MODELS.get(policy.gpu.model or "") if mode is Mode.MIG else None
        class_gpus = frozenset(DEVICE_CLASS_PREFIX + name for name in policy.device_classes.gpu_classes)
        class_migs = frozenset(DEVICE_CLASS_PREFIX + name for name in policy.device_classes.mig_classes)
        whole = frozenset() if sharing.replica_resource == NVIDIA_GPU else frozenset({NVIDIA_GPU})
        return _Rules(
            policy=policy,
            max_per_container=policy.max_per_container,
            max_mig_per_container=policy.mig_max_per_container,
            max_whole_per_container=DEFAULT_MAX_PER_CONTAINER if explicit is None else explicit,
            max_per_pod=policy.limits.max_per_pod,
            exclusive=mode is Mode.EXCLUSIVE,
            mig_model=mig_model,
            offered=sharing.mig_profiles if mode is Mode.MIG else None,
            one_shared_replica=mode.is_shared and policy.max_per_container == 1 and explicit is None,
            one_mig_slice=mode is Mode.MIG and explicit is None,
            mapping_target=mapping_target(sharing),
            share=policy.share,
            converts_to_shared=policy.share is not None and policy.fractional.value == "shared",
            block_visible_devices=policy.block_visible_devices_override,
            shared_resource=policy.sharing.shared_resource,
            mig_single_resource=NVIDIA_GPU if sharing.is_mig_single else None,
            class_gpus=class_gpus,
            class_migs=class_migs,
            class_names=class_gpus | class_migs,
            whole_gpus=class_gpus | whole,
        )


def validate(
    obj: dict[str, Any], policy: Policy, spec_path: tuple[str, ...] | None = None, counted: Holders | None = None
) -> list[Violation]:
    """Every problem, one `Violation` each. `counted`, when given, receives the containers that hold GPUs with
    their valid counts, in start order (the cluster checks read them: each count is parsed once per review)."""
    spec_path = spec_path or pod_spec_path(obj)
    if spec_path is None:
        return []
    spec = get_path(obj, spec_path)
    if not isinstance(spec, dict):
        return []
    rules = _Rules.of(policy)
    problems: Problems = []
    holders: Holders = []  # the containers that count GPUs, in start order
    count_sum: int | Fraction = 0  # every count of every container
    for section in ALL_SECTIONS:
        containers = spec.get(section)
        if not isinstance(containers, list):
            continue
        for index, body in enumerate(containers):
            if not isinstance(body, dict):
                continue
            ref = ContainerRef(section, index, body)
            counts = _container(ref, rules, problems) if section != "ephemeralContainers" else None
            total = sum(counts.values()) if counts else 0  # counts are never negative: 0 means no GPU
            if counts:
                holders.append((ref, counts))
                count_sum += total
                if rules.converts_to_shared:
                    _within_share(ref, rules, problems)
            if rules.block_visible_devices and not total:
                _visible_devices(ref, rules, problems)
    # The effective total is at most the sum of every count, so a pod under the maximum by that sum needs no
    # closer look.
    if count_sum > rules.max_per_pod:
        _pod_total(holders, rules, problems)
    classes = False  # any DeviceClass's resource counted (only GPU classes are)
    for _, counts in holders:
        if not rules.class_names.isdisjoint(counts):
            classes = True
            break
    if classes:
        _whole_gpus(holders, rules, problems)
    if counted is not None:
        # The cluster checks read nodes' extended resources; DeviceClasses' are served by DRA, not nodes.
        counted += _without_classes(holders) if classes else holders
    return problems


def _compact(ref: ContainerRef) -> str:
    return f"{ref.section}[{ref.index}]"


def container_violation(ref: ContainerRef, line: str, short: str, kind: type[Violation] = Violation) -> Violation:
    """A violation about one container: its label in front of both forms (the short one falls back to its place)."""
    return _violation(ref.label, _compact(ref), line, short, kind)


def pod_violation(line: str, short: str) -> Violation:
    """A violation about the pod as a whole."""
    return _violation("pod", "pod", line, short)


def _add(ref: ContainerRef, problems: Problems, line: str, short: str, kind: type[Violation] = Violation) -> None:
    problems.append(container_violation(ref, line, short, kind))


def _container(ref: ContainerRef, rules: _Rules, problems: Problems) -> dict[str, int | Fraction]:
    """Check one container's managed resources; return its GPU counts (the limits, which the pod holds)."""
    resources = ref.body.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        what = type(resources).__name__
        _add(ref, problems, f"resources must be a map, not {what}; fix the manifest",
             f"resources must be a map, not {_brief(what, 12)}; fix the manifest", Refusal)
        return {}
    requests, limits = resources.get("requests"), resources.get("limits")
    if not ((requests is None or isinstance(requests, dict)) and (limits is None or isinstance(limits, dict))):
        for which, value in (("requests", requests), ("limits", limits)):
            if value is not None and not isinstance(value, dict):
                what = type(value).__name__
                _add(ref, problems, f"resources.{which} must be a map, not {what}; fix the manifest",
                     f"resources.{which} must be a map, not {_brief(what, 12)}; fix the manifest", Refusal)
                break
        return {}
    requests, limits = requests or {}, limits or {}
    counts: dict[str, int | Fraction] = {}
    for name, limit in limits.items():
        if is_managed(name):
            count = _resource(ref, name, requests.get(name, NO_REQUEST), limit, rules, problems)
            if count is not None:
                counts[name] = count
    for name in requests:
        if name not in limits and is_managed(name):
            _resource(ref, name, requests[name], None, rules, problems)  # no limit: never a count
    return counts


def _parsed(ref: ContainerRef, name: str, which: str, raw: Any, problems: Problems) -> Fraction | None:
    try:
        value = parse_quantity(raw)
    except QuantityError as error:
        shown = quantity_text(raw)
        _add(ref, problems,
             f'{name} {which} {shown} {error} ({APISERVER_TOO}); set a whole number of devices such as "1"',
             f"{_brief(name)} {which} {_brief(shown, 12)} is not a quantity; set a whole number",
             Refusal)
        return None
    if value < 0:
        shown = quantity_text(raw)
        _add(ref, problems,
             f"{name} {which} {shown} is negative ({APISERVER_TOO}); set a whole number of devices >= 0",
             f"{_brief(name)} {which} {_brief(shown, 12)} is negative; set a whole number >= 0", Refusal)
        return None
    return value


def _resource(
    ref: ContainerRef, name: str, request_raw: Any, limit_raw: Any, rules: _Rules, problems: Problems
) -> int | Fraction | None:
    """Check one managed resource of a container; return its count when it is valid."""
    if limit_raw is None:  # only before mutation (which copies requests into limits)
        if request_raw is NO_REQUEST:
            return None  # a null limit alone: zero to the API server, and no GPU
        if _parsed(ref, name, "request", request_raw, problems) is not None:
            shown = quantity_text(request_raw)
            _add(ref, problems,
                 f"{name} request {shown} has no limit; GPUs cannot be overcommitted ({APISERVER_TOO}): "
                 f"set limits.{name} to the same value",
                 f"{_brief(name)} request {_brief(shown, 12)} has no limit; set an equal limit",
                 Refusal)
        return None
    limit = _parsed(ref, name, "limit", limit_raw, problems)
    if request_raw is NO_REQUEST or (type(request_raw) is type(limit_raw) and request_raw == limit_raw):
        request = limit  # the same text: judged (and reported) once (`true` is not 1, though Python says so)
    elif request_raw is None:
        request = Fraction(0)  # JSON null decodes as a zero Quantity (apimachinery Quantity.UnmarshalJSON)
    else:
        request = _parsed(ref, name, "request", request_raw, problems)
    if limit is None or request is None:
        return None
    policy = rules.policy
    if request != limit:
        request_shown, limit_shown = quantity_text(request_raw), quantity_text(limit_raw)
        _add(ref, problems,
             f"{name} request {request_shown} differs from limit {limit_shown}; GPUs cannot be overcommitted "
             f"({APISERVER_TOO}): set request and limit to the same whole number",
             f"{_brief(name)} request {_brief(request_shown, 10)} != limit {_brief(limit_shown, 10)}; "
             "set both to one whole number",
             Refusal)
        return None
    value = limit
    if value.denominator != 1:
        shown = quantity_text(limit_raw)
        if name == NVIDIA_GPU:
            line, short = _fraction_advice(shown, value, rules)
        else:
            line = f"{name} {shown} is fractional, but GPUs are whole devices ({APISERVER_TOO}); request a whole number"
            short = f"{_brief(name)} {_brief(shown, 12)} is fractional; request a whole number"
        _add(ref, problems, line, short, Refusal)
        return None
    if name in DEVICE_AMOUNTS:
        return None  # an amount of one GPU: whole and request = limit, but not a number of devices
    if name not in rules.class_names and name.startswith(DEVICE_CLASS_PREFIX):
        return None  # a DeviceClass whose devices are no GPU here: an extended resource, not a GPU
    if value and (rules.exclusive or rules.mig_model or rules.offered):
        _served(ref, name, limit_raw, rules, problems)
    if name == NVIDIA_GPU and rules.mapping_target is not None:
        _over_mapped_maximum(ref, value, rules, problems)
        return value
    maximum = rules.container_maximum(name)
    if value > maximum:
        shown = quantity_text(limit_raw)
        where = f'policy "{policy.name}"'
        if rules.one_shared_replica and rules.is_replica(name):
            _add(ref, problems,
                 f"{name} {shown} exceeds 1 per container under {policy.sharing.mode} ({where}): {value} shared "
                 f"replicas are not {value} GPUs, and the device plugin refuses them; request 1, or use a "
                 "namespace with whole GPUs",
                 f"{_brief(name)} {_brief(shown, 8)}: one {policy.sharing.mode} share per container; ask for 1")
        elif rules.one_mig_slice and (
            name.startswith(MIG_PREFIX) or name == rules.mig_single_resource or name in rules.class_migs
        ):
            _add(ref, problems, _one_slice_line(f"{name} {shown}", rules), _one_slice_short(_brief(name)))
        else:
            _add(ref, problems,
                 f"{name} {shown} exceeds the per-container maximum of {maximum} ({where}); request at most "
                 f"{maximum}",
                 f"{_brief(name)} {_brief(shown, 8)}: at most {_brief(str(maximum), 8)} per container; "
                 f"ask for fewer")
    return value


def _fraction_advice(shown: str, value: Fraction, rules: _Rules) -> tuple[str, str]:
    """The line and short form for `nvidia.com/gpu: <fraction>` that mutation could not convert."""
    policy = rules.policy
    model = GPU_MODELS.get(policy.gpu.model or "") if policy.fractional.value == "mig" else None
    if model is not None:
        sharing = policy.sharing
        offered = (sharing.mig_profile,) if sharing.is_mig_single and sharing.mig_profile else sharing.mig_profiles
        profiles = offered_profiles(model, offered)
        names = ", ".join(profile.name for profile in profiles)
        if sharing.is_mig_single:  # the nodes offer one profile, as nvidia.com/gpu
            return (
                f"{NVIDIA_GPU} {shown} is fractional, and the one MIG slice offered here ({names}) does not hold "
                f'{format_fraction(value)} of one {model.name} (policy "{policy.name}"; {APISERVER_TOO}); request '
                f"{NVIDIA_GPU}: 1 (one {names} slice), or whole GPUs in a namespace that has them",
                f"{NVIDIA_GPU} {_brief(shown, 10)}: more than the one MIG slice offered; ask for {NVIDIA_GPU}: 1",
            )
        return (
            f"{NVIDIA_GPU} {shown} is fractional, and no MIG slice offered here holds {format_fraction(value)} of "
            f'one {model.name} (policy "{policy.name}" offers {names}; {APISERVER_TOO}); request {NVIDIA_GPU}: 1, '
            "or a MIG profile it offers",
            f"{NVIDIA_GPU} {_brief(shown, 10)}: no offered MIG slice is that big; ask for {NVIDIA_GPU}: 1",
        )
    return (
        f"{NVIDIA_GPU} {shown} is fractional, but GPUs are whole devices ({APISERVER_TOO}); {offer(policy)}",
        f"{NVIDIA_GPU} {_brief(shown, 10)} is fractional; {short_offer(policy)}",
    )


def _one_slice_line(what: str, rules: _Rules) -> str:
    """Two MIG slices in one container are not a 2-GPU machine.

    NVIDIA's MIG user guide (docs.nvidia.com/datacenter/tesla/mig-user-guide, "CUDA Device Enumeration" and
    "Supported Configurations"): a CUDA process enumerates a single MIG device, however many are made visible
    to the container, and GPU-to-GPU P2P (PCIe or NVLink) is not supported between MIG devices, so NCCL has no
    fast path between slices. A second slice is memory and compute that the program cannot use.
    """
    policy = rules.policy
    return (
        f"{what} is more than one MIG slice per container (policy \"{policy.name}\"): CUDA sees one MIG device "
        "per process, and slices have no NVLink or P2P between them; request one bigger profile, or whole GPUs "
        "in a namespace that has them"
    )


def _one_slice_short(what: str) -> str:
    return f"{what}: one MIG slice per container; ask for one bigger profile"


def _over_mapped_maximum(ref: ContainerRef, value: Fraction, rules: _Rules, problems: Problems) -> None:
    """`nvidia.com/gpu: N` in a namespace that maps it (mutation leaves it as written when N is more than the
    target allows): the line names the request as written and what the policy makes of it."""
    target = rules.mapping_target
    assert target is not None
    maximum = rules.container_maximum(target)
    if value <= maximum:
        return
    policy = rules.policy
    n = int(value)
    what = f"{NVIDIA_GPU} {n} ({target} {n} under {policy.sharing.mode})"
    if rules.one_shared_replica and is_shared(target):
        _add(ref, problems,
             f"{what} exceeds 1 per container (policy \"{policy.name}\"): {n} shared replicas are not {n} GPUs, "
             "and the device plugin refuses them; request 1, or whole GPUs in a namespace that has them",
             f"{NVIDIA_GPU} {_brief(str(n), 8)}: one {policy.sharing.mode} share per container; ask for 1")
    elif rules.one_mig_slice and target.startswith(MIG_PREFIX):
        _add(ref, problems, _one_slice_line(what, rules), _one_slice_short(f"{NVIDIA_GPU} {n}"))
    else:
        _add(ref, problems,
             f"{what} exceeds the per-container maximum of {maximum} (policy \"{policy.name}\"); request at most "
             f"{maximum}",
             f"{NVIDIA_GPU} {_brief(str(n), 8)}: at most {_brief(str(maximum), 8)} per container; ask for fewer")


def _within_share(ref: ContainerRef, rules: _Rules, problems: Problems) -> None:
    """A fraction converted to a shared replica (mutation records it in the container) may not be more than one
    replica's share: the scheduler packs `replicas` of them onto one GPU, and each would be told it may use more
    memory than it gets."""
    share = rules.share
    assert share is not None
    env = ref.body.get("env")
    if type(env) is not list:
        return
    for entry in env:
        if type(entry) is dict and entry.get("name") == RECORDED_FRACTION:
            asked = recorded_fraction(entry)
            if asked is not None and asked > share:
                policy = rules.policy
                mode, limit = policy.sharing.mode, format_fraction(share)
                _add(ref, problems,
                     f"{NVIDIA_GPU} {format_fraction(asked)} is more than one share here ({mode} gives "
                     f'1/{policy.sharing.replicas} of a GPU per replica, policy "{policy.name}"); ask for {limit} '
                     "or less, or for whole GPUs in a namespace that has them",
                     f"{NVIDIA_GPU} {format_fraction(asked)} is more than one share (1/{policy.sharing.replicas}); "
                     f"ask for {limit} or less, or whole GPUs")
            return


def _served(ref: ContainerRef, name: str, raw: Any, rules: _Rules, problems: Problems) -> None:
    """Resources that the namespace's sharing mode does not hand out."""
    policy, model = rules.policy, rules.mig_model
    shown = quantity_text(raw)
    if rules.exclusive and is_shared(name):
        _add(ref, problems,
             f'{name} {shown} is a shared GPU, but policy "{policy.name}" gives this namespace whole GPUs '
             f"(mode exclusive); request {NVIDIA_GPU} instead",
             f"{_brief(name)}: this namespace has whole GPUs only; ask for {NVIDIA_GPU}")
        return
    profile = mig_profile_of(name)
    if profile is None:
        return
    if model is not None and model.profile(profile) is None:
        _add(ref, problems,
             f"{name} {shown} asks for MIG profile {profile}, which {model.name} does not have "
             f'(policy "{policy.name}"); use one of {", ".join(model.profile_names())}',
             f"{_brief(name)}: no such MIG profile on {model.name}; ask for one it has")
    elif rules.offered is not None and profile not in rules.offered:
        _add(ref, problems,
             f"{name} {shown} asks for MIG profile {profile}, which the nodes' MIG layout does not offer "
             f'(policy "{policy.name}" offers {", ".join(rules.offered)}): the pod would stay Pending; '
             "use one of those",
             f"{_brief(name)}: not offered here; ask for a MIG slice the policy lists")


def _visible_devices(ref: ContainerRef, rules: _Rules, problems: Problems) -> None:
    """NVIDIA_VISIBLE_DEVICES in a container that counts no GPU (called only where the policy blocks it).

    A privileged container is left alone: it sees every device node of the host whatever the variable says, so
    the rule protects nothing there, and the GPU stack's own pods (device plugin, DCGM exporter, GPU feature
    discovery) run privileged with NVIDIA_VISIBLE_DEVICES=all and no GPU request. Pod Security admission is the
    fence for privileged containers.
    """
    security = ref.body.get("securityContext")
    if type(security) is dict and security.get("privileged") is True:
        return
    policy = rules.policy
    if VISIBLE_DEVICES in ref.env_names():
        _add(ref, problems,
             f"sets {VISIBLE_DEVICES} but requests no GPU; the NVIDIA container toolkit would expose GPUs without "
             f'allocating them (policy "{policy.name}"): remove the variable or request {NVIDIA_GPU}',
             f"sets {VISIBLE_DEVICES} but requests no GPU; remove it or request {NVIDIA_GPU}")
    elif (prefix := visible_devices_prefix(ref.body)) is not None:
        _add(ref, problems,
             f'envFrom prefix "{prefix}" can set {VISIBLE_DEVICES} (from a key '
             f'"{VISIBLE_DEVICES.removeprefix(prefix)}") but requests no GPU; the NVIDIA container toolkit would '
             f'expose GPUs without allocating them (policy "{policy.name}"): use another prefix or request '
             f"{NVIDIA_GPU}",
             f'envFrom prefix "{prefix}" can set {VISIBLE_DEVICES}; use another prefix')


def effective_total(holders: Holders, name: str) -> tuple[int | Fraction, list[tuple[ContainerRef, int | Fraction]]]:
    """The pod's effective request of `name`, as the scheduler computes it with sidecars (KEP-753), and the
    containers that run together at that peak (so that their counts add up to the total).

    max(app containers + all sidecars, each regular init container + the sidecars started before it)
    `holders` are in start order: init containers first. Validation's per-pod maximum and the cluster checks
    (clustercheck.py) both count this way.
    """
    sidecars: list[tuple[ContainerRef, int | Fraction]] = []  # started so far: they keep running
    sidecar_total: int | Fraction = 0
    app: list[tuple[ContainerRef, int | Fraction]] = []
    init_total: int | Fraction = 0  # the highest regular init container + the sidecars started before it
    init_peak: tuple[int, ContainerRef, int | Fraction] | None = None  # (sidecars started, it, its count)
    for ref, counts in holders:
        value = counts.get(name)
        if not value:
            continue
        if ref.section == "containers":
            app.append((ref, value))
        elif ref.is_sidecar:
            sidecars.append((ref, value))
            sidecar_total += value
        elif value + sidecar_total > init_total:
            init_total, init_peak = value + sidecar_total, (len(sidecars), ref, value)
    running, total = sidecars + app, sidecar_total + sum(value for _, value in app)
    if init_peak is not None and init_total > total:
        started, ref, value = init_peak
        running, total = [*sidecars[:started], (ref, value)], init_total
    return total, running


def _pod_total(holders: Holders, rules: _Rules, problems: Problems) -> None:
    """The pod's effective request (`effective_total`) against the per-pod maximum. The line names the
    containers that run together at that peak, so that their counts add up to the total it reports."""
    maximum = rules.max_per_pod
    for name in sorted({name for _, counts in holders for name in counts}):
        total, running = effective_total(holders, name)
        if total <= maximum:
            continue
        if len(running) == 1 and total > rules.container_maximum(name):
            continue  # one container over its own maximum: its own line says it
        named = ", ".join(f'"{ref.name}"={value}' for ref, value in running)
        together = "containers running together" if len(running) > 1 else "container"
        if name == rules.mapping_target:  # most likely written as nvidia.com/gpu: say what the policy made of it
            shown = f"{name} (what {NVIDIA_GPU} becomes under {rules.policy.sharing.mode})"
        else:
            shown = name
        problems.append(
            pod_violation(
                f"{shown} effective total {total} ({together}: {named}) exceeds the per-pod maximum of "
                f'{maximum} (policy "{rules.policy.name}"); request fewer or split the pod',
                f"{_brief(name)} total {_brief(str(total), 8)}: at most {_brief(str(maximum), 8)} per pod; ask for "
                "fewer or split the pod",
            )
        )


def _without_classes(holders: Holders) -> Holders:
    kept = [
        (ref, {name: value for name, value in counts.items() if not name.startswith(DEVICE_CLASS_PREFIX)})
        for ref, counts in holders
    ]
    return [(ref, counts) for ref, counts in kept if counts]


def _whole_gpus(holders: Holders, rules: _Rules, problems: Problems) -> None:
    """`nvidia.com/gpu` and the GPU DeviceClasses' resources (`deviceclass.resource.kubernetes.io/gpu.nvidia.com`)
    are the same whole GPUs asked two ways (a DeviceClass with `extendedResourceName: nvidia.com/gpu` serves
    both from DRA): their sum is held to the maxima, in a container and in the pod. Only mixes are said here:
    one name over a maximum has its own line."""
    names = rules.whole_gpus
    merged: Holders = []
    policy = rules.policy
    maximum = rules.max_whole_per_container
    for ref, counts in holders:
        asked = {name: value for name, value in counts.items() if name in names and value}
        if not asked:
            continue
        total = sum(asked.values())
        merged.append((ref, {"": total}))
        if len(asked) > 1 and total > maximum and all(value <= maximum for value in asked.values()):
            what = " and ".join(f"{name} {value}" for name, value in asked.items())
            _add(ref, problems,
                 f"{what} are {total} GPUs, more than the per-container maximum of {maximum} "
                 f'(policy "{policy.name}"): both names ask for the same GPUs; request at most {maximum} in all',
                 f"{total} GPUs across GPU resources: at most {_brief(str(maximum), 8)} per container; ask for fewer")
    total, running = effective_total(merged, "")
    if total <= rules.max_per_pod:
        return
    present = sorted({name for _, counts in holders for name in counts if name in names})
    if len(present) < 2 or any(effective_total(holders, name)[0] > rules.max_per_pod for name in present):
        return
    if len(running) == 1 and total > maximum:
        return  # one container over its own maximum: its own line says it
    named = ", ".join(f'"{ref.name}"={value}' for ref, value in running)
    together = "containers running together" if len(running) > 1 else "container"
    problems.append(
        pod_violation(
            f"GPUs asked as {' and '.join(present)} effective total {total} ({together}: {named}) exceeds the "
            f'per-pod maximum of {rules.max_per_pod} (policy "{policy.name}"): both names ask for the same GPUs; '
            "request fewer or split the pod",
            f"GPU total {_brief(str(total), 8)} across GPU resources: at most {_brief(str(rules.max_per_pod), 8)} "
            "per pod; ask for fewer",
        )
    )


__all__ = [
    "Holders",
    "Refusal",
    "container_violation",
    "effective_total",
    "format_fraction",
    "offer",
    "pod_violation",
    "validate",
]
