"""The cluster view with DRA: ResourceSlices and DeviceClasses merged into the nodes (cluster/slices.py), so that on
a DRA-only node pool the cluster checks admit what would run and refuse what never could, naming the largest
node. Fixtures: NVIDIA's DRA driver's DeviceClasses and one node's ResourceSlice (tests/fixtures/dra/)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import yaml

from tests import yamldocs
from tests.engine_support import container, pod, policy
from tests.fake_kube_api import loopback_cluster
from tests.test_clustercheck import DENY, node, view
from tests.test_dra import exactly
from webhook.admission.cluster.devices import ClassInfo, Device, DraDevices
from webhook.admission.cluster.nodes import ClusterView
from webhook.admission.cluster.slices import class_info, merge, sharing_of, slice_info
from webhook.admission.engine import evaluate
from webhook.admission.policy.model import ClusterChecks, Limits, Mode, PolicySet, Sharing

FIXTURES = Path(__file__).parent / "fixtures" / "dra"
CLASSES = [d for d in yamldocs.load_all((FIXTURES / "deviceclasses.yaml").read_text()) if d]
SLICE = yamldocs.load((FIXTURES / "resourceslice.yaml").read_text())
WIDE = policy(limits=Limits(max_per_container=16, max_per_pod=16), cluster_checks=DENY)


def dra_view(*slices: dict, classes: list[dict] = CLASSES) -> ClusterView:
    """Nodes without any GPU resource (a DRA-only pool) and a CPU node, with the slices and classes merged."""
    nodes = view(node("gpu-node-1", {}), node("cpu-a", {})).nodes
    read = dict(filter(None, map(class_info, classes)))
    held = [s for _, s in filter(None, map(slice_info, slices))]
    return ClusterView(merge(nodes, held, read), (), sharing_of(read), dra=DraDevices(held, read))


def judged(gpus: str, cluster: ClusterView, resource: str = "nvidia.com/gpu") -> tuple[str, list[str]]:
    decision = evaluate(pod(container("train", limits={resource: gpus})), "team", PolicySet((WIDE,)), nodes=cluster)
    return decision.verdict, decision.violations


def test_the_fixtures_read_as_nvidias_driver_publishes_them():
    assert dict(map(class_info, CLASSES)) == {
        "gpu.nvidia.com": ClassInfo("gpu.nvidia.com", "gpu", "nvidia.com/gpu"),
        "mig.nvidia.com": ClassInfo("gpu.nvidia.com", "mig", ""),
    }
    name, one = slice_info(SLICE)
    assert (name, one.node, one.driver, len(one.devices)) == ("gpu-node-1-gpu.nvidia.com", "gpu-node-1",
                                                             "gpu.nvidia.com", 8)  # fmt: skip
    assert one.devices[0] == Device("gpu", "NVIDIA H100 80GB HBM3", 81559, "")
    merged = dra_view(SLICE).nodes["gpu-node-1"]
    assert dict(merged.allocatable) == {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 8, "nvidia.com/gpu": 8}
    assert dict(merged.labels) == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "8"
    }  # fmt: skip


def test_on_a_dra_only_pool_what_would_run_is_admitted_and_what_never_could_is_refused():
    cluster = dra_view(SLICE)
    assert judged("2", cluster) == ("allow", [])
    assert judged("8", cluster) == ("allow", [])
    assert judged("12", cluster) == ("deny", [
        'container "train": nvidia.com/gpu "12" fits on no node: the most one node holds is 8 (node "gpu-node-1"); '
        'request at most 8, or list a larger node pool in cluster.assumeNodes (policy "team", cluster.fits)',
    ])  # fmt: skip


def test_without_the_slices_the_same_pool_looks_empty():
    """What the checks did before they read ResourceSlices: `nvidia.com/gpu: 2` refused as never advertised."""
    verdict, lines = judged("2", dra_view())
    assert verdict == "deny"
    assert lines[0].startswith('container "train": nvidia.com/gpu "2": no node advertises it, so the pod would stay')


def test_a_class_that_serves_no_extended_resource_adds_only_its_device_class_resource():
    only_mig_class = [c for c in CLASSES if c["metadata"]["name"] == "mig.nvidia.com"]
    merged = dra_view(SLICE, classes=only_mig_class).nodes["gpu-node-1"]
    assert dict(merged.allocatable) == {}, "the slice holds GPUs, not MIG devices"
    every = {"metadata": {"name": "every"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    name, read = class_info(every)
    assert (name, read, read.exact) == ("every", ClassInfo("", "", ""), True)
    merged = dra_view(SLICE, classes=[every]).nodes["gpu-node-1"]
    assert dict(merged.allocatable) == {"deviceclass.resource.kubernetes.io/every": 8}, "`true` selects every device"


def test_a_pods_claims_and_device_class_resources_are_held_to_the_largest_dra_node():
    """12 GPUs asked through a claim, a template, a DeviceClass's resource or a mix: refused on a pool whose
    largest node has 8, naming it; 8 in all admitted; a `firstAvailable` request with a smaller alternative,
    and a class no slice shows, are not judged here."""
    from tests.test_dra import claim, exactly
    from tests.test_dra_pods import BIG_OR_SMALL, NS, claiming, index, named, using

    assert NS == "team"
    twelve = named(claim(exactly(count=12)), "twelve")
    eight = named(claim(exactly(count=8)), "eight")
    four = named(claim(exactly(count=4), kind="ResourceClaimTemplate"), "four-per-pod")
    huge_or_small = named(claim({"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 12},
        {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 1},
    ]}), "huge-or-small")  # fmt: skip
    nics = named(claim(exactly("nic", device_class="nic.example.com", count=12)), "nics")
    claims = index(twelve, eight, four, huge_or_small, nics, BIG_OR_SMALL)
    cluster = dra_view(SLICE)

    def verdict(obj: dict) -> tuple[str, list[str]]:
        decision = evaluate(obj, "team", PolicySet((WIDE,)), nodes=cluster, claims=claims)
        return decision.verdict, decision.violations

    assert verdict(claiming(using("train", "gpus"), gpus="twelve")) == ("deny", [
        'pod: 12 gpu.nvidia.com devices in all (12 from claim "gpus" (ResourceClaim "twelve")) fit on no node: the '
        'most one node holds is 8 (node "gpu-node-1"); ask for at most 8 in all, or split the pod (policy "team", '
        "cluster.fits)",
    ])  # fmt: skip
    assert verdict(claiming(using("train", "gpus"), gpus="eight")) == ("allow", [])
    assert verdict(claiming(using("train", "a", "b"), a="eight", b="template:four-per-pod")) == ("deny", [
        'pod: 12 gpu.nvidia.com devices in all (8 from claim "a" (ResourceClaim "eight"), 4 from claim "b" '
        '(ResourceClaimTemplate "four-per-pod")) fit on no node: the most one node holds is 8 (node "gpu-node-1"); '
        'ask for at most 8 in all, or split the pod (policy "team", cluster.fits)',
    ])  # fmt: skip
    mixed = claiming(
        using("train", "gpus", limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "4"}),
        gpus="template:four-per-pod",
    )
    assert verdict(mixed) == ("allow", [])
    mixed = claiming(
        using("train", "gpus", limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "6"}),
        gpus="template:four-per-pod",
    )
    assert verdict(mixed) == ("deny", [
        "pod: 10 gpu.nvidia.com devices in all (6 from deviceclass.resource.kubernetes.io/gpu.nvidia.com, 4 from "
        'claim "gpus" (ResourceClaimTemplate "four-per-pod")) fit on no node: the most one node holds is 8 (node '
        '"gpu-node-1"); ask for at most 8 in all, or split the pod (policy "team", cluster.fits)',
    ])  # fmt: skip
    assert verdict(claiming(using("train", "gpus"), gpus="huge-or-small")) == ("allow", [])
    assert verdict(claiming(using("train", "gpus"), gpus="big-or-small")) == ("allow", [])
    assert verdict(claiming(using("train", "nics"), nics="nics")) == ("allow", [])


def test_a_device_class_resource_is_held_to_the_largest_dra_node():
    cluster = dra_view(SLICE)
    resource = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    assert judged("8", cluster, resource) == ("allow", [])
    assert judged("12", cluster, resource) == ("deny", [
        f'container "train": {resource} "12" fits on no node: the most one node holds is 8 (node "gpu-node-1"); '
        'request at most 8, or list a larger node pool in cluster.assumeNodes (policy "team", cluster.fits)',
    ])  # fmt: skip
    assert judged("12", dra_view(), resource) == ("allow", []), "no slice shows the class: not judged"


def test_a_class_of_one_mig_profile_serves_that_profile_only():
    """A DeviceClass selecting one MIG profile and serving `nvidia.com/mig-1g.10gb`: the node offers the
    devices of that profile under that name; NVIDIA's `mig.nvidia.com` counts every MIG device."""
    one_profile = {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig-1g.10gb.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                "device.attributes['gpu.nvidia.com'].type == 'mig' && "
                                "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}],
                 "extendedResourceName": "nvidia.com/mig-1g.10gb"},
    }  # fmt: skip
    assert class_info(one_profile) == (
        "mig-1g.10gb.example.com",
        ClassInfo("gpu.nvidia.com", "mig", "nvidia.com/mig-1g.10gb", "1g.10gb"),
    )

    def mig(index: int, profile: str) -> dict:
        return {"name": f"gpu-0-mig-{index}", "attributes": {"type": {"string": "mig"},
                                                             "profile": {"string": profile}}}  # fmt: skip

    profiles = ["1g.10gb", "1g.10gb", "1g.10gb", "2g.20gb", "2g.20gb"]
    migs = {"metadata": {"name": "gpu-node-1-mig"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1",
            "devices": [mig(i, p) for i, p in enumerate(profiles)]}}  # fmt: skip
    merged = dra_view(migs, classes=[*CLASSES, one_profile]).nodes["gpu-node-1"]
    assert dict(merged.allocatable) == {
        "deviceclass.resource.kubernetes.io/mig.nvidia.com": 5,
        "deviceclass.resource.kubernetes.io/mig-1g.10gb.example.com": 3,
        "nvidia.com/mig-1g.10gb": 3,
    }


