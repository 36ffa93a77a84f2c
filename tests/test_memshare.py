"""Memory-sliced sharing (`sharing.mode: memory`): what `nvidia.com/gpu` becomes under ACK's GPU sharing, HAMi
and Volcano's vGPU, requests written in the backends' own resources, placement and steering, through the engine
(`run` checks the patch with the API server's semantics and idempotence) and a few through the real server.

The expected resources are worked out here from each backend's units as its documentation gives them
(ACK: aliyun.com/gpu-mem in GiB; HAMi: nvidia.com/gpumem in MiB, nvidia.com/gpucores in percent; Volcano:
volcano.sh/vgpu-memory in MiB, volcano.sh/vgpu-cores in percent), not taken from the code under test.
"""

from __future__ import annotations

import base64
import copy
import json
from fractions import Fraction
from pathlib import Path

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import evanphx
from tests.conftest import copy_policies
from tests.engine_support import container, env_of, pod, policy, run
from tests.fake_kube_api import loopback_cluster
from tests.test_clustercheck import node, view
from tests.test_engine_properties import SETTINGS, objects, strip_mutable
from tests.test_server import review
from webhook.admission.base.quantity import parse_quantity
from webhook.admission.base.resources import GPU_MODELS
from webhook.admission.checks import clusterdrift, policynodes
from webhook.admission.cluster.nodes import NodeInfo
from webhook.admission.engine import evaluate
from webhook.admission.policy.loader import parse_policy_sources
from webhook.admission.policy.model import (
    GPU,
    AssumedNode,
    Backend,
    Check,
    ClusterChecks,
    Isolation,
    Limits,
    Mode,
    Placement,
    PolicySet,
    Sharing,
)  # fmt: skip

A100 = GPU(model="A100-80GB")  # 81,920 MiB
H100 = GPU(model="H100-80GB")  # 81,559 MiB as NVML reports it


def memory(
    backend: Backend,
    gpu: GPU = A100,
    placement: Placement | None = None,
    steering: bool = False,
    isolation: Isolation | None = None,
    **kw,
):
    return policy(sharing=Sharing(mode=Mode.MEMORY, backend=backend, placement=placement, isolation=isolation),
                  gpu=gpu, steering=steering, **kw)  # fmt: skip


ACK, HAMI, VOLCANO = memory(Backend.ACK), memory(Backend.HAMI), memory(Backend.VOLCANO)


def gpu_pod(value: str, **kw):
    return pod(container(requests={"nvidia.com/gpu": value}, limits={"nvidia.com/gpu": value}), **kw)


def labelled(obj: dict, labels: dict) -> dict:
    """The pod (or a workload's pod template) with these labels, as ACK's multi-GPU sharing reads them."""
    obj = copy.deepcopy(obj)
    meta = obj["spec"]["template"]["metadata"] if "template" in obj["spec"] else obj["metadata"]
    meta.setdefault("labels", {}).update(labels)
    return obj


def resources(decision, index: int = 0) -> dict:
    return decision.mutated["spec"]["containers"][index]["resources"]


# --- fractions ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pol", "value", "expected", "warning"),
    [
        # 0.25 x 81,920 MiB = 20,480 MiB = 20 GiB
        (ACK, "0.25", {"aliyun.com/gpu-mem": "20"}, "nvidia.com/gpu 0.25 became aliyun.com/gpu-mem 20"),
        (HAMI, "250m", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "25"},
         "nvidia.com/gpu 0.25 became 1 with nvidia.com/gpumem 20480, nvidia.com/gpucores 25"),
        (VOLCANO, "0.25", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "20480",
                           "volcano.sh/vgpu-cores": "25"},
         "nvidia.com/gpu 0.25 became volcano.sh/vgpu-memory 20480, volcano.sh/vgpu-cores 25"),
        # rounded down: 0.3 x 81,559 MiB = 24,467.7 MiB (23.89 GiB); 30 % of the compute
        (memory(Backend.ACK, H100), "0.3", {"aliyun.com/gpu-mem": "23"},
         "nvidia.com/gpu 0.3 became aliyun.com/gpu-mem 23"),
        (memory(Backend.HAMI, H100), "0.3", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "24467",
                                            "nvidia.com/gpucores": "30"},
         "nvidia.com/gpu 0.3 became 1 with nvidia.com/gpumem 24467, nvidia.com/gpucores 30"),
        # 1/3 of 81,920 MiB = 27,306.67 MiB (26.67 GiB); 33 %
        (memory(Backend.VOLCANO), "333m", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "27279",
                                          "volcano.sh/vgpu-cores": "33"},
         "nvidia.com/gpu 0.333 became volcano.sh/vgpu-memory 27279, volcano.sh/vgpu-cores 33"),
    ],
    ids=["ack", "hami", "volcano", "ack-rounded-down", "hami-rounded-down", "volcano-third"],
)  # fmt: skip
def test_a_fraction_becomes_the_backends_share_of_the_memory(pol, value, expected, warning) -> None:
    decision = run(gpu_pod(value), pol)
    assert decision.verdict == "allow" and decision.violations == []
    assert resources(decision) == {"requests": expected, "limits": expected}
    assert decision.warnings == [f'gpu-admission: container "app": {warning}']
    assert "memory-share" in decision.mutation_kinds


@pytest.mark.parametrize(
    ("pol", "value", "line"),
    [
        # ACK's unit is 1 GiB: 1,024 / 81,920 = 0.0125
        (ACK, "0.01", 'container "app": nvidia.com/gpu "0.01" is less than one unit of ACK GPU sharing (1 GiB of '
         'the GPU\'s 81920 MiB, policy "team"); request 0.0125 or more'),
        # 1,024 / 81,559 = 0.012555...: rounded up, so that the advice itself converts
        (memory(Backend.ACK, H100), "0.0125", 'container "app": nvidia.com/gpu "0.0125" is less than one unit of ACK '
         'GPU sharing (1 GiB of the GPU\'s 81559 MiB, policy "team"); request 0.0126 or more'),
        # HAMi and Volcano: 1 % of the compute is the larger unit
        (HAMI, "5m", 'container "app": nvidia.com/gpu "5m" (0.005 GPU) is less than one unit of HAMi (1 MiB of the '
         'GPU\'s 81920 MiB and 1% of its compute, policy "team"); request 0.01 or more'),
        (VOLCANO, "0.009", 'container "app": nvidia.com/gpu "0.009" is less than one unit of Volcano vGPU (1 MiB of '
         'the GPU\'s 81920 MiB and 1% of its compute, policy "team"); request 0.01 or more'),
    ],
    ids=["ack", "ack-h100", "hami", "volcano"],
)  # fmt: skip
def test_a_fraction_too_small_for_one_unit_is_refused_with_the_smallest_that_works(pol, value, line) -> None:
    decision = run(gpu_pod(value), pol)
    assert decision.verdict == "deny"
    assert decision.denials == [line]
    assert decision.refusals == decision.violations  # the API server refuses a fraction anyway: /mutate denies it
    smallest = line.rsplit("request ", 1)[1].removesuffix(" or more")
    assert run(gpu_pod(smallest), pol).verdict == "allow"


# --- whole GPUs -----------------------------------------------------------------------------------------------


def test_whole_gpus_stay_nvidia_gpu_under_ack_for_its_exclusive_nodes() -> None:
    decision = run(gpu_pod("2"), ACK)
    assert decision.patch == [] and decision.warnings == [] and decision.verdict == "allow"


@pytest.mark.parametrize(
    ("pol", "expected", "warning"),
    [
        (HAMI, {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "100"},
         "nvidia.com/gpu 2 became nvidia.com/gpu 2, whole (memory and cores 100%)"),
        (VOLCANO, {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory-percentage": "100",
                   "volcano.sh/vgpu-cores": "100"},
         "nvidia.com/gpu 2 became volcano.sh/vgpu-number 2, whole (memory and cores 100%)"),
    ],
    ids=["hami", "volcano"],
)  # fmt: skip
def test_whole_gpus_become_vgpus_with_all_the_memory_and_cores(pol, expected, warning) -> None:
    decision = run(gpu_pod("2"), pol)
    assert resources(decision) == {"requests": expected, "limits": expected}
    assert decision.warnings == [f'gpu-admission: container "app": {warning}']


def test_whole_gpus_over_the_maximum_are_left_as_written_for_the_line_that_names_them() -> None:
    decision = run(gpu_pod("9"), VOLCANO)
    assert resources(decision)["limits"] == {"nvidia.com/gpu": "9"}
    assert decision.denials == [
        'container "app": nvidia.com/gpu "9" exceeds the per-container maximum of 8 (policy "team"); request at most 8'
    ]


# --- written in the backend's own resources -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pol", "limits"),
    [
        (ACK, {"aliyun.com/gpu-mem": "8"}),
        (HAMI, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}),
        (HAMI, {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "30"}),
        (VOLCANO, {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "10240", "volcano.sh/vgpu-cores": "50"}),
    ],
    ids=["ack", "hami-mib", "hami-percent", "volcano"],
)
def test_a_request_written_in_the_backends_resources_is_left_as_written(pol, limits) -> None:
    decision = run(pod(container(limits=dict(limits))), pol)
    assert decision.verdict == "allow" and decision.violations == []
    assert resources(decision)["limits"] == limits
    assert decision.mutation_kinds == []


