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

import enum
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from webhook.admission.base.podspec import (
    ALL_SECTIONS,
    DEVICE_LIST_MARK,
    DEVICE_PATH_MARK,
    VISIBLE_DEVICES,
    ContainerRef,
    get_path,
    host_paths,
    is_device_list_mount,
    is_gpu_device_path,
    pod_spec_path,
    visible_devices_prefix,
    volume_mounts,
)
from webhook.admission.base.quantity import (
    QuantityError,
    format_fraction,
    parse_quantity,
    quantity_shown,
    quantity_text,
    whole_to_the_api_server,
)
from webhook.admission.base.resources import (
    AMD_GPU,
    DEVICE_AMOUNTS,
    DEVICE_CLASS_PREFIX,
    GPU_MODELS,
    MEMORY_SLICE_RESOURCES,
    MIG_PREFIX,
    NVIDIA_GPU,
    NVIDIA_GPU_CLASSES,
    SHARED_SUFFIX,
    GPUModel,
    is_managed,
    is_shared,
    mig_profile_of,
    offered_profiles,
)
from webhook.admission.base.violation import APISERVER_TOO, SHORT_LIMIT, Refusal, Violation, cut
from webhook.admission.phases import engines, steering
from webhook.admission.phases.envhints import MEMORY_VARIABLES, hints_for, memory_claim, memory_value
from webhook.admission.phases.mutate import RECORDED_FRACTION, mapping_target, recorded_fraction
from webhook.admission.policy.model import Fractional, Policy
from webhook.admission.sharing import memshare
from webhook.admission.sharing.backend import ModeRules
from webhook.admission.sharing.registry import backend_of


def _violation(label: str, compact: str, line: str, short: str, kind: type[Violation] = Violation) -> Violation:
    """`label: line`, and `label: short` for warnings; with a long container name, the short form names the
    container by its place (`initContainers[1]`) so that the advice is never cut."""
    brief = f"{label}: {short}"
    if len(brief) > SHORT_LIMIT:
        brief = f"{compact}: {short}"
        if len(brief) > SHORT_LIMIT:  # a value or resource name far longer than any real one
            brief = cut(brief, SHORT_LIMIT)
    return kind(labelled(label, line), brief)


# --- Sentences that the native policies fill too -------------------------------------------------------------
# Each takes its changing parts as text: the engine passes values, the native compiler (native/) passes slots
# that it turns into CEL string concatenation, so that a denial reads the same from the webhook and from the
# API server's own policies. Change a sentence here and both follow.


def labelled(label: str, line: str) -> str:
    """A violation's line with what it is about in front: `container "app": ...`, `pod: ...`."""
    return f"{label}: {line}"


def over_container_maximum_line(what: str, maximum: int | str, policy: str) -> str:
    """`what` (a resource and its value) is more than one container may hold under the policy."""
    return f'{what} exceeds the per-container maximum of {maximum} (policy "{policy}"); request at most {maximum}'


def one_share_line(name: str, shown: str, mode: str, policy: str, many: str) -> str:
    """More than one shared replica in a container, where the maximum of 1 is the device plugin's."""
    return (
        f'{name} {shown} exceeds 1 per container under {mode} (policy "{policy}"): {many}; request 1, or use a '
        "namespace with whole GPUs"
    )


def mapped_what(n: int | str, target: str, mode: str) -> str:
    """`nvidia.com/gpu: N` as written, and what the policy makes of it."""
    return f"{NVIDIA_GPU} {n} ({target} {n} under {mode})"


def one_share_mapped_line(what: str, policy: str, many: str) -> str:
    """`nvidia.com/gpu: N` that would be N shared replicas in one container."""
    return (
        f'{what} exceeds 1 per container (policy "{policy}"): {many}; request 1, or whole GPUs in a namespace that '
        "has them"
    )


def running_entry(name: str, value: int | Fraction | str) -> str:
    """One container of those that run together at a pod's peak, with its count."""
    return f'"{name}"={value}'


def together_words(running: int) -> str:
    return "containers running together" if running > 1 else "container"


def pod_total_line(
    shown: str, total: int | Fraction | str, together: str, named: str, maximum: int, policy: str
) -> str:
    """The pod's effective total of one resource over the per-pod maximum."""
    return (
        f"{shown} effective total {total} ({together}: {named}) exceeds the per-pod maximum of {maximum} "
        f'(policy "{policy}"); request fewer or split the pod'
    )


def mapped_shown(name: str, mode: str) -> str:
    """The mapping target in a pod's line: most likely written as `nvidia.com/gpu`, so say what it became."""
    return f"{name} (what {NVIDIA_GPU} becomes under {mode})"


def _brief(text: str, limit: int = 24) -> str:
    """A value or name in a short form: cut, since it is shown whole in the long line."""
    return text if len(text) <= limit else cut(text, limit)


class _Missing(enum.Enum):
    """A value a container does not write, told apart from every value JSON may hold (null among them)."""

    REQUEST = "no request"  # the API server defaults the request to the limit


NO_REQUEST: Final = _Missing.REQUEST

Holders = list[tuple[ContainerRef, dict[str, "int | Fraction"]]]
Problems = list[Violation]