def test_a_classs_extended_resource_its_device_class_resource_and_claims_draw_on_the_same_devices():
    """`nvidia.com/gpu` served by gpu.nvidia.com, `deviceclass.resource.kubernetes.io/gpu.nvidia.com` and a
    claim of that class: the scheduler allocates them all from one node's 8 GPUs (KEP-5004). 6 and 6 never
    run there, whichever two ways the pod asks; 4 and 4 do."""
    from tests.test_dra import claim, exactly
    from tests.test_dra_pods import claiming, index, named, using

    claims = index(named(claim(exactly(count=6)), "six"), named(claim(exactly(count=4)), "four"))
    cluster = dra_view(SLICE)

    def verdict(obj: dict) -> tuple[str, list[str]]:
        decision = evaluate(obj, "team", PolicySet((WIDE,)), nodes=cluster, claims=claims)
        return decision.verdict, decision.violations

    gpus, by_class = "nvidia.com/gpu", "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    assert verdict(claiming(using("train", "gpus", limits={gpus: "6"}), gpus="six")) == ("deny", [
        'pod: 12 gpu.nvidia.com devices in all (6 from nvidia.com/gpu, 6 from claim "gpus" (ResourceClaim "six")) '
        'fit on no node: the most one node holds is 8 (node "gpu-node-1"); ask for at most 8 in all, or split the '
        'pod (policy "team", cluster.fits)',
    ])  # fmt: skip
    assert verdict(claiming(using("train", "gpus", limits={gpus: "4"}), gpus="four")) == ("allow", [])
    both = pod(container("train", limits={gpus: "6"}), container("sidecar", limits={by_class: "6"}))
    assert verdict(both) == ("deny", [
        "pod: 12 gpu.nvidia.com devices in all (6 from deviceclass.resource.kubernetes.io/gpu.nvidia.com, 6 from "
        'nvidia.com/gpu) fit on no node: the most one node holds is 8 (node "gpu-node-1"); ask for at most 8 in '
        'all, or split the pod (policy "team", cluster.fits)',
    ])  # fmt: skip
    assert verdict(pod(container("train", limits={gpus: "4", by_class: "4"}))) == ("allow", [])
    three = claiming(using("train", "gpus", limits={gpus: "2", by_class: "2"}), gpus="six")
    assert verdict(three) == ("deny", [
        "pod: 10 gpu.nvidia.com devices in all (2 from deviceclass.resource.kubernetes.io/gpu.nvidia.com, 2 from "
        'nvidia.com/gpu, 6 from claim "gpus" (ResourceClaim "six")) fit on no node: the most one node holds is 8 '
        '(node "gpu-node-1"); ask for at most 8 in all, or split the pod (policy "team", cluster.fits)',
    ])  # fmt: skip
    # An init container's devices are given back before the containers start (the scheduler's requests count
    # each resource's effective total): 6 then 6 of one resource, beside 2 of the other, fit on 8.
    init = pod(container("train", limits={gpus: "6"}), container("sidecar", limits={by_class: "2"}))
    init["spec"]["initContainers"] = [container("prepare", limits={gpus: "6"})]
    assert verdict(init) == ("allow", [])