@pytest.mark.parametrize(
    ("pol", "limits", "line"),
    [
        (ACK, {"aliyun.com/gpu-mem": "90"}, 'container "app": aliyun.com/gpu-mem 90 (GiB) is more than one '
         "A100-80GB's memory (80 GiB): ACK GPU sharing gives each share the memory of one GPU (policy \"team\"); "
         "request at most 80, or whole GPUs as nvidia.com/gpu: N"),
        (HAMI, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "90000"}, 'container "app": nvidia.com/gpumem 90000 '
         "(MiB) is more than one A100-80GB's memory (81920 MiB): HAMi gives each share the memory of one GPU "
         '(policy "team"); request at most 81920, or whole GPUs as nvidia.com/gpu: N'),
        (VOLCANO, {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "150"}, 'container "app": '
         'volcano.sh/vgpu-cores 150 is more than 100 percent of one GPU (policy "team"); request at most 100'),
        # GPUs' worth of memory: 3 vGPUs of 100 % under a maximum of 2 per container
        (memory(Backend.HAMI, limits=Limits(max_per_container=2)),
         {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100"}, None),
        (memory(Backend.VOLCANO, limits=Limits(max_per_container=2)),
         {"volcano.sh/vgpu-number": "3", "volcano.sh/vgpu-memory-percentage": "100"},
         'container "app": volcano.sh/vgpu-number "3" exceeds the per-container maximum of 2 (policy "team"); '
         "request at most 2"),
        # a share beside whole GPUs in one container: no ACK node serves both (the GPUs' worth, 2, is not weighed)
        (memory(Backend.ACK, GPU(memory_mib=20480), limits=Limits(max_per_container=1)),
         {"aliyun.com/gpu-mem": "20", "nvidia.com/gpu": "1"},
         'pod: container "app" holds aliyun.com/gpu-mem 20 and whole nvidia.com/gpu 1, which no ACK node serves '
         'together: a node runs one ack.node.gpu.schedule mode, shares or whole GPUs (policy "team"); request '
         "aliyun.com/gpu-mem alone (more than one GPU's memory with the pod label aliyun.com/gpu-count) or whole "
         "nvidia.com/gpu alone, or split the pod"),
    ],
    ids=["ack-more-than-a-gpu", "hami-more-than-a-gpu", "volcano-cores", "hami-within", "volcano-count",
         "ack-share-beside-whole"],
)  # fmt: skip
def test_a_request_in_the_backends_resources_meets_the_same_caps(pol, limits, line) -> None:
    decision = run(pod(container(limits=limits)), pol)
    assert decision.denials == ([line] if line else [])


def test_the_pod_maximum_counts_gpus_worth_of_memory_not_vgpus() -> None:
    """Nine containers of a tenth each hold nine vGPUs but 0.9 of a GPU's memory: within a maximum of 1."""
    pol = memory(Backend.HAMI, limits=Limits(max_per_pod=1))
    tenths = pod(*(container(f"c{i}", limits={"nvidia.com/gpu": "0.1"}) for i in range(9)))
    decision = run(tenths, pol)
    assert decision.verdict == "allow"
    assert resources(decision, 8)["limits"] == {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "10",
    }  # fmt: skip
    halves = pod(*(container(f"c{i}", limits={"nvidia.com/gpu": "0.5"}) for i in range(3)))
    assert run(halves, pol).denials == [
        'pod: 1.5 GPUs\' worth of memory in effect (containers running together: "c0"=0.5, "c1"=0.5, "c2"=0.5) '
        'exceeds the per-pod maximum of 1 GPUs (policy "team", hami); request less or split the pod'
    ]


@pytest.mark.parametrize("backend", [Backend.ACK, Backend.HAMI, Backend.VOLCANO], ids=["ack", "hami", "volcano"])
def test_the_pod_maximum_counts_the_device_classes_resources_as_devices(backend: Backend) -> None:
    """The policy's own DeviceClasses' resources are DRA devices, not memory shares: under a memory backend each
    name's pod total is held to the per-pod maximum as under every other mode (before, two containers of three
    whole GPUs asked through NVIDIA's class passed a maximum of 4)."""
    pol = memory(backend, limits=Limits(max_per_pod=4))
    gpus = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    three_each = pod(container("a", limits={gpus: "3"}), container("b", limits={gpus: "3"}))
    assert run(three_each, pol).denials == [
        f'pod: {gpus} effective total 6 (containers running together: "a"=3, "b"=3) exceeds the per-pod maximum '
        'of 4 (policy "team"); request fewer or split the pod'
    ]
    assert run(pod(container("a", limits={gpus: "2"}), container("b", limits={gpus: "2"})), pol).verdict == "allow"


# --- the namespace's pool -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pol", "limits", "line"),
    [
        (HAMI, {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1024"},
         'container "app": volcano.sh/vgpu-memory "1024" is a memory-sliced GPU resource, but policy "team" gives this '
         "namespace HAMi memory slices (nvidia.com/gpucores, nvidia.com/gpumem, nvidia.com/gpumem-percentage); "
         "request nvidia.com/gpu: <fraction> (it becomes nvidia.com/gpumem) or those"),
        (ACK, {"nvidia.com/gpu.shared": "1"},
         'container "app": nvidia.com/gpu.shared "1" is a shared GPU, but policy "team" gives this namespace ACK GPU '
         "sharing memory slices (aliyun.com/gpu-mem); request nvidia.com/gpu: <fraction> (it becomes "
         "aliyun.com/gpu-mem) or those"),
        (policy(), {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"},
         'container "app": nvidia.com/gpumem "4096" is a memory-sliced GPU resource, but policy "team" gives this '
         "namespace whole GPUs (mode exclusive); request nvidia.com/gpu instead"),
    ],
    ids=["hami-gets-volcano", "ack-gets-time-slicing", "exclusive-gets-hami"],
)  # fmt: skip
def test_another_backends_resources_are_another_pool(pol, limits, line) -> None:
    assert line in run(pod(container(limits=limits)), pol).denials


# --- memory variables -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("pol", [ACK, HAMI, VOLCANO], ids=["ack", "hami", "volcano"])
def test_no_framework_memory_fraction_on_top_of_the_backends_cap(pol) -> None:
    """The backend caps what the container sees: a framework fraction of that would shrink it twice."""
    decision = run(gpu_pod("0.5"), pol)
    assert env_of(decision) == {}
    assert "env" not in decision.mutation_kinds


# --- placement and steering -----------------------------------------------------------------------------------


def test_hami_placement_reaches_its_scheduler_as_pod_annotations() -> None:
    decision = run(gpu_pod("0.5"), memory(Backend.HAMI, placement=Placement.SPREAD))
    assert decision.mutated["metadata"]["annotations"] == {
        "gpu-admission.io/policy": "team",
        "hami.io/node-scheduler-policy": "spread",
        "hami.io/gpu-scheduler-policy": "spread",
    }
    assert decision.warnings[-1] == (
        "gpu-admission: pod: set hami.io/node-scheduler-policy and hami.io/gpu-scheduler-policy spread"
    )


def test_hami_placement_goes_on_a_workloads_pod_template_and_replaces_another_value() -> None:
    spec = gpu_pod("2")["spec"]
    template = {"metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "spread", "keep": "me"}}, "spec": spec}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team"},
                  "spec": {"replicas": 2, "template": template}}  # fmt: skip
    decision = run(deployment, memory(Backend.HAMI, placement=Placement.BINPACK))
    assert decision.mutated["spec"]["template"]["metadata"]["annotations"] == {
        "hami.io/gpu-scheduler-policy": "binpack", "keep": "me", "hami.io/node-scheduler-policy": "binpack",
    }  # fmt: skip
    assert decision.mutated["metadata"]["annotations"]["gpu-admission.io/policy"] == "team"
    assert "hami.io/gpu-scheduler-policy" not in decision.mutated["metadata"]["annotations"]  # the pod's, not the
    # workload's (which also holds the re-apply record)


def test_hami_placement_is_added_to_a_pod_written_in_hamis_own_resources() -> None:
    written = pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}))
    decision = run(written, memory(Backend.HAMI, placement=Placement.BINPACK))
    assert decision.mutated["metadata"]["annotations"]["hami.io/node-scheduler-policy"] == "binpack"
    assert decision.mutation_kinds == ["placement"]


def test_no_placement_annotations_without_placement_or_without_a_gpu() -> None:
    assert run(gpu_pod("0.5"), HAMI).mutated["metadata"]["annotations"] == {"gpu-admission.io/policy": "team"}
    cpu_only = pod(container(limits={"cpu": "1"}))
    assert run(cpu_only, memory(Backend.HAMI, placement=Placement.SPREAD)).patch == []


@pytest.mark.parametrize(
    ("placement", "expression"),
    [
        (Placement.SPREAD, {"key": "ack.node.gpu.placement", "operator": "In", "values": ["spread"]}),
        # ACK packs where a node says nothing: binpack is every node not labelled spread
        (Placement.BINPACK, {"key": "ack.node.gpu.placement", "operator": "NotIn", "values": ["spread"]}),
    ],
)
def test_ack_pods_are_steered_to_isolating_shared_nodes_with_the_placement(placement, expression) -> None:
    decision = run(gpu_pod("0.5"), memory(Backend.ACK, placement=placement, steering=True))
    assert decision.mutated["spec"]["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "ack.node.gpu.schedule", "operator": "In", "values": ["cgpu", "core_mem", "mps"]}, expression,
        ]}],
    }}}  # fmt: skip
    assert decision.warnings[-1] == (
        "gpu-admission: pod: node affinity added on ack.node.gpu.schedule, ack.node.gpu.placement"
    )


# --- ACK's multi-GPU sharing: the pod label aliyun.com/gpu-count ----------------------------------------------
# ACK's documentation ("multi-GPU sharing"): a pod asking N GiB of aliyun.com/gpu-mem with the pod label
# aliyun.com/gpu-count: "M" gets N/M GiB from each of M GPUs of one node; N/M must be whole. Without the label,
# gpushare-scheduler-extender puts the pod's memory, its containers' sum, on one GPU.


def ack_pod(*containers: dict, gpus: str | None = None) -> dict:
    obj = pod(*containers)
    return labelled(obj, {"aliyun.com/gpu-count": gpus}) if gpus is not None else obj


def mem(name: str, gib: str, **extra: str) -> dict:
    return container(name, limits={"aliyun.com/gpu-mem": gib, **extra})


@pytest.mark.parametrize(
    ("obj", "denials"),
    [
        # 120 GiB over 2 A100-80GB: 60 of each; 1.5 GPUs' worth of memory, 2 GPUs touched
        (ack_pod(mem("app", "120"), gpus="2"), []),
        (ack_pod(mem("app", "60"), mem("b", "60"), gpus="2"), []),
        (ack_pod(mem("app", "60"), mem("b", "20")), []),  # 80 GiB on one GPU: all of it
        (ack_pod(mem("app", "120")), [
            'container "app": aliyun.com/gpu-mem 120 (GiB) is more than one A100-80GB\'s memory (80 GiB): ACK GPU '
            'sharing gives each share the memory of one GPU (policy "team"); request at most 80, or whole GPUs as '
            "nvidia.com/gpu: N",
        ]),
        (ack_pod(mem("app", "170"), gpus="2"), [
            'container "app": aliyun.com/gpu-mem 170 (GiB) is more than the memory of the 2 GPUs that the pod label '
            'aliyun.com/gpu-count spreads it over (160 GiB of A100-80GBs, policy "team"); request at most 160, or '
            "name more GPUs in the label",
        ]),
        (ack_pod(mem("app", "60"), mem("b", "40")), [
            'pod: aliyun.com/gpu-mem 100 GiB in all (containers "app"=60, "b"=40) is more than one A100-80GB\'s '
            'memory (80 GiB): ACK places a pod\'s memory on one GPU (policy "team"); request at most 80 in all, or '
            'spread it with the pod label aliyun.com/gpu-count: "2"',
        ]),
        (ack_pod(mem("app", "100"), mem("b", "80"), gpus="2"), [
            'pod: aliyun.com/gpu-mem 180 GiB in all (containers "app"=100, "b"=80) over 2 GPUs (the pod label '
            'aliyun.com/gpu-count "2") is 90 GiB from each, more than one A100-80GB\'s memory (80 GiB, policy '
            '"team"); request at most 160 in all, or spread it with the pod label aliyun.com/gpu-count: "3"',
        ]),
        (ack_pod(mem("app", "9"), gpus="2"), [
            'pod: aliyun.com/gpu-mem 9 GiB in all over 2 GPUs (the pod label aliyun.com/gpu-count "2") is not a whole '
            'number of GiB from each: ACK takes an equal whole number of GiB from each GPU (policy "team"); request '
            "a multiple of 2 in all",
        ]),
        (ack_pod(mem("app", "90"), gpus="9"), [
            'pod: the pod label aliyun.com/gpu-count "9" spreads its memory over 9 GPUs, more than the per-pod '
            'maximum of 8 GPUs (policy "team"); set at most "8"',
        ]),
        (ack_pod(mem("app", "8"), gpus="two"), [
            'pod: label aliyun.com/gpu-count "two" is not a whole number of GPUs: ACK spreads the pod\'s '
            'aliyun.com/gpu-mem over that many GPUs of one node (policy "team"); set a number such as "2", or '
            "remove it",
        ]),
        (ack_pod(mem("app", "8", **{"aliyun.com/gpu-count": "2"})), [
            'container "app": aliyun.com/gpu-count is a node\'s number of GPUs, not a container\'s request: ACK '
            'reads the GPUs a pod\'s memory spreads over from the pod label aliyun.com/gpu-count (policy "team"); '
            'remove it from resources and set the label, such as aliyun.com/gpu-count: "2"',
        ]),
    ],
    ids=["two-gpus", "two-containers-two-gpus", "one-gpu-full", "one-container-over", "over-two-gpus",
         "pod-over-one-gpu", "pod-over-two-gpus", "uneven", "too-many-gpus", "not-a-number", "count-as-resource"],
)  # fmt: skip
def test_ack_multi_gpu_shares_are_judged_as_the_extender_places_them(obj, denials) -> None:
    assert run(obj, ACK).denials == denials


def test_ack_pod_memory_on_a_gpu_under_one_gib_is_refused_with_its_lines() -> None:
    """A GPU under 1 GiB holds no whole GiB: every amount is over it, and no number of such GPUs is advised."""
    small = memory(Backend.ACK, GPU(memory_mib=512))
    denials = run(ack_pod(mem("app", "1"), mem("b", "1")), small).denials
    assert denials[-1] == (
        'pod: aliyun.com/gpu-mem 2 GiB in all (containers "app"=1, "b"=1) is more than one GPU\'s memory (0 GiB): '
        'ACK places a pod\'s memory on one GPU (policy "team"); request at most 0 in all'
    )
    assert len(denials) == 3  # each container's own line first


def test_ack_multi_gpu_memory_counts_against_the_pod_maximum_in_gpus_worth() -> None:
    """The label spreads memory over GPUs; the maximum still counts the memory: 240 GiB is 3 A100s' worth."""
    capped = memory(Backend.ACK, limits=Limits(max_per_container=2, max_per_pod=2))
    assert run(ack_pod(mem("app", "240"), gpus="4"), capped).denials == [
        'container "app": holds 3 GPUs\' worth of memory (ack), more than the per-container maximum of 2 GPUs '
        '(policy "team"); request less',
        'pod: the pod label aliyun.com/gpu-count "4" spreads its memory over 4 GPUs, more than the per-pod maximum '
        'of 2 GPUs (policy "team"); set at most "2"',
    ]


def test_a_fraction_above_one_is_refused_naming_acks_multi_gpu_form() -> None:
    """nvidia.com/gpu: 1.5 stays refused (no webhook-made label): the line says ACK's own form for it."""
    assert run(gpu_pod("1.5"), ACK).denials == [
        'container "app": nvidia.com/gpu "1.5" is fractional and more than one GPU (policy "team"); request a whole '
        "number of GPUs, or 1.5 GPUs' memory in ACK's own form: aliyun.com/gpu-mem: 120 with the pod label "
        'aliyun.com/gpu-count: "2" (60 GiB of each of 2 GPUs)'
    ]
    assert run(gpu_pod("1.5"), HAMI).denials == [
        'container "app": nvidia.com/gpu "1.5" is fractional and more than one GPU: HAMi gives one GPU\'s memory per '
        'share (policy "team"); request a fraction below 1 or a whole number of GPUs'
    ]