@dataclass(frozen=True, slots=True)
class Rules:
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
    trusted_schedulers: tuple[str, ...]  # their pods may take NVIDIA_VISIBLE_DEVICES from a ConfigMap key
    # The NVIDIA resources this namespace's pool hands out (`_served`): one rule per sharing mode.
    served: frozenset[str]
    any_mig_profile: bool  # MIG on an unknown model with no migProfiles: any `nvidia.com/mig-<profile>` is served
    renamed_replica: str | None  # the shared replica under its own name (`nvidia.com/gpu.shared`), if any
    gpu_memory_mib: int | None  # the policy's GPU memory, for CuPy's byte counts
    # The (name, value) of each variable the policy itself sets for one replica's share: within it by design
    own_memory_values: frozenset[tuple[str, str]]
    own_env_tail: list[dict[str, str]]  # the entries mutation appends to a container that set none of them
    # DRA: the GPU DeviceClasses' extended resources (`deviceclass.resource.kubernetes.io/<class>`), and those
    # counted with them as the same whole GPUs (`nvidia.com/gpu` where it is whole GPUs).
    class_gpus: frozenset[str]
    class_migs: frozenset[str]
    class_names: frozenset[str]  # both
    whole_gpus: frozenset[str]
    least_maximum: int  # the least of the whole-GPU, MIG and pod maxima: a GPU total within it is within each
    # under time-slicing and MPS: NVIDIA's whole-GPU DeviceClass resources, whose implicit claims carry no
    # GpuConfig (so they share nothing), and the strategy a claim's GpuConfig would have to set
    unshared_classes: frozenset[str]
    gpu_config_strategy: str | None
    mode_rules: ModeRules  # what the sharing backend says of its mode, whole
    counts_memory: bool  # mode memory: the maxima count GPUs' worth of memory, not devices
    pod_spread: bool  # ACK: a pod's memory spreads over the GPUs its label names, with rules of its own

    def is_replica(self, resource: str) -> bool:
        """A shared replica: `*.shared`, or the policy's replica that keeps another name."""
        return is_shared(resource) or resource == self.shared_resource

    def another_pools(self, resource: str) -> bool:
        """Another pool's resource: NVIDIA's or a memory-sliced backend's that this pool does not serve."""
        return resource not in self.served and (
            resource.startswith("nvidia.com/") or resource in MEMORY_SLICE_RESOURCES
        )

    def is_mig_slice(self, resource: str) -> bool:
        """A MIG slice: `nvidia.com/mig-*`, the single strategy's `nvidia.com/gpu`, a MIG DeviceClass's resource."""
        return resource.startswith(MIG_PREFIX) or resource == self.mig_single_resource or resource in self.class_migs

    def container_maximum(self, resource: str) -> int:
        """The most of `resource` one container may hold: shared replicas and MIG slices have their own."""
        if self.is_replica(resource):
            return self.max_per_container
        if self.is_mig_slice(resource):
            return self.max_mig_per_container
        return self.max_whole_per_container

    @staticmethod
    def of(policy: Policy) -> Rules:
        return policy.derived("validation-rules", Rules._build)

    @staticmethod
    def _build(policy: Policy) -> Rules:
        sharing = policy.sharing
        backend = backend_of(policy)
        mode_rules = backend.rules(policy)
        mig_model = mode_rules.mig_model
        class_gpus = frozenset(DEVICE_CLASS_PREFIX + name for name in policy.device_classes.gpu_classes)
        class_migs = frozenset(DEVICE_CLASS_PREFIX + name for name in policy.device_classes.mig_classes)
        whole = frozenset() if backend.replica_resource(sharing) == NVIDIA_GPU else frozenset({NVIDIA_GPU})
        share, shared_fraction = backend.share(policy), backend.shared_fraction(policy)
        shared_resource = backend.shared_resource(sharing)
        most_migs = backend.max_per_container(policy, "mig-slice")
        most_whole = backend.max_per_container(policy, "whole")
        return Rules(
            policy=policy,
            max_per_container=backend.max_per_container(policy, "replica"),
            max_mig_per_container=most_migs,
            max_whole_per_container=most_whole,
            max_per_pod=policy.limits.max_per_pod,
            exclusive=mode_rules.exclusive,
            mig_model=mig_model,
            offered=mode_rules.offered,
            one_shared_replica=mode_rules.one_shared_replica,
            one_mig_slice=mode_rules.one_mig_slice,
            mapping_target=mapping_target(sharing),
            share=share,
            converts_to_shared=share is not None and policy.fractional is Fractional.SHARED,
            block_visible_devices=policy.block_visible_devices_override,
            shared_resource=shared_resource,
            mig_single_resource=mode_rules.mig_single_resource,
            trusted_schedulers=policy.trusted_schedulers,
            served=backend.serves(policy, mig_model),
            any_mig_profile=mode_rules.any_mig_profile,
            renamed_replica=shared_resource if shared_resource not in (None, NVIDIA_GPU) else None,
            gpu_memory_mib=policy.gpu_memory_mib,
            own_memory_values=frozenset(
                (hint.name, hint.value)
                for fraction in {f for f in (share, shared_fraction) if f is not None}
                for hint in hints_for(policy, fraction)
            ),
            own_env_tail=[hint.entry for hint in hints_for(policy, shared_fraction)] if shared_fraction else [],
            class_gpus=class_gpus,
            class_migs=class_migs,
            class_names=class_gpus | class_migs,
            whole_gpus=class_gpus | whole,
            least_maximum=min(
                most_migs,
                most_whole,
                policy.limits.max_per_pod,
            ),
            unshared_classes=frozenset(DEVICE_CLASS_PREFIX + name for name in NVIDIA_GPU_CLASSES)
            if mode_rules.unshared_classes
            else frozenset(),
            gpu_config_strategy=backend.gpu_config_strategy(),
            counts_memory=mode_rules.counts_memory,
            mode_rules=mode_rules,
            pod_spread=mode_rules.pod_spread,
        )


def validate(
    obj: dict[str, Any], policy: Policy, spec_path: tuple[str, ...] | None = None, counted: Holders | None = None
) -> list[Violation]:
    """Every problem, one `Violation` each. `counted`, when given, receives the containers that hold GPUs with
    their valid counts, in start order (the cluster checks read them: each count is parsed once per review)."""
    return validated(obj, policy, spec_path, counted)[0]


def validated(
    obj: dict[str, Any],
    policy: Policy,
    spec_path: tuple[str, ...] | None = None,
    counted: Holders | None = None,
    spread: tuple[int, tuple[tuple[str, str], ...]] | None = None,
) -> tuple[list[Violation], int | Fraction]:
    """`validate`, and every GPU count of the pod's containers summed (what the pod's claims are counted with:
    podclaims.pod_claims), so that the checks after validation read its counts and do not add them up again.
    `spread`: the GPUs the pod's share spreads over and the problems with its label (the backend's `pod_gpus`),
    where the caller has read them (the engine, once per review); else read here."""
    spec_path = spec_path or pod_spec_path(obj)
    if spec_path is None:
        return [], 0
    spec = get_path(obj, spec_path)
    if not isinstance(spec, dict):
        return [], 0
    rules = Rules.of(policy)
    problems: Problems = []
    blocks = rules.block_visible_devices
    scheduler = spec.get("schedulerName")
    devices = _device_volumes(spec) if blocks and "volumes" in spec else {}
    holders: Holders = []  # the containers that count GPUs, in start order
    count_sum: int | Fraction = 0  # every count of every container
    memory = None  # mode memory: the pod as the backend places it
    if rules.counts_memory:
        gpus, label_lines = spread if spread is not None else backend_of(policy).pod_gpus(obj, spec_path, policy)
        memory = _MemoryPod(rules, gpus, label_lines, counted is not None)
    for section in ALL_SECTIONS:
        containers = spec.get(section)
        if not isinstance(containers, list):
            continue
        for index, body in enumerate(containers):
            if not isinstance(body, dict):
                continue
            ref = ContainerRef(section, index, body)
            counts = container_counts(ref, rules, problems) if section != "ephemeralContainers" else None
            if memory is not None and counts is not None:
                memory.container(ref, counts, problems)
            total = sum(counts.values()) if counts else 0  # counts are never negative: 0 means no GPU
            if counts:
                holders.append((ref, counts))
                count_sum += total
                if rules.converts_to_shared:
                    _within_share(ref, rules, problems)
                if rules.share is not None and "env" in body:
                    _memory_variables(ref, counts, rules, problems)
                if rules.share is not None:
                    _engine_flag(ref, counts, rules, problems)
            if blocks and ("env" in body or "envFrom" in body or "volumeMounts" in body) and not _privileged(ref):
                if "env" in body or "envFrom" in body:
                    _visible_devices(ref, rules, problems, bool(total), scheduler)
                if "volumeMounts" in body:
                    _device_mounts(ref, devices, rules, problems)
    if rules.renamed_replica is not None and holders and ("nodeSelector" in spec or "affinity" in spec):
        _pinned_to_kept_name(spec, holders, rules, problems)
    # The effective total is at most the sum of every count, so a pod under the maximum by that sum needs no
    # closer look.
    classes = any(not rules.class_names.isdisjoint(counts) for _, counts in holders)  # only GPU classes count
    if memory is not None:  # the pod's maximum counts GPUs' worth of memory: a vGPU of a tenth is not a GPU
        memory.pod(problems)
        if classes:  # the policy's own DeviceClasses' resources are DRA devices, not memory: each name's total
            class_counts = [(ref, {n: v for n, v in c.items() if n in rules.class_names}) for ref, c in holders]
            _pod_total(class_counts, rules, problems)
    elif count_sum > rules.max_per_pod:
        _pod_total(holders, rules, problems)
    if classes:
        _whole_gpus(holders, rules, problems)
    if counted is not None:  # DeviceClasses' resources included: the cluster checks read them from slices
        counted += holders
        if memory is not None:
            counted += memory.sized  # the memory backends' per-GPU amounts (memshare.node_amounts)
    return problems, count_sum


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