def test_where_a_device_plugin_serves_the_extended_resource_it_does_not_draw_on_the_slices():
    """A node that advertises `nvidia.com/gpu` itself (a device plugin) serves it that way, not from its DRA
    devices (KEP-5004): 6 from the plugin's 8 and a claim of 6 from the slice's 8 run there together."""
    from tests.test_dra import claim, exactly
    from tests.test_dra_pods import claiming, index, named, using

    nodes = view(node("gpu-node-1", {"nvidia.com/gpu": 8})).nodes
    read = dict(filter(None, map(class_info, CLASSES)))
    cluster = ClusterView(merge(nodes, [slice_info(SLICE)[1]], read))
    merged = cluster.nodes["gpu-node-1"]
    assert (dict(merged.allocatable), merged.served) == (
        {"nvidia.com/gpu": 8, "deviceclass.resource.kubernetes.io/gpu.nvidia.com": 8},
        (),
    )
    claims = index(named(claim(exactly(count=6)), "six"))
    decision = evaluate(claiming(using("train", "gpus", limits={"nvidia.com/gpu": "6"}), gpus="six"), "team",
                        PolicySet((WIDE,)), nodes=cluster, claims=claims)  # fmt: skip
    assert (decision.verdict, decision.violations) == ("allow", [])
    assert dra_view(SLICE).nodes["gpu-node-1"].served == (("nvidia.com/gpu", "gpu.nvidia.com"),)


def test_a_class_selects_by_product_memory_and_compute_capability_and_counts_at_most_what_it_may_select():
    """DeviceClasses whose selectors read attributes and capacity (celselect.py): each counts only the node's
    devices they select; a selector part not read is taken as true, so the class counts what it may select
    (never fewer: the checks never fail closed on it), and says it is not exact."""
    nv = "device.attributes['gpu.nvidia.com']"

    def device_class(name: str, expression: str, extended: str = "") -> dict:
        spec: dict = {"selectors": [{"cel": {"expression": expression}}]}
        if extended:
            spec["extendedResourceName"] = extended
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}

    big = device_class("big.example.com", "device.driver == 'gpu.nvidia.com' && "
                       "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0")  # fmt: skip
    h100 = device_class("h100.example.com", f"{nv}.productName == 'NVIDIA H100 80GB HBM3' && {nv}.index < 4",
                        "example.com/h100")  # fmt: skip
    hopper = device_class("hopper.example.com", f"{nv}.cudaComputeCapability.compareTo(semver('9.0.0')) >= 0")
    a100 = device_class("a100.example.com", f"{nv}.productName == 'NVIDIA A100-SXM4-80GB'")
    guessed = device_class("guessed.example.com", f"device.driver == 'gpu.nvidia.com' && {nv}.type == 'gpu' && "
                           f"{nv}.productName.lowerAscii().matches('a100')")  # fmt: skip
    classes = [big, h100, hopper, a100, guessed]
    read = dict(filter(None, map(class_info, classes)))
    assert [(name, one.exact) for name, one in read.items()] == [
        ("big.example.com", True), ("h100.example.com", True), ("hopper.example.com", True),
        ("a100.example.com", True), ("guessed.example.com", False),
    ]  # fmt: skip
    merged = dra_view(SLICE, classes=classes).nodes["gpu-node-1"]
    prefix = "deviceclass.resource.kubernetes.io/"
    assert dict(merged.allocatable) == {
        f"{prefix}big.example.com": 8,
        f"{prefix}h100.example.com": 4,  # indexes 0 to 3
        "example.com/h100": 4,
        f"{prefix}hopper.example.com": 8,
        f"{prefix}guessed.example.com": 8,  # at most: the A100 test is not read
    }
    assert merged.served == (("example.com/h100", "h100.example.com"),)


def mig_slice(node_name: str, *profiles: str) -> dict:
    """A node's MIG devices as NVIDIA's DRA driver publishes them (cmd/gpu-kubelet-plugin: type mig, the
    profile, the parent's productName and uuid, the slice's own memory)."""
    memory = {"1g.10gb": "9856Mi", "2g.20gb": "19968Mi", "3g.40gb": "40192Mi"}
    devices = [
        {"name": f"gpu-0-mig-{index}", "attributes": {
            "type": {"string": "mig"}, "profile": {"string": profile},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"}, "parentUUID": {"string": "GPU-0"},
            "cudaComputeCapability": {"version": "8.0.0"}},
         "capacity": {"memory": {"value": memory[profile]}}}
        for index, profile in enumerate(profiles)
    ]  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-mig"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node_name, "devices": devices}}  # fmt: skip


