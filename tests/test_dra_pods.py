"""A pod's GPU total counts the devices of the claims and templates it names, with its extended resources.

No mix of the four routes (extended resource, DeviceClass resource, claim, template) gets a pod more GPUs than
its namespace allows. The claims reach the engine as data: a `ClaimIndex` here and offline (`check` reads the
claims of its input), the server's watched cache (webhook/server/claims.py) over HTTPS against a loopback API
server. A claim the view does not hold is a warning and a metric, never a denial.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import evanphx
from tests.conftest import LiveServer
from tests.engine_support import GPU, Limits, Mode, Sharing, container, pod, policy
from tests.fake_kube_api import FakeKubeAPI
from tests.test_cli_check import gpu_webhook
from tests.test_clustercheck import A100, node
from tests.test_dra import CAPPED, CLASS_GPU, POD_CAPPED, claim, exactly
from tests.test_inventory import eventually
from tests.test_server import review
from webhook.admission.dra.podclaims import ClaimIndex, devices_of
from webhook.admission.engine import Decision, evaluate
from webhook.admission.policy.model import Policy, PolicySet
from webhook.server.claims import ClaimCache
from webhook.server.inventory import KubeNodes, find_credentials

NS = "team"


def named(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    return obj


TWO = named(claim(exactly(count=2)), "two-gpus")
ONE = named(claim(exactly(count=1)), "one-gpu")
TEMPLATE_TWO = named(claim(exactly(count=2), kind="ResourceClaimTemplate"), "two-per-pod")
BIG_OR_SMALL = named(claim({"name": "gpu", "firstAvailable": [
    {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
    {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 1},
]}), "big-or-small")  # fmt: skip
TWO_REQUESTS = named(claim(exactly("a", count=1), exactly("b", count=2)), "a-and-b")
NIC = named(claim(exactly("nic", device_class="nic.example.com", count=4)), "nics")
EVERY = named(claim(exactly(allocationMode="All", count=None)), "every-gpu")


def index(*objects: dict[str, Any]) -> ClaimIndex:
    held = ClaimIndex()
    for obj in objects:
        assert held.add(obj, NS)
    return held


def claiming(*containers: dict, init: tuple[dict, ...] = (), **claims: str) -> dict[str, Any]:
    """A pod naming claims: `gpus="two-gpus"` (a ResourceClaim), `gpus="template:two-per-pod"` (a template)."""
    entries = []
    for name, source in claims.items():
        if source.startswith("template:"):
            entries.append({"name": name, "resourceClaimTemplateName": source.removeprefix("template:")})
        else:
            entries.append({"name": name, "resourceClaimName": source})
    return pod(*containers, init=init, resourceClaims=entries)


def using(name: str = "train", *claims: str | tuple[str, str], limits: dict | None = None) -> dict[str, Any]:
    """A container naming pod claims (`"gpus"`, or `("gpus", "request")`) in resources.claims."""
    body = container(name, limits=limits)
    refs = [{"name": c} if isinstance(c, str) else {"name": c[0], "request": c[1]} for c in claims]
    if refs:
        body.setdefault("resources", {})["claims"] = refs
    return body


def judged(obj: dict[str, Any], pol: Policy, view: ClaimIndex) -> Decision:
    """Evaluate with the claims; the patch applies as the API server applies it, and a second pass agrees."""
    original = copy.deepcopy(obj)
    decision = evaluate(obj, NS, PolicySet((pol,)), claims=view)
    assert obj == original
    assert evanphx.apply(obj, decision.patch) == decision.mutated
    assert evaluate(decision.mutated, NS, PolicySet((pol,)), claims=view).verdict == decision.verdict
    return decision


# --- the four routes, mixed ------------------------------------------------------------------------------------


def test_an_extended_gpu_and_a_claim_of_two_exceed_a_pod_cap_of_two():
    obj = claiming(using("train", "gpus", limits={"nvidia.com/gpu": "1"}), gpus="two-gpus")
    decision = judged(obj, POD_CAPPED, index(TWO))
    assert (decision.verdict, decision.violations) == ("deny", [
        'pod: 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" (ResourceClaim "two-gpus")) exceed the '
        'per-pod maximum of 2 (policy "team"): a pod\'s claims count with its extended resources; ask for at most '
        "2 in all, or split the pod",
    ])  # fmt: skip
    assert decision.warnings == [], "a denied pod is not changed: no mutation lines"
    # Without the claims the same pod is within its caps: the claim is what the total adds.
    assert evaluate(obj, NS, PolicySet((POD_CAPPED,))).verdict == "allow"


def test_a_claim_named_by_a_container_counts_against_its_per_container_cap_too():
    obj = claiming(using("train", "gpus", limits={"nvidia.com/gpu": "1"}), gpus="two-gpus")
    assert judged(obj, CAPPED, index(TWO)).violations == [
        'container "train": 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" (ResourceClaim "two-gpus")) '
        'exceed the per-container maximum of 2 (policy "team"): a claim\'s devices count with the extended '
        "resources; ask for at most 2 in all",
        'pod: 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" (ResourceClaim "two-gpus")) exceed the '
        'per-pod maximum of 2 (policy "team"): a pod\'s claims count with its extended resources; ask for at most '
        "2 in all, or split the pod",
    ]


def test_a_template_and_a_device_class_resource_in_two_containers():
    obj = claiming(using("a", "mine"), using("b", limits={CLASS_GPU: "1"}), mine="template:two-per-pod")
    assert judged(obj, POD_CAPPED, index(TEMPLATE_TWO)).violations == [
        f'pod: 3 GPUs in all (1 from {CLASS_GPU}, 2 from claim "mine" (ResourceClaimTemplate "two-per-pod")) exceed '
        'the per-pod maximum of 2 (policy "team"): a pod\'s claims count with its extended resources; ask for at '
        "most 2 in all, or split the pod",
    ]


def test_two_claims_each_within_the_cap_are_over_it_together_even_unnamed_by_containers():
    obj = claiming(container("train"), first="two-gpus", second="one-gpu")
    decision = judged(obj, POD_CAPPED, index(TWO, ONE))
    assert decision.violations == [
        'pod: 3 GPUs in all (2 from claim "first" (ResourceClaim "two-gpus"), 1 from claim "second" (ResourceClaim '
        '"one-gpu")) exceed the per-pod maximum of 2 (policy "team"): a pod\'s claims count with its extended '
        "resources; ask for at most 2 in all, or split the pod",
    ]
    assert decision.patch == []
    alone = judged(claiming(container("train"), second="one-gpu"), POD_CAPPED, index(TWO, ONE))
    assert (alone.verdict, alone.violations, alone.patch) == ("allow", [], [])


def test_within_the_caps_every_route_together_is_allowed_without_a_line():
    obj = claiming(using("train", "gpus"), using("side", limits={"nvidia.com/gpu": "1"}), gpus="one-gpu")
    decision = judged(obj, POD_CAPPED, index(ONE))
    assert (decision.verdict, decision.violations, decision.warnings) == ("allow", [], [])


def test_a_container_naming_one_request_gets_that_requests_devices_and_the_pod_all_of_them():
    obj = claiming(using("train", ("gpus", "b"), limits={"nvidia.com/gpu": "1"}), gpus="a-and-b")
    wide = policy(limits=Limits(max_per_container=2, max_per_pod=8))
    assert judged(obj, wide, index(TWO_REQUESTS)).violations == [
        'container "train": 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" (ResourceClaim "a-and-b")) '
        'exceed the per-container maximum of 2 (policy "team"): a claim\'s devices count with the extended '
        "resources; ask for at most 2 in all",
    ]
    obj = claiming(using("train", ("gpus", "a"), limits={"nvidia.com/gpu": "1"}), gpus="a-and-b")
    assert judged(obj, wide, index(TWO_REQUESTS)).violations == []  # 1 + request "a" (1)
    assert judged(obj, POD_CAPPED, index(TWO_REQUESTS)).violations == [
        'pod: 4 GPUs in all (1 from nvidia.com/gpu, 3 from claim "gpus" (ResourceClaim "a-and-b")) exceed the '
        'per-pod maximum of 2 (policy "team"): a pod\'s claims count with its extended resources; ask for at most '
        "2 in all, or split the pod",
    ]


def test_first_available_counts_at_its_largest_alternative_and_other_classes_not_at_all():
    obj = claiming(container("train", limits={"nvidia.com/gpu": "1"}), gpus="big-or-small", nics="nics")
    assert judged(obj, POD_CAPPED, index(BIG_OR_SMALL, NIC)).violations == [
        'pod: 5 GPUs in all (1 from nvidia.com/gpu, 4 from claim "gpus" (ResourceClaim "big-or-small")) exceed the '
        'per-pod maximum of 2 (policy "team"): a pod\'s claims count with its extended resources; ask for at most '
        "2 in all, or split the pod",
    ]
    only_nics = claiming(container("train", limits={"nvidia.com/gpu": "2"}), nics="nics")
    assert judged(only_nics, POD_CAPPED, index(NIC)).verdict == "allow"


def test_a_claim_with_allocation_mode_all_is_unbounded_for_the_pod_too():
    obj = claiming(container("train"), every="every-gpu")
    assert judged(obj, POD_CAPPED, index(EVERY)).violations == [
        'pod: claim "every" (ResourceClaim "every-gpu") asks for every matching gpu.nvidia.com device of a node '
        '(allocationMode All), which no cap can bound (policy "team" allows at most 2 per pod); name a claim with '
        "an exact count",
    ]


def test_mig_devices_from_a_claim_count_with_mig_resources_in_a_container():
    mig = policy(sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=GPU(model="A100-80GB"))
    slice_claim = named(claim(exactly("mig", device_class="mig.nvidia.com", count=1)), "one-slice")
    obj = claiming(using("train", "slice", limits={"nvidia.com/mig-1g.10gb": "1"}), slice="one-slice")
    assert judged(obj, mig, index(slice_claim)).violations == [
        'container "train": 2 MIG devices in all (1 from nvidia.com/mig-1g.10gb, 1 from claim "slice" (ResourceClaim '
        '"one-slice")) exceed the per-container maximum of 1 (policy "team"): a claim\'s devices count with the '
        "extended resources; ask for at most 1 in all",
    ]


def test_under_warn_the_lines_are_warnings_and_the_pod_is_admitted():
    from webhook.admission.policy.model import Enforcement

    obj = claiming(using("train", "gpus", limits={"nvidia.com/gpu": "1"}), gpus="two-gpus")
    decision = judged(obj, policy(limits=Limits(max_per_pod=2), enforcement=Enforcement.WARN), index(TWO))
    assert decision.verdict == "warn"
    assert decision.warnings[-1] == ("gpu-admission: pod: 3 GPUs with its claims: at most 2 per pod; ask for fewer")


def test_under_time_slicing_a_pods_claims_must_share_their_whole_gpus_by_its_strategy():
    """A claim made before the policy said so (or admitted under warn) still holds its GPUs alone: the pod that
    names it is refused, whatever its count; a template's copies are alike."""
    from tests.test_dra import TIME_SLICED, gpu_config

    shared = named(claim(exactly(count=1), config=[gpu_config("TimeSlicing")]), "shared")
    mps = named(claim(exactly(count=1), config=[gpu_config("MPS")], kind="ResourceClaimTemplate"), "mps-per-pod")
    view = index(ONE, shared, mps)
    assert judged(claiming(using("train", "gpu"), gpu="shared"), TIME_SLICED, view).violations == []
    assert judged(claiming(using("train", "gpu"), gpu="one-gpu"), TIME_SLICED, view).violations == [
        'pod: claim "gpu" (ResourceClaim "one-gpu") request "gpu": gpu.nvidia.com count 1 asks for whole GPUs that no '
        'GpuConfig shares: the pod would hold them alone, and policy "team" shares GPUs by time-slicing; name a '
        "claim whose GpuConfig sets sharing.strategy TimeSlicing",
    ]
    assert judged(claiming(using("train", "gpu"), gpu="template:mps-per-pod"), TIME_SLICED, view).violations == [
        'pod: claim "gpu" (ResourceClaimTemplate "mps-per-pod") request "gpu": gpu.nvidia.com count 1 asks for whole '
        'GPUs shared by MPS (its GpuConfig), and policy "team" shares GPUs by time-slicing; name a claim whose '
        "GpuConfig sets sharing.strategy TimeSlicing",
    ]
    # The same claims under exclusive: whole GPUs are what the namespace gives.
    assert judged(claiming(using("train", "gpu"), gpu="one-gpu"), CAPPED, view).violations == []


