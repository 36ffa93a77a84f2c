"""Validation: every reason the object (as it stands after mutation) cannot be admitted, one line each.

Each line names the container, the resource, the value, the rule and what to do instead. All problems are
listed, not just the first, so a user fixes a manifest in one round.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

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
    GPU_MODELS,
    NVIDIA_GPU,
    GPUModel,
    is_managed,
    is_shared,
    mig_profile_of,
    mig_resource,
)


def offer(policy: Policy) -> str:
    """What this namespace gives instead of a fraction, as advice."""
    mode = policy.sharing.mode
    where = f'policy "{policy.name}"'
    if mode.is_shared:
        share = f"one of {policy.sharing.replicas} {mode} shares" if policy.sharing.replicas else f"a {mode} share"
        if policy.sharing.resource_name == NVIDIA_GPU:  # the device plugin keeps the name: no renaming
            return f"request {NVIDIA_GPU}: 1, which is {share} of a GPU under {where}"
        return f"request {NVIDIA_GPU}: 1, which {where} turns into {share} of a GPU ({policy.sharing.resource_name})"
    if policy.sharing.is_mig_single:
        return f"request {NVIDIA_GPU}: 1, which is one {policy.sharing.mig_profile} MIG slice under {where}"
    if mode is Mode.MIG and policy.sharing.mig_profile:
        return f"request {NVIDIA_GPU}: 1, which {where} turns into {mig_resource(policy.sharing.mig_profile)}"
    return f"request a whole number of GPUs ({where} gives whole GPUs only; ask for a namespace with sharing)"


Holders = list[tuple[ContainerRef, dict[str, "int | Fraction"]]]


@dataclass(frozen=True, slots=True)
class _Rules:
    """What a policy means for validation, worked out once per policy (this runs on every review)."""

    policy: Policy
    max_per_container: int  # shared replicas (`*.shared`): 1 under time-slicing and MPS unless set
    max_whole_per_container: int  # whole devices and MIG slices: `maxPerContainer`, else 8 in every mode
    max_per_pod: int
    exclusive: bool  # whole GPUs only: shared resources are not handed out
    mig_model: GPUModel | None  # MIG mode on a known model: only its profiles are handed out
    one_shared_replica: bool  # the maximum of 1 is the device plugin's (shared mode, no explicit maximum)
    block_visible_devices: bool
    shared_resource: str | None  # the policy's shared replica (`nvidia.com/gpu` where the plugin keeps the name)

    def is_replica(self, resource: str) -> bool:
        """A shared replica: `*.shared`, or the policy's replica that keeps another name."""
        return is_shared(resource) or resource == self.shared_resource

    def container_maximum(self, resource: str) -> int:
        """The most of `resource` one container may hold: shared replicas have a maximum of their own."""
        return self.max_per_container if self.is_replica(resource) else self.max_whole_per_container

    @staticmethod
    def of(policy: Policy) -> _Rules:
        # The memo read here, not through `derived`: a call fewer on every review once the rules are made.
        return policy.memo.get("validation-rules") or policy.derived("validation-rules", _Rules._build)

    @staticmethod
    def _build(policy: Policy) -> _Rules:
        mode = policy.sharing.mode
        explicit = policy.limits.max_per_container
        return _Rules(
            policy=policy,
            max_per_container=policy.max_per_container,
            max_whole_per_container=DEFAULT_MAX_PER_CONTAINER if explicit is None else explicit,
            max_per_pod=policy.limits.max_per_pod,
            exclusive=mode is Mode.EXCLUSIVE,
            mig_model=GPU_MODELS.get(policy.gpu.model or "") if mode is Mode.MIG else None,
            one_shared_replica=mode.is_shared
            and policy.max_per_container == 1
            and explicit is None,
            block_visible_devices=policy.block_visible_devices_override,
            shared_resource=policy.sharing.shared_resource,
        )


def validate(
    obj: dict[str, Any], policy: Policy, spec_path: tuple[str, ...] | None = None, counted: Holders | None = None
) -> list[str]:
    """Every problem, one line each. `counted`, when given, receives the containers that hold GPUs with their
    valid counts, in start order (the cluster checks read them: each count is parsed once per review)."""
    spec_path = spec_path or pod_spec_path(obj)
    if spec_path is None:
        return []
    spec = get_path(obj, spec_path)
    if not isinstance(spec, dict):
        return []
    rules = _Rules.of(policy)
    problems: list[str] = []
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
            if rules.block_visible_devices and not total:
                _visible_devices(ref, rules, problems)
    # The effective total is at most the sum of every count, so a pod under the maximum by that sum needs no
    # closer look.
    if count_sum > rules.max_per_pod:
        _pod_total(holders, rules, problems)
    if counted is not None:
        counted += holders
    return problems


def _container(ref: ContainerRef, rules: _Rules, problems: list[str]) -> dict[str, int | Fraction]:
    """Check one container's managed resources; return its GPU counts (the limits, which the pod holds)."""
    resources = ref.body.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        problems.append(f"{ref.label}: resources must be a map, not {type(resources).__name__}; fix the manifest")
        return {}
    requests, limits = resources.get("requests"), resources.get("limits")
    if not ((requests is None or isinstance(requests, dict)) and (limits is None or isinstance(limits, dict))):
        for which, value in (("requests", requests), ("limits", limits)):
            if value is not None and not isinstance(value, dict):
                problems.append(
                    f"{ref.label}: resources.{which} must be a map, not {type(value).__name__}; fix the manifest"
                )
                break
        return {}
    requests, limits = requests or {}, limits or {}
    counts: dict[str, int | Fraction] = {}
    for name, limit in limits.items():
        if is_managed(name):
            count = _resource(ref, name, requests.get(name), limit, rules, problems)
            if count is not None:
                counts[name] = count
    for name in requests:
        if name not in limits and is_managed(name):
            _resource(ref, name, requests[name], None, rules, problems)  # no limit: never a count
    return counts