def test_a_deployments_template_label_spreads_its_pods_memory() -> None:
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
            "metadata": {"labels": {"app": "d"}}, "spec": {"containers": [mem("app", "120")]},
        }},
    }  # fmt: skip
    assert run(deployment, ACK).denials == [
        'container "app": aliyun.com/gpu-mem 120 (GiB) is more than one A100-80GB\'s memory (80 GiB): ACK GPU '
        'sharing gives each share the memory of one GPU (policy "team"); request at most 80, or whole GPUs as '
        "nvidia.com/gpu: N"
    ]
    assert run(labelled(deployment, {"aliyun.com/gpu-count": "2"}), ACK).denials == []


ACK_EXCLUSIVE = {"key": "ack.node.gpu.schedule", "operator": "NotIn", "values": ["cgpu", "core_mem", "mps", "share"]}


def _required(*expressions: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}],
    }}}  # fmt: skip


def test_ack_whole_gpus_are_steered_to_the_exclusive_pool_without_placement() -> None:
    """ACK's exclusive scheduling is `ack.node.gpu.schedule: default` or no label at all (its default); a
    shared node's nvidia.com/gpu is 0, so a whole GPU goes to every node not labelled with a shared mode."""
    decision = run(gpu_pod("2"), memory(Backend.ACK, placement=Placement.SPREAD, steering=True))
    assert resources(decision) == {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
    assert decision.mutated["spec"]["affinity"] == _required(ACK_EXCLUSIVE)
    assert decision.warnings == ["gpu-admission: pod: node affinity added on ack.node.gpu.schedule"]


def test_ack_isolation_none_steers_shares_to_every_shared_pool() -> None:
    decision = run(gpu_pod("0.5"), memory(Backend.ACK, isolation=Isolation.NONE, steering=True))
    assert decision.mutated["spec"]["affinity"] == _required(
        {"key": "ack.node.gpu.schedule", "operator": "In", "values": ["cgpu", "core_mem", "mps", "share"]}
    )


def test_a_whole_gpu_pod_pinned_to_acks_shared_pool_conflicts_and_the_default_pool_is_kept() -> None:
    pinned = gpu_pod("1", nodeSelector={"ack.node.gpu.schedule": "cgpu"})
    decision = run(pinned, memory(Backend.ACK, steering=True))
    assert decision.denials == [
        'pod: nodeSelector ack.node.gpu.schedule=cgpu conflicts with policy "team" (memory slices by ack), whose '
        "GPU pods run only on nodes with ack.node.gpu.schedule notin (cgpu,core_mem,mps,share); remove it, or make "
        "it select the policy's pool"
    ]
    exclusive = gpu_pod("1", nodeSelector={"ack.node.gpu.schedule": "default"})
    decision = run(exclusive, memory(Backend.ACK, steering=True))
    assert decision.allowed and decision.mutated["spec"]["affinity"] == _required(ACK_EXCLUSIVE)
    affinity = _required({"key": "ack.node.gpu.schedule", "operator": "In", "values": ["share"]})
    decision = run(gpu_pod("1", affinity=affinity), memory(Backend.ACK, steering=True))
    assert decision.denials == [
        'pod: required node affinity on ack.node.gpu.schedule conflicts with policy "team" (memory slices by ack): '
        "its only term excludes the nodes with ack.node.gpu.schedule notin (cgpu,core_mem,mps,share), where its GPU "
        "pods must run; remove it, or make it select the policy's pool"
    ]


def test_acks_multi_gpu_shares_are_steered_where_compute_is_shared() -> None:
    """ACK's multi-GPU sharing is served with memory isolation and shared compute only: not on core_mem pools."""
    pol = memory(Backend.ACK, placement=Placement.SPREAD, steering=True)
    decision = run(ack_pod(mem("app", "48"), gpus="2"), pol)
    assert decision.mutated["spec"]["affinity"] == _required(
        {"key": "ack.node.gpu.schedule", "operator": "In", "values": ["cgpu", "mps"]},
        {"key": "ack.node.gpu.placement", "operator": "In", "values": ["spread"]},
    )
    pinned = labelled(gpu_pod("0.5", nodeSelector={"ack.node.gpu.schedule": "core_mem"}), {"aliyun.com/gpu-count": "2"})
    assert run(pinned, pol).denials == [
        'pod: nodeSelector ack.node.gpu.schedule=core_mem conflicts with policy "team" (memory slices by ack, '
        "spread), whose GPU pods run only on nodes with ack.node.gpu.schedule in (cgpu,mps); remove it, or make it "
        "select the policy's pool"
    ]
    unisolated = memory(Backend.ACK, isolation=Isolation.NONE, steering=True)
    assert run(ack_pod(mem("app", "48"), gpus="2"), unisolated).mutated["spec"]["affinity"] == _required(
        {"key": "ack.node.gpu.schedule", "operator": "In", "values": ["cgpu", "mps", "share"]}
    )


def test_an_ack_pod_of_shares_and_whole_gpus_is_refused() -> None:
    """A node runs one ack.node.gpu.schedule mode, and ACK sets the other modes' resources to 0 there."""
    mixed = pod(container(limits={"nvidia.com/gpu": "0.5"}), container("b", limits={"nvidia.com/gpu": "1"}))
    assert run(mixed, ACK).denials == [
        'pod: holds aliyun.com/gpu-mem (container "app") and whole nvidia.com/gpu (container "b"), which no ACK '
        'node serves together: a node runs one ack.node.gpu.schedule mode, shares or whole GPUs (policy "team"); '
        "ask for shares in every container or whole GPUs in every one, or split the pod"
    ]
    assert run(mixed, HAMI).denials == []  # HAMi's whole GPUs are vGPUs too


def test_one_ack_container_holding_a_share_and_whole_gpus_is_refused_naming_both() -> None:
    """The same rule in one container: a share and whole GPUs, with their amounts; an init container too."""
    both = {"aliyun.com/gpu-mem": "20", "nvidia.com/gpu": "2"}
    line = (
        'pod: container "app" holds aliyun.com/gpu-mem 20 and whole nvidia.com/gpu 2, which no ACK node serves '
        'together: a node runs one ack.node.gpu.schedule mode, shares or whole GPUs (policy "team"); request '
        "aliyun.com/gpu-mem alone (more than one GPU's memory with the pod label aliyun.com/gpu-count) or whole "
        "nvidia.com/gpu alone, or split the pod"
    )
    decision = run(pod(container(limits=dict(both))), ACK)
    assert decision.denials == [line]
    assert resources(decision)["limits"] == both  # written in ACK's own resources: left as written
    assert run(pod(container(limits=dict(both)), container("b", limits={"nvidia.com/gpu": "1"})), ACK).denials == [
        line
    ]  # the container holding both is named, once
    init = pod(container("main", limits={"aliyun.com/gpu-mem": "8"}))
    init["spec"]["initContainers"] = [container("app", limits=dict(both))]
    assert run(init, ACK).denials == [line]


def test_a_whole_gpu_pod_bound_to_an_ack_shared_node_is_judged_by_its_labels() -> None:
    cluster = view(_ack_node("ack-0", "cgpu"))
    bound = gpu_pod("1", nodeName="ack-0")
    decision = evaluate(bound, "team", PolicySet((memory(Backend.ACK, steering=True),)), nodes=cluster)
    assert decision.denials == [
        'pod: spec.nodeName binds it to node "ack-0", whose label ack.node.gpu.schedule=cgpu does not match policy '
        '"team" (memory slices by ack), whose GPU pods run only on nodes with ack.node.gpu.schedule notin '
        "(cgpu,core_mem,mps,share); bind it to a node of the policy's pool, or leave spec.nodeName out and let the "
        "scheduler place it"
    ]


def test_acks_steering_is_said_by_policy_explain() -> None:
    from webhook.admission.phases import steering

    assert steering.describe(memory(Backend.ACK, placement=Placement.BINPACK, steering=True)) == (
        "pods holding aliyun.com/gpu-mem need node labels ack.node.gpu.schedule in (cgpu,core_mem,mps), "
        "ack.node.gpu.placement notin (spread); pods holding whole nvidia.com/gpu and no share need "
        "ack.node.gpu.schedule notin (cgpu,core_mem,mps,share)"
    )


def test_a_node_selector_for_acks_unisolated_pool_conflicts() -> None:
    obj = gpu_pod("0.5", nodeSelector={"ack.node.gpu.schedule": "share"})
    decision = run(obj, memory(Backend.ACK, steering=True))
    assert decision.denials == [
        'pod: nodeSelector ack.node.gpu.schedule=share conflicts with policy "team" (memory slices by ack), whose '
        "GPU pods run only on nodes with ack.node.gpu.schedule in (cgpu,core_mem,mps); remove it, or make it select "
        "the policy's pool"
    ]
    assert "affinity" not in decision.mutated["spec"]


def test_the_loader_steers_ack_by_default_and_the_others_have_nothing_to_steer() -> None:
    text = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: %s}
spec:
  namespaces: [%s]
  sharing: {mode: memory, backend: %s}
  gpu: {model: A100-80GB}