# --- a claim the view does not hold -------------------------------------------------------------------------


def test_a_claim_not_in_the_view_is_a_warning_never_a_denial():
    obj = claiming(container("train", limits={"nvidia.com/gpu": "2"}), gpus="later", mine="template:nowhere")
    decision = judged(obj, POD_CAPPED, index())
    assert (decision.verdict, decision.violations) == ("allow", [])
    assert decision.warnings == [
        'gpu-admission: claim "gpus": ResourceClaim "later" unknown yet; its GPUs are not counted',
        'gpu-admission: claim "mine": template "nowhere" unknown yet; its GPUs are not counted',
    ]
    long = claiming(container("train"), **{"x" * 63: "template:" + "y" * 253})
    (warning,) = judged(long, POD_CAPPED, index()).warnings
    assert len(warning) <= 120 and warning.endswith("unknown yet; its GPUs are not counted")
    # Without a view at all (the server without credentials), a pod's claims are not looked up.
    assert evaluate(obj, NS, PolicySet((POD_CAPPED,))).warnings == []


def test_devices_keep_only_what_counting_needs():
    assert devices_of(BIG_OR_SMALL) == (("gpu", "gpu.nvidia.com", 4), ("gpu", "gpu.nvidia.com", 1))
    assert devices_of(TEMPLATE_TWO) == (("gpu", "gpu.nvidia.com", 2),)
    assert devices_of(EVERY) == (("gpu", "gpu.nvidia.com", -1),)
    assert devices_of(pod(container())) is None