def container_counts(ref: ContainerRef, rules: Rules, problems: Problems) -> dict[str, int | Fraction]:
    """Check one container's managed resources; return its GPU counts (the limits, which the pod holds)."""
    resources = ref.body.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        what = type(resources).__name__
        _add(
            ref,
            problems,
            f"resources must be a map, not {what}; fix the manifest",
            f"resources must be a map, not {_brief(what, 12)}; fix the manifest",
            Refusal,
        )
        return {}
    requests, limits = resources.get("requests"), resources.get("limits")
    if not ((requests is None or isinstance(requests, dict)) and (limits is None or isinstance(limits, dict))):
        for which, value in (("requests", requests), ("limits", limits)):
            if value is not None and not isinstance(value, dict):
                what = type(value).__name__
                _add(
                    ref,
                    problems,
                    f"resources.{which} must be a map, not {what}; fix the manifest",
                    f"resources.{which} must be a map, not {_brief(what, 12)}; fix the manifest",
                    Refusal,
                )
                break
        return {}
    requests, limits = requests or {}, limits or {}
    counts: dict[str, int | Fraction] = {}
    # By name, as the API server sends the maps (sorted keys), whatever order a file or mutation left them in.
    for name in sorted(name for name in limits if is_managed(name)):
        count = _resource(ref, name, requests.get(name, NO_REQUEST), limits[name], rules, problems)
        if count is not None:
            counts[name] = count
    for name in sorted(name for name in requests if name not in limits and is_managed(name)):
        _resource(ref, name, requests[name], None, rules, problems)  # no limit: never a count
    if len(counts) > 1 and not all(counts.values()) and any(counts.values()):
        _zero_companions(ref, counts, limits, rules, problems)
    return counts


def _zero_companions(
    ref: ContainerRef, counts: dict[str, int | Fraction], limits: dict[str, Any], rules: Rules, problems: Problems
) -> None:
    """A managed resource set to 0 beside a GPU request. The scheduler and the device plugin skip it, but it
    keeps mutation from mapping the request (its target is already there): `nvidia.com/gpu: 1` with
    `nvidia.com/gpu.shared: "0"` would stay a whole GPU in a sharing namespace. A 0 alone asks for nothing and
    is left as written (charts write `nvidia.com/gpu: 0` for their CPU variant)."""
    held = next(name for name, count in counts.items() if count)
    held_shown = quantity_text(limits[held])
    for name, count in counts.items():
        if not count:
            shown = quantity_text(limits[name])
            _add(
                ref,
                problems,
                zero_companion_line(name, shown, held, held_shown, rules.policy.name),
                f"{_brief(name)} {_brief(shown, 8)} beside a GPU request; remove it",
            )


def zero_companion_line(name: str, shown: str, held: str, held_shown: str, policy: str) -> str:
    """A managed resource set to 0 beside a GPU request (`_zero_companions`; template: the native policies fill
    it too). `held`: the first resource the container does hold, `held_shown` its quantity."""
    return (
        f"{name} {shown} beside {held} {held_shown} asks for no device, and a zero keeps the webhook from making "
        f'the request what policy "{policy}" gives; remove {name}'
    )


def _parsed(ref: ContainerRef, name: str, which: str, raw: Any, problems: Problems) -> int | Fraction | None:
    try:
        value = parse_quantity(raw)
    except QuantityError as error:
        shown = quantity_text(raw)
        _add(
            ref,
            problems,
            f'{name} {which} {shown} {error} ({APISERVER_TOO}); set a whole number of devices such as "1"',
            f"{_brief(name)} {which} {_brief(shown, 12)} is not a quantity; set a whole number",
            Refusal,
        )
        return None
    if value < 0:
        shown = quantity_text(raw)
        _add(
            ref,
            problems,
            f"{name} {which} {shown} is negative ({APISERVER_TOO}); set a whole number of devices >= 0",
            f"{_brief(name)} {which} {_brief(shown, 12)} is negative; set a whole number >= 0",
            Refusal,
        )
        return None
    return value


def _resource(
    ref: ContainerRef, name: str, request_raw: Any | _Missing, limit_raw: Any, rules: Rules, problems: Problems
) -> int | Fraction | None:
    """Check one managed resource of a container; return its count when it is valid."""
    if limit_raw is None:  # only before mutation (which copies requests into limits)
        if request_raw is NO_REQUEST:
            return None  # a null limit alone: zero to the API server, and no GPU
        if _parsed(ref, name, "request", request_raw, problems) is not None:
            shown = quantity_text(request_raw)
            _add(
                ref,
                problems,
                f"{name} request {shown} has no limit; GPUs cannot be overcommitted ({APISERVER_TOO}): "
                f"set limits.{name} to the same value",
                f"{_brief(name)} request {_brief(shown, 12)} has no limit; set an equal limit",
                Refusal,
            )
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
        _add(
            ref,
            problems,
            f"{name} request {_amount(name, request_raw, request)} differs from limit "
            f"{_amount(name, limit_raw, limit)}; GPUs cannot be overcommitted "
            f"({APISERVER_TOO}): set request and limit to the same whole number",
            f"{_brief(name)} request {_brief(request_shown, 10)} != limit {_brief(limit_shown, 10)}; "
            "set both to one whole number",
            Refusal,
        )
        return None
    value = limit
    if value.denominator != 1:
        shown = quantity_text(limit_raw)
        # Within a thousandth below a whole number the API server takes it as whole: refused here alone.
        refused = not whole_to_the_api_server(value)
        if name == NVIDIA_GPU:
            line, short = fraction_advice(_amount(name, limit_raw, value), value, rules, shown, refused)
        else:
            line = fractional_line(name, _amount(name, limit_raw, value), refused, WHOLE_NUMBER)
            short = f"{_brief(name)} {_brief(shown, 12)} is fractional; request a whole number"
        _add(ref, problems, line, short, Refusal if refused else Violation)
        return None
    foreign = bool(value) and rules.another_pools(name)
    if name in DEVICE_AMOUNTS:
        if foreign:  # another pool's memory slice (memshare.py)
            _served(ref, name, limit_raw, rules, problems)
        return None  # an amount of one GPU: whole and request = limit, but not a number of devices
    if name not in rules.class_names and name.startswith(DEVICE_CLASS_PREFIX):
        return None  # a DeviceClass whose devices are no GPU here: an extended resource, not a GPU
    if value and name in rules.unshared_classes:
        _unshared_class(ref, name, limit_raw, value, rules, problems)
    if foreign:
        _served(ref, name, limit_raw, rules, problems)
    if name == NVIDIA_GPU and rules.mapping_target is not None:
        if value and not _over_mapped_maximum(ref, value, rules, problems):
            _left_unmapped(ref, limit_raw, rules, problems)
        return value
    maximum = rules.container_maximum(name)
    if value > maximum:
        shown = quantity_text(limit_raw)
        if rules.one_shared_replica and rules.is_replica(name):
            _add(
                ref,
                problems,
                one_share_line(
                    name, shown, policy.sharing.mode, policy.name, backend_of(policy).many_replicas(policy, value)
                ),
                f"{_brief(name)} {_brief(shown, 8)}: one {policy.sharing.mode} share per container; ask for 1",
            )
        elif rules.one_mig_slice and rules.is_mig_slice(name):
            _add(ref, problems, _one_slice_line(f"{name} {shown}", rules), _one_slice_short(_brief(name)))
        else:
            _over_container_maximum(
                ref, f"{name} {shown}", f"{_brief(name)} {_brief(shown, 8)}", rules, maximum, problems
            )
    return value


