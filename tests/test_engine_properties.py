"""Properties of the engine over generated pods and policies (hypothesis).

For every object and policy: the engine never raises; its patch, applied with the API server's semantics,
gives the mutated object; a second pass changes nothing; containers without GPU resources and every field
that no rule is about stay as they were; and the mutated object never fails a rule that mutation exists to fix.
"""

from __future__ import annotations

import copy
import os
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import evanphx
from webhook.admission.base.resources import GPU_MODELS, is_managed
from webhook.admission.base.violation import WARNING_LIMIT, WARNING_PREFIX
from webhook.admission.engine import evaluate
from webhook.admission.phases.mutate import mutate
from webhook.admission.phases.validate import validate
from webhook.admission.policy.loader import SHARED_MODES
from webhook.admission.policy.model import (
    GPU,
    Backend,
    Enforcement,
    Fractional,
    Limits,
    MigStrategy,
    Mode,
    Placement,
    Policy,
    PolicySet,
    Sharing,
)
from webhook.admission.sharing.memshare import HAMI_GPU_POLICY, HAMI_NODE_POLICY
from webhook.admission.sharing.registry import backend_of

NS = "ns"
RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "aliyun.com/gpu-mem",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-memory",
    "cpu",
    "memory",
    5,  # YAML keys need not be strings (`5: 1`), and the CLI reads YAML
    None,
]
QUANTITY_TEXT = ["0", "1", "2", "8", "9", "1000m", "1e0", "1.0", "500m", "0.5", "0.25", "250m", ".5", "-1", "1e309",
                 "2Ki", "abc", "", "1 ", "9223372036854775808", "3"]  # fmt: skip
ENV_NAMES = ["GPU_MEMORY_FRACTION", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION",
             "NVIDIA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "HOME", "CUPY_GPU_MEMORY_LIMIT",
             7, None]  # fmt: skip
FRAMEWORKS = ["jax", "tensorflow", "cupy", "tgi", "generic", "pytorch"]

quantities = st.one_of(
    st.sampled_from(QUANTITY_TEXT),
    st.integers(min_value=-2, max_value=12),
    st.sampled_from([0.5, 1.0, 2.0]),
    st.sampled_from([None, True, [1], {"a": 1}]),
)
resource_maps = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(RESOURCES), quantities, max_size=4),
    st.sampled_from([[], "x"]),
)
env_entries = st.one_of(
    st.builds(lambda n, v: {"name": n, "value": v}, st.sampled_from(ENV_NAMES), st.sampled_from(["0.5", "all", "x"])),
    st.builds(lambda n: {"name": n, "valueFrom": {"fieldRef": {"fieldPath": "x"}}}, st.sampled_from(ENV_NAMES)),
)


@st.composite
def containers(draw, prefix: str):
    body = {"name": f"{prefix}{draw(st.integers(0, 99))}", "image": "img", "ports": [{"containerPort": 80}]}
    shape = draw(st.sampled_from(["map", "map", "map", "none", "absent", "malformed"]))
    if shape == "map":
        resources = {}
        for which in ("requests", "limits"):
            value = draw(resource_maps)
            if value is not None or draw(st.booleans()):
                resources[which] = value
        body["resources"] = resources
    elif shape == "none":
        body["resources"] = None
    elif shape == "malformed":
        body["resources"] = "lots"
    if draw(st.booleans()):
        body["env"] = draw(st.lists(env_entries, max_size=3, unique_by=lambda e: e["name"]))
    if prefix == "init" and draw(st.booleans()):
        body["restartPolicy"] = "Always"
    return body