# --- offline: check reads the claims of its input ---------------------------------------------------------------


def test_check_counts_the_claims_in_the_same_input(tmp_path: Path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {name: capped}\n"
        "spec: {namespaces: [team], limits: {maxPerPod: 2}}\n"
    )
    obj = claiming(using("train", "gpus", limits={"nvidia.com/gpu": "1"}), gpus="two-gpus")
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump_all([TWO, obj]))
    done = gpu_webhook("check", "--policies", str(tmp_path / "policies"), str(tmp_path / "mixed.yaml"))
    assert done.returncode == 1, done.stderr
    assert (
        f'DENY {tmp_path}/mixed.yaml#1 Pod/p: pod: 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" '
        '(ResourceClaim "two-gpus")) exceed the per-pod maximum of 2 (policy "capped"): a pod\'s claims count with '
        "its extended resources; ask for at most 2 in all, or split the pod"
    ) in done.stdout.splitlines()


# --- the server's cache, against a loopback API server ------------------------------------------------------


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI().start()
    fake.put_node(node("gpu-a", {"nvidia.com/gpu": "8"}, A100))
    fake.put(TWO)
    fake.put(TEMPLATE_TWO)
    yield fake
    fake.stop()


def cache_for(api: FakeKubeAPI, tmp_path: Path, kind: str, **options: Any) -> ClaimCache:
    credentials = find_credentials(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    assert credentials.configuration is not None
    source = KubeNodes(credentials.configuration, f"/apis/resource.k8s.io/v1/{kind.lower()}s", kind)
    cache = ClaimCache(source, kind, **{"watch_timeout": (2, 2), "backoff": (0.05, 0.2), **options})
    cache.start()
    return cache


def test_the_cache_lists_then_follows_adds_deletes_and_relists_after_410(api, tmp_path):
    cache = cache_for(api, tmp_path, "ResourceClaim")
    eventually(lambda: cache.state() == "current")
    assert cache.get(NS, "two-gpus") == (("gpu", "gpu.nvidia.com", 2),)
    assert cache.get(NS, "two-per-pod") is None, "templates are the other cache's"
    assert api.list_requests("resourceclaims")[0] == "GET /apis/resource.k8s.io/v1/resourceclaims?limit=500"
    api.put(ONE)
    eventually(lambda: cache.get(NS, "one-gpu") is not None)
    api.delete("ResourceClaim", NS, "two-gpus")
    eventually(lambda: cache.get(NS, "two-gpus") is None)
    lists = cache.lists
    api.disconnect()
    api.put(named(ONE, "three"))
    api.delete("ResourceClaim", NS, "one-gpu")
    api.compact()  # the watch resumes from a version the server no longer has: ERROR 410, then a list
    eventually(lambda: cache.lists == lists + 1)
    eventually(lambda: cache.get(NS, "three") is not None and cache.get(NS, "one-gpu") is None)
    assert len(cache) == 1
    cache.stop()


def test_a_forbidden_list_leaves_the_cache_listing_and_a_broken_watch_keeps_its_entries(api, tmp_path):
    api.forbidden.add("resourceclaimtemplates")
    templates = cache_for(api, tmp_path, "ResourceClaimTemplate")
    eventually(lambda: templates.last_error.startswith("listing ResourceClaimTemplates: HTTP 403"))
    assert templates.state() == "listing"
    templates.stop()
    claims = cache_for(api, tmp_path, "ResourceClaim", stale_after=0.2)
    eventually(lambda: claims.state() == "current")
    api.stop()
    eventually(lambda: claims.state() == "stale")
    assert claims.get(NS, "two-gpus") is not None, "a claim's spec is immutable: a stale entry is still right"
    claims.stop()


POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: capped}
spec:
  namespaces: [team]
  limits: {maxPerPod: 2}
