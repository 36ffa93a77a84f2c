"""Cluster-aware admission (clustercheck.py through engine.evaluate): the verdict and the exact line of each
check, drift between a policy and its nodes, and `auto` values taken from the nodes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine_support import MIG, NS, container, pod, policy
from webhook.admission.base.violation import SHORT_LIMIT
from webhook.admission.checks import clustercheck, clusterdrift, policynodes
from webhook.admission.cluster.nodes import ClusterView, NodeInfo
from webhook.admission.engine import evaluate
from webhook.admission.phases.validate import validate
from webhook.admission.policy.loader import parse_policy_sources
from webhook.admission.policy.model import (
    GPU,
    AssumedNode,
    Check,
    ClusterChecks,
    Enforcement,
    MigStrategy,
    Mode,
    PolicySet,
    Sharing,
)


def node(name: str, allocatable: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any) -> dict:
    """A Node as the API sends it."""
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", **allocatable}},
    }


def view(*nodes: dict) -> ClusterView:
    return ClusterView.of(info for info in map(NodeInfo.from_object, nodes) if info is not None)


A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
CLUSTER = view(
    node("gpu-a", {"nvidia.com/gpu": "8"}, A100),
    node("gpu-b", {"nvidia.com/gpu": "4"}, A100, unschedulable=True),
    node("cpu-a", {}),
)
DENY = ClusterChecks(fits=Check.DENY, offered=Check.DENY, drift=Check.DENY)


def run(obj: dict, pol, nodes: ClusterView | None = CLUSTER):
    return evaluate(obj, NS, PolicySet((pol,)), nodes=nodes)


def gpus(n: str, name: str = "app", resource: str = "nvidia.com/gpu") -> dict:
    return container(name, limits={resource: n})


@pytest.mark.parametrize(
    ("obj", "verdict", "lines"),
    [
        (pod(gpus("8")), "allow", []),
        (
            pod(gpus("9", "train")),
            "deny",
            [
                'container "train": nvidia.com/gpu "9" fits on no node: the most one node holds is 8 (node "gpu-a"); '
                "request at most 8, or list a larger node pool in cluster.assumeNodes "
                '(policy "team", cluster.fits)'
            ],
        ),
        (  # each container fits; together they do not: the pod's line names them
            pod(gpus("6", "a"), gpus("4", "b")),
            "deny",
            [
                'pod: nvidia.com/gpu effective total 10 (containers running together: "a"=6, "b"=4) fits on no '
                'node: the most one node holds is 8 (node "gpu-a"); request at most 8 in all, or split the pod '
                '(policy "team", cluster.fits)'
            ],
        ),
        (  # a regular init container runs alone: 8 + 6 never run together (KEP-753 counting)
            pod(gpus("6", "a"), init=(gpus("8", "setup"),)),
            "allow",
            [],
        ),
        (  # a sidecar keeps running beside the app container: 4 + 6
            pod(gpus("6", "a"), init=({**gpus("4", "side"), "restartPolicy": "Always"},)),
            "deny",
            [
                'pod: nvidia.com/gpu effective total 10 (containers running together: "side"=4, "a"=6) fits on '
                'no node: the most one node holds is 8 (node "gpu-a"); request at most 8 in all, or split the pod '
                '(policy "team", cluster.fits)'
            ],
        ),
        (
            pod(gpus("1", "app", "amd.com/gpu")),
            "deny",
            [
                'container "app": amd.com/gpu "1": no node advertises it, so the pod would stay Pending; request a '
                "resource the nodes advertise, or list the autoscaled pool that has it in cluster.assumeNodes "
                '(policy "team", cluster.fits)'
            ],
        ),
    ],
)
def test_fits_verdicts_and_lines(obj, verdict, lines):
    decision = run(obj, policy(limits=_limits(16), cluster_checks=DENY))
    assert (decision.verdict, decision.violations) == (verdict, lines)


def test_a_cordoned_node_still_counts_and_is_named_so():
    cordoned = view(node("gpu-b", {"nvidia.com/gpu": "4"}, A100, unschedulable=True))
    decision = run(pod(gpus("5")), policy(cluster_checks=DENY), cordoned)
    assert decision.violations == [
        'container "app": nvidia.com/gpu "5" fits on no node: the most one node holds is 4 (node "gpu-b", cordoned); '
        'request at most 4, or list a larger node pool in cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    fitting = run(pod(gpus("4")), policy(cluster_checks=DENY), cordoned)
    assert (fitting.verdict, fitting.violations) == ("allow", [])


def test_warn_is_the_default_and_never_denies():
    decision = run(pod(gpus("9")), policy(limits=_limits(16)))
    assert decision.verdict == "allow"
    assert decision.violations == []
    assert decision.warnings == [  # the short form
        'gpu-admission: container "app": nvidia.com/gpu "9" fits on no node (most: 8); request at most 8'
    ]


def test_off_and_no_inventory_skip_the_checks():
    off = policy(cluster_checks=ClusterChecks(fits=Check.OFF, offered=Check.OFF, drift=Check.OFF))
    assert run(pod(gpus("9")), off).warnings == []
    assert run(pod(gpus("9")), policy(cluster_checks=DENY, limits=_limits(16)), nodes=None).verdict == "allow"


def test_an_assumed_node_pool_lets_a_pod_fit_that_no_current_node_holds():
    pools = ClusterChecks(fits=Check.DENY, assume_nodes=(AssumedNode("h100-pool", (("nvidia.com/gpu", 16),)),))
    assert run(pod(gpus("16")), policy(cluster_checks=pools, limits=_limits(16))).verdict == "allow"
    decision = run(pod(gpus("17")), policy(cluster_checks=pools, limits=_limits(32)))
    assert decision.violations == [
        'container "app": nvidia.com/gpu "17" fits on no node: the most one node holds is 16 (node "h100-pool '
        '(assumed)"); request at most 16, or list a larger node pool in cluster.assumeNodes (policy "team", '
        "cluster.fits)"
    ]


def _limits(per_pod: int):
    from webhook.admission.policy.model import Limits

    return Limits(max_per_container=per_pod, max_per_pod=per_pod)


def test_offered_names_the_mapped_resource_that_no_node_advertises():
    shared = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), cluster_checks=DENY)
    decision = run(pod(gpus("1")), shared)
    assert decision.violations == [
        'container "app": nvidia.com/gpu.shared "1", which the policy maps nvidia.com/gpu to: no node advertises '
        "it, so the pod would stay Pending; check the device plugin's sharing config (replicas, renameByDefault) "
        'or set sharing.resourceName (policy "team", cluster.offered)'
    ]


def test_offered_names_the_converted_mig_profile_that_no_node_advertises():
    mig = policy(sharing=MIG.sharing, gpu=MIG.gpu, cluster_checks=DENY)
    nodes = view(
        node(
            "mig-a",
            {"nvidia.com/mig-3g.40gb": "2"},
            {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.count": "2"},
        )
    )
    decision = run(pod(gpus("1")), mig, nodes)
    assert decision.violations == [
        'container "app": nvidia.com/mig-1g.10gb "1", which the policy converts nvidia.com/gpu to: no node '
        "advertises it, so the pod would stay Pending; check the nodes' MIG layout and mig.strategy (mixed), or "
        'set sharing.migProfile to one they have (policy "team", cluster.offered)',
        'pod: policy "team" sharing.migProfile is 1g.10gb, but 1 node (mig-a) says 3g.40gb x2: pods converted to '
        "nvidia.com/mig-1g.10gb cannot run there; set sharing.migProfile to a profile the nodes have, or change "
        "their MIG layout (mig-parted) and use mig.strategy mixed (cluster.drift)",
    ]


SLICED = view(
    *(
        node(
            f"ts-{i}",
            {"nvidia.com/gpu.shared": "32"},
            {**A100, "nvidia.com/gpu.replicas": "8", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
        )
        for i in range(5)
    ),
)


def test_drift_in_replicas_is_one_line_naming_the_nodes():
    shared = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), cluster_checks=DENY)
    assert [d.line for d in clusterdrift.drift(shared, SLICED)] == [
        'policy "team" sharing.replicas is 4, but 5 nodes (ts-0, ts-1, ts-2, ...) say 8: each pod is told it has '
        "1/4 of a GPU, but the GPU is shared 8 ways; set sharing.replicas: 8 (or auto), or change the device "
        "plugin's sharing config"
    ]
    decision = run(pod(gpus("1")), shared, SLICED)
    assert decision.verdict == "deny"
    assert decision.violations == ["pod: " + clusterdrift.drift(shared, SLICED)[0].line + " (cluster.drift)"]


@pytest.mark.parametrize(
    ("pol", "expected"),
    [
        (  # mode
            policy(sharing=Sharing(mode=Mode.MPS, replicas=8), gpu=GPU(model="A100-80GB")),
            [("sharing.mode", "mps", "sharing-strategy time-slicing")],
        ),
        (  # model
            policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=8), gpu=GPU(model="H100-80GB")),
            [("gpu.model", "H100-80GB", "A100-80GB")],
        ),
        (  # memory
            policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=8), gpu=GPU(memory_mib=40960)),
            [("gpu.memoryMiB", "40960", "81920")],
        ),
        (policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=8), gpu=GPU(model="A100-80GB")), []),
    ],
)
def test_drift_fields(pol, expected):
    assert [(d.field, d.policy_says, d.nodes_say) for d in clusterdrift.drift(pol, SLICED)] == expected


@pytest.mark.parametrize(
    ("product", "memory", "model"),
    [
        ("NVIDIA-A100-SXM4-80GB", "81920", "A100-80GB"),
        ("NVIDIA-A100-SXM4-40GB", "40960", "A100-40GB"),
        ("NVIDIA-H100-80GB-HBM3", "81559", "H100-80GB"),
        ("NVIDIA-H100-NVL", "95830", "H100-NVL-94GB"),
        ("NVIDIA-H200", "143771", "H200-141GB"),
        ("NVIDIA-GH200-480GB", "97871", "GH200-96GB"),
        ("NVIDIA-A100-SXM4-80GB-SHARED", None, "A100-80GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", None, "A100-40GB"),
        ("Tesla-T4", "15360", None),
    ],
)
def test_product_labels_name_a_model(product, memory, model):
    found = policynodes.product_model(product, int(memory) if memory else None)
    assert (found.name if found else None) == model


def test_auto_takes_the_smallest_share_the_nodes_give():
    nodes = view(
        node("ts-4", {"nvidia.com/gpu.shared": "32"}, {**A100, "nvidia.com/gpu.replicas": "4"}),
        node(
            "ts-8",
            {"nvidia.com/gpu.shared": "8"},
            {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.memory": "40960",
                "nvidia.com/gpu.replicas": "8",
            },
        ),
    )
    (auto,) = parse_policy_sources(
        {
            "p.yaml": "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: team}\nspec:\n"
            "  namespaces: [team]\n  sharing: {mode: mps, replicas: auto}\n  gpu: {model: auto}\n"
        }
    ).policies
    resolved = policynodes.resolve(auto, nodes)
    assert (resolved.sharing.replicas, resolved.gpu.model) == (8, "A100-40GB")
    assert policynodes.resolve(auto, nodes) is resolved  # once per snapshot
    env = {
        e["name"]: e["value"]
        for e in evaluate(pod(gpus("1")), NS, PolicySet((auto,)), nodes=nodes).mutated["spec"]["containers"][0]["env"]
    }
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=5120M"
    assert clusterdrift.drift(auto, nodes) == ()  # auto values never drift
    offline = evaluate(pod(gpus("1")), NS, PolicySet((auto,)))
    assert offline.verdict == "allow"


def test_every_short_form_fits_a_warning():
    long_name = "c" * 63
    shared = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), cluster_checks=DENY)
    for obj, pol, nodes in [
        (pod(gpus("9", long_name)), policy(cluster_checks=DENY, limits=_limits(16)), CLUSTER),
        (
            pod(gpus("6", long_name), gpus("4", long_name + "x")),
            policy(cluster_checks=DENY, limits=_limits(16)),
            CLUSTER,
        ),
        (pod(gpus("1", long_name)), shared, CLUSTER),
        (pod(gpus("1", long_name)), shared, SLICED),
    ]:
        holders: list = []
        validate(evaluate(obj, NS, PolicySet((pol,))).mutated, pol, ("spec",), holders)
        found = clustercheck.check(holders, pol, nodes, False)
        assert found
        assert all(len(v.short) <= SHORT_LIMIT for _, v in found)


def test_enforcement_audit_keeps_deny_lines_silent():
    audit = policy(cluster_checks=DENY, enforcement=Enforcement.AUDIT, limits=_limits(16))
    decision = run(pod(gpus("9")), audit)
    assert (decision.verdict, decision.allowed, len(decision.violations)) == ("audit", True, 1)


def _doc(spec: str) -> str:
    head = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: team}\n"
    return f"{head}spec:\n  namespaces: [team]\n{spec}"


def test_the_cluster_section_is_read_with_warn_as_the_default():
    (plain,) = parse_policy_sources({"p.yaml": _doc("")}).policies
    assert plain.cluster_checks == ClusterChecks(fits=Check.WARN, offered=Check.WARN, drift=Check.WARN)
    (full,) = parse_policy_sources(
        {
            "p.yaml": _doc(
                "  cluster:\n    fits: deny\n    offered: off\n    drift: warn\n    assumeNodes:\n"
                "    - name: h100-pool\n      allocatable: {nvidia.com/gpu: 8}\n"
                "      labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n"
            )
        }
    ).policies
    assert full.cluster_checks == ClusterChecks(
        fits=Check.DENY,
        offered=Check.OFF,
        drift=Check.WARN,
        assume_nodes=(
            AssumedNode("h100-pool", (("nvidia.com/gpu", 8),), (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),)),
        ),
    )


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ("  cluster: {fits: block}", 'p.yaml#0 spec.cluster.fits: "block" is not one of deny, warn, off'),
        ("  cluster: {drfit: warn}", 'p.yaml#0 spec.cluster.drfit: unknown field (did you mean "drift"?)'),
        (
            "  cluster: {assumeNodes: pool}",
            'p.yaml#0 spec.cluster.assumeNodes: expected a list of node shapes, got "pool" (a string)',
        ),
        (
            "  cluster: {assumeNodes: [{allocatable: {nvidia.com/gpu: 8}}]}",
            "p.yaml#0 spec.cluster.assumeNodes[0].name: required; name the node shape (it appears in messages), e.g. "
            "a100-pool",
        ),
        (
            "  cluster: {assumeNodes: [{name: a}]}",
            "p.yaml#0 spec.cluster.assumeNodes[0].allocatable: required; give the GPU resources one node holds, e.g. "
            "nvidia.com/gpu: 8",
        ),
        (
            "  cluster: {assumeNodes: [{name: a, allocatable: {cpu: 8}}]}",
            "p.yaml#0 spec.cluster.assumeNodes[0].allocatable.cpu: is not a GPU resource the webhook manages; "
            "list only GPU resources, e.g. nvidia.com/gpu: 8",
        ),
        (
            "  cluster: {assumeNodes: [{name: a, allocatable: {nvidia.com/gpu: 0}}]}",
            "p.yaml#0 spec.cluster.assumeNodes[0].allocatable.nvidia.com/gpu: 0 is too small; a node shape holds at "
            "least 1",
        ),
        (
            "  sharing: {mode: exclusive, replicas: auto}",
            "p.yaml#0 spec.sharing.replicas: only applies when mode is time-slicing or mps (mode is exclusive); "
            "remove it",
        ),
    ],
)
def test_each_cluster_section_problem_is_one_exact_line(spec, line):
    from webhook.admission.policy.loader import PolicyLoadError

    with pytest.raises(PolicyLoadError) as caught:
        parse_policy_sources({"p.yaml": _doc(spec)})
    assert caught.value.problems == [line]


def test_a_new_snapshot_is_judged_afresh_for_the_same_policy():
    """The per-snapshot plan (the resources whose largest node holds the per-pod maximum) follows the view."""
    same = policy(cluster_checks=DENY)
    small = view(node("gpu-s", {"nvidia.com/gpu": "2"}))
    assert run(pod(gpus("4")), same, CLUSTER).verdict == "allow"
    assert run(pod(gpus("4")), same, small).violations == [
        'container "app": nvidia.com/gpu "4" fits on no node: the most one node holds is 2 (node "gpu-s"); '
        'request at most 2, or list a larger node pool in cluster.assumeNodes (policy "team", cluster.fits)'
    ]
    assert run(pod(gpus("4")), same, CLUSTER).verdict == "allow"


def test_a_pod_that_fails_validation_still_gets_its_cluster_lines():
    """Under warn or audit a pod over the per-pod maximum is admitted: whether it fits on a node still matters."""
    warn = policy(cluster_checks=DENY, enforcement=Enforcement.WARN, limits=_limits(4))
    decision = run(pod(gpus("4", "a"), gpus("6", "b")), warn)
    assert decision.verdict == "warn"
    assert [line.split(":")[0] for line in decision.violations] == [
        'container "b"',
        "pod",
        "pod",
    ]
    assert decision.violations[2].startswith("pod: nvidia.com/gpu effective total 10 (containers running together")


# --- A mixed cluster, labelled as GPU feature discovery labels it (tests/gfd_cluster.py) --------------------


def _mixed(*nodes: dict) -> tuple[PolicySet, ClusterView]:
    from tests import gfd_cluster

    return parse_policy_sources({"p.yaml": gfd_cluster.POLICIES}), view(*(nodes or gfd_cluster.nodes()))


def test_each_policy_is_judged_on_the_nodes_its_pods_can_land_on():
    policies, nodes = _mixed()
    assert {p.name: [n.name for n in policynodes.policy_nodes(p, nodes)] for p in policies.policies} == {
        "default": ["a100-whole-0", "a100-whole-1"],  # nvidia.com/gpu, steered off the time-sliced pool
        "training": ["a100-whole-0", "a100-whole-1"],
        "notebooks": ["a100-ts-0", "a100-ts-1"],  # nvidia.com/gpu, steered onto time-slicing
        "research": ["a100-mig-1g-0", "a100-mig-3g-0"],  # every profile of migProfiles
        "inference": ["h100-mps-0"],  # nvidia.com/gpu.shared
    }
    assert clusterdrift.drift_of(policies, nodes) == []


@pytest.mark.parametrize(
    ("namespace", "quantity", "warnings"),
    [
        ("training", "1", ["pod: node affinity added on nvidia.com/gpu.sharing-strategy, nvidia.com/gpu.slices.gi"]),
        ("elsewhere", "2", ["pod: node affinity added on nvidia.com/gpu.sharing-strategy, nvidia.com/gpu.slices.gi"]),
        (
            "notebooks",
            "1",
            [
                'container "app": set 6 memory env vars for GPU fraction 0.25',
                "pod: node affinity added on nvidia.com/gpu.sharing-strategy, nvidia.com/gpu.replicas",
            ],
        ),
        ("research", "0.5", ['container "app": nvidia.com/gpu 0.5 became nvidia.com/mig-3g.40gb 1']),
        ("research", "1", ['container "app": nvidia.com/gpu 1 became nvidia.com/mig-1g.10gb 1 (mig policy)']),
        (
            "inference",
            "1",
            [
                'container "app": nvidia.com/gpu 1 became nvidia.com/gpu.shared 1 (mps policy)',
                'container "app": set 7 memory env vars for GPU fraction 0.125',
            ],
        ),
    ],
)
def test_no_pod_of_the_mixed_cluster_gets_a_drift_warning(namespace, quantity, warnings):
    policies, nodes = _mixed()
    decision = evaluate(pod(gpus(quantity)), namespace, policies, nodes=nodes)
    assert (decision.verdict, decision.violations) == ("allow", [])
    assert decision.warnings == [f"gpu-admission: {w}" for w in warnings]


def test_a_relabelled_pool_drifts_on_its_own_policy_only():
    from tests import gfd_cluster

    policies, nodes = _mixed(*gfd_cluster.nodes(gfd_cluster.TWO_REPLICAS, 16))
    assert [d.line for d in clusterdrift.drift_of(policies, nodes)] == [
        'policy "notebooks" sharing.replicas is 4, but 2 nodes (a100-ts-0, a100-ts-1) say 2: each pod is told it has '
        "1/4 of a GPU, but the GPU is shared 2 ways; set sharing.replicas: 2 (or auto), or change the device "
        "plugin's sharing config"
    ]
    whole = evaluate(pod(gpus("1")), "training", policies, nodes=nodes)
    assert "drift" not in " ".join(whole.warnings)
    shared = evaluate(pod(gpus("1")), "notebooks", policies, nodes=nodes)
    assert shared.warnings[-1] == "gpu-admission: pod: policy sharing.replicas 4 but 2 nodes say 2; ask an admin"


def test_a_pool_whose_sharing_mode_changed_is_judged_by_the_policy_written_for_it():
    """The kept-name pool went to MPS: no policy's steering reaches it, and the time-slicing policy, which then
    reaches no node, is compared with the shared nodes (the whole-GPU policies still are not)."""
    from tests import gfd_cluster

    switched = {**gfd_cluster.TIME_SLICED, "nvidia.com/gpu.sharing-strategy": "mps"}
    policies, nodes = _mixed(*gfd_cluster.nodes(switched))
    assert [(d.policy, d.field, d.nodes_say, d.nodes) for d in clusterdrift.drift_of(policies, nodes)] == [
        ("notebooks", "sharing.mode", "sharing-strategy mps", ("a100-ts-0", "a100-ts-1"))
    ]


MIG_POLICY = policy(
    sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_profiles=("1g.10gb", "3g.40gb")),
    gpu=GPU(model="A100-80GB"),
)


def _mig_node(name: str, profile: str, count: int) -> dict:
    labels = {"nvidia.com/mig.strategy": "mixed", f"nvidia.com/mig-{profile}.count": str(count)}
    return node(name, {f"nvidia.com/mig-{profile}": str(count)}, labels)


def test_mig_drift_is_judged_against_every_offered_profile():
    both = view(_mig_node("mig-1g", "1g.10gb", 56), _mig_node("mig-3g", "3g.40gb", 16))
    assert clusterdrift.drift(MIG_POLICY, both) == ()
    # another pool's layout (2g.20gb, not offered): not the policy's nodes
    other = view(_mig_node("mig-1g", "1g.10gb", 56), _mig_node("mig-2g", "2g.20gb", 24))
    assert clusterdrift.drift(MIG_POLICY, other) == ()
    # no node has the profile nvidia.com/gpu converts to
    only_3g = view(_mig_node("mig-3g", "3g.40gb", 16))
    assert [d.line for d in clusterdrift.drift(MIG_POLICY, only_3g)] == [
        'policy "team" sharing.migProfile is 1g.10gb, but 1 node (mig-3g) says no 1g.10gb slice: pods converted to '
        "nvidia.com/mig-1g.10gb cannot run there; set sharing.migProfile to a profile of migProfiles the nodes "
        "have, or change their MIG layout (mig-parted)"
    ]
    # no node has any listed profile: judged on the MIG nodes there are
    only_2g = view(_mig_node("mig-2g", "2g.20gb", 24))
    assert [d.line for d in clusterdrift.drift(MIG_POLICY, only_2g)] == [
        'policy "team" sharing.migProfile is 1g.10gb, but 1 node (mig-2g) says no 1g.10gb slice: pods converted to '
        "nvidia.com/mig-1g.10gb cannot run there; set sharing.migProfile to a profile of migProfiles the nodes "
        "have, or change their MIG layout (mig-parted)",
        'policy "team" sharing.migProfiles is 1g.10gb, 3g.40gb, but 1 node (mig-2g) says 2g.20gb x24: pods '
        "converted to nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb cannot run there; list the profiles the "
        "nodes have in sharing.migProfiles, or change their MIG layout (mig-parted) and use mig.strategy mixed",
    ]


def test_a_mig_single_node_is_judged_by_its_slice_not_by_the_slice_memory():
    """Under mig.strategy single GFD labels the slice as nvidia.com/gpu: `gpu.memory` is the slice's memory."""
    single = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_strategy=MigStrategy.SINGLE),
        gpu=GPU(model="A100-80GB"),
        steering=True,
    )
    labels = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "nvidia.com/gpu.memory": "9728",
        "nvidia.com/gpu.slices.gi": "1",
    }
    assert clusterdrift.drift(single, view(node("s-1g", {"nvidia.com/gpu": "56"}, labels))) == ()
    bigger = {**labels, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "nvidia.com/gpu.slices.gi": "3"}
    assert [d.line for d in clusterdrift.drift(single, view(node("s-3g", {"nvidia.com/gpu": "16"}, bigger)))] == [
        'policy "team" sharing.migProfile is 1g.10gb, but 1 node (s-3g) says 3g.40gb slices (mig.strategy single): '
        "pods are told a nvidia.com/gpu is a 1g.10gb slice, but it is a 3g.40gb one; set sharing.migProfile: "
        "3g.40gb, or change the nodes' MIG layout (mig-parted)"
    ]