def _unshared_class(
    ref: ContainerRef, name: str, raw: Any, value: int | Fraction, rules: Rules, problems: Problems
) -> None:
    """NVIDIA's whole-GPU DeviceClass asked for as an extended resource under time-slicing or MPS: the claim the
    scheduler makes for it carries no GpuConfig, so the driver gives the container GPUs of its own, unshared."""
    shown, mode = quantity_text(raw), rules.policy.sharing.mode
    _add(
        ref,
        problems,
        unshared_class_line(f"{name} {shown}", str(value), rules),
        f"{_brief(name[len(DEVICE_CLASS_PREFIX) :])} {_brief(shown, 8)}: whole GPUs, unshared under {mode}; ask "
        f"for {NVIDIA_GPU}",
    )


def unshared_class_line(what: str, count: str, rules: Rules) -> str:
    """NVIDIA's whole-GPU DeviceClass resource under time-slicing or MPS (`_unshared_class`; template: the native
    policies fill it too). `what`: the resource and its quantity; `count`: its number of GPUs."""
    mode = rules.policy.sharing.mode
    return (
        f"{what} asks DRA for whole GPUs that nothing shares (the claim made for it carries no GpuConfig), "
        f'but policy "{rules.policy.name}" shares GPUs by {mode}; ask for {NVIDIA_GPU}: {count} (shared by {mode}), '
        f"or name a ResourceClaim whose GpuConfig sets sharing.strategy {rules.gpu_config_strategy}"
    )


def _over_container_maximum(
    ref: ContainerRef, what: str, brief: str, rules: Rules, maximum: int, problems: Problems
) -> None:
    """`what` (a resource and its value) is more than one container may hold under the policy."""
    _add(
        ref,
        problems,
        over_container_maximum_line(what, maximum, rules.policy.name),
        f"{brief}: at most {_brief(str(maximum), 8)} per container; ask for fewer",
    )


def _amount(name: str, raw: Any, value: int | Fraction) -> str:
    """A quantity as written and, where the text does not say it plainly, its value: `"500m" (0.5 GPU)`."""
    return quantity_shown(raw, value, amount_unit(name))


def amount_unit(name: str) -> str:
    """What a value of `name` is counted in, after its number in a message (the native policies write it too)."""
    return " GPU" if name in (NVIDIA_GPU, AMD_GPU) else ""


WHOLE_NUMBER = "request a whole number"  # the advice for a fractional resource but nvidia.com/gpu


def fractional_line(name: str, shown: str, refused: bool, advice: str) -> str:
    """A fractional quantity of `name` (`shown`: as written, and its value), with `advice`; `refused`: the API
    server refuses it too (template: the native policies fill it too, for a value it takes as whole)."""
    too = f" ({APISERVER_TOO})" if refused else ""
    return f"{name} {shown} is fractional, but GPUs are whole devices{too}; {advice}"


def fraction_advice(shown: str, value: int | Fraction, rules: Rules, written: str, refused: bool) -> tuple[str, str]:
    """The line and short form for `nvidia.com/gpu: <fraction>` that mutation could not convert: `shown` for the
    line (`"500m" (0.5 GPU)`), `written` (the text alone) for the short form; `refused`: the API server refuses
    it too (it does not within a thousandth below a whole number)."""
    policy = rules.policy
    too = f"; {APISERVER_TOO}" if refused else ""
    backend = backend_of(policy)
    own = backend.fraction_advice(shown, value, policy, written)
    if own is not None:
        return own
    model = GPU_MODELS.get(policy.gpu.model or "") if policy.fractional is Fractional.MIG else None
    if model is not None:
        single = backend.single_slice(policy)
        offered = (single,) if single else policy.sharing.mig_profiles
        profiles = offered_profiles(model, offered)
        names = ", ".join(profile.name for profile in profiles)
        if single is not None:  # the nodes offer one profile, as nvidia.com/gpu
            return (
                f"{NVIDIA_GPU} {shown} is fractional, and the one MIG slice offered here ({names}) does not hold "
                f'{format_fraction(value)} of one {model.name} (policy "{policy.name}"{too}); request '
                f"{NVIDIA_GPU}: 1 (one {names} slice), or whole GPUs in a namespace that has them",
                f"{NVIDIA_GPU} {_brief(written, 10)}: more than the one MIG slice offered; ask for {NVIDIA_GPU}: 1",
            )
        return (
            f"{NVIDIA_GPU} {shown} is fractional, and no MIG slice offered here holds {format_fraction(value)} of "
            f'one {model.name} (policy "{policy.name}" offers {names}{too}); request {NVIDIA_GPU}: 1, '
            "or a MIG profile it offers",
            f"{NVIDIA_GPU} {_brief(written, 10)}: no offered MIG slice is that big; ask for {NVIDIA_GPU}: 1",
        )
    return (
        fractional_line(NVIDIA_GPU, shown, refused, backend.offer(policy)),
        f"{NVIDIA_GPU} {_brief(written, 10)} is fractional; {backend.short_offer(policy)}",
    )


def _one_slice_line(what: str, rules: Rules) -> str:
    """Two MIG slices in one container are not a 2-GPU machine.

    NVIDIA's MIG user guide (docs.nvidia.com/datacenter/tesla/mig-user-guide, "CUDA Device Enumeration" and
    "Supported Configurations"): a CUDA process enumerates a single MIG device, however many are made visible
    to the container, and GPU-to-GPU P2P (PCIe or NVLink) is not supported between MIG devices, so NCCL has no
    fast path between slices. A second slice is memory and compute that the program cannot use.
    """
    return one_slice_line(what, rules.policy.name)