"""


@pytest.fixture
def dra_server(start_server: Callable[..., LiveServer], tmp_path: Path, api: FakeKubeAPI):
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(POLICY)
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    server = start_server(policies, extra_args=["--kubeconfig", str(kubeconfig)])
    eventually(lambda: all(
        cache["state"] == "current" for cache in server.get("/readyz").json()["cluster"].get("dra", {}).values()
    ) and server.get("/readyz").json()["cluster"].get("dra"), timeout=10)  # fmt: skip
    return server


def test_the_server_counts_a_pods_claims_from_its_watched_cache(dra_server, api):
    server = dra_server
    assert server.get("/readyz").json()["cluster"]["dra"] == {
        "ResourceClaim": {"state": "current", "objects": 1},
        "ResourceClaimTemplate": {"state": "current", "objects": 1},
        "ResourceSlice": {"state": "current", "objects": 0},
        "DeviceClass": {"state": "current", "objects": 0},
    }
    mixed = claiming(using("train", "gpus", limits={"nvidia.com/gpu": "1"}), gpus="two-gpus")
    for endpoint in ("validate", "mutate"):
        answer = review(server, endpoint, mixed)
        if endpoint == "validate":
            assert answer["allowed"] is False
            assert answer["status"]["message"] == (
                'pod: 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" (ResourceClaim "two-gpus")) exceed '
                'the per-pod maximum of 2 (policy "capped"): a pod\'s claims count with its extended resources; ask '
                "for at most 2 in all, or split the pod"
            )
    templated = claiming(using("train", "mine", limits={CLASS_GPU: "1"}), mine="template:two-per-pod")
    assert review(server, "validate", templated)["allowed"] is False

    # A claim created after the pod's review: a warning and a metric, the pod admitted.
    later = claiming(using("train", "gpus", limits={"nvidia.com/gpu": "1"}), gpus="made-later")
    answer = review(server, "validate", later)
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        'gpu-admission: claim "gpus": ResourceClaim "made-later" unknown yet; its GPUs are not counted'
    ]
    key = 'gpu_admission_dra_cache_misses_total{kind="ResourceClaim",state="current"}'
    assert server.metrics()[key] == 1.0
    record = server.wait_for_log(lambda r: r.get("event") == "dra-cache-miss")
    assert record["message"] == (
        'ResourceClaim "team/made-later" is not in the DRA cache (current): its devices are not counted'
    )
    # Once the watch brings it, it counts.
    api.put(named(TWO, "made-later"))
    eventually(lambda: review(server, "validate", later)["allowed"] is False)


# --- audit lists claims and templates, and counts them in the pods that name them ---------------------------


def test_audit_judges_claims_and_templates_and_counts_them_in_pods(tmp_path: Path):
    from tests.test_cli_audit import gpu_webhook as audit_cli

    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(POLICY)
    too_many = named(claim(exactly(count=4), kind="ResourceClaimTemplate"), "four-per-pod")
    mixed = claiming(using("train", "gpus", limits={"nvidia.com/gpu": "1"}), gpus="two-gpus")
    api = FakeKubeAPI()
    api.add(TWO, too_many, mixed)
    api.start()
    try:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        run = audit_cli("audit", "--kubeconfig", str(config), "--policies", str(tmp_path / "policies"), "-A")
        assert run.returncode == 1, run.stderr
        assert run.stderr == ""
        denials = [line for line in run.stdout.splitlines() if line.startswith("DENY ")]
        assert denials == [
            'DENY fake#0 ResourceClaimTemplate/four-per-pod: template: 4 GPU devices (request "gpu": 4 from '
            'gpu.nvidia.com) exceed the per-pod maximum of 2 (policy "capped"): each pod made from this template '
            "gets its own 4; ask for at most 2, or split the work",
            'DENY fake#2 Pod/p: pod: 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" (ResourceClaim '
            '"two-gpus")) exceed the per-pod maximum of 2 (policy "capped"): a pod\'s claims count with its extended '
            "resources; ask for at most 2 in all, or split the pod",
        ]
        assert api.list_requests("resourceclaims") == ["GET /apis/resource.k8s.io/v1/resourceclaims?limit=500"]
    finally:
        api.stop()


# --- the property: no mix gets past the caps -------------------------------------------------------------------

# The claims a generated pod may name, with the GPUs each holds at most (firstAvailable at its largest; a NIC
# claim holds none).
POOL = {"one-gpu": (ONE, 1), "two-gpus": (TWO, 2), "big-or-small": (BIG_OR_SMALL, 4), "nics": (NIC, 0),
        "template:two-per-pod": (TEMPLATE_TWO, 2)}  # fmt: skip
PROPERTY_POLICY = policy(limits=Limits(max_per_container=3, max_per_pod=5))


@st.composite
def mixed_pods(draw: st.DrawFn) -> tuple[dict[str, Any], list[int], int]:
    """A pod asking GPUs by any mix of the four routes, with each container's total and the pod's, counted here
    from the routes alone: a container counts its resources and the claims it names, the pod its containers'
    resources and every claim it names, whether a container names it or not."""
    sources = draw(st.lists(st.sampled_from(sorted(POOL)), max_size=3, unique=True))
    claims = {f"c{i}": source for i, source in enumerate(sources)}
    containers, totals, own = [], [], 0
    for number in range(draw(st.integers(1, 3))):
        limits = {}
        extended, by_class = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        if extended:
            limits["nvidia.com/gpu"] = str(extended)
        if by_class:
            limits[CLASS_GPU] = str(by_class)
        names = draw(st.lists(st.sampled_from(sorted(claims)), unique=True)) if claims else []
        containers.append(using(f"c-{number}", *names, limits=limits or None))
        totals.append(extended + by_class + sum(POOL[claims[name]][1] for name in names))
        own += extended + by_class
    return claiming(*containers, **claims), totals, own + sum(POOL[source][1] for source in claims.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_pods())
def test_no_mix_of_the_four_routes_gets_a_pod_past_its_caps(case: tuple[dict[str, Any], list[int], int]) -> None:
    """Whatever a pod mixes (nvidia.com/gpu, the DeviceClass resource, claims, templates, named by containers or
    not), it is denied exactly when a container's devices or the pod's exceed the caps."""
    obj, totals, pod_total = case
    view = index(*(entry for entry, _ in POOL.values()))
    decision = judged(obj, PROPERTY_POLICY, view)
    over = any(total > 3 for total in totals) or pod_total > 5
    assert decision.verdict == ("deny" if over else "allow"), (totals, pod_total, decision.violations)
