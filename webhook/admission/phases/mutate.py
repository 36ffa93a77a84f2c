"""Mutation: make a GPU request what the namespace's policy says it should be.

For each container and init container, in order (each change gives one warning):
 1. requests into limits: a managed resource requested without a limit gets that limit;
 2. fractional: `nvidia.com/gpu` below 1 becomes one shared replica or the smallest fitting MIG slice;
 3. mapping: `nvidia.com/gpu: N` becomes the namespace's shared resource or MIG profile;
 4. env: memory-fraction hints for containers that hold a shared GPU (envhints.py);
and the object is annotated with the policy's name when anything changed. Values that are not valid are
left alone for validation to explain. Running this on its own output changes nothing (the API server may
call the webhook again). Each container is worked on as private copies of its resource maps and env list,
put back only when it changed.

Workloads are re-applied (`kubectl apply` in a loop, GitOps syncs), which sends the user's values back into
the webhook's output: a workload's object also carries a record of what the user wrote and what mutation
made of it, from which the user's input is worked out again before mutating (reapply.py). A re-apply of the
same file then gives the same object.

The JSON Patch is against the object as it came. It sets a changed container's `resources` whole (quantities
only), and changes its `env` entry by entry: mutation appends its entries (`add` at `env/-`) and replaces the
one it merges into, so that the user's own entries (literal values, secrets among them), which the API server
may keep in audit logs, are never copied into it; an `env` that is absent is added whole (it holds the
webhook's entries alone). The policy annotation and the record are added by key: `annotations` may be large
(kubectl's last-applied-configuration), and the user's annotations are not the webhook's to send.

Each step is a function of those copies that adds its change's kind to one list and its text to another
(a notice, a user's value kept, has a text alone); the container's label is put in front of the texts once,
at the end. This runs on every admission review, so the steps do only what their rule needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.admission.base.envnames import (
    ENV_HINT_NAMES,
    JAX_FRACTION_VARS,
    PYTORCH_ALLOC_CONF,
    PYTORCH_CUDA_ALLOC_CONF,
)
from webhook.admission.base.patch import index_token, pointer
from webhook.admission.base.podspec import MUTATED_SECTIONS, POD_SPEC_PATHS, container_label, get_path, pod_spec_path
from webhook.admission.base.quantity import format_fraction, quantity_or_none, quantity_shown, written_plainly
from webhook.admission.base.resources import (
    GPU_MODELS,
    NVIDIA_GPU,
    is_managed,
    is_shared,
    mig_resource,
    smallest_profile_for,
)
from webhook.admission.base.violation import WARNING_LIMIT, WARNING_PREFIX, Violation, cut
from webhook.admission.phases import engines, reapply
from webhook.admission.phases.envhints import (
    EnvHint,
    hints_for,
    merge_alloc_conf,
)
from webhook.admission.phases.steering import steer
from webhook.admission.policy.model import Fractional, Policy, Sharing
from webhook.admission.sharing import memshare
from webhook.admission.sharing.backend import SharingBackend
from webhook.admission.sharing.registry import backend_for, backend_of

POLICY_ANNOTATION = "gpu-admission.io/policy"
ANNOTATION_POINTER = pointer(("metadata", "annotations", POLICY_ANNOTATION))
RECORD_POINTER = pointer(("metadata", "annotations", reapply.RECORD))
SPEC_POINTERS = {path: pointer(path) for path in POD_SPEC_PATHS.values()}
POD_SPEC = POD_SPEC_PATHS["Pod"]
# The fraction that a fractional request was converted to, kept in the container so that the API server's
# second call, and the pods of a mutated template, inject the same hints.
RECORDED_FRACTION = "GPU_ADMISSION_MEMORY_FRACTION"
WATCHED_ENV = ENV_HINT_NAMES | {RECORDED_FRACTION, PYTORCH_ALLOC_CONF}  # the env names that the env step reads


class MutationResult:
    """What mutation gives the engine: the object, the patch against the original, warnings, change kinds."""

    __slots__ = ("conflicts", "edits", "kinds", "obj", "patch", "warnings")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj  # the mutated object: the original itself when nothing changed
        self.patch: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.kinds: list[str] = []  # one per change: for metrics and counts
        self.conflicts: list[Violation] = []  # user constraints that contradict the policy's node pool (steering)
        self.edits: list[Violation] = []  # the webhook's earlier output edited by hand (reapply.py)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a policy means for mutation, worked out once per policy (this runs on every review)."""

    policy: Policy
    backend: SharingBackend  # the policy's sharing mode
    mapping_target: str | None  # where `nvidia.com/gpu: N` goes, if anywhere
    mapping_maximum: int  # the most of mapping_target one container may hold: a larger N is left as written
    mode_text: str  # the sharing mode, for messages
    fractional_shared: str | None  # the shared resource a fraction becomes (fractional: shared)
    fractional_model: Any  # the GPUModel whose MIG slices fractions become (fractional: mig)
    offered_profiles: tuple[str, ...] | None  # the MIG profiles the nodes offer (None: every one of the model)
    share: Fraction | None  # one replica's share of a GPU: no memory variable may say more
    shared_resource: str | None  # the resource that counts as a shared GPU besides `*.shared`
    maps_to_shared: bool  # mapping gives a shared GPU: the env step need not look for one
    default_fraction: Fraction | None  # `memoryFraction`, else 1/replicas: what most containers get
    default_hints: tuple[EnvHint, ...]  # the env hints for default_fraction
    default_entries: tuple[dict[str, str], ...]  # their env entries, for a container that has none of them
    default_note: str  # the warning's text when a container gets default_entries ("" when there are none)
    # The same for a container that runs an inference engine (engines.py): the MPS limits alone, since the
    # engine reads none of the frameworks' variables.
    engine_hints: tuple[EnvHint, ...]
    engine_entries: tuple[dict[str, str], ...]
    engine_note: str

    @staticmethod
    def of(policy: Policy) -> _Plan:
        return policy.derived("mutation-plan", _Plan._build)

    @staticmethod
    def _build(policy: Policy) -> _Plan:
        sharing = policy.sharing
        backend = backend_of(policy)
        default_fraction = backend.shared_fraction(policy)
        default_hints = hints_for(policy, default_fraction) if default_fraction else ()
        engine_hints = mps_only(default_hints)
        return _Plan(
            policy=policy,
            backend=backend,
            mapping_target=mapping_target(sharing),
            mapping_maximum=backend.max_per_container(policy),
            mode_text=str(sharing.mode),
            fractional_shared=sharing.resource_name if policy.fractional is Fractional.SHARED else None,
            fractional_model=GPU_MODELS.get(policy.gpu.model or "") if policy.fractional is Fractional.MIG else None,
            offered_profiles=sharing.mig_profiles,
            share=backend.share(policy),
            shared_resource=backend.shared_resource(sharing),
            maps_to_shared=backend.maps_to_shared(policy),  # mapped under time-slicing or MPS: to the shared replica
            default_fraction=default_fraction,
            default_hints=default_hints,
            default_entries=tuple(hint.entry for hint in default_hints),
            default_note=_env_note(len(default_hints), default_fraction) if default_fraction and default_hints else "",
            engine_hints=engine_hints,
            engine_entries=tuple(hint.entry for hint in engine_hints),
            engine_note=_mps_note(len(engine_hints), default_fraction) if default_fraction and engine_hints else "",
        )