def one_slice_line(what: str, policy: str) -> str:
    """More than one MIG slice in a container, where the maximum of 1 is MIG's (`_one_slice_line`; template: the
    native policies fill it too)."""
    return (
        f'{what} is more than one MIG slice per container (policy "{policy}"): CUDA sees one MIG device '
        "per process, and slices have no NVLink or P2P between them; request one bigger profile, or whole GPUs "
        "in a namespace that has them"
    )


def _one_slice_short(what: str) -> str:
    return f"{what}: one MIG slice per container; ask for one bigger profile"


def _left_unmapped(ref: ContainerRef, raw: Any, rules: Rules, problems: Problems) -> None:
    """`nvidia.com/gpu: N` still there after mutation in a namespace that maps it: mutation leaves it only where
    the container already holds the target (`nvidia.com/gpu.shared: "0"` beside it, say), and a whole GPU would
    then be drawn from a pool this namespace is not given."""
    target = rules.mapping_target
    policy = rules.policy
    shown = quantity_text(raw)
    _add(
        ref,
        problems,
        left_unmapped_line(shown, str(target), policy.sharing.mode, policy.name),
        f"{NVIDIA_GPU} {_brief(shown, 8)} beside {_brief(str(target))}; request one of them, not both",
    )


def left_unmapped_line(shown: str, target: str, mode: str, policy: str) -> str:
    """`nvidia.com/gpu` left unmapped beside the mapping's target (`_left_unmapped`; template: the native
    policies fill it too)."""
    return (
        f'{NVIDIA_GPU} {shown} stays a whole GPU beside {target}, but under policy "{policy}" ({mode}) {NVIDIA_GPU} '
        f"becomes {target}; request {target} or {NVIDIA_GPU}, not both"
    )


def _over_mapped_maximum(ref: ContainerRef, value: int | Fraction, rules: Rules, problems: Problems) -> bool:
    """`nvidia.com/gpu: N` in a namespace that maps it (mutation leaves it as written when N is more than the
    target allows): the line names the request as written and what the policy makes of it. Whether it was."""
    target = rules.mapping_target
    assert target is not None
    maximum = rules.container_maximum(target)
    if value <= maximum:
        return False
    policy = rules.policy
    n = int(value)
    what = mapped_what(n, target, policy.sharing.mode)
    if rules.one_shared_replica and is_shared(target):
        _add(
            ref,
            problems,
            one_share_mapped_line(what, policy.name, backend_of(policy).many_replicas(policy, n)),
            f"{NVIDIA_GPU} {_brief(str(n), 8)}: one {policy.sharing.mode} share per container; ask for 1",
        )
    elif rules.one_mig_slice and target.startswith(MIG_PREFIX):
        _add(ref, problems, _one_slice_line(what, rules), _one_slice_short(f"{NVIDIA_GPU} {n}"))
    else:
        _over_container_maximum(ref, what, f"{NVIDIA_GPU} {_brief(str(n), 8)}", rules, maximum, problems)
    return True


def over_share_line(asked: str, mode: str, replicas: int | None, policy: str, limit: str) -> str:
    """A fraction converted to a shared replica that is more than one replica's share (template: the native
    policies fill it too)."""
    return (
        f"{NVIDIA_GPU} {asked} is more than one share here ({mode} gives 1/{replicas} of a GPU per replica, "
        f'policy "{policy}"); ask for {limit} or less, or for whole GPUs in a namespace that has them'
    )


def _within_share(ref: ContainerRef, rules: Rules, problems: Problems) -> None:
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
                _add(
                    ref,
                    problems,
                    over_share_line(format_fraction(asked), mode, policy.sharing.replicas, policy.name, limit),
                    f"{NVIDIA_GPU} {_brief(format_fraction(asked), 8)} exceeds one share "
                    f"(1/{policy.sharing.replicas}); ask for {_brief(limit, 8)} or less, or whole GPUs",
                )
            return


MEMORY_READS = frozenset({*MEMORY_VARIABLES, RECORDED_FRACTION})  # the env names the memory rule reads


def _memory_variables(ref: ContainerRef, counts: dict[str, int | Fraction], rules: Rules, problems: Problems) -> None:
    """A user's own memory variable (envhints.MEMORY_VARIABLES) in a container that holds a shared replica may
    not let its framework take more than the container's share of the GPU: the scheduler packs `replicas` such
    containers onto one GPU, and one that takes 0.9 of it starves or crashes the others as surely as a fraction
    over the share would. The share is the fraction the container converted (recorded by mutation), else one
    replica's. Within the share, the value is kept as written (mutation says so when it differs from its own)."""
    env = ref.body.get("env")
    if type(env) is not list or not any(map(rules.is_replica, counts)):
        return
    own, share, tail = rules.own_memory_values, rules.share, rules.own_env_tail
    assert share is not None
    judged: list[tuple[str, str]] = []  # (name, value) of the variables to judge: not from a ConfigMap or Secret
    owned: list[tuple[str, str]] = []  # those exactly as the policy sets them for one replica's share
    hints: list[dict[str, str]] = []
    if tail and env[-len(tail) :] == tail:  # the usual case: the user's entries, then the policy's own hints
        hints, env = tail, env[: -len(tail)]
    for entry in env:
        if type(entry) is not dict:
            continue
        name, value = entry.get("name"), entry.get("value")
        if type(value) is not str or type(name) is not str or name not in MEMORY_READS:
            continue
        if name == RECORDED_FRACTION:
            share = min(share, recorded_fraction(entry) or share)
        elif (name, value) in own:
            owned.append((name, value))
        else:
            judged.append((name, value))
    if share is not rules.share and share != rules.share:  # a converted fraction's smaller share: the
        # policy's own may exceed it (its MPS limits are not a framework's fraction: not judged here)
        judged += owned + [(entry["name"], entry["value"]) for entry in hints if entry["name"] in MEMORY_VARIABLES]
    policy = rules.policy
    for name, value in judged:
        claim = memory_claim(name, value, rules.gpu_memory_mib)
        if claim is None or claim <= share or not backend_of(policy).judges_variable(name):
            continue
        reader = MEMORY_VARIABLES[name]
        instead = memory_value(name, share, rules.gpu_memory_mib)
        setting = setting_words(name, reader, instead)
        portion = f"1/{policy.sharing.replicas}" if share == rules.share else format_fraction(share)
        # The value as written is not quoted (the log keeps every line): what it lets the framework take is.
        _add(
            ref,
            problems,
            memory_line(name, reader, format_fraction(claim), portion, policy.sharing.mode, policy.name, setting),
            f"{_brief(name, 30)}: {format_fraction(claim)} of the GPU is over the {portion} share; set "
            + (f"its fraction to {format_fraction(share)}" if reader == "PyTorch" else _brief(instead, 24)),
        )


