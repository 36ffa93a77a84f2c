"""Dynamic Resource Allocation: claims, claim templates and DeviceClass resources judged by the namespace policy.

The fixtures in tests/fixtures/dra/ are written from NVIDIA's DRA driver (its DeviceClasses, ResourceSlices and
GpuConfig) and from Kubernetes' resource.k8s.io/v1 types; every case states the exact verdict and lines.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine_support import EXCLUSIVE, GPU, Enforcement, Limits, Mode, Sharing, container, pod, policy, run
from webhook.admission.cluster.nodes import ClusterView, NodeInfo
from webhook.admission.engine import evaluate
from webhook.admission.policy import loader
from webhook.admission.policy.model import PolicySet
from webhook.admission.review import make_review

FIXTURES = Path(__file__).parent / "fixtures" / "dra"
CAPPED = policy(limits=Limits(max_per_container=2, max_per_pod=2))
POD_CAPPED = policy(limits=Limits(max_per_pod=2))  # 8 per container (the default), 2 per pod
CLASS_GPU = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"


def fixture(name: str) -> dict[str, Any]:
    for document in yaml.safe_load_all((FIXTURES / "claims.yaml").read_text()):
        if document["metadata"]["name"] == name:
            return document
    raise KeyError(name)


def claim(*requests: dict, config: list | None = None, kind: str = "ResourceClaim") -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if config is not None:
        devices["config"] = config
    spec = {"devices": devices}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "c", "namespace": "team"},
        "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec,
    }


def exactly(name: str = "gpu", device_class: str = "gpu.nvidia.com", count: int | None = 1, **extra: Any) -> dict:
    body: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", **extra}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def gpu_config(strategy: str, kind: str = "GpuConfig", requests: list[str] | None = None) -> dict[str, Any]:
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "sharing": {"strategy": strategy}}
    config: dict[str, Any] = {"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}
    if requests is not None:
        config["requests"] = requests
    return config


def judged(obj: dict, pol=CAPPED) -> tuple[str, list[str]]:
    decision = run(obj, pol)
    assert decision.patch == [], "claims are judged, never mutated"
    return decision.verdict, decision.violations


# --- the fixtures: a namespace capped at 2 GPUs ---------------------------------------------------------------


def test_a_template_asking_four_gpus_is_denied_with_one_line_per_cap():
    assert judged(fixture("four-gpus")) == ("deny", [
        'request "gpu": gpu.nvidia.com count 4 exceeds the per-container maximum of 2 (policy "team"): a container '
        "naming this request gets all 4; ask for at most 2",
    ])  # fmt: skip
    assert judged(fixture("four-gpus"), POD_CAPPED) == ("deny", [
        'template: 4 GPU devices (request "gpu": 4 from gpu.nvidia.com) exceed the per-pod maximum of 2 (policy '
        '"team"): each pod made from this template gets its own 4; ask for at most 2, or split the work',
    ])  # fmt: skip


def test_allocation_mode_all_is_refused_where_a_cap_exists():
    assert judged(fixture("every-gpu")) == ("deny", [
        'request "gpu": gpu.nvidia.com allocationMode All asks for every matching device of a node, which no cap '
        'can bound (policy "team" allows at most 2 per pod); use allocationMode ExactCount with a count of at most 2',
    ])  # fmt: skip


def test_first_available_alternatives_count_at_their_largest():
    assert judged(fixture("big-or-small")) == ("deny", [
        'request "gpu/big": gpu.nvidia.com count 4 exceeds the per-container maximum of 2 (policy "team"): a '
        "container naming this request gets all 4; ask for at most 2",
    ])  # fmt: skip
    two_requests = claim(
        {"name": "a", "firstAvailable": [exactly("big", count=2)["exactly"] | {"name": "big"},
                                         exactly("small", count=1)["exactly"] | {"name": "small"}]},
        exactly("b", count=1),
    )  # fmt: skip
    assert judged(two_requests) == ("deny", [
        'claim: 3 GPU devices (request "a/big": 2 from gpu.nvidia.com, request "b": 1 from gpu.nvidia.com) exceed '
        'the per-pod maximum of 2 (policy "team"): a pod naming this claim gets 3; ask for at most 2, or split the '
        "work",
    ])  # fmt: skip


def test_within_the_caps_a_claim_is_allowed_untouched():
    assert judged(claim(exactly(count=2))) == ("allow", [])
    assert judged(claim(exactly("a"), exactly("b"))) == ("allow", [])


def test_devices_of_classes_that_are_no_gpu_are_not_counted():
    nic = claim(exactly("nic", "rdma.example.com", count=16), exactly("all", "fpga.example.com", count=None))
    nic["spec"]["devices"]["requests"][1]["exactly"]["allocationMode"] = "All"
    assert judged(nic) == ("allow", [])


# --- sharing, MIG and admin access ----------------------------------------------------------------------------


TIME_SLICED = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4))
MPS_SHARED = policy(sharing=Sharing(mode=Mode.MPS, replicas=4), gpu=GPU(model="A100-80GB"))


def test_a_gpu_config_sharing_strategy_must_be_the_namespaces_sharing_mode():
    template = fixture("timesliced-gpu")
    assert judged(template, TIME_SLICED) == ("allow", [])
    assert judged(template, EXCLUSIVE) == ("deny", [
        'config[0]: GpuConfig sharing strategy TimeSlicing does not match the namespace: policy "team" gives this '
        "namespace whole GPUs (mode exclusive); remove sharing",
    ])  # fmt: skip
    assert judged(template, MPS_SHARED) == ("deny", [
        'config[0]: GpuConfig sharing strategy TimeSlicing does not match the namespace: policy "team" shares GPUs '
        "by mps; use strategy MPS",
    ])  # fmt: skip
    assert judged(claim(exactly(), config=[gpu_config("MPS")]), MPS_SHARED) == ("allow", [])
    other_driver = gpu_config("MPS")
    other_driver["opaque"]["driver"] = "gpu.example.com"
    assert judged(claim(exactly(), config=[other_driver]), EXCLUSIVE) == ("allow", [])


UNSHARED = (
    "gpu.nvidia.com {what} asks for whole GPUs with no GpuConfig to share them: the claim would hold them alone, and "
    'policy "team" shares GPUs by {mode}; add a config for this request with opaque driver gpu.nvidia.com and '
    "parameters apiVersion resource.nvidia.com/v1beta1, kind GpuConfig, sharing.strategy {strategy}"
)


def test_whole_gpus_without_the_namespaces_gpu_config_are_refused_under_time_slicing_and_mps():
    """NVIDIA's driver shares nothing without a GpuConfig (its default config sets no sharing): the claim would
    hold whole GPUs alone, in a namespace whose GPUs are shared."""
    bare = claim(exactly(count=2))
    assert judged(bare, TIME_SLICED) == ("deny", [
        'request "gpu": ' + UNSHARED.format(what="count 2", mode="time-slicing", strategy="TimeSlicing"),
    ])  # fmt: skip
    assert judged(bare, MPS_SHARED) == ("deny", [
        'request "gpu": ' + UNSHARED.format(what="count 2", mode="mps", strategy="MPS"),
    ])  # fmt: skip
    assert judged(bare, EXCLUSIVE) == ("allow", [])
    # A config naming one request shares that one only; one naming none applies to every request.
    two = claim(exactly("a"), exactly("b"), config=[gpu_config("TimeSlicing", requests=["a"])],
                kind="ResourceClaimTemplate")  # fmt: skip
    assert judged(two, TIME_SLICED) == ("deny", [
        'request "b": ' + UNSHARED.format(what="count 1", mode="time-slicing", strategy="TimeSlicing"),
    ])  # fmt: skip
    assert judged(claim(exactly("a"), exactly("b"), config=[gpu_config("TimeSlicing")]), TIME_SLICED) == ("allow", [])
    # firstAvailable: an alternative is covered by a config naming it or its request
    alternatives = claim(
        {"name": "gpu", "firstAvailable": [exactly("big", count=2)["exactly"] | {"name": "big"},
                                           exactly("small")["exactly"] | {"name": "small"}]},
        config=[gpu_config("TimeSlicing", requests=["gpu/big"])],
    )  # fmt: skip
    assert judged(alternatives, TIME_SLICED) == ("deny", [
        'request "gpu/small": ' + UNSHARED.format(what="count 1", mode="time-slicing", strategy="TimeSlicing"),
    ])  # fmt: skip
    # Another strategy is the config's line alone; a config without a strategy shares nothing; MIG devices and
    # other classes are not whole GPUs of NVIDIA's.
    assert judged(claim(exactly(), config=[gpu_config("MPS")]), TIME_SLICED) == ("deny", [
        'config[0]: GpuConfig sharing strategy MPS does not match the namespace: policy "team" shares GPUs by '
        "time-slicing; use strategy TimeSlicing",
    ])  # fmt: skip
    no_strategy = gpu_config("TimeSlicing")
    del no_strategy["opaque"]["parameters"]["sharing"]
    assert judged(claim(exactly(), config=[no_strategy]), TIME_SLICED) == ("deny", [
        'request "gpu": ' + UNSHARED.format(what="count 1", mode="time-slicing", strategy="TimeSlicing"),
    ])  # fmt: skip
    assert judged(claim(exactly("nic", "rdma.example.com")), TIME_SLICED) == ("allow", [])
    assert judged(fixture("timesliced-gpu"), TIME_SLICED) == ("allow", [])


def test_under_warn_an_unshared_claim_is_admitted_with_its_short_form():
    warned = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), enforcement=Enforcement.WARN)
    decision = run(claim(exactly()), warned)
    assert (decision.verdict, decision.warnings) == ("warn", [
        'gpu-admission: request "gpu": gpu.nvidia.com unshared under time-slicing; add a GpuConfig with strategy '
        "TimeSlicing",
    ])  # fmt: skip


def test_the_device_class_resource_for_whole_gpus_is_refused_under_time_slicing_and_mps():
    """The claim the scheduler makes for `deviceclass.resource.kubernetes.io/gpu.nvidia.com` carries no config."""
    asking = pod(container("train", limits={CLASS_GPU: 1}))
    assert judged_pod(asking, TIME_SLICED) == ("deny", [
        f'container "train": {CLASS_GPU} 1 asks DRA for whole GPUs that nothing shares (the claim made for it carries '
        'no GpuConfig), but policy "team" shares GPUs by time-slicing; ask for nvidia.com/gpu: 1 (shared by '
        "time-slicing), or name a ResourceClaim whose GpuConfig sets sharing.strategy TimeSlicing",
    ])  # fmt: skip
    assert judged_pod(asking, MPS_SHARED)[1][0].endswith(
        "(shared by mps), or name a ResourceClaim whose GpuConfig sets sharing.strategy MPS"
    )
    assert judged_pod(asking, EXCLUSIVE) == ("allow", [])
    assert judged_pod(pod(container("train", limits={CLASS_GPU: 0})), TIME_SLICED) == ("allow", [])
    warned = run(asking, policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), enforcement=Enforcement.WARN))
    assert warned.warnings == [
        'gpu-admission: container "train": gpu.nvidia.com 1: whole GPUs, unshared under time-slicing; ask for '
        "nvidia.com/gpu"
    ]


def judged_pod(obj: dict, pol) -> tuple[str, list[str]]:
    decision = run(obj, pol)
    return decision.verdict, decision.violations


def test_mig_devices_are_held_to_the_policys_mig_profiles():
    one_slice = fixture("one-slice")  # 3g.40gb
    offered = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_profiles=("1g.10gb", "3g.40gb")),
        gpu=GPU(model="H100-80GB"),
    )
    assert judged(one_slice, offered) == ("allow", [])
    small_only = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_profiles=("1g.10gb",)), gpu=GPU(model="H100-80GB")
    )
    assert judged(one_slice, small_only) == ("deny", [
        'request "slice": mig.nvidia.com selects MIG profile 3g.40gb, which the nodes\' MIG layout does not offer '
        '(policy "team" offers 1g.10gb): the claim would never be allocated; use one of those',
    ])  # fmt: skip
    a30 = policy(sharing=Sharing(mode=Mode.MIG, mig_profile="1g.6gb"), gpu=GPU(model="A30-24GB"))
    assert judged(one_slice, a30) == ("deny", [
        'request "slice": mig.nvidia.com selects MIG profile 3g.40gb, which A30-24GB does not have (policy "team"); '
        "use one of 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb",
    ])  # fmt: skip
    two_slices = claim(exactly("slices", "mig.nvidia.com", count=2))
    assert judged(two_slices, offered) == ("deny", [
        'request "slices": mig.nvidia.com count 2 is more than one MIG slice per container (policy "team"): CUDA '
        "sees one MIG device per process, and slices have no NVLink or P2P between them; ask for one bigger "
        "profile, or whole GPUs in a namespace that has them",
    ])  # fmt: skip


def test_a_mig_profile_is_read_from_any_selector_celselect_reads():
    """The profile a request's selectors name, read by celselect (the one reader of selectors): beside other
    comparisons, in parentheses, the literal first; a selector it cannot split (`||`) is not judged."""
    small_only = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_profiles=("1g.10gb",)), gpu=GPU(model="H100-80GB")
    )

    def selecting(expression: str) -> dict:
        return claim(exactly("slice", "mig.nvidia.com", selectors=[{"cel": {"expression": expression}}]))

    line = (
        'request "slice": mig.nvidia.com selects MIG profile 3g.40gb, which the nodes\' MIG layout does not offer '
        '(policy "team" offers 1g.10gb): the claim would never be allocated; use one of those'
    )
    nv = "device.attributes['gpu.nvidia.com']"
    for expression in (
        f"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20Gi')) >= 0 && ({nv}.profile == '3g.40gb')",
        f"'3g.40gb' == {nv}.profile && {nv}.productName.lowerAscii().matches('h100')",
        'device.attributes["gpu.nvidia.com"]["profile"] == "3g.40gb"',
    ):
        assert judged(selecting(expression), small_only) == ("deny", [line]), expression
    assert judged(selecting(f"{nv}.profile == '1g.10gb'"), small_only) == ("allow", [])
    either = f"{nv}.profile == '3g.40gb' || {nv}.profile == '1g.10gb'"
    assert judged(selecting(either), small_only) == ("allow", []), "not read: never a denial"
    assert judged(selecting(f"{nv}.profile != '3g.40gb'"), small_only) == ("allow", [])


def test_admin_access_is_refused_for_tenants():
    assert judged(claim(exactly(adminAccess=True))) == ("deny", [
        'request "gpu": gpu.nvidia.com adminAccess gives access to devices allocated to others, outside every GPU '
        'limit (policy "team" does not allow it for tenants); remove adminAccess',
    ])  # fmt: skip


# --- what the API server refuses anyway: denied whatever the enforcement -------------------------------------


WARN = policy(enforcement=Enforcement.WARN, limits=Limits(max_per_container=2, max_per_pod=2))
APISERVER = "(the API server refuses it anyway)"


@pytest.mark.parametrize(
    ("obj", "line"),
    [
        (claim(exactly(count=-1)),
         f'request "gpu": gpu.nvidia.com count -1 is not a whole number greater than zero {APISERVER}; ask for 1 or '
         "more devices"),
        (claim({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All",
                                           "count": 2}}),
         f'request "gpu": gpu.nvidia.com count 2 is set with allocationMode All {APISERVER}; remove count, or use '
         "allocationMode ExactCount"),
        (claim(exactly(allocationMode="Some")),
         f'request "gpu": gpu.nvidia.com allocationMode "Some" is neither ExactCount nor All {APISERVER}; use '
         "ExactCount with a count"),
        (claim(exactly("GPU_1")),
         f"requests[0]: has name \"GPU_1\"; a request's name is a DNS label: lowercase letters, digits and '-', at "
         f"most 63 {APISERVER}; name it, e.g. gpu"),
        (claim(exactly(), exactly()),
         f'request "gpu": the name is used by another request too {APISERVER}; give each request its own name'),
        (claim({"name": "gpu"}),
         f'request "gpu": sets neither of exactly and firstAvailable; a request sets exactly one {APISERVER}: use '
         "exactly for one kind of device, firstAvailable for alternatives"),
        (claim(exactly(device_class="")),
         f'request "gpu": has no deviceClassName; a request names its DeviceClass, a DNS subdomain {APISERVER}; set '
         "it, e.g. gpu.nvidia.com"),
        (claim(exactly(), config=[{"requests": ["gpu", "gpu/small"], "opaque": {"driver": "x.example.com",
                                                                                  "parameters": {}}}]),
         f'config[0]: names request "gpu/small", which this claim does not have {APISERVER}; name one of its '
         "requests (gpu)"),
        (claim(*(exactly(f"r{i}", "rdma.example.com") for i in range(33))),
         f"claim: 33 device requests, more than the 32 a claim may hold {APISERVER}; split it into several claims"),
    ],
    ids=["count-negative", "count-with-all", "mode", "name", "duplicate", "neither", "no-class", "config-ref", "33"],
)  # fmt: skip
def test_what_the_api_server_refuses_is_denied_by_mutate_whatever_the_enforcement(obj: dict, line: str):
    decision = run(obj, WARN)
    assert (decision.verdict, decision.refusals, decision.refused_only) == ("deny", [line], True)


def test_policy_violations_under_warn_are_warnings_and_the_claim_is_admitted():
    decision = run(fixture("every-gpu"), WARN)
    assert (decision.verdict, decision.allowed) == ("warn", True)
    assert decision.warnings == ["gpu-admission: request \"gpu\": gpu.nvidia.com allocationMode All is unbounded; "
                                 "ask for an ExactCount"]  # fmt: skip


def test_updates_that_leave_the_spec_and_claims_being_deleted_are_left_alone():
    every = fixture("every-gpu")
    policies = PolicySet((CAPPED,))
    status_update = copy.deepcopy(every) | {"status": {"allocation": {}}}
    decision = evaluate(status_update, "team", policies, old=every)
    assert (decision.verdict, decision.skip_reason) == ("allow", "this update leaves its spec as it was")
    deleting = copy.deepcopy(every)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert evaluate(deleting, "team", policies).skip_reason == "it is being deleted"
    assert evaluate(every, "team", policies, old=fixture("four-gpus")).verdict == "deny"  # the spec changed


def test_v1beta1_claims_are_not_read_in_the_v1_shape():
    """v1beta1's requests are flat (no `exactly`); the webhook configurations ask for v1, to which the API
    server converts a request made in another version."""
    old = fixture("every-gpu") | {"apiVersion": "resource.k8s.io/v1beta1"}
    assert evaluate(old, "team", PolicySet((CAPPED,))).skip_reason == "it has no pod spec"


# --- which classes are GPU classes -----------------------------------------------------------------------------


POLICY_WITH_CLASSES = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: team}
spec:
  namespaces: [team]
  limits: {maxPerPod: 2}
  deviceClasses:
    gpu: [gpu.example.com]
    mig: [slices.example.com]
"""