def mapping_target(sharing: Sharing) -> str | None:
    """What mutation renames `nvidia.com/gpu: N` to: the shared resource, or the MIG profile's resource; None
    where nothing is renamed (whole GPUs, or the device plugin keeps the name for a replica or slice)."""
    backend = backend_for(sharing)
    if backend.replica_resource(sharing) is not None:
        return None  # `nvidia.com/gpu: 1` is itself a replica or slice
    return backend.mapping_target(sharing)


def mutate(
    obj: dict[str, Any], policy: Policy, spec_path: tuple[str, ...] | None = None, gpus: int | None = None
) -> MutationResult:
    """`obj` as the policy makes it. `gpus`: the GPUs the pod's share spreads over (the backend's `pod_gpus`),
    where the caller has read them already (the engine reads them once per review); else read here."""
    spec_path = spec_path or pod_spec_path(obj)
    result = MutationResult(obj)
    if spec_path is None:
        return result
    plan = _Plan.of(policy)
    original = get_path(obj, spec_path)
    # Workloads only: a Pod's spec cannot change once created (the webhooks see Pod CREATEs alone), so a Pod is
    # never re-applied through the webhook.
    recorded = spec_path != POD_SPEC
    spec, keep_record = _input(obj, original, result) if recorded else (original, False)
    spec_at = SPEC_POINTERS.get(spec_path) or pointer(spec_path)
    rebuilt_input = spec is not original
    new_sections = _containers(spec, None if rebuilt_input else spec_at, plan, result)
    steering_ops = _steer(spec, spec_at, spec_path, new_sections, policy, result, gpus) if policy.steering else []
    if not rebuilt_input and not new_sections:
        if policy.sharing.placement is not None:  # a pod written in HAMi's own resources still gets its placement
            _place(result, spec_path, policy, annotated=False)
        return result  # the usual case for an object the webhook leaves alone
    # The patch for a rebuilt input, against the object as it came (the containers' copies compared by value).
    sections: dict[str, Any] = {}
    entries: dict[str, Any] = {}
    keys = reapply.container_keys(spec) if recorded and not keep_record else {}
    for section in MUTATED_SECTIONS:
        before, given = original.get(section), spec.get(section)
        after = new_sections.get(section, given)
        if type(after) is not list or type(before) is not list:
            continue
        if after is not before:
            sections[section] = after
            if rebuilt_input:
                _container_ops(f"{spec_at}/{section}/", before, after, result.patch)
        if keys and after is not given:
            for index, body in enumerate(after):
                key = keys.get((section, index))
                if key is not None and (entry := reapply.entry_for(given[index], body)) is not None:
                    entries[key] = entry
    if steering_ops:
        result.patch += steering_ops
        sections["affinity"] = new_sections["affinity"]
    record_text: str | None = None
    if recorded:
        existing = _annotation(obj, reapply.RECORD)
        record_text = existing if keep_record else reapply.dump(entries)
        if not result.patch and record_text == existing:
            # The object already holds what its input as written becomes (a re-apply, the API server's second
            # call): nothing changed, nothing to say.
            result.warnings.clear()
            result.kinds.clear()
            return result
    root = _with_sections(obj, spec_path, sections) if sections else dict(obj)
    result.obj = _annotate(root, policy.name if sections else None, recorded, record_text, result.patch)
    if policy.sharing.placement is not None:
        _place(result, spec_path, policy, annotated=True)
    return result