def memory_line(name: str, reader: str, claim: str, portion: str, mode: str, policy: str, setting: str) -> str:
    """A memory variable that lets its framework take more than the container's share (template: the native
    policies fill it too)."""
    return (
        f"{name} lets {reader} take {claim} of the GPU's memory, but this container's share is {portion} ({mode}, "
        f'policy "{policy}"): set {setting}, or remove it and the webhook sets it'
    )


def setting_words(name: str, reader: str, instead: str) -> str:
    """How a memory line tells the value to write (template: the native policies fill it too)."""
    return f"{instead} in {name}" if reader == "PyTorch" else f"{name}={instead}"


def _engine_flag(ref: ContainerRef, counts: dict[str, int | Fraction], rules: Rules, problems: Problems) -> None:
    """An inference engine's memory flag (engines.py) in a container that holds a shared replica may not let the
    engine take more than the container's share, as a memory variable may not (`_memory_variables`); the line
    gives the exact argument to write. Within the share it stays as written."""
    engine = engines.detect(ref.body)  # first: most containers are no engine, and say so at once
    policy = rules.policy
    if engine is None or not engines.applies(engine, policy) or not any(map(rules.is_replica, counts)):
        return
    found = engines.find(ref.body, engine)
    share = rules.share
    if found is None or found.value is None or share is None:
        return  # absent (mutation adds it), or not a number (the engine refuses it)
    env = ref.body.get("env")
    if type(env) is list:
        for entry in env:
            if type(entry) is dict and entry.get("name") == RECORDED_FRACTION:
                share = min(share, recorded_fraction(entry) or share)
    if found.value <= share:
        return
    instead = engines.argument(engine, share, rules.gpu_memory_mib)
    portion = f"1/{policy.sharing.replicas}" if share == rules.share else format_fraction(share)
    claim = format_fraction(found.value)
    _add(
        ref,
        problems,
        engine_flag_line(
            found.spelling, claim, engine.title, engine.reads, portion, policy.sharing.mode, policy.name, instead
        ),
        f"{claim} of the GPU is over the {portion} share; write {instead}",
    )


def engine_flag_line(
    spelling: str, claim: str, title: str, reads: str, portion: str, mode: str, policy: str, instead: str
) -> str:
    """An engine's memory flag that lets it take more than the container's share (template: the native policies
    fill it too)."""
    return (
        f"{spelling} {claim} lets {title} take {claim} {reads}, but this container's share is "
        f'{portion} ({mode}, policy "{policy}"): write {instead} instead, or remove it and the webhook adds it'
    )


def _pinned_to_kept_name(spec: dict[str, Any], holders: Holders, rules: Rules, problems: Problems) -> None:
    """A pod pinned to GPUs shared without renaming, holding the renamed replica: it would never schedule.

    GPU feature discovery appends `-SHARED` to `nvidia.com/gpu.product` on nodes whose time-slicing or MPS
    replicas keep the name `nvidia.com/gpu` (NVIDIA/k8s-device-plugin internal/lm/resource.go,
    getProductName: shared and not renamed). Those nodes advertise no `nvidia.com/gpu.shared`, so a pod that
    holds it (what the policy maps `nvidia.com/gpu` to) and selects only such products stays Pending.
    """
    renamed = rules.renamed_replica
    if renamed is None or not any(counts.get(renamed) for _, counts in holders):
        return
    pinned = steering.kept_name_pin(spec)
    if pinned is None:
        return
    policy = rules.policy
    problems.append(
        pod_violation(
            kept_name_pin_line(pinned, policy.sharing.mode, policy.name, renamed),
            f"{_brief(pinned, 48)} selects nodes without {_brief(renamed, 24)}; remove it",
        )
    )


def kept_name_pin_line(pinned: str, mode: str, policy: str, renamed: str) -> str:
    """A pod pinned (`pinned`: steering.kept_name_pin's words) to nodes whose replicas keep the name
    `nvidia.com/gpu`, holding the renamed replica (template: the native policies fill it too)."""
    return (
        f"{pinned} pins it to nodes whose {mode} replicas keep the name {NVIDIA_GPU} (GPU feature discovery's "
        f'-SHARED suffix), but policy "{policy}" gives this namespace {renamed} (what {NVIDIA_GPU} becomes here), '
        f"which those nodes do not advertise: the pod would stay Pending; remove it, or use a namespace whose "
        f"policy keeps the name {NVIDIA_GPU}"
    )


def _served(ref: ContainerRef, name: str, raw: Any, rules: Rules, problems: Problems) -> None:
    """An NVIDIA resource that this namespace's pool does not hand out (`_served_resources`): the pod would draw
    on another team's pool (a MIG slice in a whole-GPU namespace, a shared replica in a MIG one)."""
    policy = rules.policy
    shown = quantity_text(raw)
    profile = mig_profile_of(name)
    if profile is not None and not name.endswith(SHARED_SUFFIX):
        judged = backend_of(policy).served_profile(name, shown, profile, policy, rules.mode_rules)
        if judged is True:
            return  # an unknown model's profiles: any is one
        if isinstance(judged, tuple):
            _add(ref, problems, judged[0], f"{_brief(name)}: {judged[1]}")
            return
    gives, instead, short = _pool(rules)
    _add(
        ref,
        problems,
        not_served_line(name, shown, served_what(name), policy.name, gives, instead),
        f"{_brief(name)}: not this namespace's GPUs; {short}",
    )


# What another pool's resource is, in a few words, by what `served_what` finds first (the native policies say
# the same words, tested in the same order).
SERVED_WHAT: Final = {
    "shared": "a shared GPU",
    "memory": "a memory-sliced GPU resource",
    "mig": "a MIG slice",
    "other": "an NVIDIA resource",
}


def served_what(name: str) -> str:
    """What another pool's resource is, in a few words."""
    if is_shared(name):
        return SERVED_WHAT["shared"]
    if name in MEMORY_SLICE_RESOURCES:
        return SERVED_WHAT["memory"]
    if mig_profile_of(name) is not None:
        return SERVED_WHAT["mig"]
    return SERVED_WHAT["other"]


def not_served_line(name: str, shown: str, what: str, policy: str, gives: str, instead: str) -> str:
    """A resource that this namespace's pool does not hand out (template: the native policies fill it too)."""
    return f'{name} {shown} is {what}, but policy "{policy}" gives this namespace {gives}; request {instead}'


def _pool(rules: Rules) -> tuple[str, str, str]:
    """What the namespace's pool is, what to request instead of another pool's resource, and that in short."""
    return backend_of(rules.policy).pool_words(rules.policy, rules.served)


MEMORY_WORTH = "GPU memory"  # mode memory: the pseudo-resource that `effective_total` adds up