def _parsed(ref: ContainerRef, name: str, which: str, raw: Any, problems: list[str]) -> Fraction | None:
    try:
        value = parse_quantity(raw)
    except QuantityError as error:
        problems.append(
            f'{ref.label}: {name} {which} {quantity_text(raw)} {error}; set a whole number of devices such as "1"'
        )
        return None
    if value < 0:
        problems.append(
            f"{ref.label}: {name} {which} {quantity_text(raw)} is negative; set a whole number of devices >= 0"
        )
        return None
    return value


def _resource(
    ref: ContainerRef, name: str, request_raw: Any, limit_raw: Any, rules: _Rules, problems: list[str]
) -> int | Fraction | None:
    """Check one managed resource of a container; return its count when it is valid."""
    if limit_raw is None:  # only before mutation (which copies requests into limits)
        if _parsed(ref, name, "request", request_raw, problems) is not None:
            problems.append(
                f"{ref.label}: {name} request {quantity_text(request_raw)} has no limit; GPUs cannot be "
                f"overcommitted: set limits.{name} to the same value"
            )
        return None
    limit = _parsed(ref, name, "limit", limit_raw, problems)
    if request_raw is None or (type(request_raw) is type(limit_raw) and request_raw == limit_raw):
        request = limit  # the same text: judged (and reported) once (`true` is not 1, though Python says so)
    else:
        request = _parsed(ref, name, "request", request_raw, problems)
    if limit is None or request is None:
        return None
    policy = rules.policy
    if request != limit:
        problems.append(
            f"{ref.label}: {name} request {quantity_text(request_raw)} differs from limit {quantity_text(limit_raw)};"
            f" GPUs cannot be overcommitted: set request and limit to the same whole number"
        )
        return None
    value = limit
    if value.denominator != 1:
        advice = offer(policy) if name == NVIDIA_GPU else "request a whole number"
        problems.append(
            f"{ref.label}: {name} {quantity_text(limit_raw)} is fractional, but GPUs are whole devices; {advice}"
        )
        return None
    if name in DEVICE_AMOUNTS:
        return None  # an amount of one GPU: whole and request = limit, but not a number of devices
    if value and (rules.exclusive or rules.mig_model):
        _served(ref, name, limit_raw, rules, problems)
    maximum = rules.container_maximum(name)
    if value > maximum:
        shown = quantity_text(limit_raw)
        if rules.one_shared_replica and rules.is_replica(name):
            problems.append(
                f"{ref.label}: {name} {shown} exceeds 1 per container under {policy.sharing.mode} "
                f'(policy "{policy.name}"): {value} shared replicas are not {value} GPUs, and the device plugin '
                f"refuses them; request 1, or use a namespace with whole GPUs"
            )
        else:
            problems.append(
                f"{ref.label}: {name} {shown} exceeds the per-container maximum of {maximum} "
                f'(policy "{policy.name}"); request at most {maximum}'
            )
    return value


def _served(ref: ContainerRef, name: str, raw: Any, rules: _Rules, problems: list[str]) -> None:
    """Resources that the namespace's sharing mode does not hand out."""
    policy, model = rules.policy, rules.mig_model
    if rules.exclusive and is_shared(name):
        problems.append(
            f'{ref.label}: {name} {quantity_text(raw)} is a shared GPU, but policy "{policy.name}" gives this '
            f"namespace whole GPUs (mode exclusive); request {NVIDIA_GPU} instead"
        )
    elif model is not None:
        profile = mig_profile_of(name)
        if profile is not None and model.profile(profile) is None:
            problems.append(
                f"{ref.label}: {name} {quantity_text(raw)} asks for MIG profile {profile}, which {model.name} "
                f'does not have (policy "{policy.name}"); use one of {", ".join(model.profile_names())}'
            )


def _visible_devices(ref: ContainerRef, rules: _Rules, problems: list[str]) -> None:
    """NVIDIA_VISIBLE_DEVICES in a container that counts no GPU (called only where the policy blocks it)."""
    if VISIBLE_DEVICES in ref.env_names():
        problems.append(
            f"{ref.label}: sets {VISIBLE_DEVICES} but requests no GPU; the NVIDIA container toolkit would expose "
            f'GPUs without allocating them (policy "{rules.policy.name}"): remove the variable or request {NVIDIA_GPU}'
        )
    elif (prefix := visible_devices_prefix(ref.body)) is not None:
        problems.append(
            f'{ref.label}: envFrom prefix "{prefix}" can set {VISIBLE_DEVICES} (from a key '
            f'"{VISIBLE_DEVICES.removeprefix(prefix)}") but requests no GPU; the NVIDIA container toolkit would '
            f'expose GPUs without allocating them (policy "{rules.policy.name}"): use another prefix or request '
            f"{NVIDIA_GPU}"
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


def _pod_total(holders: Holders, rules: _Rules, problems: list[str]) -> None:
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
        problems.append(
            f"pod: {name} effective total {total} ({together}: {named}) exceeds the per-pod maximum of "
            f'{maximum} (policy "{rules.policy.name}"); request fewer or split the pod'
        )


__all__ = ["Holders", "effective_total", "format_fraction", "offer", "validate"]