def test_drift_compares_a_policys_mig_profiles_with_the_mig_devices_in_the_slices():
    """A DRA-only MIG pool: its nodes' MIG devices are read as the mixed strategy's labels, so a policy
    offering profiles the slices do not publish, or a GPU model they contradict, is drift, with its lines."""
    from tests.test_clustercheck import MIG_POLICY
    from webhook.admission.checks import clusterdrift
    from webhook.admission.policy.model import GPU

    nodes = view(node("dra-mig-1", {}), node("dra-mig-2", {})).nodes
    read = dict(filter(None, map(class_info, CLASSES)))
    slices = [slice_info(mig_slice(name, "2g.20gb", "2g.20gb", "2g.20gb"))[1] for name in ("dra-mig-1", "dra-mig-2")]
    cluster = ClusterView(merge(nodes, slices, read))
    assert dict(cluster.nodes["dra-mig-1"].labels) == {
        "nvidia.com/mig-2g.20gb.count": "3", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"
    }  # fmt: skip
    assert [d.line for d in clusterdrift.drift(MIG_POLICY, cluster)] == [
        'policy "team" sharing.migProfile is 1g.10gb, but 2 nodes (dra-mig-1, dra-mig-2) say no 1g.10gb slice: pods '
        "converted to nvidia.com/mig-1g.10gb cannot run there; set sharing.migProfile to a profile of migProfiles "
        "the nodes have, or change their MIG layout (mig-parted)",
        'policy "team" sharing.migProfiles is 1g.10gb, 3g.40gb, but 2 nodes (dra-mig-1, dra-mig-2) say 2g.20gb x3 '
        "(MIG devices in ResourceSlices): pods converted to nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb cannot "
        "run there; list the profiles the nodes have in sharing.migProfiles, or change their MIG layout (mig-parted)",
    ]  # fmt: skip
    h100 = dataclasses.replace(MIG_POLICY, gpu=GPU(model="H100-80GB"), memo={})
    assert [d.line for d in clusterdrift.drift(h100, cluster) if d.field == "gpu.model"] == [
        (
            'policy "team" gpu.model is H100-80GB, but 2 nodes (dra-mig-1, dra-mig-2) say A100-80GB: memory limits are '
            "worked out for H100-80GB's memory; set gpu.model: A100-80GB (or auto), or give these nodes' namespaces "
            "their own policy"
        )
    ]
    offered = [slice_info(mig_slice("dra-mig-1", "1g.10gb", "1g.10gb", "3g.40gb"))[1]]
    assert clusterdrift.drift(MIG_POLICY, ClusterView(merge(nodes, offered, read))) == ()


def test_drift_compares_a_policys_gpu_memory_with_the_gpus_in_the_slices():
    from webhook.admission.checks import clusterdrift
    from webhook.admission.policy.model import GPU

    wrong = policy(gpu=GPU(model="H100-80GB", memory_mib=40960))
    assert [d.line for d in clusterdrift.drift(wrong, dra_view(SLICE))] == [
        'policy "team" gpu.memoryMiB is 40960, but 1 node (gpu-node-1) says 81559: memory limits are worked out for '
        "another GPU's memory; set gpu.memoryMiB: 81559",
    ]


# --- through the real server, the slices and classes watched from a loopback API server ---------------------

POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: training}
spec:
  namespaces: [train]
  limits: {maxPerContainer: 16, maxPerPod: 16}
  cluster: {fits: deny}
"""


def test_the_server_admits_and_refuses_on_a_dra_only_pool_from_its_watches(start_server, tmp_path):
    from tests.test_inventory import eventually
    from tests.test_server import pod as gpu_pod
    from tests.test_server import review

    no_plugin = node("gpu-node-1", {})  # no device plugin: its GPUs are in a ResourceSlice
    with loopback_cluster(tmp_path, nodes=[no_plugin], policies={"p.yaml": POLICY}) as cluster:
        server = start_server(cluster.policies, extra_args=["--kubeconfig", cluster.kubeconfig])

        def dra() -> dict:
            return server.get("/readyz").json()["cluster"].get("dra", {})

        eventually(lambda: dra().get("DeviceClass", {}).get("state") == "current", timeout=10)
        assert review(server, "validate", gpu_pod("train", "2"))["allowed"] is False  # no slices yet
        for item in CLASSES:
            cluster.api.put(item)
        cluster.api.put(SLICE)
        eventually(lambda: dra().get("ResourceSlice", {}).get("objects") == 1, timeout=10)
        eventually(lambda: review(server, "validate", gpu_pod("train", "2"))["allowed"] is True)
        denied = review(server, "validate", gpu_pod("train", "12"))
        assert denied["status"]["message"] == (
            'container "main": nvidia.com/gpu "12" fits on no node: the most one node holds is 8 (node '
            '"gpu-node-1"); request at most 8, or list a larger node pool in cluster.assumeNodes (policy "training", '
            "cluster.fits)"
        )
        # A claim's own selectors, through the server's claims cache: A100s never on this node of H100s.
        from tests.test_dra import claim
        from tests.test_dra_pods import claiming, named, using

        for product, name in ((A100, "a100s"), (H100, "h100s")):
            made = named(claim(selecting(f"{NV}.productName == '{product}'", 4)), name)
            made["metadata"]["namespace"] = "train"
            cluster.api.put(made)
        claiming_pods = {}
        for name in ("a100s", "h100s"):
            claiming_pods[name] = claiming(using("main", "gpus"), gpus=name)
            claiming_pods[name]["metadata"]["namespace"] = "train"
        eventually(lambda: review(server, "validate", claiming_pods["a100s"])["allowed"] is False, timeout=10)
        assert review(server, "validate", claiming_pods["a100s"])["status"]["message"] == (
            "pod: 4 gpu.nvidia.com devices matching \"device.attributes['gpu.nvidia.com'].productName == "
            '\'NVIDIA A100-SXM4-80GB\'" (4 from claim "gpus" (ResourceClaim "a100s") request "gpu") fit on no node: '
            'the most on one node is 0 of the 8 gpu.nvidia.com devices of node "gpu-node-1"; change the selector to '
            'one the nodes\' devices match (policy "training", cluster.fits)'
        )
        assert review(server, "validate", claiming_pods["h100s"])["allowed"] is True
        cluster.api.delete("ResourceSlice", "", SLICE["metadata"]["name"])  # the driver goes: the devices with it
        eventually(lambda: review(server, "validate", gpu_pod("train", "2"))["allowed"] is False)


def test_check_with_cluster_reads_the_slices_and_classes_too(tmp_path):
    from tests.test_cli_check import gpu_webhook
    from tests.test_server import pod as gpu_pod

    with loopback_cluster(tmp_path, nodes=[node("gpu-node-1", {})], objects=[*CLASSES, SLICE],
                          policies={"p.yaml": POLICY}) as cluster:  # fmt: skip
        (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([gpu_pod("train", "2"), gpu_pod("train", "12")]))
        run = gpu_webhook("check", "--cluster", "--kubeconfig", cluster.kubeconfig, "--policies", str(cluster.policies),
                          str(tmp_path / "pods.yaml"))  # fmt: skip
        assert run.returncode == 1, run.stderr
        assert [line for line in run.stdout.splitlines() if line.startswith("DENY")] == [
            f'DENY {tmp_path}/pods.yaml#1 Pod/train: container "main": nvidia.com/gpu "12" fits on no node: the most '
            'one node holds is 8 (node "gpu-node-1"); request at most 8, or list a larger node pool in '
            'cluster.assumeNodes (policy "training", cluster.fits)'
        ]
        cluster.api.forbidden.update({"resourceslices", "deviceclasses"})  # not allowed to read DRA: the nodes alone
        run = gpu_webhook("check", "--cluster", "--kubeconfig", cluster.kubeconfig, "--policies", str(cluster.policies),
                          str(tmp_path / "pods.yaml"))  # fmt: skip
        assert run.returncode == 1 and "no node advertises it" in run.stdout


MIG_POLICY_YAML = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: slices}
spec:
  namespaces: [train]
  gpu: {model: A100-80GB}
  sharing: {mode: mig, migProfile: 1g.10gb, migProfiles: [1g.10gb, 3g.40gb]}
"""