def _memory_share(
    ref: ContainerRef,
    counts: dict[str, int | Fraction],
    rules: Rules,
    problems: Problems,
    worths: Holders,
    gpus: int,
) -> None:
    """Mode memory: the container's backend resources as GPUs' worth of memory (memshare.held), checked against
    the per-container maximum as whole GPUs are; `worths` gathers them for the pod's maximum. `gpus`: ACK, the
    GPUs the pod's memory spreads over."""
    limits = ref.resource_map("limits")
    if not limits:
        return
    got = memshare.held(limits, rules.policy, gpus)
    for line, short in got.problems:
        _add(ref, problems, line, short)
    if not got.worth:
        return
    worths.append((ref, {MEMORY_WORTH: got.worth}))
    maximum = rules.max_whole_per_container
    if got.worth > maximum and not any(count > rules.container_maximum(name) for name, count in counts.items()):
        policy = rules.policy
        worth = format_fraction(got.worth)
        _add(
            ref,
            problems,
            memory_container_line(worth, str(policy.sharing.backend), maximum, policy.name),
            f"{memshare.worth_text(got.worth)}: at most {maximum} GPUs per container; ask for less",
        )


def memory_container_line(worth: str, backend: str, maximum: int, policy: str) -> str:
    """Mode memory: a container's GPUs' worth of memory (`worth`, format_fraction's text: the native policies
    fill it) over the per-container maximum."""
    return (
        f"holds {memshare.worth_text(worth)} ({backend}), more than the per-container maximum of {maximum} GPUs "
        f'(policy "{policy}"); request less'
    )


def memory_pod_total_line(total: str, together: str, named: str, maximum: int, policy: str, backend: str) -> str:
    """Mode memory: the pod's effective GPUs' worth of memory (`total`, format_fraction's text) over the per-pod
    maximum, naming the containers that run together (`running_entry`s, joined)."""
    return (
        f"{memshare.worth_text(total)} in effect ({together}: {named}) exceeds the per-pod maximum of {maximum} GPUs "
        f'(policy "{policy}", {backend}); request less or split the pod'
    )


@dataclass(slots=True)
class _MemoryPod:
    """Mode memory: what validation gathers of a pod's containers to judge the pod as its backend places it."""

    rules: Rules
    gpus: int  # ACK: the GPUs the pod's memory spreads over (its label); 1 elsewhere
    label_lines: tuple[tuple[str, str], ...]  # the problems with that label
    sizing: bool  # the cluster checks will read `sized`
    worths: Holders = field(default_factory=list)  # each container's GPUs' worth of memory (memshare.held)
    sized: Holders = field(default_factory=list)  # the amounts of one GPU the fits check compares (ACK's GiB)
    limits_of: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # ACK: the containers' limits
    held_by: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # ACK: init containers' too

    def container(self, ref: ContainerRef, counts: dict[str, int | Fraction], problems: Problems) -> None:
        rules = self.rules
        _memory_share(ref, counts, rules, problems, self.worths, self.gpus)
        limits = ref.resource_map("limits")
        if rules.pod_spread and limits:
            self.held_by.append((ref.name, limits))
            if ref.section == "containers":
                self.limits_of.append((ref.name, limits))
        if self.sizing and (amounts := memshare.node_amounts(limits, rules.policy, self.gpus)):
            self.sized.append((ref, amounts))

    def pod(self, problems: Problems) -> None:
        rules = self.rules
        _memory_pod_total(self.worths, rules, problems)
        if rules.pod_spread:  # ACK's multi-GPU sharing (memshare.ack_pod), and its modes per container
            pod_lines = [
                *self.label_lines,
                *memshare.ack_pod(self.gpus, self.limits_of, rules.max_per_pod, rules.policy),
            ]
            pod_lines += memshare.ack_modes(self.held_by, rules.policy)
            problems += [pod_violation(line, short) for line, short in pod_lines]


def _memory_pod_total(worths: Holders, rules: Rules, problems: Problems) -> None:
    """Mode memory: the pod's effective GPUs' worth of memory (`effective_total`) against the per-pod maximum."""
    maximum = rules.max_per_pod
    total, running = effective_total(worths, MEMORY_WORTH)
    if total <= maximum or (len(running) == 1 and total > rules.max_whole_per_container):
        return  # within the maximum, or one container over its own: its line says it
    named = ", ".join(running_entry(ref.name, format_fraction(Fraction(value))) for ref, value in running)
    policy = rules.policy
    shown = format_fraction(Fraction(total))
    problems.append(
        pod_violation(
            memory_pod_total_line(
                shown, together_words(len(running)), named, maximum, policy.name, str(policy.sharing.backend)
            ),
            f"{memshare.worth_text(Fraction(total))}: at most {maximum} GPUs per pod; ask for less or split the pod",
        )
    )


def _privileged(ref: ContainerRef) -> bool:
    """A privileged container sees every device node of the host whatever it asks for: the device rules
    protect nothing there, and the GPU stack's own pods (device plugin, DCGM exporter, GPU feature discovery)
    run privileged with NVIDIA_VISIBLE_DEVICES=all and no GPU request. Pod Security admission is the fence for
    privileged containers."""
    security = ref.body.get("securityContext")
    return type(security) is dict and security.get("privileged") is True


TRUST_HINT = "policy's trustedSchedulers"
# Where the container holds a GPU (True) or not: what NVIDIA_VISIBLE_DEVICES does there, why that is wrong, and
# what to do (the variable written, a prefix of envFrom). The native policies read this table too.
VISIBLE_STATES: Final = {
    True: (
        "beside its GPU request",
        "the kubelet puts it after the device plugin's value and the NVIDIA container toolkit keeps the last, so the "
        "container would see GPUs not allocated to it",
    ),
    False: ("but requests no GPU", "the NVIDIA container toolkit would expose GPUs without allocating them"),
}
VISIBLE_FIXES: Final = {
    True: ("remove the variable (the device plugin sets it)", "use another prefix"),
    False: (f"remove the variable or request {NVIDIA_GPU}", f"use another prefix or request {NVIDIA_GPU}"),
}


def visible_devices_line(state: str, why: str, policy: str, fix: str) -> str:
    """NVIDIA_VISIBLE_DEVICES written in the container (VISIBLE_STATES, VISIBLE_FIXES)."""
    return f'sets {VISIBLE_DEVICES} {state}; {why} (policy "{policy}"): {fix}'


def trust_fix(named: str) -> str:
    """What a fix adds where the variable comes from a ConfigMap key: `named`, the pod's scheduler
    (scheduler_named)."""
    return (
        f"; if a scheduler sets it (KAI Scheduler's GPU sharing), list that scheduler in the {TRUST_HINT} "
        f"({named} is not listed)"
    )


def scheduler_named(scheduler: str | None) -> str:
    return f'spec.schedulerName "{scheduler}"' if scheduler is not None else "no spec.schedulerName"


def visible_prefix_line(prefix: str, key: str, state: str, why: str, policy: str, fix: str) -> str:
    """An envFrom prefix that makes NVIDIA_VISIBLE_DEVICES of the key `key`."""
    return (
        f'envFrom prefix "{prefix}" can set {VISIBLE_DEVICES} (from a key "{key}") {state}; {why} '
        f'(policy "{policy}"): {fix}'
    )


def device_list_line(volume: str, path: str, policy: str) -> str:
    """A mount under the container toolkit's device-list root."""
    return (
        f'mounts volume "{volume}" at {path}, the NVIDIA container toolkit\'s device list: it would give the '
        f'container the GPUs named there without allocating them (policy "{policy}"); remove the mount and request '
        f"{NVIDIA_GPU}"
    )