@st.composite
def objects(draw):
    spec = {"containers": draw(st.lists(containers("app"), min_size=1, max_size=3)), "nodeSelector": {"a": "b"}}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(containers("init"), max_size=2))
    kind = draw(st.sampled_from(["Pod", "Deployment", "CronJob", "PodTemplate", "Job"]))
    metadata = {"name": "x", "labels": {"l": "v"}}
    if draw(st.booleans()):
        metadata["annotations"] = {"a": "b"}
    template = {"metadata": {"labels": {"l": "v"}}, "spec": spec}
    wrap = {
        "Pod": lambda: {"spec": spec},
        "Deployment": lambda: {"spec": {"replicas": 2, "template": template}},
        "Job": lambda: {"spec": {"template": template}},
        "CronJob": lambda: {"spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}}},
        "PodTemplate": lambda: {"template": template},
    }[kind]
    return {"apiVersion": "v1", "kind": kind, "metadata": metadata, **wrap()}


@st.composite
def policies(draw):
    mode = draw(st.sampled_from(list(Mode)))
    model = draw(st.sampled_from([None, *GPU_MODELS]))
    if mode is Mode.MPS and model is None:
        model = "H100-80GB"
    sharing = Sharing(mode=mode)
    if mode in SHARED_MODES:
        name = draw(st.sampled_from(["nvidia.com/gpu.shared", "nvidia.com/gpu"]))  # renamed, or the name kept
        sharing = Sharing(mode=mode, replicas=draw(st.integers(2, 8)), resource_name=name)
    elif mode is Mode.MIG:
        model = model or "A100-80GB"
        names = GPU_MODELS[model].profile_names()
        profile = draw(st.sampled_from(names))
        offered = None
        if draw(st.booleans()):  # a layout: the mapped profile and some others, as mig-parted would offer them
            offered = tuple(n for n in names if n == profile or draw(st.booleans()))
        strategy = draw(st.sampled_from(list(MigStrategy)))
        sharing = Sharing(mode=mode, mig_profile=profile, mig_profiles=offered, mig_strategy=strategy)
    elif mode is Mode.MEMORY:
        model = model or "A30-24GB"
        backend = draw(st.sampled_from(list(Backend)))
        placement = draw(st.sampled_from([None, *Placement])) if backend is not Backend.VOLCANO else None
        sharing = Sharing(mode=mode, backend=backend, placement=placement)
    fractional_choices = [Fractional.REJECT]
    if mode in SHARED_MODES:
        fractional_choices.append(Fractional.SHARED)
    if model is not None and mode is not Mode.MEMORY:
        fractional_choices.append(Fractional.MIG)
    return Policy(
        name="p",
        namespaces=(NS,),
        enforcement=draw(st.sampled_from(list(Enforcement))),
        sharing=sharing,
        gpu=GPU(model=model),
        limits=Limits(max_per_container=draw(st.sampled_from([None, 1, 4])), max_per_pod=draw(st.sampled_from([1, 8]))),
        fractional=draw(st.sampled_from(fractional_choices)),
        # Shared modes only, and at most one replica's share, as the loader has it.
        memory_fraction=draw(st.sampled_from([None, Fraction(1, 10), Fraction(1, sharing.replicas)]))
        if mode in SHARED_MODES
        else None,
        framework_env=tuple(draw(st.lists(st.sampled_from(FRAMEWORKS), unique=True))),
        block_visible_devices_override=draw(st.booleans()),
        steering=draw(st.booleans()),
    )


def pod_template(obj):
    """The pod template (a workload's), or the Pod itself."""
    return {
        "Pod": lambda: obj,
        "Deployment": lambda: obj["spec"]["template"],
        "Job": lambda: obj["spec"]["template"],
        "CronJob": lambda: obj["spec"]["jobTemplate"]["spec"]["template"],
        "PodTemplate": lambda: obj["template"],
    }[obj["kind"]]()


def pod_metadata(obj):
    """A workload's pod template metadata (None for a Pod, whose metadata is the object's)."""
    return None if obj["kind"] == "Pod" else pod_template(obj).get("metadata")


def pod_spec(obj):
    return {
        "Pod": lambda: obj["spec"],
        "Deployment": lambda: obj["spec"]["template"]["spec"],
        "Job": lambda: obj["spec"]["template"]["spec"],
        "CronJob": lambda: obj["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        "PodTemplate": lambda: obj["template"]["spec"],
    }[obj["kind"]]()


def has_managed(container) -> bool:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return False
    return any(
        isinstance(resources.get(which), dict) and any(map(is_managed, resources[which]))
        for which in ("requests", "limits")
    )


def strip_mutable(obj):
    """Everything no rule may change: the object less container resources/env, the policy annotation, the
    re-apply record and the affinity (the objects generated here have none: steering adds it)."""
    result = copy.deepcopy(obj)
    pod_spec(result).pop("affinity", None)
    result["metadata"].get("annotations", {}).pop("gpu-admission.io/policy", None)
    result["metadata"].get("annotations", {}).pop("gpu-admission.io/requested", None)
    for metadata in (result["metadata"], pod_metadata(result)):  # HAMi's placement, on the pod (memshare.py)
        if metadata is None:
            continue
        for key in (HAMI_NODE_POLICY, HAMI_GPU_POLICY):
            metadata.get("annotations", {}).pop(key, None)
        if metadata.get("annotations") == {}:
            del metadata["annotations"]
        if metadata is not result["metadata"] and metadata == {}:
            del pod_template(result)["metadata"]
    for section in ("containers", "initContainers"):
        for c in pod_spec(result).get(section, []):
            if has_managed(c):
                c.pop("resources", None)
                c.pop("env", None)
    return result


FRACTIONS = ("500m", "0.5", "0.25", "250m", ".5", 0.5)
# A few hundred examples in `make test`; `make soak` sets GPU_ADMISSION_EXAMPLES for a long run.
SETTINGS = settings(
    max_examples=int(os.environ.get("GPU_ADMISSION_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(objects(), policies())
def test_patch_applies_and_gives_the_mutated_object(obj, policy):
    original = copy.deepcopy(obj)
    decision = evaluate(obj, NS, PolicySet((policy,)))
    assert obj == original
    assert evanphx.apply(original, decision.patch) == decision.mutated


@SETTINGS
@given(objects(), policies())
def test_engine_is_idempotent(obj, policy):
    policies_ = PolicySet((policy,))
    first = evaluate(obj, NS, policies_)
    second = evaluate(first.mutated, NS, policies_)
    assert second.patch == []
    assert second.violations == first.violations
    assert second.verdict == first.verdict


@SETTINGS
@given(objects(), policies())
def test_unrelated_fields_and_gpu_free_containers_are_never_touched(obj, policy):
    decision = evaluate(obj, NS, PolicySet((policy,)))
    assert strip_mutable(decision.mutated) == strip_mutable(obj)
    for section in ("containers", "initContainers"):
        for before, after in zip(
            pod_spec(obj).get(section, []), pod_spec(decision.mutated).get(section, []), strict=True
        ):
            if not has_managed(before):
                assert after == before


@SETTINGS
@given(objects(), policies())
def test_mutation_leaves_nothing_that_it_exists_to_fix(obj, policy):
    decision = evaluate(obj, NS, PolicySet((policy,)))
    assert not any("has no limit" in line for line in decision.violations)
    if policy.fractional is Fractional.REJECT or backend_of(policy).single_slice(policy) is not None:
        return  # MIG single: a fraction above the one profile's share stays (test_steering.py)
    for c in pod_spec(obj)["containers"] + pod_spec(obj).get("initContainers", []):
        resources = c.get("resources")
        if not isinstance(resources, dict) or not all(
            isinstance(resources.get(w), dict | None) for w in ("requests", "limits")
        ):
            continue
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        values = [v for v in (requests.get("nvidia.com/gpu"), limits.get("nvidia.com/gpu")) if v is not None]
        if not values or any(v != values[0] for v in values) or values[0] not in FRACTIONS:
            continue
        if any(k != "nvidia.com/gpu" and is_managed(k) for k in (*requests, *limits)):
            continue  # the conversion target may already be there; validation explains that case
        assert not any(f'container "{c["name"]}": nvidia.com/gpu' in line and "fractional" in line
                       for line in decision.violations), decision.violations  # fmt: skip


MEMORY_VARIABLES = ("GPU_MEMORY_FRACTION", "CUDA_MEMORY_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def _said_fraction(name: str, value: str, memory_mib: int | None) -> Fraction | None:
    """The share of a GPU that an injected variable tells the container it may use."""
    if name in MEMORY_VARIABLES:
        return Fraction(value)
    if name == "CUPY_GPU_MEMORY_LIMIT":
        return Fraction(value.removesuffix("%")) / 100
    if name == "PYTORCH_CUDA_ALLOC_CONF" and "per_process_memory_fraction:" in value:
        return Fraction(value.rsplit("per_process_memory_fraction:", 1)[1].split(",")[0])
    if name == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" and memory_mib:
        return Fraction(int(value.removeprefix("0=").removesuffix("M")), memory_mib)
    if name == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE":
        return Fraction(int(value), 100)
    return None


@SETTINGS
@given(objects(), policies())
def test_no_admitted_container_is_told_it_may_use_more_than_its_share(obj, policy):
    """Under time-slicing and MPS a replica is 1/replicas of a GPU: no variable the webhook injects says more
    (the MPS limits are then at most what the device plugin's MPS daemon sets per replica). Under MIG a slice
    is a GPU of its own, and no memory variable is injected at all. A user's own value is the user's."""
    decision = evaluate(obj, NS, PolicySet((policy,)))
    if not decision.allowed:
        return
    share = backend_of(policy).share(policy)
    for section in ("containers", "initContainers"):
        for before, after in zip(
            pod_spec(obj).get(section, []), pod_spec(decision.mutated).get(section, []), strict=True
        ):
            env_before = before.get("env") if isinstance(before.get("env"), list) else []
            injected = [e for e in after.get("env") or [] if isinstance(e, dict) and e not in env_before]
            for entry in injected:
                said = _said_fraction(entry["name"], entry.get("value", ""), policy.gpu_memory_mib)
                if said is None:
                    continue
                assert share is not None, (policy.sharing.mode, entry)  # only shared modes inject them
                assert said <= share, (entry, share)


@SETTINGS
@given(objects(), policies())
def test_every_violation_has_a_short_form_that_fits_a_warning_whole(obj, policy):
    for violation in validate(mutate(obj, policy).obj, policy):
        assert len(WARNING_PREFIX + violation.short) <= WARNING_LIMIT, violation.short
        assert not violation.short.endswith("..."), violation.short