def test_the_policy_adds_gpu_classes_to_nvidias():
    policies = loader.parse_policy_sources({"p.yaml": POLICY_WITH_CLASSES})
    classes = policies.policies[0].device_classes
    assert (classes.gpu_classes, classes.mig_classes) == (
        ("gpu.nvidia.com", "gpu.example.com"), ("mig.nvidia.com", "slices.example.com"),
    )  # fmt: skip
    decision = evaluate(claim(exactly("a", "gpu.example.com", count=2), exactly("b", count=1)), "team", policies)
    assert decision.violations == [
        'claim: 3 GPU devices (request "a": 2 from gpu.example.com, request "b": 1 from gpu.nvidia.com) exceed the '
        'per-pod maximum of 2 (policy "team"): a pod naming this claim gets 3; ask for at most 2, or split the work',
    ]


@pytest.mark.parametrize(
    ("classes", "problem"),
    [
        ("{gpu: [Bad_Class]}", 'spec.deviceClasses.gpu[0]: "Bad_Class" is not a DeviceClass name; use a DNS '
                               "subdomain, e.g. gpu.example.com"),
        ("{gpu: [a.example.com, a.example.com]}", 'spec.deviceClasses.gpu[1]: "a.example.com" is listed twice; '
                                                  "remove one"),
        ("{mig: [gpu.nvidia.com]}", "spec.deviceClasses: gpu.nvidia.com listed as both whole GPUs and MIG devices; "
                                    "keep each class in one list"),
        ("{gpu: []}", "spec.deviceClasses.gpu: is empty; list DeviceClass names, or remove it"),
        ("{gpus: [a]}", "spec.deviceClasses.gpus: unknown field"),
    ],
)  # fmt: skip
def test_device_classes_in_a_policy_file_are_checked(classes: str, problem: str):
    text = POLICY_WITH_CLASSES.replace("gpu: [gpu.example.com]\n    mig: [slices.example.com]", "").replace(
        "deviceClasses:\n", f"deviceClasses: {classes}\n"
    )
    with pytest.raises(loader.PolicyLoadError) as raised:
        loader.parse_policy_sources({"p.yaml": text})
    assert problem in str(raised.value)