def device_nodes_line(host_path: str, volume: str, policy: str) -> str:
    """A hostPath of the node's GPU device nodes, mounted."""
    return (
        f'mounts hostPath {host_path} (volume "{volume}"): the node\'s GPU device nodes, outside the device '
        f'plugin\'s allocation (policy "{policy}"); remove the volume and request {NVIDIA_GPU}'
    )


def _visible_devices(ref: ContainerRef, rules: Rules, problems: Problems, holds_gpu: bool, scheduler: Any) -> None:
    """NVIDIA_VISIBLE_DEVICES in an unprivileged container (called only where the policy blocks it), whatever
    the container requests: the kubelet puts the pod's env after the device plugin's, and the container
    toolkit keeps the last value, so `nvidia.com/gpu: 1` beside `NVIDIA_VISIBLE_DEVICES=all` sees every GPU
    of the node while one is allocated. A scheduler the policy trusts (`trustedSchedulers`, matched against
    spec.schedulerName) may set it from a ConfigMap key, as KAI Scheduler's GPU sharing does (a ConfigMap it
    owns and writes when it binds the pod); a literal value is never trusted."""
    entry = None
    env = ref.body.get("env")
    if type(env) is list:
        for item in env:
            if type(item) is dict and item.get("name") == VISIBLE_DEVICES:
                entry = item
                break
    if entry is None and "envFrom" not in ref.body:
        return  # the usual case
    policy = rules.policy
    state, why = VISIBLE_STATES[holds_gpu]
    written_fix, prefix_fix = VISIBLE_FIXES[holds_gpu]
    if entry is not None:
        source = entry.get("valueFrom")
        from_config_map = type(source) is dict and type(source.get("configMapKeyRef")) is dict
        if from_config_map and type(scheduler) is str and scheduler in rules.trusted_schedulers:
            return
        fix = written_fix
        short = "remove it" if holds_gpu else f"remove it or request {NVIDIA_GPU}"
        if from_config_map:  # the shape a scheduler writes: say how to trust one
            fix += trust_fix(scheduler_named(scheduler if type(scheduler) is str else None))
            short = f"{short}, or list its scheduler in {TRUST_HINT}"
        _add(
            ref,
            problems,
            visible_devices_line(state, why, policy.name, fix),
            f"sets {VISIBLE_DEVICES} {state}; {short}",
        )
    elif "envFrom" in ref.body and (prefix := visible_devices_prefix(ref.body)) is not None:
        _add(
            ref,
            problems,
            visible_prefix_line(prefix, VISIBLE_DEVICES.removeprefix(prefix), state, why, policy.name, prefix_fix),
            f'envFrom prefix "{prefix}" can set {VISIBLE_DEVICES}; use another prefix',
        )


def _device_volumes(spec: dict[str, Any]) -> dict[str, str]:
    """The pod's hostPath volumes that hold the node's GPU device nodes: volume name -> host path."""
    return {
        name: path for name, path in host_paths(spec).items() if DEVICE_PATH_MARK in path and is_gpu_device_path(path)
    }


def _device_mounts(ref: ContainerRef, devices: dict[str, str], rules: Rules, problems: Problems) -> None:
    """Device selection past the device plugin through volumes, in an unprivileged container: a mount under the
    container toolkit's device-list root (its `volume-mounts` strategy reads the mount paths there as the
    devices to give, whatever the volume is), or a hostPath of the node's /dev or /dev/nvidia*."""
    for volume, path in volume_mounts(ref.body):
        if DEVICE_LIST_MARK in path and is_device_list_mount(path):
            _add(
                ref,
                problems,
                device_list_line(volume, path, rules.policy.name),
                f"mounts {_brief(path, 40)}, the toolkit's device list; remove it, request {NVIDIA_GPU}",
            )
        elif volume in devices:
            _add(
                ref,
                problems,
                device_nodes_line(devices[volume], volume, rules.policy.name),
                f"mounts hostPath {_brief(devices[volume], 30)}; remove it and request {NVIDIA_GPU}",
            )


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


def _pod_total(holders: Holders, rules: Rules, problems: Problems) -> None:
    """The pod's effective request (`effective_total`) against the per-pod maximum. The line names the
    containers that run together at that peak, so that their counts add up to the total it reports."""
    maximum = rules.max_per_pod
    for name in sorted({name for _, counts in holders for name in counts}):
        total, running = effective_total(holders, name)
        if total <= maximum:
            continue
        if len(running) == 1 and total > rules.container_maximum(name):
            continue  # one container over its own maximum: its own line says it
        named = ", ".join(running_entry(ref.name, value) for ref, value in running)
        together = together_words(len(running))
        # Most likely written as nvidia.com/gpu: say what the policy made of it.
        shown = mapped_shown(name, rules.policy.sharing.mode) if name == rules.mapping_target else name
        problems.append(
            pod_violation(
                pod_total_line(shown, total, together, named, maximum, rules.policy.name),
                f"{_brief(name)} total {_brief(str(total), 8)}: at most {_brief(str(maximum), 8)} per pod; ask for "
                "fewer or split the pod",
            )
        )


def same_gpus_line(what: str, total: int | Fraction | str, maximum: int, policy: str) -> str:
    """One container's GPUs asked by two names over the per-container maximum (`_whole_gpus`; template: the
    native policies fill it too). `what`: each name and its count, joined with " and "."""
    return (
        f"{what} are {total} GPUs, more than the per-container maximum of {maximum} "
        f'(policy "{policy}"): both names ask for the same GPUs; request at most {maximum} in all'
    )


def same_gpus_pod_line(
    names: str, total: int | Fraction | str, together: str, named: str, maximum: int, policy: str
) -> str:
    """The pod's GPUs asked by two names over the per-pod maximum (`_whole_gpus`; template: the native policies
    fill it too). `names`: the names joined with " and "; `together`, `named` as in pod_total_line."""
    return (
        f"GPUs asked as {names} effective total {total} ({together}: {named}) exceeds the "
        f'per-pod maximum of {maximum} (policy "{policy}"): both names ask for the same GPUs; '
        "request fewer or split the pod"
    )


def _whole_gpus(holders: Holders, rules: Rules, problems: Problems) -> None:
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
            _add(
                ref,
                problems,
                same_gpus_line(what, total, maximum, policy.name),
                f"{total} GPUs across GPU resources: at most {_brief(str(maximum), 8)} per container; ask for fewer",
            )
    total, running = effective_total(merged, "")
    if total <= rules.max_per_pod:
        return
    present = sorted({name for _, counts in holders for name in counts if name in names})
    if len(present) < 2 or any(effective_total(holders, name)[0] > rules.max_per_pod for name in present):
        return
    if len(running) == 1 and total > maximum:
        return  # one container over its own maximum: its own line says it
    named = ", ".join(running_entry(ref.name, value) for ref, value in running)
    together = together_words(len(running))
    problems.append(
        pod_violation(
            same_gpus_pod_line(" and ".join(present), total, together, named, rules.max_per_pod, policy.name),
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
    "pod_violation",
    "validate",
    "validated",
]