def test_policy_lint_cluster_reads_the_mig_devices_in_the_slices(tmp_path):
    from tests.test_cli_check import gpu_webhook

    mig = mig_slice("dra-mig-1", "2g.20gb", "2g.20gb", "2g.20gb")
    with loopback_cluster(tmp_path, namespaces=["train"], nodes=[node("dra-mig-1", {})], objects=[*CLASSES, mig],
                          policies={"p.yaml": MIG_POLICY_YAML}) as cluster:  # fmt: skip
        run = gpu_webhook("policy", "lint", str(cluster.policies), "--cluster", "--kubeconfig", cluster.kubeconfig,
                          "-o", "json")  # fmt: skip
        assert run.returncode == 1, run.stderr
        assert [item["line"] for item in yamldocs.load(run.stdout)["drift"]] == [
            'policy "slices" sharing.migProfile is 1g.10gb, but 1 node (dra-mig-1) says no 1g.10gb slice: pods '
            "converted to nvidia.com/mig-1g.10gb cannot run there; set sharing.migProfile to a profile of "
            "migProfiles the nodes have, or change their MIG layout (mig-parted)",
            'policy "slices" sharing.migProfiles is 1g.10gb, 3g.40gb, but 1 node (dra-mig-1) says 2g.20gb x3 (MIG '
            "devices in ResourceSlices): pods converted to nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb cannot run "
            "there; list the profiles the nodes have in sharing.migProfiles, or change their MIG layout (mig-parted)",
        ]
        assert "unreadSelectors" not in yamldocs.load(run.stdout)
        guessed = ("device.driver == 'gpu.nvidia.com' && "
                   "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100')")  # fmt: skip
        cluster.api.put({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                         "metadata": {"name": "a100.example.com"},
                         "spec": {"selectors": [{"cel": {"expression": guessed}}]}})  # fmt: skip
        run = gpu_webhook("policy", "lint", str(cluster.policies), "--cluster", "--kubeconfig", cluster.kubeconfig)
        assert run.returncode == 1, run.stderr
        assert run.stdout.splitlines()[-1] == (
            'note: DeviceClass "a100.example.com": its selector is not read in full '
            "(device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100')): its devices are counted "
            "as those the rest of it selects, the most it may select (the cluster checks never refuse a pod on what "
            "they cannot read)"
        )


SHARED_CLASSES = [d for d in yamldocs.load_all((FIXTURES / "shared-deviceclasses.yaml").read_text()) if d]
UNSHARED, TIMESLICED = SHARED_CLASSES
TIME_SLICED = policy(
    sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), limits=Limits(max_per_container=16, max_per_pod=16),
    cluster_checks=DENY,
)  # fmt: skip


def gpu_slice(node_name: str) -> dict:
    """The fixture's ResourceSlice (8 H100s), published by another node."""
    return {
        **SLICE,
        "metadata": {"name": f"{node_name}-gpu.nvidia.com"},
        "spec": {**SLICE["spec"], "nodeName": node_name},
    }


