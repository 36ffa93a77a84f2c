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

from webhook.admission.envhints import JAX_FRACTION_VARS, PYTORCH_ALLOC_CONF, hints_for, merge_alloc_conf
from webhook.admission.patch import ObjectEditor, diff
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
WARNING_PREFIX = "gpu-admission: "
WARNING_LIMIT = 120


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


def mutate(obj: dict[str, Any], policy: Policy, spec_path: tuple[str, ...] | None = None) -> MutationResult:
    spec_path = spec_path or pod_spec_path(obj)
    if spec_path is None:
        return MutationResult(obj)
    editor = ObjectEditor(obj)
    result = MutationResult(obj)
    for ref in iter_containers(obj, spec_path):
        changed = _ContainerMutation(ref, policy, result).run()
        if changed is not None:
            editor.set(ref.path, changed)
    if result.kinds:
        _annotate(editor, policy)
        result.obj = editor.root
        result.patch = diff(obj, editor.root)
    return result


def _annotate(editor: ObjectEditor, policy: Policy) -> None:
    metadata = editor.root.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if metadata is not None and not isinstance(metadata, dict):
        return  # malformed metadata: the API server rejects the object anyway
    if annotations is not None and not isinstance(annotations, dict):
        return
    if annotations is None or annotations.get(POLICY_ANNOTATION) != policy.name:
        editor.set(("metadata", "annotations", POLICY_ANNOTATION), policy.name)


def _quantity(value: Any) -> int | Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


class _ContainerMutation:
    """The four steps for one container, on private copies of its resource maps and env list."""

    def __init__(self, ref: ContainerRef, policy: Policy, result: MutationResult) -> None:
        self.ref, self.policy, self.result = ref, policy, result
        self.requests: dict[str, Any] = {}
        self.limits: dict[str, Any] = {}
        self.env_list: list[Any] | None = None
        self.changed = False
        self.converted_fraction: Fraction | None = None

    def change(self, kind: str, text: str) -> None:
        self.changed = True
        self.result.kinds.append(kind)
        self.notice(text)

    def notice(self, text: str) -> None:
        self.result.warnings.append(warning(f"{self.ref.label}: {text}"))

    def run(self) -> dict[str, Any] | None:
        """The changed container, or None when nothing changed (or it is too malformed to touch)."""
        body = self.ref.body
        resources = body.get("resources")
        if not isinstance(resources, dict):
            return None  # no resources: no GPU; malformed: validation explains
        requests, limits = resources.get("requests"), resources.get("limits")
        if not isinstance(requests, dict | None) or not isinstance(limits, dict | None):
            return None
        requests, limits = requests or {}, limits or {}
        if not any(map(is_managed, requests)) and not any(map(is_managed, limits)):
            return None
        self.requests, self.limits = dict(requests), dict(limits)
        self.requests_into_limits()
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
        found = self._gpu_value()
        if found is None or not 0 < found[1] < 1:
            return
        q = found[1]
        target = None
        if self.policy.fractional is Fractional.SHARED:
            target = self.policy.sharing.resource_name
        elif self.policy.fractional is Fractional.MIG and self.policy.gpu.model in GPU_MODELS:
            profile = smallest_profile_for(GPU_MODELS[self.policy.gpu.model], q)
            target = mig_resource(profile.name) if profile else None
        if target is None or not self._rename(target, "1"):
            return
        if self.policy.fractional is Fractional.SHARED:
            self.converted_fraction = q
        self.change("fractional", f"{NVIDIA_GPU} {format_fraction(q)} became {target} 1")

    # 3
    def mapping(self) -> None:
        mode = self.policy.sharing.mode
        if mode.is_shared:
            target = self.policy.sharing.resource_name
        elif mode is Mode.MIG and self.policy.sharing.mig_profile:
            target = mig_resource(self.policy.sharing.mig_profile)
        else:
            return
        found = self._gpu_value()
        if found is None or found[1] < 1 or found[1].denominator != 1:
            return
        if self._rename(target, found[0]):
            self.change("mapping", f"{NVIDIA_GPU} {found[1]} became {target} {found[1]} ({mode} policy)")

    def _holds_shared_gpu(self) -> bool:
        shared_name = self.policy.sharing.resource_name if self.policy.sharing.mode.is_shared else None
        for name, value in self.limits.items():
            if is_shared(name) or name == shared_name:
                quantity = _quantity(value)
                if quantity is not None and quantity > 0:
                    return True
        return False

    # 4
    def env(self) -> None:
        if self.converted_fraction is None and not self._holds_shared_gpu():
            return
        fraction = self.policy.memory_fraction or self.converted_fraction or self.policy.shared_fraction
        env = self.ref.body.get("env")
        if fraction is None or not isinstance(env, list | None):
            return
        env = list(env or [])
        existing = {e["name"]: i for i, e in enumerate(env) if isinstance(e, dict) and isinstance(e.get("name"), str)}
        added = 0
        jax_set = [name for name in JAX_FRACTION_VARS if name in existing]
        for hint in hints_for(self.policy, fraction):
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
                    added += 1
            elif current != hint.value:
                self.notice(f"kept {hint.name} as set (policy suggests {hint.value})")
        if added:
            self.env_list = env
            self.change("env", f"set {added} memory env vars for GPU fraction {format_fraction(fraction)}")