"""
    policies = parse_policy_sources({"p.yaml": "---\n".join(text % (b, b, b) for b in ("ack", "hami", "volcano"))})
    steering = {p.name: p.steering for p in policies.policies}
    assert steering == {"ack": True, "hami": False, "volcano": False}
    hami = run(gpu_pod("0.5", name="x") | {"metadata": {"name": "x", "namespace": "hami"}}, policies.policies[1],
               namespace="hami")  # fmt: skip
    assert "affinity" not in hami.mutated["spec"]


# --- never more memory than the share -------------------------------------------------------------------------


def _given_mib(limits: dict, backend: Backend) -> int:
    name = {Backend.ACK: "aliyun.com/gpu-mem", Backend.HAMI: "nvidia.com/gpumem",
            Backend.VOLCANO: "volcano.sh/vgpu-memory"}[backend]  # fmt: skip
    amount = int(parse_quantity(limits[name]))
    return amount * 1024 if backend is Backend.ACK else amount


@SETTINGS
@given(
    st.integers(1, 9999),
    st.sampled_from(list(Backend)),
    st.one_of(st.sampled_from(list(GPU_MODELS)).map(lambda m: GPU(model=m)),
              st.integers(1024, 200_000).map(lambda mib: GPU(memory_mib=mib))),
)  # fmt: skip
def test_no_mutated_container_gets_more_memory_than_its_share(ten_thousandths: int, backend: Backend, gpu) -> None:
    fraction = Fraction(ten_thousandths, 10_000)
    pol = memory(backend, gpu)
    gpu_mib = pol.gpu_memory_mib
    decision = evaluate(gpu_pod(str(fraction.numerator / fraction.denominator)), "team", PolicySet((pol,)))
    limits = decision.mutated["spec"]["containers"][0]["resources"]["limits"]
    if "nvidia.com/gpu" in limits and "nvidia.com/gpumem" not in limits:  # too small for one unit: refused
        assert decision.verdict == "deny"
        return
    given_mib = _given_mib(limits, backend)
    assert 0 < given_mib <= fraction * gpu_mib  # never more than the share: shares never overcommit a GPU
    assert given_mib > fraction * gpu_mib - (1024 if backend is Backend.ACK else 1)  # and less by under one unit
    cores = limits.get("nvidia.com/gpucores") or limits.get("volcano.sh/vgpu-cores")
    if cores is not None:
        assert 1 <= int(cores) <= fraction * 100
    assert decision.verdict == "allow"


# --- the real server -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def memory_server(start_server, tmp_path_factory):
    examples = Path(__file__).resolve().parent.parent / "examples" / "policies"
    directory = tmp_path_factory.mktemp("memory-policies")
    for name in ("memory-ack.yaml", "memory-hami.yaml", "memory-volcano.yaml"):
        (directory / name).write_text((examples / name).read_text())
    return start_server(copy_policies(directory / "all", directory))


def _namespaced(obj: dict, namespace: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return obj


def test_the_server_gives_each_backends_share_and_placement(memory_server) -> None:
    expected = {
        "ack-notebooks": {"aliyun.com/gpu-mem": "6"},  # 0.25 x 24 GiB
        "hami-serving": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "25"},
        # 0.25 x 81,559 MiB in units of 10 MiB (the example's gpuMemoryFactor), rounded down
        "vgpu-batch": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2038", "volcano.sh/vgpu-cores": "25"},
    }
    for namespace, wanted in expected.items():
        obj = _namespaced(gpu_pod("0.25"), namespace)
        response = review(memory_server, "mutate", obj)
        assert response["allowed"] is True, response
        mutated = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
        assert mutated["spec"]["containers"][0]["resources"] == {"requests": wanted, "limits": wanted}
        assert review(memory_server, "validate", mutated)["allowed"] is True
        assert "patch" not in review(memory_server, "mutate", mutated)
        if namespace == "hami-serving":
            assert mutated["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] == "binpack"
        if namespace == "ack-notebooks":
            terms = mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms["nodeSelectorTerms"][0]["matchExpressions"][1] == {
                "key": "ack.node.gpu.placement", "operator": "In", "values": ["spread"],
            }  # fmt: skip


def test_the_server_denies_a_fraction_below_one_unit_with_the_smallest(memory_server) -> None:
    response = review(memory_server, "mutate", _namespaced(gpu_pod("0.04"), "ack-notebooks"))
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        'container "app": nvidia.com/gpu "0.04" is less than one unit of ACK GPU sharing (1 GiB of the GPU\'s '
        '24576 MiB, policy "notebooks-ack-sharing"); request 0.0417 or more'
    )


def test_the_server_judges_a_request_written_for_volcano(memory_server) -> None:
    obj = _namespaced(pod(container(limits={"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "90000"})),
                      "vgpu-batch")  # fmt: skip
    response = review(memory_server, "validate", obj)
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        'container "app": volcano.sh/vgpu-memory 90000 (units of 10 MiB) is more than one H100-80GB\'s memory (8155 '
        'units of 10 MiB): Volcano vGPU gives each share the memory of one GPU (policy "batch-volcano-vgpu"); request '
        "at most 8155, or whole GPUs as nvidia.com/gpu: N"
    )


# --- the cluster view, drift, `policy lint --cluster` ---------------------------------------------------------


def _ack_node(name: str, schedule: str, placement: str | None = None, gib: str = "96", gpus: str = "4") -> dict:
    """A shared ACK node as the API sends it: 4 A10s (24 GiB each) as aliyun.com/gpu-mem and aliyun.com/gpu-count."""
    labels = {"ack.node.gpu.schedule": schedule, **({"ack.node.gpu.placement": placement} if placement else {})}
    return node(name, {"aliyun.com/gpu-mem": gib, "aliyun.com/gpu-count": gpus}, labels)


def test_the_node_snapshot_keeps_the_backends_labels_and_resources() -> None:
    info = NodeInfo.from_object(_ack_node("ack-0", "cgpu", "spread"))
    assert info is not None
    assert dict(info.allocatable) == {"aliyun.com/gpu-mem": 96, "aliyun.com/gpu-count": 4}
    assert dict(info.labels) == {"ack.node.gpu.schedule": "cgpu", "ack.node.gpu.placement": "spread"}
    vgpu = NodeInfo.from_object(node("v-0", {"volcano.sh/vgpu-number": "80", "volcano.sh/vgpu-memory": "652472",
                                             "volcano.sh/vgpu-cores": "800"}))  # fmt: skip
    assert vgpu is not None and set(vgpu.allocatable) == {
        "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores",
    }  # fmt: skip


ACK_A10 = memory(Backend.ACK, GPU(memory_mib=24576), placement=Placement.SPREAD, steering=True)


def test_ack_drift_names_an_unisolated_pool_another_placement_and_another_gpu() -> None:
    cluster = view(
        _ack_node("ack-0", "cgpu", "spread"),  # agrees
        _ack_node("ack-1", "cgpu"),  # binpack, ACK's default
        _ack_node("ack-2", "core_mem", "spread", gib="64", gpus="4"),  # 16 GiB GPUs
    )
    assert [d.line for d in clusterdrift.drift(ACK_A10, cluster)] == [
        'policy "team" gpu.memoryMiB is 24576 MiB, but 1 node (ack-2) says 16 GiB per GPU: each fraction is taken '
        "of another GPU's memory; set gpu.memoryMiB: 16384, or give these nodes' namespaces their own policy",
        'policy "team" sharing.placement is spread, but 1 node (ack-1) says ack.node.gpu.placement binpack: pods '
        "steered to spread nodes cannot run there; set sharing.placement: binpack, or label the node pool "
        "ack.node.gpu.placement=spread",
    ]
    only_share = view(_ack_node("ack-9", "share", "spread"))  # the policy's pods reach no node: its kind stands in
    assert [d.line for d in clusterdrift.drift(ACK_A10, only_share)] == [
        'policy "team" sharing.isolation is required (ack.node.gpu.schedule cgpu, core_mem, mps), but 1 node '
        "(ack-9) says ack.node.gpu.schedule share: no node of the pool caps a share's memory, so the policy's shares "
        "run nowhere; label the node pool ack.node.gpu.schedule=cgpu (or core_mem, mps), or set sharing.isolation: "
        "none"
    ]
    unisolated = memory(Backend.ACK, GPU(memory_mib=24576), placement=Placement.SPREAD, steering=True,
                        isolation=Isolation.NONE)  # fmt: skip
    assert clusterdrift.drift(unisolated, only_share) == ()


def test_volcano_shares_are_offered_by_volcano_nodes_only() -> None:
    """The offered check: a converted request that no node advertises warns (the pod would stay Pending)."""
    plain = view(node("gpu-0", {"nvidia.com/gpu": "8"}))
    decision = evaluate(gpu_pod("0.25"), "team", PolicySet((VOLCANO,)), nodes=plain)
    assert decision.warnings[-1] == (
        'gpu-admission: container "app": no node offers volcano.sh/vgpu-number; request one the nodes have'
    )
    with_vgpu = view(node("v-0", {"volcano.sh/vgpu-number": "80", "volcano.sh/vgpu-memory": "652472"}))
    assert len(evaluate(gpu_pod("0.25"), "team", PolicySet((VOLCANO,)), nodes=with_vgpu).warnings) == 1


def test_the_policy_references_memory_policies_load_and_are_the_example_files() -> None:
    from tests.test_readme import policy_examples

    root = Path(__file__).resolve().parent.parent
    blocks = [b for b in policy_examples((root / "docs" / "policies.md").read_text()) if "mode: memory" in b]
    shown = {p.name: p for b in blocks for p in parse_policy_sources({"policies.md": b}).policies}
    files = {p.name: p for p in parse_policy_sources({
        name: (root / "examples" / "policies" / name).read_text()
        for name in ("memory-ack.yaml", "memory-hami.yaml", "memory-volcano.yaml")
    }).policies}  # fmt: skip
    assert set(shown) == set(files) == {"notebooks-ack-sharing", "inference-hami", "batch-volcano-vgpu"}
    for name, shown_policy in shown.items():
        assert (shown_policy.sharing, shown_policy.gpu, shown_policy.limits, shown_policy.steering) == (
            files[name].sharing, files[name].gpu, files[name].limits, files[name].steering,
        )  # fmt: skip


def test_a_fraction_beside_the_backends_own_resources_is_refused_saying_so() -> None:
    written = pod(container(limits={"nvidia.com/gpu": "0.5", "nvidia.com/gpumem": "4096"}))
    assert run(written, HAMI).denials == [
        'container "app": nvidia.com/gpu "0.5" is fractional beside HAMi\'s own resources, which the webhook leaves '
        'as written (policy "team"); request the fraction alone (it becomes nvidia.com/gpumem), or nvidia.com/gpu: '
        "1 with nvidia.com/gpumem"
    ]


def against_nodes(tmp_path: Path, namespace: str, nodes: list[dict], example: str, *command: str,
                  policy_text: str | None = None):  # fmt: skip
    """`gpu-webhook <command>` with the shipped example policy `example` (or `policy_text`) in a policies directory,
    against a loopback Kubernetes API holding the namespace and `nodes`; `{policies}` and `{kubeconfig}` in the
    command are filled in."""
    from tests.test_cli_audit import gpu_webhook

    text = policy_text or (EXAMPLES / example).read_text()
    namespaces = ["default", namespace]
    with loopback_cluster(tmp_path, namespaces=namespaces, nodes=nodes, policies={example: text}) as cluster:
        return gpu_webhook(*(arg.format(policies=cluster.policies, kubeconfig=cluster.kubeconfig) for arg in command))


LINT = ("policy", "lint", "{policies}", "--cluster", "--kubeconfig", "{kubeconfig}")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "policies"


def test_policy_lint_cluster_reports_acks_drift_from_the_nodes_list(tmp_path) -> None:
    """`policy lint --cluster` on a loopback Kubernetes API whose ACK nodes pack while the policy spreads."""
    nodes = [_ack_node("ack-0", "cgpu", "binpack"), _ack_node("ack-1", "cgpu", "binpack")]
    run = against_nodes(tmp_path, "ack-notebooks", nodes, "memory-ack.yaml", *LINT)
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[-4:-1] == [
        "POLICY                 FIELD              POLICY SAYS  NODES SAY" + " " * 23 + "NODES" + " " * 19 + "FIX",
        "notebooks-ack-sharing  sharing.placement  spread       ack.node.gpu.placement binpack  2 nodes (ack-0, "
        "ack-1)  set sharing.placement: binpack, or label the node pool ack.node.gpu.placement=spread",
        "policy drift: 1 disagreement in 1 policy (2 nodes read); until fixed, memory fractions and MIG conversions "
        "are wrong for the pods on those nodes",
    ]


@st.composite
def memory_policies(draw):
    backend = draw(st.sampled_from(list(Backend)))
    placement = None if backend is Backend.VOLCANO else draw(st.sampled_from([None, *Placement]))
    gpu = GPU(model=draw(st.sampled_from(list(GPU_MODELS))))
    return memory(backend, gpu, placement=placement, steering=draw(st.booleans()),
                  limits=Limits(max_per_container=draw(st.sampled_from([None, 1, 4]))))  # fmt: skip


@SETTINGS
@given(objects(), memory_policies())
def test_memory_mutation_applies_is_idempotent_and_touches_nothing_else(obj, pol) -> None:
    """The engine's properties (test_engine_properties.py) on memory policies alone, placement included."""
    original = copy.deepcopy(obj)
    policies = PolicySet((pol,))
    decision = evaluate(obj, "team", policies)  # the namespace of `memory`'s policies
    assert decision.policy == "team"
    assert obj == original
    assert evanphx.apply(original, decision.patch) == decision.mutated
    assert evaluate(decision.mutated, "team", policies).patch == []
    assert strip_mutable(decision.mutated) == strip_mutable(obj)


def test_policy_lint_warns_about_an_ack_policy_that_does_not_steer(tmp_path) -> None:
    from tests.test_cli_policy import gpu_webhook

    root = Path(__file__).resolve().parent.parent
    text = (root / "examples" / "policies" / "memory-ack.yaml").read_text() + "  steering: false\n"
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "ack.yaml").write_text(text)
    run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-2:] == [
        "warning: policy notebooks-ack-sharing (pol/ack.yaml#0) has backend ack with steering: false: its pods may "
        "land on nodes labelled ack.node.gpu.schedule=share, which do not isolate memory, and placement never reaches "
        "ACK (it reads node labels); remove steering: false",
        "1 policy in 1 file: no errors, no glob ties, 1 steering warning",
    ]


@pytest.mark.parametrize("backend", list(Backend), ids=[b.value for b in Backend])
@pytest.mark.parametrize("value", ["0.25", "2"])
def test_a_re_applied_workload_gets_the_same_object(backend, value) -> None:
    """`kubectl apply` again sends the user's `nvidia.com/gpu` back into the webhook's output (reapply.py)."""
    placement = None if backend is Backend.VOLCANO else Placement.SPREAD
    policies = PolicySet((memory(backend, placement=placement, steering=True),))
    spec = gpu_pod(value)["spec"]
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team"},
                  "spec": {"template": {"metadata": {}, "spec": spec}}}  # fmt: skip
    first = evaluate(copy.deepcopy(deployment), "team", policies).mutated
    reapplied = copy.deepcopy(first)
    reapplied["spec"]["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(
        spec["containers"][0]["resources"]
    )
    again = evaluate(reapplied, "team", policies)
    assert evanphx.apply(reapplied, again.patch) == first


# --- what the cluster checks know of each backend's nodes ----------------------------------------------------