# --- pods: a DeviceClass's extended resource counts as GPUs ---------------------------------------------------


def test_a_gpu_device_class_resource_counts_against_the_maxima():
    decision = run(pod(container(limits={CLASS_GPU: 4})), CAPPED)
    assert decision.violations == [
        f'container "app": {CLASS_GPU} 4 exceeds the per-container maximum of 2 (policy "team"); request at most 2'
    ]
    decision = run(pod(container("a", limits={CLASS_GPU: 2}), container("b", limits={CLASS_GPU: 1})), CAPPED)
    assert decision.violations == [
        f'pod: {CLASS_GPU} effective total 3 (containers running together: "a"=2, "b"=1) exceeds the per-pod '
        'maximum of 2 (policy "team"); request fewer or split the pod'
    ]


def test_nvidia_gpu_and_the_device_class_resource_add_up():
    """A DeviceClass with extendedResourceName nvidia.com/gpu serves both names from the same GPUs."""
    decision = run(pod(container(limits={"nvidia.com/gpu": "1", CLASS_GPU: "2"})), CAPPED)
    assert decision.violations == [
        f'container "app": {CLASS_GPU} 2 and nvidia.com/gpu 1 are 3 GPUs, more than the per-container maximum of 2 '
        '(policy "team"): both names ask for the same GPUs; request at most 2 in all',  # by name, as sent
    ]
    decision = run(pod(container("a", limits={"nvidia.com/gpu": 2}), container("b", limits={CLASS_GPU: 1})),
                   CAPPED)  # fmt: skip
    assert decision.violations == [
        f"pod: GPUs asked as {CLASS_GPU} and nvidia.com/gpu effective total 3 (containers running together: "
        '"a"=2, "b"=1) exceeds the per-pod maximum of 2 (policy "team"): both names ask for the same GPUs; '
        "request fewer or split the pod",
    ]
    assert run(pod(container(limits={"nvidia.com/gpu": "1", CLASS_GPU: "1"})), CAPPED).violations == []