def _input(obj: dict[str, Any], original: Any, result: MutationResult) -> tuple[Any, bool]:
    """What is mutated: the pod spec as written, or the user's input worked out from the re-apply record; and
    whether the record stays as it is (the webhook's output edited by hand: judged as it stands)."""
    record = reapply.read(obj)
    if record is None:
        return original, False
    rebuilt, edits = reapply.rebuild(original, record)
    if edits:
        result.edits = edits
        return original, True
    return ({**original, **rebuilt} if rebuilt else original), False


def _containers(spec: Any, spec_at: str | None, plan: _Plan, result: MutationResult) -> dict[str, Any]:
    """Each container's step (`_container`): the sections it changed, as new lists. `spec_at`: where the spec
    is in the object, for the patch; None for a rebuilt input, patched by comparison afterwards."""
    new_sections: dict[str, Any] = {}
    for section in MUTATED_SECTIONS:
        containers = spec.get(section)
        if type(containers) is not list:
            continue
        section_at = None if spec_at is None else f"{spec_at}/{section}/"
        for index, body in enumerate(containers):
            if type(body) is not dict or "resources" not in body:
                continue  # no resources: no GPU
            at = None if section_at is None else section_at + index_token(index)
            changed = _container(body, section, index, plan, result, at)
            if changed is not None:
                new_list = new_sections.get(section)
                if new_list is None:
                    new_list = new_sections[section] = list(containers)
                new_list[index] = changed
    return new_sections