def test_an_ack_share_larger_than_any_nodes_gpu_fits_nowhere() -> None:
    """aliyun.com/gpu-mem on a node is the memory of all its GPUs (96 GiB over 4): a container's share is of one."""
    checks = ClusterChecks(fits=Check.DENY, offered=Check.DENY, drift=Check.OFF)
    pol = memory(Backend.ACK, GPU(memory_mib=49152), cluster_checks=checks, steering=True)  # it thinks 48 GiB GPUs
    cluster = view(_ack_node("ack-0", "cgpu"), _ack_node("ack-1", "cgpu", gib="64", gpus="4"))
    asked = pod(container(limits={"aliyun.com/gpu-mem": "30"}))
    decision = evaluate(asked, "team", PolicySet((pol,)), nodes=cluster)
    assert decision.denials == [
        'container "app": aliyun.com/gpu-mem "30" fits on no node: the most one GPU of a node holds is 24 GiB (node '
        '"ack-0"); request at most 24, or list a larger node pool in cluster.assumeNodes (policy "team", '
        "cluster.fits)"
    ]
    two = pod(container(limits={"aliyun.com/gpu-mem": "24"}), container("b", limits={"aliyun.com/gpu-mem": "24"}))
    # gpushare-scheduler-extender places the pod's memory, the sum of its containers', on one GPU
    # (pkg/utils/pod.go GetGPUMemoryFromPodResource, pkg/cache/nodeinfo.go allocateGPUID)
    assert evaluate(two, "team", PolicySet((pol,)), nodes=cluster).denials == [
        'pod: aliyun.com/gpu-mem effective total 48 (containers running together: "app"=24, "b"=24) fits on no '
        'node: the most one GPU of a node holds is 24 GiB (node "ack-0"); request at most 24 in all, or split the '
        'pod (policy "team", cluster.fits)'
    ]
    spread = labelled(two, {"aliyun.com/gpu-count": "2"})
    assert evaluate(spread, "team", PolicySet((pol,)), nodes=cluster).denials == []  # 24 GiB of each of 2 GPUs
    converted = evaluate(gpu_pod("0.75"), "team", PolicySet((pol,)), nodes=cluster)  # 36 GiB of 48
    assert resources(converted)["limits"] == {"aliyun.com/gpu-mem": "36"}
    assert converted.denials == [  # the amount it became: what the scheduler would look for
        'container "app": aliyun.com/gpu-mem "36" fits on no node: the most one GPU of a node holds is 24 GiB (node '
        '"ack-0"); request at most 24, or list a larger node pool in cluster.assumeNodes (policy "team", '
        "cluster.fits)"
    ]
    assert evaluate(gpu_pod("0.5"), "team", PolicySet((pol,)), nodes=cluster).denials == []


def test_an_ack_pod_spread_over_gpus_fits_as_ack_places_it() -> None:
    """The pod label aliyun.com/gpu-count: "M" puts N/M GiB on each of M GPUs of one node (ACK's multi-GPU
    sharing): a node of fewer GPUs does not count, and the line says the most the pod can ask for in all."""
    checks = ClusterChecks(fits=Check.DENY, offered=Check.DENY, drift=Check.OFF)
    pol = memory(Backend.ACK, GPU(memory_mib=49152), cluster_checks=checks, steering=True)
    # one GPU of 80 GiB beside four of 24: a share of 40 GiB fits there, but not 40 GiB of each of 2 GPUs
    cluster = view(_ack_node("big", "cgpu", gib="80", gpus="1"), _ack_node("ack-0", "cgpu"))
    policies = PolicySet((pol,))
    assert evaluate(ack_pod(mem("app", "40")), "team", policies, nodes=cluster).denials == []
    assert evaluate(ack_pod(mem("app", "48"), gpus="2"), "team", policies, nodes=cluster).denials == []
    assert evaluate(ack_pod(mem("app", "80"), gpus="2"), "team", policies, nodes=cluster).denials == [
        'container "app": aliyun.com/gpu-mem "80" over 2 GPUs (the pod label aliyun.com/gpu-count "2") is 40 GiB '
        "from each, which fits on no node: the most one GPU of a node with 2 GPUs or more holds is 24 GiB (node "
        '"ack-0"); request at most 48 (24 GiB of each of 2 GPUs), or list a larger node pool in '
        'cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    two = ack_pod(mem("app", "40"), mem("b", "40"), gpus="2")  # 80 GiB in all: the pod's, over its 2 GPUs
    assert evaluate(two, "team", policies, nodes=cluster).denials == [
        'pod: aliyun.com/gpu-mem effective total 80 (containers running together: "app"=40, "b"=40) over 2 GPUs '
        '(the pod label aliyun.com/gpu-count "2") is 40 GiB from each, which fits on no node: the most one GPU of '
        'a node with 2 GPUs or more holds is 24 GiB (node "ack-0"); request at most 48 in all, or split the pod '
        '(policy "team", cluster.fits)'
    ]
    assert evaluate(ack_pod(mem("app", "40"), gpus="8"), "team", policies, nodes=cluster).denials == [
        'pod: the pod label aliyun.com/gpu-count "8" spreads its aliyun.com/gpu-mem over 8 GPUs of one node, and '
        'no node has that many: the most one node has is 4 (node "ack-0"); set at most "4", or list a larger node '
        'pool in cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    # an autoscaled pool of eight 24 GiB GPUs: 8 GPUs of one node are there
    pool = AssumedNode("ack-8", (("aliyun.com/gpu-mem", 192), ("aliyun.com/gpu-count", 8)))
    warn = ClusterChecks(fits=Check.WARN, offered=Check.DENY, drift=Check.OFF, assume_nodes=(pool,))
    scaled = memory(Backend.ACK, GPU(memory_mib=49152), cluster_checks=warn)
    decision = evaluate(ack_pod(mem("app", "40"), gpus="8"), "team", PolicySet((scaled,)), nodes=cluster)
    assert decision.allowed and decision.warnings == []
    decision = evaluate(ack_pod(mem("app", "80"), gpus="2"), "team", PolicySet((scaled,)), nodes=cluster)
    assert decision.allowed and decision.warnings == [
        'gpu-admission: container "app": aliyun.com/gpu-mem "80" over 2 GPUs fits on no node; request at most 48'
    ]


HAMI_JSON = json.dumps([
    {"id": "GPU-0", "count": 10, "devmem": 32768, "devcore": 100, "type": "NVIDIA-Tesla V100-PCIE-32GB", "numa": 1,
     "mode": "hami-core", "health": True},
    {"id": "GPU-1", "index": 1, "count": 10, "devmem": 32768, "devcore": 100, "type": "NVIDIA-Tesla V100-PCIE-32GB",
     "mode": "hami-core", "health": True},
])  # fmt: skip
HAMI_LEGACY = (
    "GPU-0,10,81920,100,NVIDIA-NVIDIA A100-SXM4-80GB,0,true:GPU-1,10,81920,100,NVIDIA-NVIDIA A100-SXM4-80GB,0,true:"
)
HAMI_H100 = json.dumps([
    {"id": "GPU-2", "count": 10, "devmem": 81559, "type": "NVIDIA-NVIDIA H100 80GB HBM3", "health": True}
])  # fmt: skip


def _hami_node(name: str, register: str, gpus: str = "20", gpus_total: str | None = None) -> dict:
    """A HAMi node: its vGPUs as nvidia.com/gpu (split count x GPUs), its GPUs in the register annotation."""
    obj = node(name, {"nvidia.com/gpu": gpus_total or gpus})
    obj["metadata"]["annotations"] = {"hami.io/node-nvidia-register": register, "hami.io/node-handshake": "x"}
    return obj


def test_the_node_snapshot_keeps_hamis_registered_gpus_in_both_encodings() -> None:
    info = NodeInfo.from_object(_hami_node("h-0", HAMI_JSON))
    legacy = NodeInfo.from_object(_hami_node("h-1", HAMI_LEGACY))
    assert info is not None and legacy is not None
    assert (info.registrar, tuple(info.devices)) == ("hami", (("NVIDIA-Tesla V100-PCIE-32GB", 32768),))
    assert (legacy.registrar, tuple(legacy.devices)) == ("hami", (("NVIDIA-NVIDIA A100-SXM4-80GB", 81920),))
    again = NodeInfo.from_object(_hami_node("h-9", HAMI_JSON))
    assert again is not None and again.devices is info.devices  # interned: 5,000 nodes hold a few tuples
    for broken in ("[{", "GPU-0,10:", '[{"type": "x", "devmem": "81920"}]', '{"a": 1}', ""):
        got = NodeInfo.from_object(_hami_node("h-2", broken))
        assert got is not None and got.devices == () and got.registrar == ""


def test_hami_drift_compares_the_registered_gpus_with_the_policys_model_and_memory() -> None:
    cluster = view(
        _hami_node("h-0", HAMI_LEGACY),  # agrees
        _hami_node("h-1", HAMI_JSON),
        _hami_node("h-2", HAMI_JSON),
        _hami_node("h-3", HAMI_H100),  # 81,559 MiB: within NVML's tolerance of 81,920, but another model
    )
    assert [d.line for d in clusterdrift.drift(HAMI, cluster)] == [
        'policy "team" gpu.model is A100-80GB, but 1 node (h-3) says H100-80GB: memory limits are worked out for '
        "A100-80GB's memory; set gpu.model: H100-80GB (or auto), or give these nodes' namespaces their own policy"
    ]
    by_memory = memory(Backend.HAMI, GPU(memory_mib=81920))
    assert [d.line for d in clusterdrift.drift(by_memory, cluster)] == [
        'policy "team" gpu.memoryMiB is 81920, but 2 nodes (h-1, h-2) say 32768: memory limits are worked out for '
        "another GPU's memory; set gpu.memoryMiB: 32768"
    ]
    gfd = node("h-4", {"nvidia.com/gpu": "20"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                                 "nvidia.com/gpu.memory": "81920"})  # fmt: skip
    gfd["metadata"]["annotations"] = {"hami.io/node-nvidia-register": HAMI_JSON}
    assert clusterdrift.drift(by_memory, view(gfd)) == ()  # GPU feature discovery's labels, where a node has them


def test_policy_lint_cluster_reports_hamis_drift_from_the_nodes_annotations(tmp_path) -> None:
    """`policy lint --cluster` on a loopback Kubernetes API whose HAMi nodes register V100s; the policy says A100."""
    text = (EXAMPLES / "memory-hami.yaml").read_text().replace("model: A100-80GB", "memoryMiB: 81920")
    nodes = [_hami_node("hami-0", HAMI_JSON), _hami_node("hami-1", HAMI_LEGACY)]
    run = against_nodes(tmp_path, "hami-serving", nodes, "memory-hami.yaml", *LINT, policy_text=text)
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[-4:-1] == [
        "POLICY          FIELD          POLICY SAYS  NODES SAY  NODES            FIX",
        "inference-hami  gpu.memoryMiB  81920        32768      1 node (hami-0)  set gpu.memoryMiB: 32768",
        "policy drift: 1 disagreement in 1 policy (2 nodes read); until fixed, memory fractions and MIG conversions "
        "are wrong for the pods on those nodes",
    ]


# --- Volcano's gpuMemoryFactor and HAMi's deviceMemoryScaling -------------------------------------------------
#
# Written from the device plugins' sources: Volcano's vGPU device plugin (Project-HAMi/volcano-vgpu-device-plugin
# pkg/plugin/register.go) registers NVML's MiB divided by gpuMemoryFactor, and gives a container
# CUDA_DEVICE_MEMORY_LIMIT = its volcano.sh/vgpu-memory times the factor (pkg/plugin/server.go); it encodes each
# GPU as `id,count,devmem,type,health,mode:` (pkg/util/util.go EncodeNodeDevices), five fields before the dynamic
# MIG release. HAMi's device plugin registers NVML's MiB times deviceMemoryScaling (getAPIDevices, register.go).

H100_TYPE = "NVIDIA-NVIDIA H100 80GB HBM3"  # "NVIDIA-" and NVML's name, as both plugins write it


def volcano_memory(gpu: GPU = H100, factor: int = 1, **kw):
    return policy(sharing=Sharing(mode=Mode.MEMORY, backend=Backend.VOLCANO, gpu_memory_factor=factor), gpu=gpu,
                  **kw)  # fmt: skip


def hami_memory(scaling: Fraction, gpu: GPU = A100, **kw):
    return policy(sharing=Sharing(mode=Mode.MEMORY, backend=Backend.HAMI, device_memory_scaling=scaling), gpu=gpu,
                  **kw)  # fmt: skip


def _volcano_node(name: str, devmem: int, kind: str = H100_TYPE, gpus: int = 2, mode: str | None = "hami-core"):
    """A Volcano vGPU node: vgpu-number = GPUs x deviceSplitCount (10), vgpu-memory the units of all GPUs."""
    entries = "".join(f"GPU-{name}-{i},10,{devmem},{kind},true" + (f",{mode}" if mode else "") + ":"
                      for i in range(gpus))  # fmt: skip
    obj = node(name, {"volcano.sh/vgpu-number": str(10 * gpus), "volcano.sh/vgpu-memory": str(devmem * gpus),
                      "volcano.sh/vgpu-cores": str(100 * gpus)})  # fmt: skip
    obj["metadata"]["annotations"] = {"volcano.sh/node-vgpu-register": entries}
    return obj


@pytest.mark.parametrize(
    ("pol", "value", "expected", "warning"),
    [
        # 0.25 x 81,559 MiB = 20,389.75 MiB = 2,038.975 units of 10 MiB: 2,038 (20,380 MiB)
        (volcano_memory(factor=10), "0.25", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2038",
                                             "volcano.sh/vgpu-cores": "25"},
         "nvidia.com/gpu 0.25 became volcano.sh/vgpu-memory 2038, volcano.sh/vgpu-cores 25"),
        # units of 1,000 MiB: 20.39 -> 20 (20,000 MiB)
        (volcano_memory(factor=1000), "0.25", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "20",
                                               "volcano.sh/vgpu-cores": "25"},
         "nvidia.com/gpu 0.25 became volcano.sh/vgpu-memory 20, volcano.sh/vgpu-cores 25"),
        # HAMi registers 81,920 x 2 = 163,840 MiB per GPU: a quarter of it is 40,960 MiB
        (hami_memory(Fraction(2)), "0.25", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960",
                                            "nvidia.com/gpucores": "25"},
         "nvidia.com/gpu 0.25 became 1 with nvidia.com/gpumem 40960, nvidia.com/gpucores 25"),
        # 81,920 x 1.5 = 122,880 MiB; 0.3 of it is 36,864
        (hami_memory(Fraction(3, 2)), "0.3", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "36864",
                                              "nvidia.com/gpucores": "30"},
         "nvidia.com/gpu 0.3 became 1 with nvidia.com/gpumem 36864, nvidia.com/gpucores 30"),
        # below 1, HAMi registers less than the GPU has: 81,920 x 0.5 = 40,960 MiB, a quarter 10,240
        (hami_memory(Fraction(1, 2)), "0.25", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240",
                                               "nvidia.com/gpucores": "25"},
         "nvidia.com/gpu 0.25 became 1 with nvidia.com/gpumem 10240, nvidia.com/gpucores 25"),
    ],
    ids=["volcano-factor-10", "volcano-factor-1000", "hami-scaling-2", "hami-scaling-1.5", "hami-scaling-0.5"],
)  # fmt: skip
def test_a_fraction_is_taken_in_the_device_plugins_units_of_the_memory_it_registers(pol, value, expected, warning):
    decision = run(gpu_pod(value), pol)
    assert decision.verdict == "allow" and decision.violations == []
    assert resources(decision) == {"requests": expected, "limits": expected}
    assert decision.warnings == [f'gpu-admission: container "app": {warning}']