def test_a_device_class_resource_is_an_extended_resource_whichever_the_class():
    """Requests become limits and fractions are refused for every class; only GPU classes count as GPUs."""
    nic = "deviceclass.resource.kubernetes.io/rdma.example.com"
    decision = run(pod(container(requests={nic: "16"})), CAPPED)
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["containers"][0]["resources"]["limits"] == {nic: "16"}
    decision = run(pod(container(limits={CLASS_GPU: "500m"})), CAPPED)
    assert decision.refusals == [
        f'container "app": {CLASS_GPU} "500m" (0.5) is fractional, but GPUs are whole devices '
        "(the API server refuses it anyway); request a whole number",
    ]


def test_the_cluster_checks_do_not_look_for_device_class_resources_on_nodes():
    """Nodes do not advertise DeviceClasses' resources (DRA serves them): no "no node advertises it"."""
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    view = ClusterView.of([NodeInfo.from_object(node)])
    decision = evaluate(pod(container(limits={CLASS_GPU: 1})), "team", PolicySet((CAPPED,)), nodes=view)
    assert (decision.verdict, decision.warnings) == ("allow", [])


# --- the real server: /mutate denies the API server's refusals, /validate the policy's ------------------------


POLICY_FILE = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: capped}
spec:
  namespaces: [team]
  enforcement: warn
  limits: {maxPerContainer: 2, maxPerPod: 2}