def test_a_device_classs_own_gpu_config_is_read_into_its_class_info():
    read = dict(map(class_info, SHARED_CLASSES))
    assert read["gpu-shared.example.com"].sharing == ""
    assert read["gpu-timesliced.example.com"].sharing == "TimeSlicing"
    assert dict(map(class_info, CLASSES))["gpu.nvidia.com"].sharing == "", "NVIDIA's classes carry no config"
    mps_last = {**TIMESLICED, "spec": {**TIMESLICED["spec"], "config": [*TIMESLICED["spec"]["config"], {"opaque": {
        "driver": "gpu.nvidia.com", "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                                                   "sharing": {"strategy": "MPS"}}}}]}}  # fmt: skip
    assert class_info(mps_last)[1].sharing == "MPS", "a later config wins, as the driver applies them"
    bare_last = {**TIMESLICED, "spec": {**TIMESLICED["spec"], "config": [*TIMESLICED["spec"]["config"], {"opaque": {
        "driver": "gpu.nvidia.com", "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                                   "kind": "GpuConfig"}}}]}}  # fmt: skip
    assert class_info(bare_last)[1].sharing == ""
    other_driver = {**TIMESLICED, "spec": {**TIMESLICED["spec"], "config": [
        {"opaque": {"driver": "gpu.example.com", "parameters": TIMESLICED["spec"]["config"][0]["opaque"]["parameters"]}}
    ]}}  # fmt: skip
    assert class_info(other_driver)[1].sharing == ""


UNSHARED_DRIFT = (
    'policy "team" sharing.mode is time-slicing, but 2 nodes (dra-1, dra-2) say DeviceClass "gpu-shared.example.com" '
    "serves nvidia.com/gpu.shared with no GpuConfig: pods asking nvidia.com/gpu.shared there get GPUs not shared by "
    "time-slicing, through a claim the scheduler makes with no config but the class's; add a GpuConfig with "
    'sharing.strategy TimeSlicing (opaque driver gpu.nvidia.com) to DeviceClass "gpu-shared.example.com" '
    "spec.config, or serve nvidia.com/gpu.shared from the device plugin on these nodes"
)
WHOLE_GPUS = (
    'container "train": nvidia.com/gpu.shared "1" would be GPUs of its own: every node offering it (2 nodes (dra-1, '
    'dra-2)) serves it through DeviceClass "gpu-shared.example.com", whose own config does not share GPUs by '
    'time-slicing, and the claim the scheduler makes for it carries no other; policy "team" shares GPUs by '
    "time-slicing; ask an admin to add a GpuConfig with sharing.strategy TimeSlicing to the DeviceClass's "
    'spec.config, or to serve nvidia.com/gpu.shared from the device plugin (policy "team", cluster.fits)'
)


def shared_view(classes: list[dict], *plugin_nodes: dict) -> ClusterView:
    nodes = view(node("dra-1", {}), node("dra-2", {}), *plugin_nodes).nodes
    read = dict(filter(None, map(class_info, classes)))
    slices = [slice_info(gpu_slice(name))[1] for name in ("dra-1", "dra-2")]
    return ClusterView(merge(nodes, slices, read), (), sharing_of(read))


def test_a_class_serving_the_replica_name_without_the_namespaces_gpu_config_is_drift_and_refused_where_only_it_serves():
    from webhook.admission.checks import clusterdrift

    unshared = shared_view([UNSHARED])
    assert [d.line for d in clusterdrift.drift(TIME_SLICED, unshared)] == [UNSHARED_DRIFT]
    asking = pod(container("train", limits={"nvidia.com/gpu": "1"}))  # mapped to nvidia.com/gpu.shared: 1
    decision = evaluate(asking, "team", PolicySet((TIME_SLICED,)), nodes=unshared)
    assert (decision.verdict, decision.violations) == ("deny", [
        WHOLE_GPUS,
        f"pod: {UNSHARED_DRIFT} (cluster.drift)",
    ])  # fmt: skip
    shared = shared_view([TIMESLICED])
    assert clusterdrift.drift(TIME_SLICED, shared) == ()
    assert evaluate(asking, "team", PolicySet((TIME_SLICED,)), nodes=shared).verdict == "allow"
    # A node whose device plugin shares GPUs offers the replica too: the pod may run shared, so it is not
    # refused for the classes (the drift still names them)
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    plugin = node("plugin-1", {"nvidia.com/gpu.shared": "32"}, labels)
    mixed = shared_view([UNSHARED], plugin)
    decision = evaluate(asking, "team", PolicySet((TIME_SLICED,)), nodes=mixed)
    assert (decision.verdict, decision.violations) == ("deny", [f"pod: {UNSHARED_DRIFT} (cluster.drift)"])
    warned = dataclasses.replace(TIME_SLICED, cluster_checks=ClusterChecks(), memo={})  # fits, drift: warn
    decision = evaluate(asking, "team", PolicySet((warned,)), nodes=unshared)
    assert decision.verdict == "allow"
    assert decision.warnings[2:] == [
        'gpu-admission: container "train": nvidia.com/gpu.shared: DRA serves it unshared ("gpu-shared.example.com"); '
        "ask an admin",
        "gpu-admission: pod: policy sharing.mode disagrees with 2 nodes; ask an admin to fix the policy",
    ]
    mps = dataclasses.replace(TIME_SLICED, sharing=Sharing(mode=Mode.MPS, replicas=4), memo={})
    assert [d.nodes_say for d in clusterdrift.drift(mps, shared)] == [
        'DeviceClass "gpu-timesliced.example.com" serves nvidia.com/gpu.shared with a TimeSlicing GpuConfig'
    ]


def test_a_claim_of_a_class_that_shares_the_namespaces_way_is_shared_where_the_server_knows_the_class():
    """A claim with no GpuConfig of its own gets its DeviceClass's (the driver applies the class's configs under
    the claim's): where the snapshot holds the class, one that shares by the namespace's strategy covers it;
    offline (no snapshot) the claim must carry the GpuConfig itself, as before."""
    from tests.test_dra import claim, exactly
    from tests.test_dra_pods import claiming, index, named, using

    shared_gpu_class = {**TIMESLICED, "metadata": {"name": "gpu.nvidia.com"}}
    known = shared_view([shared_gpu_class])
    plain = named(claim(exactly(count=1)), "one")
    policies = PolicySet((TIME_SLICED,))
    unshared_line = (
        'request "gpu": gpu.nvidia.com count 1 asks for whole GPUs with no GpuConfig to share them: the claim would '
        'hold them alone, and policy "team" shares GPUs by time-slicing; add a config for this request with opaque '
        "driver gpu.nvidia.com and parameters apiVersion resource.nvidia.com/v1beta1, kind GpuConfig, "
        "sharing.strategy TimeSlicing"
    )
    assert evaluate(plain, "team", policies).violations == [unshared_line], "offline: today's rule"
    assert evaluate(plain, "team", policies, nodes=shared_view([CLASSES[0]])).violations == [unshared_line]
    assert evaluate(plain, "team", policies, nodes=known).verdict == "allow"
    bare = named(claim(exactly(count=1)), "bare")
    bare["spec"]["devices"]["config"] = [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}}}]  # fmt: skip
    assert evaluate(bare, "team", policies, nodes=known).violations == [unshared_line], (
        "the claim's own GpuConfig stands over the class's"
    )
    claims = index(plain, bare)
    for source, verdict in (("one", "allow"), ("bare", "deny")):
        decision = evaluate(claiming(using("train", "gpus"), gpus=source), "team", policies, nodes=known, claims=claims)
        assert decision.verdict == verdict, (source, decision.violations)
    decision = evaluate(claiming(using("train", "gpus"), gpus="one"), "team", policies, claims=claims)
    assert decision.violations == [
        'pod: claim "gpus" (ResourceClaim "one") request "gpu": gpu.nvidia.com count 1 asks for whole GPUs that no '
        'GpuConfig shares: the pod would hold them alone, and policy "team" shares GPUs by time-slicing; name a claim '
        "whose GpuConfig sets sharing.strategy TimeSlicing"
    ]


SHARED_POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: notebooks}
spec:
  namespaces: [notebooks]
  sharing: {mode: time-slicing, replicas: 4}
  cluster: {fits: deny}
"""


def test_the_server_reads_the_classes_configs_from_its_watches(start_server, tmp_path):
    """Through the real server: a pod whose replica only an unshared DeviceClass serves is refused; once the
    class carries the namespace's GpuConfig it is admitted; a claim with no GpuConfig of its own is admitted
    when its class shares the namespace's way."""
    from tests.test_dra import claim, exactly
    from tests.test_inventory import eventually
    from tests.test_server import pod as gpu_pod
    from tests.test_server import review

    shared_gpu_class = {**TIMESLICED, "metadata": {"name": "gpu.nvidia.com"}, "spec": {
        **TIMESLICED["spec"], "extendedResourceName": "nvidia.com/gpu"}}  # fmt: skip
    with loopback_cluster(tmp_path, nodes=[node("dra-1", {})], objects=[UNSHARED, shared_gpu_class, gpu_slice("dra-1")],
                          policies={"p.yaml": SHARED_POLICY}) as cluster:  # fmt: skip
        server = start_server(cluster.policies, extra_args=["--kubeconfig", cluster.kubeconfig])
        one = claim(exactly(count=1))
        one["metadata"]["namespace"] = "notebooks"
        eventually(lambda: review(server, "validate", one)["allowed"] is True, timeout=10)
        denied = review(server, "validate", gpu_pod("notebooks", "1"))
        assert denied["status"]["message"] == (
            'container "main": nvidia.com/gpu.shared "1" would be GPUs of its own: every node offering it (1 node '
            '(dra-1)) serves it through DeviceClass "gpu-shared.example.com", whose own config does not share GPUs '
            'by time-slicing, and the claim the scheduler makes for it carries no other; policy "notebooks" shares '
            "GPUs by time-slicing; ask an admin to add a GpuConfig with sharing.strategy TimeSlicing to the "
            "DeviceClass's spec.config, or to serve nvidia.com/gpu.shared from the device plugin (policy "
            '"notebooks", cluster.fits)'
        )
        cluster.api.put({**UNSHARED, "spec": {**UNSHARED["spec"], "config": TIMESLICED["spec"]["config"]}})
        eventually(lambda: review(server, "validate", gpu_pod("notebooks", "1"))["allowed"] is True, timeout=10)


def test_policy_lint_cluster_names_a_class_that_serves_the_replica_unshared(tmp_path):
    from tests.test_cli_check import gpu_webhook

    names = ("dra-1", "dra-2")
    with loopback_cluster(tmp_path, namespaces=["notebooks"], nodes=[node(name, {}) for name in names],
                          objects=[*map(gpu_slice, names), UNSHARED],
                          policies={"p.yaml": SHARED_POLICY}) as cluster:  # fmt: skip
        run = gpu_webhook("policy", "lint", str(cluster.policies), "--cluster", "--kubeconfig", cluster.kubeconfig,
                          "-o", "json")  # fmt: skip
        assert run.returncode == 1, run.stderr
        assert [item["line"] for item in yamldocs.load(run.stdout)["drift"]] == [
            UNSHARED_DRIFT.replace('policy "team"', 'policy "notebooks"')
        ]
        cluster.api.put({**UNSHARED, "spec": {**UNSHARED["spec"], "config": TIMESLICED["spec"]["config"]}})
        run = gpu_webhook("policy", "lint", str(cluster.policies), "--cluster", "--kubeconfig", cluster.kubeconfig,
                          "-o", "json")  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
NV = "device.attributes['gpu.nvidia.com']"


def product_slice(node_name: str, *products: str) -> dict:
    """The fixture's ResourceSlice published by another node, its GPUs of these products (8 by default: A100s)."""
    products = products or (A100,) * 8
    devices = []
    for index, product in enumerate(products):
        device = copy.deepcopy(SLICE["spec"]["devices"][index % 8])
        device["name"] = f"gpu-{index}"
        device["attributes"]["productName"] = {"string": product}
        device["attributes"]["index"] = {"int": index}
        devices.append(device)
    return {"metadata": {"name": f"{node_name}-gpu.nvidia.com"},
            "spec": {**SLICE["spec"], "nodeName": node_name, "devices": devices}}  # fmt: skip


def pool_view(*slices: dict) -> ClusterView:
    nodes = view(*(node(one["spec"]["nodeName"], {}) for one in slices)).nodes
    read = dict(filter(None, map(class_info, CLASSES)))
    held = [s for _, s in filter(None, map(slice_info, slices))]
    return ClusterView(merge(nodes, held, read), (), sharing_of(read), dra=DraDevices(held, read))


def selecting(expression: str, count: int, name: str = "gpu") -> dict:
    return exactly(name, count=count, selectors=[{"cel": {"expression": expression}}])


def test_a_claims_own_selectors_narrow_the_devices_it_is_held_to():
    """On a pool of 8-A100 nodes, a claim of 4 gpu.nvidia.com devices whose selector asks for H100s is refused,
    naming the selector and the largest node's matching count; one asking A100s is admitted; a selector part
    not read is taken as true (admitted: never refused on what is not read). Requests of one selector in a
    pod are counted together; a `firstAvailable` request is refused only where none of its alternatives fits;
    a claim with no selector keeps nothing more in its summary."""
    from tests.test_dra import claim
    from tests.test_dra_pods import claiming, index, named, using
    from webhook.admission.dra.podclaims import summary_of

    h100s = named(claim(selecting(f"{NV}.productName == '{H100}'", 4)), "h100s")
    a100s = named(claim(selecting(f"{NV}.productName == '{A100}'", 4)), "a100s")
    guessed = named(claim(selecting(f"{NV}.productName.lowerAscii().matches('h100')", 4)), "guessed")
    low = named(claim(selecting(f"{NV}.index < 4", 3)), "low-index")
    low_template = named(claim(selecting(f"{NV}.index < 4", 2), kind="ResourceClaimTemplate"), "low-index-per-pod")
    either = named(claim({"name": "gpu", "firstAvailable": [
        {"name": "h100", "deviceClassName": "gpu.nvidia.com", "count": 4,
         "selectors": [{"cel": {"expression": f"{NV}.productName == '{H100}'"}}]},
        {"name": "any", "deviceClassName": "gpu.nvidia.com", "count": 2},
    ]}), "h100-or-any")  # fmt: skip
    h100_only = named(claim({"name": "gpu", "firstAvailable": [
        {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4,
         "selectors": [{"cel": {"expression": f"{NV}.productName == '{H100}'"}}]},
        {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2,
         "selectors": [{"cel": {"expression": f"{NV}.productName == '{H100}'"}}]},
    ]}), "h100-four-or-two")  # fmt: skip
    plain = named(claim(exactly(count=4)), "plain")
    claims = index(h100s, a100s, guessed, low, low_template, either, h100_only, plain)
    a100_pool = pool_view(product_slice("a100-1"), product_slice("a100-2"))

    def verdict(obj: dict, cluster: ClusterView = a100_pool) -> tuple[str, list[str]]:
        decision = evaluate(obj, "team", PolicySet((WIDE,)), nodes=cluster, claims=claims)
        return decision.verdict, decision.violations

    assert verdict(claiming(using("train", "gpus"), gpus="h100s")) == ("deny", [
        "pod: 4 gpu.nvidia.com devices matching \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 "
        '80GB HBM3\'" (4 from claim "gpus" (ResourceClaim "h100s") request "gpu") fit on no node: the most on one '
        'node is 0 of the 8 gpu.nvidia.com devices of node "a100-1"; change the selector to one the nodes\' devices '
        'match (policy "team", cluster.fits)',
    ])  # fmt: skip
    assert verdict(claiming(using("train", "gpus"), gpus="a100s")) == ("allow", [])
    assert verdict(claiming(using("train", "gpus"), gpus="guessed")) == ("allow", []), "not read: taken as true"
    assert verdict(claiming(using("train", "gpus"), gpus="plain")) == ("allow", [])
    # 3 and 2 of the GPUs indexed 0 to 3: 5 on one node, which has 4 of them (and 8 GPUs in all: the class fits)
    assert verdict(claiming(using("train", "a", "b"), a="low-index", b="template:low-index-per-pod")) == ("deny", [
        "pod: 5 gpu.nvidia.com devices matching \"device.attributes['gpu.nvidia.com'].index < 4\" (3 from claim \"a\" "
        '(ResourceClaim "low-index") request "gpu", 2 from claim "b" (ResourceClaimTemplate "low-index-per-pod") '
        'request "gpu") fit on no node: the most on one node is 4 of the 8 gpu.nvidia.com devices of node '
        '"a100-1"; ask for at most 4 in all, or change the selector (policy "team", cluster.fits)',
    ])  # fmt: skip
    assert verdict(claiming(using("train", "gpus"), gpus="low-index")) == ("allow", [])
    assert verdict(claiming(using("train", "gpus"), gpus="h100-or-any")) == ("allow", []), "its second fits"
    assert verdict(claiming(using("train", "gpus"), gpus="h100-four-or-two")) == ("deny", [
        'pod: claim "gpus" (ResourceClaim "h100-four-or-two") request "gpu": none of its firstAvailable alternatives '
        "fits on a node: \"four\": 4 gpu.nvidia.com devices matching \"device.attributes['gpu.nvidia.com'].productName "
        '== \'NVIDIA H100 80GB HBM3\'" (the most on one node: 0 of the 8 gpu.nvidia.com devices of node "a100-1"); '
        "\"two\": 2 gpu.nvidia.com devices matching \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 "
        '80GB HBM3\'" (the most on one node: 0 of the 8 gpu.nvidia.com devices of node "a100-1"); ask for devices '
        'the nodes have, or change the selectors (policy "team", cluster.fits)',
    ])  # fmt: skip
    # A node of 4 H100s and 4 A100s joins the pool: 4 H100s fit there; 6 do not, and that node is named.
    mixed = pool_view(product_slice("a100-1"), product_slice("mixed-1", *(H100,) * 4, *(A100,) * 4))
    assert verdict(claiming(using("train", "gpus"), gpus="h100s"), mixed) == ("allow", [])
    six = index(named(claim(selecting(f"{NV}.productName == '{H100}'", 6)), "six-h100s"))
    decision = evaluate(claiming(using("train", "gpus"), gpus="six-h100s"), "team", PolicySet((WIDE,)), nodes=mixed,
                        claims=six)  # fmt: skip
    assert (decision.verdict, decision.violations) == ("deny", [
        "pod: 6 gpu.nvidia.com devices matching \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 "
        '80GB HBM3\'" (6 from claim "gpus" (ResourceClaim "six-h100s") request "gpu") fit on no node: the most on one '
        'node is 4 of the 8 gpu.nvidia.com devices of node "mixed-1"; ask for at most 4, or change the selector '
        '(policy "team", cluster.fits)',
    ])  # fmt: skip
    # More than any node has of the class: the class's line says it, once.
    twelve = index(named(claim(selecting(f"{NV}.productName == '{A100}'", 12)), "twelve-a100s"))
    decision = evaluate(claiming(using("train", "gpus"), gpus="twelve-a100s"), "team", PolicySet((WIDE,)),
                        nodes=a100_pool, claims=twelve)  # fmt: skip
    assert (decision.verdict, decision.violations) == ("deny", [
        'pod: 12 gpu.nvidia.com devices in all (12 from claim "gpus" (ResourceClaim "twelve-a100s")) fit on no '
        'node: the most one node holds is 8 (node "a100-1"); ask for at most 8 in all, or split the pod (policy '
        '"team", cluster.fits)',
    ])  # fmt: skip
    # Without the slices' devices (a view with none), the selectors are not judged: admitted.
    assert verdict(claiming(using("train", "gpus"), gpus="h100s"), view(node("a100-1", {}))) == ("allow", [])
    # What a claim keeps: nothing more without selectors; a selector read once per distinct text.
    assert summary_of(plain).selected == ()
    first, second = summary_of(h100s).selected, summary_of(named(h100s, "again")).selected
    assert first[0][1][0][3] is second[0][1][0][3]
    assert first == (("gpu", (("", "gpu.nvidia.com", 4, first[0][1][0][3]),)),)