@pytest.mark.parametrize(
    ("pol", "value", "line"),
    [
        # one unit of 1,000 MiB is 1,000 / 81,559 = 0.01226 of the GPU: rounded up to 0.0123
        (volcano_memory(factor=1000), "0.012", 'container "app": nvidia.com/gpu "0.012" is less than one unit of '
         "Volcano vGPU (1 unit of 1000 MiB of the GPU's 81559 MiB and 1% of its compute, policy \"team\"); request "
         "0.0123 or more"),
        (hami_memory(Fraction(1, 2)), "0.005", 'container "app": nvidia.com/gpu "0.005" is less than one unit of '
         "HAMi (1 MiB of the GPU's 40960 MiB (81920 MiB x HAMi's deviceMemoryScaling 0.5) and 1% of its compute, "
         'policy "team"); request 0.01 or more'),
    ],
    ids=["volcano-factor-1000", "hami-scaling-0.5"],
)  # fmt: skip
def test_the_smallest_fraction_is_one_unit_of_the_device_plugins(pol, value, line) -> None:
    decision = run(gpu_pod(value), pol)
    assert decision.denials == [line]
    smallest = line.rsplit("request ", 1)[1].removesuffix(" or more")
    assert run(gpu_pod(smallest), pol).verdict == "allow"