"""


def test_the_server_judges_claims_and_templates(start_server, tmp_path: Path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "capped.yaml").write_text(POLICY_FILE)
    server = start_server(tmp_path / "policies")
    refused = make_review(claim(exactly(count=-1)), namespace="team", uid="u-1")
    answer = server.post("/mutate", refused).json()["response"]
    assert (answer["allowed"], answer["status"]["message"]) == (False, (
        'request "gpu": gpu.nvidia.com count -1 is not a whole number greater than zero (the API server refuses it '
        "anyway); ask for 1 or more devices"))  # fmt: skip
    warned = make_review(fixture("four-gpus"), namespace="team", uid="u-2")
    answer = server.post("/validate", warned).json()["response"]
    assert answer["allowed"] is True and "patch" not in answer
    assert answer["warnings"] == [
        'gpu-admission: request "gpu": gpu.nvidia.com count 4: at most 2 per container; ask for fewer'
    ]
    assert json.dumps(answer["auditAnnotations"]) == '{"policy": "capped", "decision": "warn"}'


# --- hostile claims: every shape gives a verdict, never an error (an error would deny under failurePolicy Fail)


def _claims() -> Any:
    from hypothesis import strategies as st

    from tests.test_fuzz import json_values, maybe

    counts = maybe(st.one_of(st.integers(-2, 40), st.none()))
    body = maybe(st.fixed_dictionaries({}, optional={
        "deviceClassName": maybe(st.sampled_from(["gpu.nvidia.com", "mig.nvidia.com", "rdma.example.com", "", "A_B"])),
        "allocationMode": maybe(st.sampled_from(["ExactCount", "All", "Some"])),
        "count": counts,
        "adminAccess": maybe(st.booleans()),
        "selectors": maybe(st.lists(maybe(st.fixed_dictionaries({"cel": maybe(st.fixed_dictionaries(
            {"expression": maybe(st.sampled_from(["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
                                                  "device.attributes['gpu.nvidia.com'].profile == '9g.9gb'"]))}))})),
                                    max_size=2)),
    }))  # fmt: skip
    names = maybe(st.sampled_from(["gpu", "big", "small", "GPU", ""]))
    alternative = st.builds(lambda name, rest: {**rest, "name": name} if isinstance(rest, dict) else rest, names, body)
    request = maybe(st.fixed_dictionaries({"name": names}, optional={
        "exactly": body, "firstAvailable": maybe(st.lists(alternative, max_size=3)),
    }))  # fmt: skip
    config = maybe(st.fixed_dictionaries({}, optional={
        "requests": maybe(st.lists(maybe(names), max_size=2)),
        "opaque": maybe(st.fixed_dictionaries({"driver": maybe(st.just("gpu.nvidia.com")), "parameters": maybe(
            st.fixed_dictionaries({"kind": maybe(st.sampled_from(["GpuConfig", "MigDeviceConfig"])),
                                   "sharing": maybe(st.fixed_dictionaries({"strategy": maybe(st.sampled_from(
                                       ["TimeSlicing", "MPS", "Fabric"]))}))}))})),
    }))  # fmt: skip
    devices = maybe(st.fixed_dictionaries({}, optional={
        "requests": maybe(st.lists(request, max_size=4)), "config": maybe(st.lists(config, max_size=2)),
    }))  # fmt: skip
    return st.tuples(st.sampled_from(["ResourceClaim", "ResourceClaimTemplate"]), devices, json_values)


def test_any_claim_gets_a_verdict_and_is_never_mutated():
    from hypothesis import given, settings

    from tests.engine_support import MIG

    @settings(max_examples=300, deadline=None, database=None)
    @given(_claims())
    def check(case: tuple[str, Any, Any]) -> None:
        kind, devices, anything = case
        spec = {"devices": devices} if devices is not None else anything
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": "c"},
               "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec}  # fmt: skip
        for pol in (CAPPED, TIME_SLICED, MIG, WARN):
            decision = evaluate(copy.deepcopy(obj), "team", PolicySet((pol,)))
            assert decision.patch == [] and decision.verdict in ("allow", "deny", "warn")
            assert all(len(warning) <= 120 for warning in decision.warnings)  # the API server's advice

    check()


def test_policy_explain_says_which_device_classes_are_gpus(tmp_path: Path):
    import subprocess
    import sys

    (tmp_path / "p.yaml").write_text(POLICY_WITH_CLASSES)
    script = Path(sys.executable).with_name("gpu-webhook")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]
    result = subprocess.run([*command, "policy", "explain", "--policies", str(tmp_path), "team", "other"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("  dra ")]
    assert lines == [
        "  dra       GPUs from DeviceClasses gpu.nvidia.com, gpu.example.com; MIG devices from mig.nvidia.com, "
        "slices.example.com",
        "  dra       GPUs from DeviceClasses gpu.nvidia.com; MIG devices from mig.nvidia.com",  # built-in defaults
    ]


def test_policy_explain_says_that_whole_gpus_need_the_namespaces_gpu_config_under_time_slicing(tmp_path: Path):
    import subprocess
    import sys

    (tmp_path / "p.yaml").write_text(
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: notebooks}\nspec:\n"
        "  namespaces: [notebooks]\n  sharing: {mode: mps, replicas: 4}\n  gpu: {model: A100-80GB}\n"
    )
    script = Path(sys.executable).with_name("gpu-webhook")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]
    result = subprocess.run([*command, "policy", "explain", "--policies", str(tmp_path), "notebooks"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("  dra ")] == [
        "  dra       GPUs from DeviceClasses gpu.nvidia.com; MIG devices from mig.nvidia.com; gpu.nvidia.com only in "
        "claims whose GpuConfig sets sharing.strategy MPS",
    ]


def test_a_request_with_no_gpu_config_of_its_own_gets_its_device_classs_config_where_the_class_is_known():
    """NVIDIA's driver applies a DeviceClass's configs (source FromClass) under the claim's own, a later one over
    an earlier one (GetOpaqueDeviceConfigs). So with the server's classes, a request no GpuConfig of the claim
    covers is shared when its class's GpuConfig shares the namespace's way; a claim's GpuConfig without a
    strategy stands over the class's; a class sharing by MPS does not cover a time-slicing namespace."""
    from webhook.admission.base import gpuconfig
    from webhook.admission.dra import claimrules

    plain = claim(exactly(count=1))
    line = (
        'request "gpu": gpu.nvidia.com count 1 asks for whole GPUs with no GpuConfig to share them: the claim would '
        'hold them alone, and policy "team" shares GPUs by time-slicing; add a config for this request with opaque '
        "driver gpu.nvidia.com and parameters apiVersion resource.nvidia.com/v1beta1, kind GpuConfig, "
        "sharing.strategy TimeSlicing"
    )

    def lines(obj: dict, classes: dict[str, str] | None) -> list[str]:
        return [v.line for v in claimrules.judge(obj, TIME_SLICED, ("spec",), classes)]

    assert lines(plain, None) == [line], "offline: the claim says it itself"
    assert lines(plain, {"gpu.nvidia.com": "TimeSlicing"}) == []
    assert lines(plain, {"gpu.nvidia.com": ""}) == [line]
    assert lines(plain, {"gpu.nvidia.com": "MPS"}) == [line]
    assert lines(plain, {"mig.nvidia.com": "TimeSlicing"}) == [line], "another class's config"
    bare = {"opaque": {"driver": "gpu.nvidia.com", "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                                                  "kind": "GpuConfig"}}}  # fmt: skip
    assert lines(claim(exactly(count=1), config=[bare]), {"gpu.nvidia.com": "TimeSlicing"}) == [line]
    two = claim(exactly(count=1), exactly("other", count=1), config=[{**bare, "requests": ["other"]}])
    assert lines(two, {"gpu.nvidia.com": "TimeSlicing"}) == [line.replace('request "gpu"', 'request "other"')], (
        "the bare GpuConfig stands over the class's for the request it names only"
    )
    assert gpuconfig.class_strategy([gpu_config("TimeSlicing"), gpu_config("MPS")]) == "MPS"
    assert (
        gpuconfig.class_strategy([gpu_config("TimeSlicing"), gpu_config("MPS", kind="MigDeviceConfig")])
        == "TimeSlicing"
    )
    assert gpuconfig.class_strategy(None) == gpuconfig.class_strategy("junk") == ""
