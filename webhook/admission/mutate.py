"""Mutation: make a GPU request what the namespace's policy says it should be.

For each container and init container, in order (each change gives one warning):
 1. requests into limits: a managed resource requested without a limit gets that limit;
 2. fractional: `nvidia.com/gpu` below 1 becomes one shared replica or the smallest fitting MIG slice;
 3. mapping: `nvidia.com/gpu: N` becomes the namespace's shared resource or MIG profile;
 4. env: memory-fraction hints for containers that hold a shared GPU (envhints.py);
and the object is annotated with the policy's name when anything changed. Values that are not valid are
left alone for validation to explain. Running this on its own output changes nothing (the API server may
call the webhook again). Each container is worked on as a private copy and put back only when it changed;
`patch.diff` then turns the result into the smallest JSON Patch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.admission.envhints import JAX_FRACTION_VARS, PYTORCH_ALLOC_CONF, EnvHint, hints_for, merge_alloc_conf
from webhook.admission.patch import ObjectEditor, escape_token, pointer
from webhook.admission.podspec import ContainerRef, iter_containers, pod_spec_path
from webhook.admission.policy import Fractional, Mode, Policy
from webhook.admission.quantity import QuantityError, format_fraction, parse_quantity
from webhook.admission.resources import (
    GPU_MODELS,
    NVIDIA_GPU,
    is_managed,
    is_shared,
    mig_resource,
    smallest_profile_for,
)

POLICY_ANNOTATION = "gpu-admission.io/policy"
# The fraction that a fractional request was converted to, kept in the container so that the API server's
# second call, and the pods of a mutated template, inject the same hints.
RECORDED_FRACTION = "GPU_ADMISSION_MEMORY_FRACTION"
WARNING_PREFIX = "gpu-admission: "
WARNING_LIMIT = 120  # the API server's advice; review.limit_warnings holds every warning to it


def warning(text: str) -> str:
    """A user-facing admission warning: prefixed, and at most 120 characters (the API server's advice)."""
    line = WARNING_PREFIX + text
    return line if len(line) <= WARNING_LIMIT else line[: WARNING_LIMIT - 3] + "..."


@dataclass(slots=True)
class MutationResult:
    obj: dict[str, Any]
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # one per change: for metrics and counts


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a policy means for mutation, worked out once per policy (this runs on every review)."""

    policy: Policy
    mapping_target: str | None  # where `nvidia.com/gpu: N` goes, if anywhere
    fractional_shared: str | None  # the shared resource a fraction becomes (fractional: shared)
    fractional_model: Any  # the GPUModel whose MIG slices fractions become (fractional: mig)
    shared_resource: str | None  # the resource that counts as a shared GPU besides `*.shared`
    default_fraction: Fraction | None  # `memoryFraction`, else 1/replicas: what most containers get
    default_hints: tuple[EnvHint, ...]  # the env hints for default_fraction
    default_text: str  # default_fraction for messages

    @staticmethod
    def of(policy: Policy) -> _Plan:
        plan = policy.memo.get("mutation-plan")
        if plan is None:
            sharing = policy.sharing
            mapping_target = None
            if sharing.mode.is_shared:
                mapping_target = sharing.resource_name
            elif sharing.mode is Mode.MIG and sharing.mig_profile:
                mapping_target = mig_resource(sharing.mig_profile)
            plan = policy.memo["mutation-plan"] = _Plan(
                policy=policy,
                mapping_target=None if mapping_target == NVIDIA_GPU else mapping_target,
                fractional_shared=sharing.resource_name if policy.fractional is Fractional.SHARED else None,
                fractional_model=GPU_MODELS.get(policy.gpu.model or "")
                if policy.fractional is Fractional.MIG
                else None,
                shared_resource=sharing.resource_name if sharing.mode.is_shared else None,
                default_fraction=policy.shared_fraction,
                default_hints=hints_for(policy, policy.shared_fraction) if policy.shared_fraction else (),
                default_text=format_fraction(policy.shared_fraction) if policy.shared_fraction else "",
            )
        return plan


def mutate(obj: dict[str, Any], policy: Policy, spec_path: tuple[str, ...] | None = None) -> MutationResult:
    spec_path = spec_path or pod_spec_path(obj)
    result = MutationResult(obj)
    if spec_path is None:
        return result
    plan = _Plan.of(policy)
    editor = ObjectEditor(obj)
    spec_at = pointer(spec_path)
    for ref in iter_containers(obj, spec_path):
        container = _ContainerMutation(ref, plan, result)
        changed = container.run()
        if changed is not None:
            editor.put(ref.path, changed)
            container.patch(f"{spec_at}/{ref.section}/{ref.index}", result.patch)
    if result.kinds:
        _annotate(editor, policy, result.patch)
        result.obj = editor.root
    return result


def _annotate(editor: ObjectEditor, policy: Policy, patch: list[dict[str, Any]]) -> None:
    metadata = editor.root.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict) or not isinstance(annotations, dict | None):
        return  # malformed metadata: the API server rejects the object anyway
    if annotations is None:
        value = {POLICY_ANNOTATION: policy.name}
        patch.insert(0, {"op": "add", "path": "/metadata/annotations", "value": value})
    elif annotations.get(POLICY_ANNOTATION) != policy.name:
        op = "replace" if POLICY_ANNOTATION in annotations else "add"
        where = pointer(("metadata", "annotations", POLICY_ANNOTATION))
        patch.insert(0, {"op": op, "path": where, "value": policy.name})
    else:
        return
    editor.set(("metadata", "annotations", POLICY_ANNOTATION), policy.name)


def _recorded_fraction(entry: dict[str, Any]) -> Fraction | None:
    value = entry.get("value")
    try:
        fraction = Fraction(value) if isinstance(value, str) and len(value) <= 16 else None
    except ValueError:
        return None
    return fraction if fraction is not None and 0 < fraction <= 1 else None


def _quantity(value: Any) -> int | Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


class _ContainerMutation:
    """The four steps for one container, on private copies of its resource maps and env list."""

    def __init__(self, ref: ContainerRef, plan: _Plan, result: MutationResult) -> None:
        self.ref, self.plan, self.policy, self.result = ref, plan, plan.policy, result
        self._label: str | None = None
        self.requests: dict[str, Any] = {}
        self.limits: dict[str, Any] = {}
        self.env_list: list[Any] | None = None
        self.replaced_env: int | None = None  # the env entry whose value was merged into (PYTORCH_CUDA_ALLOC_CONF)
        self.changed = False
        self.converted_fraction: Fraction | None = None
        self.gpu: tuple[Any, int | Fraction] | None = None  # `nvidia.com/gpu` (text, value) while it is there

    def change(self, kind: str, text: str) -> None:
        self.changed = True
        self.result.kinds.append(kind)
        self.notice(text)

    def notice(self, text: str) -> None:
        if self._label is None:
            self._label = self.ref.label
        self.result.warnings.append(warning(f"{self._label}: {text}"))

    def run(self) -> dict[str, Any] | None:
        """The changed container, or None when nothing changed (or it is too malformed to touch)."""
        body = self.ref.body
        resources = body.get("resources")
        if not isinstance(resources, dict):
            return None  # no resources: no GPU; malformed: validation explains
        requests, limits = resources.get("requests"), resources.get("limits")
        if (requests is not None and type(requests) is not dict) or (limits is not None and type(limits) is not dict):
            return None
        requests, limits = requests or {}, limits or {}
        if not any(map(is_managed, requests)) and not any(map(is_managed, limits)):
            return None
        self.requests, self.limits = dict(requests), dict(limits)
        self.requests_into_limits()
        self.gpu = self._gpu_value()
        self.fractional()
        self.mapping()
        self.env()
        if not self.changed:
            return None
        new_resources = dict(resources)
        for which, value in (("requests", self.requests), ("limits", self.limits)):
            if value or resources.get(which) is not None:
                new_resources[which] = value
        new_body = dict(body, resources=new_resources)
        if self.env_list is not None:
            new_body["env"] = self.env_list
        return new_body

    def patch(self, at: str, ops: list[dict[str, Any]]) -> None:
        """The JSON Patch for this container's changes: only the paths that changed, parents first.

        Mutation touches three places only: requests, limits and env. A map or list that was absent (or null)
        is added whole; a map that exists gets per-key operations; env entries are appended, or a value replaced.
        """
        resources = self.ref.body["resources"]
        for which, new in (("requests", self.requests), ("limits", self.limits)):
            old, where = resources.get(which), f"{at}/resources/{which}"
            if old is None:
                if new:
                    ops.append({"op": "add", "path": where, "value": new})
                continue
            for key in old:
                if key not in new:
                    ops.append({"op": "remove", "path": f"{where}/{escape_token(key)}"})
                elif new[key] is not old[key]:
                    ops.append({"op": "replace", "path": f"{where}/{escape_token(key)}", "value": new[key]})
            for key, value in new.items():
                if key not in old:
                    ops.append({"op": "add", "path": f"{where}/{escape_token(key)}", "value": value})
        if self.env_list is None:
            return
        old_env = self.ref.body.get("env")
        if old_env is None:
            ops.append({"op": "add", "path": f"{at}/env", "value": self.env_list})
            return
        if self.replaced_env is not None:
            value = self.env_list[self.replaced_env]["value"]
            ops.append({"op": "replace", "path": f"{at}/env/{self.replaced_env}/value", "value": value})
        for index in range(len(old_env), len(self.env_list)):
            ops.append({"op": "add", "path": f"{at}/env/{index}", "value": self.env_list[index]})

    # 1
    def requests_into_limits(self) -> None:
        missing = [name for name in self.requests if is_managed(name) and self.limits.get(name) is None]
        for name in missing:
            self.limits[name] = self.requests[name]
        if missing:
            self.change(
                "requests-into-limits", f"set limits {', '.join(missing)} from requests (GPUs need request = limit)"
            )

    def _gpu_value(self) -> tuple[Any, int | Fraction] | None:
        """`nvidia.com/gpu` as (text, value) when request and limit agree; None otherwise."""
        limit = self.limits.get(NVIDIA_GPU)
        value = _quantity(limit) if limit is not None else None
        if value is None or (NVIDIA_GPU in self.requests and _quantity(self.requests[NVIDIA_GPU]) != value):
            return None
        return limit, value

    def _rename(self, target: str, value: Any) -> bool:
        """Move `nvidia.com/gpu` to `target`; refuse when the container already holds `target`."""
        if target == NVIDIA_GPU or target in self.requests or target in self.limits:
            return False
        for resource_map in (self.requests, self.limits):
            if NVIDIA_GPU in resource_map:
                del resource_map[NVIDIA_GPU]
                resource_map[target] = value
        return True

    # 2
    def fractional(self) -> None:
        found = self.gpu
        if found is None or not 0 < found[1] < 1:
            return
        q = found[1]
        target = self.plan.fractional_shared
        if self.plan.fractional_model is not None:
            profile = smallest_profile_for(self.plan.fractional_model, q)
            target = mig_resource(profile.name) if profile else None
        if target is None or not self._rename(target, "1"):
            return
        self.gpu = None
        if self.plan.fractional_shared:
            self.converted_fraction = q
        self.change("fractional", f"{NVIDIA_GPU} {format_fraction(q)} became {target} 1")

    # 3
    def mapping(self) -> None:
        target = self.plan.mapping_target
        if target is None:
            return
        found = self.gpu
        if found is None or found[1] < 1 or found[1].denominator != 1:
            return
        if self._rename(target, found[0]):
            mode = self.policy.sharing.mode
            self.change("mapping", f"{NVIDIA_GPU} {found[1]} became {target} {found[1]} ({mode} policy)")

    def _holds_shared_gpu(self) -> bool:
        shared_name = self.plan.shared_resource
        for name, value in self.limits.items():
            if is_shared(name) or name == shared_name:
                quantity = _quantity(value)
                if quantity is not None and quantity > 0:
                    return True
        return False

    # 4
    def env(self) -> None:
        env = self.ref.body.get("env")
        if not isinstance(env, list | None) or (self.converted_fraction is None and not self._holds_shared_gpu()):
            return
        env = list(env or [])
        existing = {e["name"]: i for i, e in enumerate(env) if isinstance(e, dict) and isinstance(e.get("name"), str)}
        added = 0
        if self.converted_fraction is not None:  # record it: a second pass cannot tell 0.5 from gpu.shared: 1
            if RECORDED_FRACTION not in existing:  # a name is never duplicated, a user's value never replaced
                env.append({"name": RECORDED_FRACTION, "value": format_fraction(self.converted_fraction)})
                added += 1
        elif RECORDED_FRACTION in existing:
            self.converted_fraction = _recorded_fraction(env[existing[RECORDED_FRACTION]])
        if self.policy.memory_fraction is None and self.converted_fraction is not None:
            fraction, hints = self.converted_fraction, hints_for(self.policy, self.converted_fraction)
            fraction_text = format_fraction(fraction)
        else:
            fraction, hints, fraction_text = self.plan.default_fraction, self.plan.default_hints, self.plan.default_text
        if fraction is None:
            return
        jax_set = [name for name in JAX_FRACTION_VARS if name in existing]
        for hint in hints:
            index = existing.get(hint.name)
            if hint.framework == "jax" and jax_set:
                if hint.name == JAX_FRACTION_VARS[0] and (index is None or env[index].get("value") != hint.value):
                    self.notice(f"kept {jax_set[0]} as set; jax hints skipped")
                continue
            if index is None:
                env.append({"name": hint.name, "value": hint.value})
                added += 1
                continue
            current = env[index].get("value")
            if hint.name == PYTORCH_ALLOC_CONF and isinstance(current, str) and "valueFrom" not in env[index]:
                merged = merge_alloc_conf(current, hint.value)
                if merged is not None:
                    env[index] = dict(env[index], value=merged)
                    self.replaced_env = index
                    added += 1
            elif current != hint.value:
                self.notice(f"kept {hint.name} as set (policy suggests {hint.value})")
        if added:
            self.env_list = env
            self.change("env", f"set {added} memory env vars for GPU fraction {fraction_text}")