@pytest.mark.parametrize(
    ("pol", "limits", "line"),
    [
        # 9,000 units of 10 MiB = 90,000 MiB, more than 81,559: 8,155 units is the most
        (volcano_memory(factor=10), {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "9000"},
         'container "app": volcano.sh/vgpu-memory 9000 (units of 10 MiB) is more than one H100-80GB\'s memory (8155 '
         'units of 10 MiB): Volcano vGPU gives each share the memory of one GPU (policy "team"); request at most '
         "8155, or whole GPUs as nvidia.com/gpu: N"),
        (volcano_memory(factor=10), {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8155"}, None),
        # HAMi's scheduler divides the 163,840 MiB it registers: 170,000 is more, 163,840 is all of it
        (hami_memory(Fraction(2)), {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "170000"},
         'container "app": nvidia.com/gpumem 170000 (MiB) is more than one A100-80GB\'s memory (163840 MiB as HAMi '
         "registers it: 81920 MiB x deviceMemoryScaling 2): HAMi gives each share the memory of one GPU (policy "
         '"team"); request at most 163840, or whole GPUs as nvidia.com/gpu: N'),
        (hami_memory(Fraction(2)), {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "163840"}, None),
    ],
    ids=["volcano-more-than-a-gpu", "volcano-a-gpu", "hami-more-than-a-gpu", "hami-a-gpu"],
)  # fmt: skip
def test_a_request_in_the_backends_units_is_capped_at_the_memory_the_plugin_registers(pol, limits, line) -> None:
    assert run(pod(container(limits=limits)), pol).denials == ([line] if line else [])


def test_gpus_worth_of_memory_counts_volcano_units_as_the_factors_mib() -> None:
    """4,096 units of 20 MiB are half an A100-80GB: three such containers hold 1.5 GPUs' worth."""
    pol = volcano_memory(A100, factor=20, limits=Limits(max_per_pod=1))
    half = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2048"}
    assert run(pod(*(container(f"c{i}", limits=dict(half)) for i in range(2))), pol).denials == []
    assert run(pod(*(container(f"c{i}", limits=dict(half)) for i in range(3))), pol).denials == [
        'pod: 1.5 GPUs\' worth of memory in effect (containers running together: "c0"=0.5, "c1"=0.5, "c2"=0.5) '
        'exceeds the per-pod maximum of 1 GPUs (policy "team", volcano); request less or split the pod'
    ]


@pytest.mark.parametrize("backend", [Backend.HAMI, Backend.VOLCANO], ids=["hami", "volcano"])
def test_whole_gpus_are_all_of_what_the_plugin_registers_whatever_its_units(backend) -> None:
    pol = hami_memory(Fraction(2)) if backend is Backend.HAMI else volcano_memory(factor=10)
    plain = run(gpu_pod("2"), memory(backend))
    assert resources(run(gpu_pod("2"), pol)) == resources(plain)  # memory-percentage 100, cores 100


@SETTINGS
@given(
    st.integers(1, 9999),
    st.sampled_from([1, 2, 10, 64, 100, 1000]),
    st.sampled_from([Fraction(1, 2), Fraction(1), Fraction(3, 2), Fraction(9, 5), Fraction(2), Fraction(5)]),
    st.one_of(st.sampled_from(list(GPU_MODELS)).map(lambda m: GPU(model=m)),
              st.integers(1024, 200_000).map(lambda mib: GPU(memory_mib=mib))),
)  # fmt: skip
def test_no_share_is_more_than_f_of_the_memory_the_plugin_registers(ten_thousandths, factor, scaling, gpu) -> None:
    """Volcano: the units times the factor at most f of the GPU's MiB, less by under one unit. HAMi: the MiB
    at most f of what it registers (the GPU's MiB times the scaling, rounded down as HAMi does)."""
    fraction = Fraction(ten_thousandths, 10_000)
    text = str(fraction.numerator / fraction.denominator)
    gpu_mib = volcano_memory(gpu).gpu_memory_mib
    assert gpu_mib is not None
    cases = [
        (volcano_memory(gpu, factor), "volcano.sh/vgpu-memory", factor, gpu_mib),
        (hami_memory(scaling, gpu), "nvidia.com/gpumem", 1, int(gpu_mib * scaling)),
    ]
    for pol, name, unit, whole_mib in cases:
        decision = evaluate(gpu_pod(text), "team", PolicySet((pol,)))
        limits = decision.mutated["spec"]["containers"][0]["resources"]["limits"]
        if fraction * whole_mib < unit or fraction < Fraction(1, 100):  # below one unit, or 1% of the compute
            assert name not in limits and decision.verdict == "deny"
            continue
        given_mib = int(limits[name]) * unit
        assert fraction * whole_mib - unit < given_mib <= fraction * whole_mib
        assert decision.verdict == "allow"


def test_the_node_snapshot_keeps_volcanos_registered_gpus_in_both_of_its_encodings() -> None:
    six = NodeInfo.from_object(_volcano_node("v-0", 8155))  # with the mode (dynamic MIG and later)
    five = NodeInfo.from_object(_volcano_node("v-1", 81559, mode=None))  # before it
    assert six is not None and five is not None
    assert (six.registrar, tuple(six.devices)) == ("volcano", ((H100_TYPE, 8155),))
    assert (five.registrar, tuple(five.devices)) == ("volcano", ((H100_TYPE, 81559),))
    again = NodeInfo.from_object(_volcano_node("v-2", 8155))
    assert again is not None and again.devices is six.devices  # interned
    # The same numbers registered by HAMi are another registrar's: the inventory sees the node change
    hami = NodeInfo.from_object(_hami_node("v-0", json.dumps([{"devmem": 8155, "type": H100_TYPE}])))
    assert hami is not None and tuple(hami.devices) == tuple(six.devices) and hami.devices != six.devices
    assert dataclass_replace(six, devices=hami.devices) != six


def dataclass_replace(info: NodeInfo, **changes) -> NodeInfo:
    import dataclasses

    return dataclasses.replace(info, **changes)


HOSTILE_REGISTERS = [
    "[" * 100_000,  # JSON nested past the interpreter's recursion limit
    '[{"devmem": 81920, "type": "NVIDIA-A100"}' + "]" * 5,
    "GPU-0,10,²,NVIDIA-NVIDIA A100-SXM4-80GB,true,hami-core:",  # a digit to str.isdigit, not to int()
    "GPU-0,10," + "9" * 5000 + ",NVIDIA-NVIDIA A100-SXM4-80GB,true,hami-core:",  # past int()'s digit limit
    "GPU-0,10,²,100,NVIDIA-NVIDIA A100-SXM4-80GB,0,true:",  # HAMi's older entries, the same two
    "GPU-0,10," + "9" * 5000 + ",100,NVIDIA-NVIDIA A100-SXM4-80GB,0,true:",
    "GPU-0,10,-81920,NVIDIA-NVIDIA A100-SXM4-80GB,true,hami-core:",
    "GPU-0,10,0,NVIDIA-NVIDIA A100-SXM4-80GB,true,hami-core:",
    "GPU-0,10,81920,NVIDIA\nA100\x1b[31m,true,hami-core:",  # a type that would break a line
    "GPU-0,10,81920,,true,hami-core:",
    "GPU-0,10,81920," + "A" * 200 + ",true,hami-core:",
    "GPU-0,10,81920:",
    "GPU-0,10,81920,NVIDIA-NVIDIA A100-SXM4-80GB,true,hami-core,x,y:",
    ":::,,,:,,,,,:",
    "x" * 250_000,
    json.dumps(
        [
            {"devmem": 10**12, "type": "NVIDIA-A100"},
            {"devmem": True, "type": "NVIDIA-A100"},
            {"devmem": 81920, "type": 7},
            {"devmem": 81920, "type": "T" * 500},
            [1],
            None,
        ]
    ),
    json.dumps({"devmem": 81920, "type": "NVIDIA-A100"}),
    12345,
    ["GPU-0,10,81920,NVIDIA-NVIDIA A100-SXM4-80GB,true,hami-core:"],
    None,
]


@pytest.mark.parametrize("annotation", ["volcano.sh/node-vgpu-register", "hami.io/node-nvidia-register"])
@pytest.mark.parametrize("value", HOSTILE_REGISTERS, ids=range(len(HOSTILE_REGISTERS)))
def test_a_hostile_register_annotation_reads_as_no_gpus(annotation, value) -> None:
    obj = node("n-0", {"volcano.sh/vgpu-number": "10", "nvidia.com/gpu": "10"})
    obj["metadata"]["annotations"] = {annotation: value}
    info = NodeInfo.from_object(obj)
    assert info is not None and info.devices == () and info.registrar == ""
    cluster = view(obj)
    for pol in (volcano_memory(factor=10), hami_memory(Fraction(2)), VOLCANO, HAMI):
        assert clusterdrift.drift(pol, cluster) == ()
        assert evaluate(gpu_pod("0.25"), "team", PolicySet((pol,)), nodes=cluster).verdict == "allow"


def test_volcano_drift_reads_the_registered_units_through_the_policys_factor() -> None:
    cluster = view(
        _volcano_node("v-0", 8155),  # 81,559 MiB in units of 10 MiB
        _volcano_node("v-1", 8155),
        _volcano_node("v-2", 81559, mode=None),  # units of 1 MiB, an older device plugin
        _volcano_node("v-3", 81, kind="NVIDIA-NVIDIA H100 80GB HBM3"),  # units of 1,000 MiB
    )
    assert [d.line for d in clusterdrift.drift(volcano_memory(factor=10), cluster)] == [
        'policy "team" sharing.gpuMemoryFactor is 10, but 1 node (v-2) says 1 (81559 units of volcano.sh/vgpu-memory '
        "per H100-80GB): a unit of volcano.sh/vgpu-memory is 1 MiB there, so each share gets 0.1 times the memory it "
        "means; set sharing.gpuMemoryFactor: 1 (the device plugin's gpuMemoryFactor)",
        'policy "team" sharing.gpuMemoryFactor is 10, but 1 node (v-3) says 1000 (81 units of volcano.sh/vgpu-memory '
        "per H100-80GB): a unit of volcano.sh/vgpu-memory is 1000 MiB there, so each share gets 100 times the memory "
        "it means; set sharing.gpuMemoryFactor: 1000 (the device plugin's gpuMemoryFactor)",
    ]
    assert [d.line for d in clusterdrift.drift(volcano_memory(), view(_volcano_node("v-0", 8155)))] == [
        'policy "team" sharing.gpuMemoryFactor is 1, but 1 node (v-0) says 10 (8155 units of volcano.sh/vgpu-memory '
        "per H100-80GB): a unit of volcano.sh/vgpu-memory is 10 MiB there, so each share gets 10 times the memory it "
        "means; set sharing.gpuMemoryFactor: 10 (the device plugin's gpuMemoryFactor)",
    ]  # and no gpu.model or gpu.memoryMiB line besides: the units were misread, the GPU is the one the policy says
    agreeing = view(_volcano_node("v-0", 8155), _volcano_node("v-1", 8155))
    assert clusterdrift.drift(volcano_memory(factor=10), agreeing) == ()


def test_volcano_drift_names_another_gpu_through_the_factor() -> None:
    cluster = view(_volcano_node("v-0", 8155), _volcano_node("v-1", 4096, kind="NVIDIA-NVIDIA A100-SXM4-40GB"))
    assert [d.line for d in clusterdrift.drift(volcano_memory(A100, factor=10), cluster)] == [
        'policy "team" gpu.model is A100-80GB, but 1 node (v-1) says A100-40GB: memory limits are worked out for '
        "A100-80GB's memory; set gpu.model: A100-40GB (or auto), or give these nodes' namespaces their own policy",
        'policy "team" gpu.model is A100-80GB, but 1 node (v-0) says H100-80GB: memory limits are worked out for '
        "A100-80GB's memory; set gpu.model: H100-80GB (or auto), or give these nodes' namespaces their own policy",
    ]
    by_memory = volcano_memory(GPU(memory_mib=40960), factor=10)  # 4,096 units of 10 MiB are 40,960 MiB
    assert [d.line for d in clusterdrift.drift(by_memory, cluster)] == [
        'policy "team" gpu.memoryMiB is 40960, but 1 node (v-0) says 81550: memory limits are worked out for another '
        "GPU's memory; set gpu.memoryMiB: 81550"
    ]
    auto = volcano_memory(GPU(model=None), factor=10, cluster_checks=ClusterChecks(auto_model=True))
    assert policynodes.resolve(auto, view(_volcano_node("v-0", 8155))).gpu.model == "H100-80GB"


def test_hami_drift_reads_the_registered_memory_through_the_policys_scaling() -> None:
    a100 = "NVIDIA-NVIDIA A100-SXM4-80GB"
    scaled = json.dumps([{"id": "GPU-0", "count": 10, "devmem": 163840, "devcore": 100, "type": a100}])
    legacy = f"GPU-1,10,147456,100,{a100},0,true:"  # 81,920 x 1.8
    cluster = view(_hami_node("h-0", scaled), _hami_node("h-1", HAMI_LEGACY), _hami_node("h-2", legacy))
    assert [d.line for d in clusterdrift.drift(hami_memory(Fraction(2)), cluster)] == [
        'policy "team" sharing.deviceMemoryScaling is 2, but 1 node (h-1) says 1 (81920 MiB registered per '
        "A100-80GB): HAMi divides 81920 MiB of each GPU there, so each fraction is taken of another amount of memory; "
        "set sharing.deviceMemoryScaling: 1 (HAMi's deviceMemoryScaling)",
        'policy "team" sharing.deviceMemoryScaling is 2, but 1 node (h-2) says 1.8 (147456 MiB registered per '
        "A100-80GB): HAMi divides 147456 MiB of each GPU there, so each fraction is taken of another amount of "
        "memory; set sharing.deviceMemoryScaling: 1.8 (HAMi's deviceMemoryScaling)",
    ]
    assert clusterdrift.drift(hami_memory(Fraction(2)), view(_hami_node("h-0", scaled))) == ()  # not drift
    assert [d.line for d in clusterdrift.drift(HAMI, view(_hami_node("h-0", scaled)))] == [
        'policy "team" sharing.deviceMemoryScaling is 1, but 1 node (h-0) says 2 (163840 MiB registered per '
        "A100-80GB): HAMi divides 163840 MiB of each GPU there, so each fraction is taken of another amount of "
        "memory; set sharing.deviceMemoryScaling: 2 (HAMi's deviceMemoryScaling)"
    ]  # where a plain policy used to read 163,840 MiB as another GPU
    a100_40 = json.dumps([{"devmem": 81920, "type": "NVIDIA-NVIDIA A100-SXM4-40GB"}])  # 40,960 x 2
    auto = hami_memory(Fraction(2), GPU(model=None), cluster_checks=ClusterChecks(auto_model=True))
    resolved = policynodes.resolve(auto, view(_hami_node("h-3", a100_40)))
    assert resolved.gpu.model == "A100-40GB"  # not the 80 GB one its registered 81,920 MiB would suggest
    half = evaluate(gpu_pod("0.5"), "team", PolicySet((auto,)), nodes=view(_hami_node("h-3", a100_40)))
    assert resources(half)["limits"]["nvidia.com/gpumem"] == "40960"  # half of 40,960 x 2


# --- the fits check on HAMi's and Volcano's registered GPUs -------------------------------------------------
#
# Written from the schedulers: each vGPU of a container takes a GPU of its own on one node, whose registered
# memory must hold the vGPU's (HAMi pkg/device/nvidia/device.go Fit: `dev.Totalmem-dev.Usedmem < memreq`, one
# device per vGPU; Volcano pkg/scheduler/api/devices/nvidia/vgpu/utils.go checkNodeGPUSharingPredicateAndScore:
# "no enough gpu cards on node" where a container asks more vGPUs than the node has GPUs, and the same memory
# test in units). A percentage of memory is of whatever GPU it lands on; cores at most 100 fit an idle GPU.

FITS = ClusterChecks(fits=Check.DENY, offered=Check.DENY, drift=Check.OFF)
A100_40 = "NVIDIA-NVIDIA A100-SXM4-40GB"


def _hami_gpus(name: str, devmem: int, gpus: int, kind: str = A100_40, **kw) -> dict:
    """A HAMi node registering `gpus` GPUs of `devmem` MiB, split 10 ways (nvidia.com/gpu: GPUs x 10)."""
    register = json.dumps([{"id": f"GPU-{name}-{i}", "count": 10, "devmem": devmem, "devcore": 100, "type": kind,
                            "health": True} for i in range(gpus)])  # fmt: skip
    return _hami_node(name, register, gpus=str(10 * gpus), **kw)


def vgpu_pod(**limits: str):
    return pod(container(limits=limits))


def test_the_node_snapshot_counts_the_gpus_of_each_registered_kind() -> None:
    eight = NodeInfo.from_object(_hami_gpus("h-0", 40960, 8))
    seven = NodeInfo.from_object(_hami_gpus("h-1", 40960, 7))
    volcano = NodeInfo.from_object(_volcano_node("v-0", 8155, gpus=3))
    assert eight is not None and seven is not None and volcano is not None
    assert (tuple(eight.devices), eight.devices.gpus) == (((A100_40, 40960),), (8,))  # type: ignore[attr-defined]
    assert volcano.devices.gpus == (3,)  # type: ignore[attr-defined]
    assert eight.devices != seven.devices  # one GPU fewer: the node changed
    again = NodeInfo.from_object(_hami_gpus("h-2", 40960, 8))
    assert again is not None and again.devices is eight.devices  # interned with its counts


def test_a_hami_vgpu_larger_than_any_registered_gpu_fits_nowhere_whatever_the_nodes_total() -> None:
    """Eight 40 GB GPUs advertise nvidia.com/gpu 80 and hold 320 GiB, but a vGPU is on one of them."""
    pol = memory(Backend.HAMI, cluster_checks=FITS)  # it thinks A100-80GB: 0.75 is 61,440 MiB
    cluster = view(_hami_gpus("h-0", 40960, 8), _hami_gpus("h-1", 32768, 4, "NVIDIA-Tesla V100-PCIE-32GB"))
    line = (
        'container "app": nvidia.com/gpumem "61440" fits on no node: the most one GPU of a node holds is 40960 MiB '
        '(node "h-0"); request at most 40960, or list a larger node pool in cluster.assumeNodes (policy "team", '
        "cluster.fits)"
    )
    converted = evaluate(gpu_pod("0.75"), "team", PolicySet((pol,)), nodes=cluster)
    assert resources(converted)["limits"]["nvidia.com/gpumem"] == "61440"
    assert converted.denials == [line]
    asked = vgpu_pod(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "61440", "nvidia.com/gpucores": "100"})
    assert evaluate(asked, "team", PolicySet((pol,)), nodes=cluster).denials == [line]
    fits = vgpu_pod(**{"nvidia.com/gpu": "8", "nvidia.com/gpumem": "40960", "nvidia.com/gpucores": "100"})
    assert evaluate(fits, "team", PolicySet((pol,)), nodes=cluster).denials == []  # 8 GPUs of h-0, exclusive
    assert evaluate(gpu_pod("0.5"), "team", PolicySet((pol,)), nodes=cluster).denials == []  # 40,960 MiB
    # A percentage is of the GPU it lands on: any GPU holds 100%
    whole = evaluate(gpu_pod("8"), "team", PolicySet((pol,)), nodes=cluster)
    assert resources(whole)["limits"]["nvidia.com/gpumem-percentage"] == "100" and whole.denials == []
    warned = memory(Backend.HAMI, cluster_checks=ClusterChecks(fits=Check.WARN, drift=Check.OFF))
    decision = evaluate(gpu_pod("0.75"), "team", PolicySet((warned,)), nodes=cluster)
    assert decision.verdict == "allow" and decision.warnings[1:] == [
        'gpu-admission: container "app": nvidia.com/gpumem "61440" fits on no node (most: 40960); request at most 40960'
    ]  # after the conversion's own warning


def test_a_container_asking_more_vgpus_than_a_node_has_gpus_fits_nowhere() -> None:
    """Four GPUs split ten ways advertise nvidia.com/gpu 40: a container's vGPUs each need a GPU of their own."""
    pol = memory(Backend.HAMI, cluster_checks=FITS)
    cluster = view(_hami_gpus("h-0", 40960, 4), _hami_gpus("h-1", 81920, 2, "NVIDIA-NVIDIA A100-SXM4-80GB"))
    assert evaluate(gpu_pod("6"), "team", PolicySet((pol,)), nodes=cluster).denials == [
        'container "app": nvidia.com/gpu "6" fits on no node: HAMi puts each vGPU of a container on a GPU of its '
        'own, and the most GPUs one node registers is 4 (node "h-0"); request at most 4, or list a larger node pool '
        'in cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    assert evaluate(gpu_pod("4"), "team", PolicySet((pol,)), nodes=cluster).denials == []
    # HAMi places init containers' vGPUs too (Resourcereqs reads them first)
    init = pod(container(), init=(container("setup", limits={"nvidia.com/gpu": "6"}),))
    assert evaluate(init, "team", PolicySet((pol,)), nodes=cluster).denials == [
        'init container "setup": nvidia.com/gpu "6" fits on no node: HAMi puts each vGPU of a container on a GPU of '
        'its own, and the most GPUs one node registers is 4 (node "h-0"); request at most 4, or list a larger node '
        'pool in cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    # Three vGPUs of 60 GiB: h-1's GPUs are large enough but two, h-0 has four too small
    three = vgpu_pod(**{"nvidia.com/gpu": "3", "nvidia.com/gpumem": "61440"})
    assert evaluate(three, "team", PolicySet((pol,)), nodes=cluster).denials == [
        'container "app": nvidia.com/gpu "3" with nvidia.com/gpumem "61440" each fits on no node: HAMi puts each '
        "vGPU of a container on a GPU of its own, and the most GPUs of 61440 MiB or more one node registers is 2 "
        '(node "h-1"); request at most 2, or list a larger node pool in cluster.assumeNodes (policy "team", '
        "cluster.fits)"
    ]
    two = vgpu_pod(**{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "61440"})
    assert evaluate(two, "team", PolicySet((pol,)), nodes=cluster).denials == []
    # Both too many and too large: a line each
    both = vgpu_pod(**{"nvidia.com/gpu": "5", "nvidia.com/gpumem": "90000"})
    assert evaluate(both, "team", PolicySet((memory(Backend.HAMI, GPU(memory_mib=98304), cluster_checks=FITS),)),
                    nodes=cluster).denials == [
        'container "app": nvidia.com/gpumem "90000" fits on no node: the most one GPU of a node holds is 81920 MiB '
        '(node "h-1"); request at most 81920, or list a larger node pool in cluster.assumeNodes (policy "team", '
        "cluster.fits)",
        'container "app": nvidia.com/gpu "5" fits on no node: HAMi puts each vGPU of a container on a GPU of its '
        'own, and the most GPUs one node registers is 4 (node "h-0"); request at most 4, or list a larger node pool '
        'in cluster.assumeNodes (policy "team", cluster.fits)',
    ]  # fmt: skip
    # More vGPUs than any node advertises: the line of any resource, not a second one
    assert evaluate(gpu_pod("8"), "team", PolicySet((memory(Backend.HAMI, cluster_checks=FITS),)),
                    nodes=view(_hami_gpus("h-2", 40960, 1, gpus_total="4"))).denials == [
        'container "app": nvidia.com/gpu "8" fits on no node: the most one node holds is 4 (node "h-2"); request at '
        'most 4, or list a larger node pool in cluster.assumeNodes (policy "team", cluster.fits)'
    ]  # fmt: skip


def test_volcano_vgpus_fit_on_the_registered_gpus_in_the_device_plugins_units() -> None:
    """Units of 10 MiB: v-0 registers two A100-40GBs of 4,096 units, v-1 one H100 of 8,155; the node's
    volcano.sh/vgpu-memory is the total of its GPUs (8,192 on v-0), which no vGPU gets."""
    pol = volcano_memory(factor=10, cluster_checks=FITS)
    cluster = view(_volcano_node("v-0", 4096, kind=A100_40), _volcano_node("v-1", 8155, gpus=1))
    only_a100 = view(_volcano_node("v-0", 4096, kind=A100_40))

    def denials(limits: dict[str, str], nodes=cluster) -> list[str]:
        return evaluate(vgpu_pod(**limits), "team", PolicySet((pol,)), nodes=nodes).denials

    assert denials({"volcano.sh/vgpu-memory": "6000"}) == []  # one vGPU (the device plugin's default), on v-1
    assert denials({"volcano.sh/vgpu-memory": "6000"}, only_a100) == [
        'container "app": volcano.sh/vgpu-memory "6000" fits on no node: the most one GPU of a node holds is 4096 '
        'units of 10 MiB (node "v-0"); request at most 4096, or list a larger node pool in cluster.assumeNodes '
        '(policy "team", cluster.fits)'
    ]
    assert denials({"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "6000"}) == [
        'container "app": volcano.sh/vgpu-number "2" with volcano.sh/vgpu-memory "6000" each fits on no node: '
        "Volcano vGPU puts each vGPU of a container on a GPU of its own, and the most GPUs of 6000 units of 10 MiB "
        'or more one node registers is 1 (node "v-1"); request at most 1, or list a larger node pool in '
        'cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    assert denials({"volcano.sh/vgpu-number": "3"}) == [
        'container "app": volcano.sh/vgpu-number "3" fits on no node: Volcano vGPU puts each vGPU of a container on '
        'a GPU of its own, and the most GPUs one node registers is 2 (node "v-0"); request at most 2, or list a '
        'larger node pool in cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    # Volcano reads the percentage first: 50% of each of v-0's GPUs, whatever vgpu-memory says
    both = {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "6000", "volcano.sh/vgpu-memory-percentage": "50"}
    assert denials(both) == []
    assert denials({"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "4096"}) == []
    # Volcano's scheduler reads the containers' vGPUs, not the init containers' (ExtractResourceRequest)
    init = pod(
        container(limits={"volcano.sh/vgpu-number": "3"}),
        init=(container("setup", limits={"volcano.sh/vgpu-number": "3"}),),
    )
    assert evaluate(init, "team", PolicySet((pol,)), nodes=cluster).denials == [
        'container "app": volcano.sh/vgpu-number "3" fits on no node: Volcano vGPU puts each vGPU of a container on '
        'a GPU of its own, and the most GPUs one node registers is 2 (node "v-0"); request at most 2, or list a '
        'larger node pool in cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    converted = evaluate(gpu_pod("0.75"), "team", PolicySet((pol,)), nodes=only_a100)  # of an H100: 6,116 units
    assert resources(converted)["limits"]["volcano.sh/vgpu-memory"] == "6116"
    assert converted.denials == [
        'container "app": volcano.sh/vgpu-memory "6116" fits on no node: the most one GPU of a node holds is 4096 '
        'units of 10 MiB (node "v-0"); request at most 4096, or list a larger node pool in cluster.assumeNodes '
        '(policy "team", cluster.fits)'
    ]


def test_a_node_without_registered_gpus_is_not_judged_per_gpu() -> None:
    """Missing data never refuses: a node of the backend that registers nothing (no annotation, or one that does
    not read) holds as many vGPUs as it advertises, of any memory, as before; an assumed pool likewise."""
    hami, big = (
        memory(Backend.HAMI, cluster_checks=FITS),
        vgpu_pod(**{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "61440"}),
    )
    registered = _hami_gpus("h-0", 40960, 8)
    for nodes in (
        view(node("plain-0", {"nvidia.com/gpu": "8"})),  # no node registers: nothing judged, no "not offered"
        view(registered, node("plain-0", {"nvidia.com/gpu": "8"})),
        view(registered, _hami_node("h-9", "[{")),
    ):
        assert evaluate(big, "team", PolicySet((hami,)), nodes=nodes).denials == []
    assert evaluate(
        big, "team", PolicySet((hami,)), nodes=view(registered, node("plain-0", {"nvidia.com/gpu": "1"}))
    ).denials == [
        'container "app": nvidia.com/gpumem "61440" fits on no node: the most one GPU of a node holds is 40960 MiB '
        '(node "h-0"); request at most 40960, or list a larger node pool in cluster.assumeNodes (policy "team", '
        "cluster.fits)"
    ]  # a node that advertises one vGPU cannot hold two
    off = memory(Backend.HAMI, cluster_checks=ClusterChecks(fits=Check.OFF, drift=Check.OFF))
    decision = evaluate(big, "team", PolicySet((off,)), nodes=view(registered))
    assert (decision.denials, decision.warnings) == ([], [])
    pools = ClusterChecks(fits=Check.DENY, assume_nodes=(AssumedNode("h100-pool", (("nvidia.com/gpu", 16),)),))
    assumed = memory(Backend.HAMI, cluster_checks=pools)
    assert evaluate(big, "team", PolicySet((assumed,)), nodes=view(registered)).denials == []
    volcano = volcano_memory(factor=10, cluster_checks=FITS)
    unread = _volcano_node("v-9", 8155)
    unread["metadata"]["annotations"] = {}
    asked = vgpu_pod(**{"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "6000"})
    assert evaluate(asked, "team", PolicySet((volcano,)), nodes=view(_volcano_node("v-0", 4096), unread)).denials == []
    assert evaluate(asked, "team", PolicySet((volcano,)), nodes=view(_volcano_node("v-0", 4096))).verdict == "deny"
    assert evaluate(asked, "team", PolicySet((hami,)), nodes=view(_volcano_node("v-0", 4096))).verdict == "deny"


def test_check_cluster_fits_a_hami_vgpu_on_the_gpus_the_nodes_register(tmp_path) -> None:
    """`gpu-webhook check --cluster` on a loopback Kubernetes API whose HAMi nodes register eight A100-40GBs
    each (nvidia.com/gpu 80): the shipped HAMi policy's 0.75 of an A100-80GB fits none of them."""
    text = (EXAMPLES / "memory-hami.yaml").read_text() + "  cluster:\n    fits: deny\n    drift: off\n"
    manifest = tmp_path / "pods.json"
    asked = {"apiVersion": "v1", "kind": "List", "items": [
        {**gpu_pod(value), "metadata": {"name": f"p{index}", "namespace": "hami-serving"}}
        for index, value in enumerate(("0.75", "0.5"))
    ]}  # fmt: skip
    manifest.write_text(json.dumps(asked))
    command = ("check", "--cluster", "--kubeconfig", "{kubeconfig}", "--policies", "{policies}", str(manifest))
    nodes = [_hami_gpus("hami-0", 40960, 8), _hami_gpus("hami-1", 40960, 8)]
    run = against_nodes(tmp_path, "hami-serving", nodes, "memory-hami.yaml", *command, policy_text=text)
    assert run.returncode == 1, run.stdout + run.stderr
    assert [line for line in run.stdout.splitlines() if line.startswith("DENY")] == [
        f'DENY {manifest}#0 items[0] Pod/p0: container "app": nvidia.com/gpumem "61440" fits on no node: the most one '
        'GPU of a node holds is 40960 MiB (node "hami-0"); request at most 40960, or list a larger node pool in '
        'cluster.assumeNodes (policy "inference-hami", cluster.fits)'
    ]  # 0.5 of an A100-80GB is 40,960 MiB: it fits


def test_policy_lint_cluster_reports_volcanos_factor_from_the_nodes_annotations(tmp_path) -> None:
    """`policy lint --cluster` on a loopback Kubernetes API whose Volcano nodes register H100s in units of
    1 MiB (the device plugin's default factor), and one in the shipped example's 10."""
    nodes = [_volcano_node("vgpu-0", 81559), _volcano_node("vgpu-1", 81559, mode=None), _volcano_node("vgpu-2", 8155)]
    run = against_nodes(tmp_path, "vgpu-batch", nodes, "memory-volcano.yaml", *LINT)
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[-4:-1] == [
        "POLICY              FIELD                    POLICY SAYS  NODES SAY                                         "
        "       NODES                     FIX",
        "batch-volcano-vgpu  sharing.gpuMemoryFactor  10           1 (81559 units of volcano.sh/vgpu-memory per "
        "H100-80GB)  2 nodes (vgpu-0, vgpu-1)  set sharing.gpuMemoryFactor: 1 (the device plugin's gpuMemoryFactor)",
        "policy drift: 1 disagreement in 1 policy (3 nodes read); until fixed, memory fractions and MIG conversions "
        "are wrong for the pods on those nodes",
    ]


def test_policy_explain_says_the_units_and_the_scaling() -> None:
    from webhook.admission.sharing import memshare

    assert memshare.describe_mode(volcano_memory(factor=10)) == (
        "memory: volcano (volcano.sh/vgpu-memory in units of 10 MiB), the backend's default placement"
    )
    assert memshare.describe_share(volcano_memory(factor=10)) == (
        "nvidia.com/gpu 0.25 becomes volcano.sh/vgpu-number 1, volcano.sh/vgpu-memory 2038, volcano.sh/vgpu-cores "
        "25; at least 0.01; nvidia.com/gpu: N becomes N whole GPUs"
    )
    assert memshare.describe_mode(hami_memory(Fraction(3, 2))) == (
        "memory: hami (nvidia.com/gpumem in MiB, deviceMemoryScaling 1.5), the backend's default placement"
    )
    assert memshare.describe_share(hami_memory(Fraction(3, 2))) == (
        "nvidia.com/gpu 0.25 becomes nvidia.com/gpu 1, nvidia.com/gpumem 30720, nvidia.com/gpucores 25; at least "
        "0.01; nvidia.com/gpu: N becomes N whole GPUs"
    )  # 81,920 x 1.5 = 122,880 MiB registered, a quarter of it