def _place(result: MutationResult, spec_path: tuple[str, ...], policy: Policy, annotated: bool) -> None:
    """Placement that a backend reads from the pod's annotations (memshare.place: HAMi's binpack or spread)."""
    placed, patch = memshare.place(result.obj, spec_path, policy)
    if not patch:
        return
    if not annotated:  # the policy annotation first: its patch operation may create the annotations map
        result.obj = _annotate(dict(result.obj), policy.name, False, None, result.patch)  # a copy: it sets metadata
        placed, patch = memshare.place(result.obj, spec_path, policy)
    result.obj = placed
    result.patch += patch
    result.kinds.append("placement")
    assert policy.sharing.placement is not None
    result.warnings.append(f"{WARNING_PREFIX}pod: set {memshare.placement_text(policy.sharing.placement)}")


def _container_ops(section_at: str, before: list[Any], after: list[Any], ops: list[dict[str, Any]]) -> None:
    """The operations for the containers of one section that differ by value (a rebuilt input's)."""
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        if new is not old and new != old:
            _body_ops(section_at + index_token(index), old, new, True, ops)


def _body_ops(at: str, old: dict[str, Any], new: dict[str, Any], compare: bool, ops: list[dict[str, Any]]) -> None:
    """One container's operations: `resources` set whole (quantities only), `env` changed entry by entry
    (reapply.env_ops), so that the user's env values are not copied into the patch. With `compare`, parts are
    compared by value; else a part that changed is a new object, and one that did not the same object."""
    new_resources, old_resources = new.get("resources"), old.get("resources")
    if new_resources is not old_resources and (not compare or new_resources != old_resources):
        # `add` sets a member that is absent; `replace` needs one that is there.
        ops.append(
            {"op": "replace" if "resources" in old else "add", "path": at + "/resources", "value": new_resources}
        )
    new_env, old_env = new.get("env"), old.get("env")
    if new_env is not old_env and (not compare or new_env != old_env):
        if type(new_env) is list:
            ops += reapply.env_ops(at, old_env, new_env)
        else:  # only a rebuilt input that the policy no longer adds to: the webhook's entries go
            ops.append({"op": "remove", "path": at + "/env"})
    new_args, old_args = new.get("args"), old.get("args")
    if new_args is not old_args and (not compare or new_args != old_args):
        ops += _args_ops(at, old, old_args, new_args)


def _args_ops(at: str, old: dict[str, Any], old_args: Any, new_args: Any) -> list[dict[str, Any]]:
    """The operations on a container's `args`: the arguments mutation appends (`add` at `args/-`), else the list
    set whole (a rebuilt input's), or removed where it held the webhook's arguments alone."""
    if type(new_args) is not list:
        return [{"op": "remove", "path": at + "/args"}]
    if type(old_args) is list and new_args[: len(old_args)] == old_args:
        return [{"op": "add", "path": at + "/args/-", "value": token} for token in new_args[len(old_args) :]]
    return [{"op": "replace" if "args" in old else "add", "path": at + "/args", "value": new_args}]


def _annotation(obj: dict[str, Any], name: str) -> Any:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if type(metadata) is dict else None
    return annotations.get(name) if type(annotations) is dict else None


def _steer(
    spec: dict[str, Any],
    spec_at: str,
    spec_path: tuple[str, ...],
    new_sections: dict[str, Any],
    policy: Policy,
    result: MutationResult,
    gpus: int | None,
) -> list[dict[str, Any]]:
    """Node-pool steering (steering.py), on the pod spec as the container steps left it: its patch operations."""
    if gpus is None:  # mutation leaves the pod's labels as they are: the original's say it
        gpus = backend_of(policy).pod_gpus(result.obj, spec_path, policy)[0]
    steered = steer({**spec, **new_sections} if new_sections else spec, spec_at, policy, gpus)
    if steered is None:
        return []
    if steered.conflicts:
        result.conflicts += steered.conflicts
        return []
    new_sections["affinity"] = steered.affinity
    result.kinds.append("steering")
    if steered.added:
        line = f"{WARNING_PREFIX}pod: node affinity added on " + ", ".join(r.key for r in steered.added)
        result.warnings.append(cut(line))
    for requirement in steered.removed:
        line = f"{WARNING_PREFIX}pod: node affinity {requirement} removed (0.1.0's; it excludes whole GPUs)"
        result.warnings.append(cut(line))
    return steered.patch or []


def _with_sections(obj: dict[str, Any], spec_path: tuple[str, ...], sections: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` with the pod spec's container lists (and affinity) replaced; only the maps on the way are
    copied."""
    root = node = dict(obj)
    for key in spec_path:
        child = dict(node[key])
        node[key] = child
        node = child
    node.update(sections)
    return root


def _annotate(
    root: dict[str, Any], policy_name: str | None, recorded: bool, record: str | None, patch: list[dict[str, Any]]
) -> dict[str, Any]:
    """Record the policy's name (when the pod spec changed) and, on a workload (`recorded`), the re-apply record
    (reapply.py; None: none) on the object.

    The operations go first: one may create the annotations map. The user's annotations are never sent.
    """
    metadata = root.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict) or not (annotations is None or isinstance(annotations, dict)):
        return root  # malformed metadata: the API server rejects the object anyway
    changes: list[tuple[str, str, str | None]] = []  # (name, pointer, value; None: removed)
    if policy_name is not None and (annotations is None or annotations.get(POLICY_ANNOTATION) != policy_name):
        changes.append((POLICY_ANNOTATION, ANNOTATION_POINTER, policy_name))
    if recorded and (annotations.get(reapply.RECORD) if annotations else None) != record:
        changes.append((reapply.RECORD, RECORD_POINTER, record))
    if not changes:
        return root
    if annotations is None:
        wanted = {name: value for name, _, value in changes if value is not None}
        patch.insert(0, {"op": "add", "path": "/metadata/annotations", "value": wanted})
    else:
        wanted = dict(annotations)
        ops = []
        for name, at, value in changes:
            if value is None:
                ops.append({"op": "remove", "path": at})
                del wanted[name]
            else:
                ops.append({"op": "replace" if name in annotations else "add", "path": at, "value": value})
                wanted[name] = value
        patch[:0] = ops
    root["metadata"] = dict(metadata, annotations=wanted)
    return root


def recorded_fraction(entry: dict[str, Any]) -> Fraction | None:
    """The fraction in a RECORDED_FRACTION entry, when it is one in (0, 1]."""
    value = entry.get("value")
    try:
        fraction = Fraction(value) if isinstance(value, str) and len(value) <= 16 else None
    except ValueError:
        return None
    return fraction if fraction is not None and 0 < fraction <= 1 else None


GPUValue = tuple[Any, int | Fraction] | None  # `nvidia.com/gpu` as (text, value), while it is there


def _container(
    body: dict[str, Any], section: str, index: int, plan: _Plan, result: MutationResult, at: str | None
) -> dict[str, Any] | None:
    """The four steps for one container: its changed copy (its warnings and kinds added to `result`), or None
    when nothing changed or it is too malformed to touch (validation explains).

    `at` is the container's JSON Pointer where `body` is the object's own container: its patch operations are
    added to `result` here (None for a rebuilt input, whose patch mutate works out against the object)."""
    resources = body["resources"]
    if type(resources) is not dict:
        return None
    old_requests, old_limits = resources.get("requests"), resources.get("limits")
    if (old_requests is not None and type(old_requests) is not dict) or (
        old_limits is not None and type(old_limits) is not dict
    ):
        return None
    if not (old_requests and any(map(is_managed, old_requests))) and not (
        old_limits and any(map(is_managed, old_limits))
    ):
        return None
    requests = dict(old_requests) if old_requests else {}
    limits = dict(old_limits) if old_limits else {}
    kinds: list[str] = []  # one per change
    texts: list[str] = []  # one per change, and one per notice, in order
    _requests_into_limits(requests, limits, kinds, texts)
    gpu = _gpu_value(requests, limits)
    share: Fraction | None = None  # the memory share of a fraction converted to a shared replica
    mapped_to_shared = False
    if gpu is not None and plan.backend.converts_itself(plan.policy):  # the memory backends' share
        plan.backend.convert(requests, limits, gpu, plan.policy, plan.mapping_maximum, kinds, texts)
    elif gpu is not None:
        if type(amount := gpu[1]) is Fraction and 0 < amount < 1:  # whole amounts are ints
            share = _fractional(requests, limits, amount, plan, kinds, texts)
        elif gpu[1] >= 1:
            mapped_to_shared = _mapping(requests, limits, gpu, plan, kinds, texts) and plan.maps_to_shared
    env_change = args_change = None
    if share is not None or mapped_to_shared or _holds_shared_gpu(limits, plan):
        engine = engines.detect(body)
        env_change, fraction = _env(body.get("env"), share, plan, engine is not None, kinds, texts)
        if engine is not None and fraction is not None:
            args_change = _engine_args(body, engine, fraction, plan, kinds, texts)
    if not texts:
        return None
    # Each text is a user-facing admission warning: prefixed, and at most 120 characters (the API server's advice),
    # whole: a container whose long name would not leave room is named by its place instead (`containers[0]`).
    about = f"{WARNING_PREFIX}{container_label(section, index, body)}: "
    warnings = result.warnings
    for text in texts:
        line = about + text
        if len(line) > WARNING_LIMIT:
            line = f"{WARNING_PREFIX}{section}[{index}]: {text}"
        warnings.append(line if len(line) <= WARNING_LIMIT else cut(line))
    if not kinds:  # notices only (a user's value kept)
        return None
    result.kinds += kinds
    new_body = dict(body)
    if requests != (old_requests or {}) or limits != (old_limits or {}):
        new_resources = dict(resources)
        if requests or old_requests is not None:  # a null map stays null when nothing is in it
            new_resources["requests"] = requests
        if limits or old_limits is not None:
            new_resources["limits"] = limits
        new_body["resources"] = new_resources
    if env_change is not None:
        new_body["env"] = env_change
    if args_change is not None:
        new_body["args"] = args_change
    if at is not None:
        _body_ops(at, body, new_body, False, result.patch)
    return new_body


# 1
def _requests_into_limits(requests: dict[str, Any], limits: dict[str, Any], kinds: list[str], texts: list[str]) -> None:
    missing = []
    for name, value in requests.items():
        if is_managed(name) and limits.get(name) is None:
            limits[name] = value
            missing.append(name)
    if missing:
        kinds.append("requests-into-limits")
        texts.append(f"set limits {', '.join(missing)} from requests (GPUs need request = limit)")


def _gpu_value(requests: dict[str, Any], limits: dict[str, Any]) -> GPUValue:
    """`nvidia.com/gpu` as (text, value) when request and limit agree; None otherwise."""
    limit = limits.get(NVIDIA_GPU)
    value = quantity_or_none(limit) if limit is not None else None
    if value is None:
        return None
    request = requests.get(NVIDIA_GPU)
    if request is not None and request is not limit and quantity_or_none(request) != value:
        return None  # (a different text with the same value agrees; `true` is no quantity, though `true == 1`)
    return limit, value


def _rename(requests: dict[str, Any], limits: dict[str, Any], target: str, value: Any) -> bool:
    """Move `nvidia.com/gpu` to `target`; refuse when the container already holds `target`."""
    if target == NVIDIA_GPU or target in requests or target in limits:
        return False
    for resource_map in (requests, limits):
        if NVIDIA_GPU in resource_map:
            del resource_map[NVIDIA_GPU]
            resource_map[target] = value
    return True


# 2
def _fractional(
    requests: dict[str, Any], limits: dict[str, Any], q: Fraction, plan: _Plan, kinds: list[str], texts: list[str]
) -> Fraction | None:
    """Convert `nvidia.com/gpu: q`, 0 < q < 1: returns the memory share the container got (a shared replica's
    fraction; None for a MIG slice or no conversion)."""
    target = plan.fractional_shared
    single = plan.backend.single_slice(plan.policy)
    if plan.fractional_model is not None and single is not None:  # the nodes offer one profile, as nvidia.com/gpu
        profile = plan.fractional_model.profile(single)
        target = NVIDIA_GPU if profile is not None and q <= profile.memory_share else None
    elif plan.fractional_model is not None:
        profile = smallest_profile_for(plan.fractional_model, q, plan.offered_profiles)
        target = mig_resource(profile.name) if profile else None
    if target is None:
        return None
    raw = limits.get(NVIDIA_GPU)  # `"500m" (0.5 GPU)` where the API server sent 0.5 as 500m
    shown = format_fraction(q) if written_plainly(raw) else quantity_shown(raw, q, " GPU")
    if target == NVIDIA_GPU:  # a replica or slice that keeps the name: converted in place
        for resource_map in (requests, limits):
            if NVIDIA_GPU in resource_map:
                resource_map[NVIDIA_GPU] = "1"
        what = plan.backend.kept_name_words(plan.policy)
        kinds.append("fractional")
        texts.append(f"{NVIDIA_GPU} {shown} became {NVIDIA_GPU} 1 (one {what})")
    elif _rename(requests, limits, target, "1"):
        kinds.append("fractional")
        texts.append(f"{NVIDIA_GPU} {shown} became {target} 1")
    else:
        return None
    return q if plan.fractional_shared else None


# 3
def _mapping(
    requests: dict[str, Any],
    limits: dict[str, Any],
    gpu: tuple[Any, int | Fraction],
    plan: _Plan,
    kinds: list[str],
    texts: list[str],
) -> bool:
    """Map `nvidia.com/gpu: N`, N >= 1; returns whether it became the policy's target."""
    target = plan.mapping_target
    text, value = gpu
    if (
        target is None
        or value.denominator != 1
        or value > plan.mapping_maximum  # left as written, so that validation's line names what the user wrote
        or not _rename(requests, limits, target, text)
    ):
        return False
    kinds.append("mapping")
    texts.append(f"{NVIDIA_GPU} {value} became {target} {value} ({plan.mode_text} policy)")
    return True


def _holds_shared_gpu(limits: dict[str, Any], plan: _Plan) -> bool:
    shared_name = plan.shared_resource
    for name, value in limits.items():
        if name == shared_name or is_shared(name):
            quantity = quantity_or_none(value)
            if quantity is not None and quantity > 0:
                return True
    return False


# 4
def _env(
    old_env: Any,
    share: Fraction | None,
    plan: _Plan,
    engine: bool,
    kinds: list[str],
    texts: list[str],
) -> tuple[list[Any] | None, Fraction | None]:
    """Memory-fraction hints for a container that holds a shared GPU: the new env list (None when the env list
    is unchanged), and the fraction the container's memory values are made for (None: none).

    `share` is the fraction that step 2 converted to a shared replica, if it did. A container that runs an
    inference engine (`engine`) gets the MPS limits alone: the engine reads none of the frameworks' variables.
    """
    if not (old_env is None or type(old_env) is list):
        return None, None
    env = list(old_env) if old_env else []
    if engine:
        default_hints, default_entries, default_note = plan.engine_hints, plan.engine_entries, plan.engine_note
    else:
        default_hints, default_entries, default_note = plan.default_hints, plan.default_entries, plan.default_note
    # The entries this step reads: the variables it injects, JAX's pair and the recorded fraction.
    watched = WATCHED_ENV
    existing = {}
    for i, entry in enumerate(env):
        if type(entry) is dict and type(name := entry.get("name")) is str and name in watched:
            existing[name] = i
    if share is None and not existing:  # the usual case: the policy's own hints, none of them set by the user
        if not default_entries:
            return None, plan.default_fraction
        env += default_entries
        kinds.append("env")
        texts.append(default_note)
        return env, plan.default_fraction
    added = recorded = 0
    if share is not None:  # record it: a second pass cannot tell 0.5 from gpu.shared: 1
        if RECORDED_FRACTION not in existing:  # a name is never duplicated, a user's value never replaced
            env.append({"name": RECORDED_FRACTION, "value": format_fraction(share)})
            recorded = 1
    elif RECORDED_FRACTION in existing:
        share = recorded_fraction(env[existing[RECORDED_FRACTION]])
    if share is not None and plan.share is not None and share > plan.share:
        share = plan.share  # more than one replica's share: validation says so; the variables never do
    policy = plan.policy
    fraction: Fraction | None
    if policy.memory_fraction is None and share is not None:
        fraction, hints = share, hints_for(policy, share)
        if engine:
            hints = mps_only(hints)
    else:
        fraction, hints = plan.default_fraction, default_hints
    if fraction is None:
        return None, None
    if not existing:  # nothing set by the user: every hint is appended
        env += default_entries if hints is default_hints else [hint.entry for hint in hints]
        added += len(hints)
    else:
        added += _merge_hints(env, existing, hints, texts)
    if not added + recorded:
        return None, fraction
    kinds.append("env")
    if engine:
        if added:
            texts.append(_mps_note(added, fraction))
    else:
        texts.append(_env_note(added + recorded, fraction))
    return env, fraction


def mps_only(hints: tuple[EnvHint, ...]) -> tuple[EnvHint, ...]:
    """The hints a container that runs an inference engine gets (the native policies read it too)."""
    return tuple(hint for hint in hints if hint.framework == "mps")


def _mps_note(added: int, fraction: Fraction) -> str:
    return f"set {added} MPS env vars for GPU fraction {format_fraction(fraction)}"


def _engine_args(
    body: dict[str, Any],
    engine: engines.Engine,
    fraction: Fraction,
    plan: _Plan,
    kinds: list[str],
    texts: list[str],
) -> list[str] | None:
    """The engine's memory flag (engines.py) for a container that may use `fraction` of a GPU: the new args
    list when the flag is absent from its command line, else None (a value the user wrote stays as written,
    with a notice where it differs from the policy's; one above the share is validation's to judge)."""
    if not engines.applies(engine, plan.policy):
        return None
    memory = plan.policy.gpu_memory_mib
    found = engines.find(body, engine)
    if found is None:
        argument = engines.argument(engine, fraction, memory)
        kinds.append("engine-args")
        texts.append(f"added {argument} for GPU fraction {format_fraction(fraction)} ({engine.title})")
        args = body.get("args")
        return [*args, argument] if type(args) is list else [argument]
    suggested = format_fraction(engines.value_for(engine, fraction, memory))
    # The container's share: its own fraction, or one replica's where the policy sets memoryFraction.
    limit = fraction if plan.policy.memory_fraction is None or plan.share is None else plan.share
    if found.value is not None and found.value <= limit and found.text != suggested:
        texts.append(f"kept {found.spelling} as set (policy suggests {suggested})")
    return None


def _env_note(added: int, fraction: Fraction) -> str:
    return f"set {added} memory env vars for GPU fraction {format_fraction(fraction)}"


def _merge_hints(env: list[Any], existing: dict[str, int], hints: tuple[EnvHint, ...], texts: list[str]) -> int:
    """Add the hints the user has not set; keep the user's values (with a notice in `texts` where they differ).

    Returns how many entries were added or merged into.
    """
    added = 0
    jax_set = [name for name in JAX_FRACTION_VARS if name in existing]
    for hint in hints:
        index = existing.get(hint.name)
        if hint.framework == "jax" and jax_set:
            if hint.name == JAX_FRACTION_VARS[0] and (index is None or env[index].get("value") != hint.value):
                texts.append(f"kept {jax_set[0]} as set; jax hints skipped")
            continue
        if index is None and hint.name == PYTORCH_CUDA_ALLOC_CONF:
            index = existing.get(PYTORCH_ALLOC_CONF)  # PyTorch reads one of the two: merge into the user's
        if index is None:
            env.append(hint.entry)
            added += 1
            continue
        current = env[index].get("value")
        if hint.name == PYTORCH_CUDA_ALLOC_CONF and isinstance(current, str) and "valueFrom" not in env[index]:
            merged = merge_alloc_conf(current, hint.value)
            if merged is not None:
                env[index] = dict(env[index], value=merged)
                added += 1
        elif current != hint.value:
            texts.append(f"kept {env[index]['name']} as set (policy suggests {hint.value})")
    return added
