"""GPU budgets in the pure core: what each form weighs in GPU-equivalents, which pods a ResourceQuota counts,
and the rule `judge` with its one line.

Expected weights are worked out here from the unit's definition (a MIG slice: the larger of its compute slices
over 7 and its memory over the GPU's; a memory share: its memory over one GPU's), not read from the code. Pods
are mutated by the real engine first: a budget weighs what the pod holds after the webhook's mapping.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from tests.engine_support import MIG, NS, TIME_SLICING, container, pod, policy, run
from webhook.admission.base.equivalents import format_gpus
from webhook.admission.base.resources import GPU_MODELS
from webhook.admission.budgets.budget import NOTHING, PodAsk, Usage, judge, pod_ask
from webhook.admission.cluster.quota import GPU_QUOTA_ENTRIES, GpuQuota, gpu_quota, quota_problem
from webhook.admission.dra.podclaims import ClaimIndex
from webhook.admission.policy.model import (
    GPU,
    Backend,
    DeviceClasses,
    Fractional,
    MigStrategy,
    Mode,
    Sharing,
)  # fmt: skip
from webhook.admission.sharing.mig import slice_weight

A100 = GPU_MODELS["A100-80GB"]


def gpu(n: object = 1) -> dict:
    return container(limits={"nvidia.com/gpu": n})


def asked(obj: dict, pol) -> PodAsk:
    """The ask of the pod as the engine leaves it (mutated)."""
    return pod_ask(run(obj, pol).mutated, pol, None)


# --- Weights, form by form ----------------------------------------------------------------------------------


def test_a_whole_gpu_weighs_one():
    assert asked(pod(gpu(2)), policy()).total == 2
    assert asked(pod(gpu(1)), policy()).detail == "1 whole GPU"


def test_a_time_slicing_replica_weighs_one_over_replicas_under_either_name():
    renamed = asked(pod(gpu(1)), TIME_SLICING)
    assert renamed.total == Fraction(1, 4)
    assert renamed.detail == "1 replica of 4"
    kept = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4, resource_name="nvidia.com/gpu"))
    assert asked(pod(gpu(1)), kept).total == Fraction(1, 4)
    mps = policy(sharing=Sharing(mode=Mode.MPS, replicas=8), gpu=GPU(model="A100-80GB"))
    assert asked(pod(gpu(1)), mps).total == Fraction(1, 8)


def test_four_replicas_are_a_quarter_each():
    pods = [asked(pod(gpu(1), name=f"p{i}"), TIME_SLICING) for i in range(4)]
    assert sum(p.total for p in pods) == 1


@pytest.mark.parametrize(
    ("profile", "weight"),
    [
        ("1g.10gb", Fraction(1, 7)),  # seven fill its compute (1/7 > 1/8 of its memory)
        ("1g.20gb", Fraction(1, 4)),  # its memory: 2 of 8 slices
        ("2g.20gb", Fraction(2, 7)),
        ("3g.40gb", Fraction(1, 2)),  # two fill its memory (4/8 > 3/7)
        ("4g.40gb", Fraction(4, 7)),
        ("7g.80gb", Fraction(1)),
    ],
)
def test_a_mig_slice_weighs_its_dominant_share_of_an_a100_80gb(profile, weight):
    assert slice_weight(profile, A100) == weight
    mixed = policy(sharing=Sharing(mode=Mode.MIG, mig_profile=profile), gpu=GPU(model="A100-80GB"))
    assert asked(pod(gpu(1)), mixed).total == weight


def test_a_mig_slice_under_the_single_strategy_is_nvidia_gpu_weighed_by_its_profile():
    single = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="3g.40gb", mig_strategy=MigStrategy.SINGLE),
        gpu=GPU(model="A100-80GB"),
    )
    ask = asked(pod(gpu(1)), single)
    assert ask.total == Fraction(1, 2)
    assert ask.detail == "one 3g.40gb MIG slice"


def test_a_fraction_under_mig_becomes_the_slice_that_holds_it():
    fractional = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=GPU(model="A100-80GB"), fractional=Fractional.MIG
    )
    assert asked(pod(gpu("0.5")), fractional).total == Fraction(1, 2)  # a 3g.40gb


def test_a_mig_profile_without_a_model_weighs_the_most_any_model_gives_it():
    assert slice_weight("1g.18gb", None) == Fraction(1, 7)  # the H200's only
    assert slice_weight("1g.10gb", None) == Fraction(1, 4)  # on an A100-40GB a quarter of its memory
    assert slice_weight("9g.99gb", None) == 1


def memory(backend: Backend, **sharing) -> object:
    return policy(
        sharing=Sharing(mode=Mode.MEMORY, backend=backend, **sharing),
        gpu=GPU(model="A100-80GB"),
        fractional=Fractional.SHARED,
    )


def test_an_ack_share_weighs_its_gib_of_the_gpus():
    ack = memory(Backend.ACK)
    ask = asked(pod(gpu("0.25")), ack)
    assert ask.total == Fraction(1, 4)  # 20 of 80 GiB
    assert ask.detail == "20 GiB of GPU memory"
    assert asked(pod(container(limits={"aliyun.com/gpu-mem": 30})), ack).total == Fraction(30, 80)


def test_a_hami_share_weighs_the_larger_of_its_memory_and_cores():
    hami = memory(Backend.HAMI)
    assert asked(pod(gpu("0.25")), hami).total == Fraction(1, 4)
    written = pod(container(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8192, "nvidia.com/gpucores": 50}))
    assert asked(written, hami).total == Fraction(1, 2)  # its cores: half the GPU's compute
    assert asked(pod(gpu(2)), hami).total == 2  # whole GPUs: 100% of memory and cores each


def test_a_volcano_share_weighs_its_units_of_gpu_memory_factor():
    volcano = memory(Backend.VOLCANO, gpu_memory_factor=10)
    assert asked(pod(gpu("0.25")), volcano).total == Fraction(1, 4)


def classes_policy(**fields):
    return policy(device_classes=DeviceClasses(gpu=("gpu.example.com",)), **fields)


def test_a_device_class_resource_weighs_its_class():
    resource = {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 2}
    ask = pod_ask(pod(container(limits=resource)), classes_policy(), None)
    assert ask.total == 2
    assert ask.by_route == (("deviceclass", Fraction(2)),)
    mig = {"deviceclass.resource.kubernetes.io/mig.nvidia.com": 1}
    assert pod_ask(pod(container(limits=mig)), MIG, None).total == Fraction(1, 7)  # the policy's 1g.10gb


def claim(kind: str, name: str, *requests: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": list(requests)}} if kind == "ResourceClaim"
        else {"spec": {"devices": {"requests": list(requests)}}},
    }  # fmt: skip


def mig_request(profile: str) -> dict:
    selector = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    return {
        "name": "mig",
        "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": selector}}]},
    }


def test_claims_and_templates_count_their_devices_by_class_and_profile():
    index = ClaimIndex()
    index.add(claim("ResourceClaim", "two-gpus", {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                               "count": 2}}), NS)  # fmt: skip
    index.add(claim("ResourceClaimTemplate", "half", mig_request("3g.40gb")), NS)
    a100 = policy(gpu=GPU(model="A100-80GB"))
    spec_claims = [
        {"name": "a", "resourceClaimName": "two-gpus"},
        {"name": "b", "resourceClaimTemplateName": "half"},
        {"name": "c", "resourceClaimName": "unknown"},
    ]
    ask = pod_ask(pod(container(), resourceClaims=spec_claims), a100, index)
    assert ask.total == Fraction(5, 2)
    assert ask.by_route == (("claims", Fraction(2)), ("templates", Fraction(1, 2)))
    assert ask.claims == (("two-gpus", Fraction(2)),)
    assert pod_ask(pod(container(), resourceClaims=spec_claims), a100, None) == NOTHING  # claims not given


def test_init_containers_count_as_the_scheduler_counts_them():
    # an init container of 2 GPUs, then an app container of 1: the pod's effective request is 2
    assert pod_ask(pod(gpu(1), init=(gpu(2),)), policy(), None).total == 2
    # a sidecar of 1 runs beside the app container of 1: 2
    sidecar = container("side", limits={"nvidia.com/gpu": 1}, restartPolicy="Always")
    assert pod_ask(pod(gpu(1), init=(sidecar,)), policy(), None).total == 2


def test_a_terminal_pod_holds_nothing():
    done = pod(gpu(1))
    done["status"] = {"phase": "Succeeded"}
    assert pod_ask(done, policy(), None) == NOTHING
    assert pod_ask(pod(container()), policy(), None) == NOTHING


# --- Quotas -------------------------------------------------------------------------------------------------


def quota(hard: dict, name: str = "gpus", **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"hard": hard, **spec},
    }


def test_a_quota_reads_its_gpu_entries_as_gpu_equivalents():
    read = gpu_quota(quota({"requests.nvidia.com/gpu": "1.5", "limits.nvidia.com/gpu": 2, "pods": 10}))
    assert read == GpuQuota(NS, "gpus", Fraction(3, 2), "requests.nvidia.com/gpu")
    assert read.entry in GPU_QUOTA_ENTRIES
    assert gpu_quota(quota({"limits.nvidia.com/gpu": "500m"})).hard == Fraction(1, 2)


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "x",
        {"kind": "Pod"},
        quota({"pods": 3}),
        quota({"requests.nvidia.com/gpu.shared": 4}),
        {"kind": "ResourceQuota"},
    ],
)
def test_anything_else_is_no_budget(obj):
    assert gpu_quota(obj) is None
    assert quota_problem(obj) is None


def one_gpu(**spec) -> dict:
    return quota({"requests.nvidia.com/gpu": 1}, **spec)


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (quota({"requests.nvidia.com/gpu": "lots"}), "is not a Kubernetes quantity"),
        (quota({"requests.nvidia.com/gpu": "-1"}), "is negative"),
        (one_gpu(scopeSelector={"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]}), "needs at"),
        (one_gpu(scopeSelector={"matchExpressions": [{"scopeName": "X", "operator": "Near"}]}), "must be one of"),
        (one_gpu(scopes="Terminating"), "spec.scopes must be a list"),
    ],
)
def test_a_malformed_gpu_quota_gets_a_reason(obj, reason):
    assert gpu_quota(obj) is None
    assert reason in quota_problem(obj)


def scoped(**spec) -> GpuQuota:
    read = gpu_quota(quota({"requests.nvidia.com/gpu": 1}, **spec))
    assert read is not None
    return read


def selector(scope: str, operator: str, *values: str) -> dict:
    entry: dict = {"scopeName": scope, "operator": operator}
    if values:
        entry["values"] = list(values)
    return {"matchExpressions": [entry]}


def test_scopes_count_the_pods_the_api_server_counts():
    plain, deadline = pod(gpu()), pod(gpu(), activeDeadlineSeconds=60)
    assert scoped(scopes=["Terminating"]).counts(deadline) and not scoped(scopes=["Terminating"]).counts(plain)
    assert scoped(scopes=["NotTerminating"]).counts(plain)
    best_effort = scoped(scopes=["BestEffort"])
    assert best_effort.counts(plain)  # GPUs alone: no cpu or memory, BestEffort
    assert not best_effort.counts(pod(container(requests={"cpu": "1"}, limits={"nvidia.com/gpu": 1})))
    assert scoped(scopes=["NotBestEffort"]).counts(pod(container(limits={"memory": "1Gi"})))
    assert not scoped(scopes=["Unknown"]).counts(plain)
    cross = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "namespaceSelector": {}}]}}  # fmt: skip
    assert scoped(scopes=["CrossNamespacePodAffinity"]).counts(pod(gpu(), affinity=cross))
    assert not scoped(scopes=["CrossNamespacePodAffinity"]).counts(plain)


def test_priority_class_selectors_match_as_label_selectors_over_one_key():
    high, none = pod(gpu(), priorityClassName="high"), pod(gpu())
    assert scoped(scopeSelector=selector("PriorityClass", "In", "high", "mid")).counts(high)
    assert not scoped(scopeSelector=selector("PriorityClass", "In", "high")).counts(none)
    assert scoped(scopeSelector=selector("PriorityClass", "NotIn", "low")).counts(none)  # absent: NotIn matches
    assert not scoped(scopeSelector=selector("PriorityClass", "NotIn", "high")).counts(high)
    assert scoped(scopeSelector=selector("PriorityClass", "Exists")).counts(high)
    assert scoped(scopeSelector=selector("PriorityClass", "DoesNotExist")).counts(none)
    both = scoped(scopes=["NotTerminating"], scopeSelector=selector("PriorityClass", "In", "high"))
    assert both.counts(high) and not both.counts(pod(gpu(), priorityClassName="high", activeDeadlineSeconds=1))


# --- The rule -----------------------------------------------------------------------------------------------


def team_quota(hard: Fraction | int = 1, **spec) -> GpuQuota:
    read = gpu_quota(quota({"requests.nvidia.com/gpu": str(hard)}, **spec))
    assert read is not None
    return read


def test_judge_admits_what_fits_and_refuses_the_rest_in_one_line():
    half = PodAsk(Fraction(1, 2), (("extended", Fraction(1, 2)),), "2 replicas of 4")
    assert judge(half, [Usage(team_quota(), Fraction(1, 2))], "p") is None  # exactly full
    refused = judge(half, [Usage(team_quota(), Fraction(3, 4))], "train-1")
    assert refused is not None
    assert refused.line == (
        'pod "train-1": quota "gpus" of namespace "team": 0.75 of 1 GPU used; this pod asks 0.5 (2 replicas of 4); '
        "0.25 fits; ask for at most 0.25, free some by ending pods, or raise the quota's requests.nvidia.com/gpu"
    )
    assert len("gpu-admission: " + refused.short) <= 120


def test_judge_names_the_quota_that_fits_least_and_skips_quotas_that_do_not_count_the_pod():
    one = PodAsk(Fraction(1), (), "1 whole GPU")
    high = team_quota(4, scopeSelector=selector("PriorityClass", "In", "high"))
    usages = [Usage(team_quota(2), Fraction(1, 7)), Usage(high, Fraction(4))]
    assert judge(one, usages, "p", pod(gpu())) is None  # the full quota counts high-priority pods only
    refused = judge(one, usages, "p", pod(gpu(), priorityClassName="high"))
    assert (
        refused is not None and "nothing fits" in refused.line and "(scopes: PriorityClass In (high))" in refused.line
    )


def test_a_pod_that_holds_nothing_is_never_refused():
    assert judge(NOTHING, [Usage(team_quota(0), Fraction(3))], "p") is None


def test_gpus_are_shown_as_decimals_where_exact_else_as_fractions():
    assert [format_gpus(Fraction(n, d)) for n, d in [(1, 4), (3, 1), (1, 7), (8, 7), (1, 3), (0, 1)]] == [
        "0.25", "3", "1/7", "8/7", "1/3", "0"
    ]  # fmt: skip


# --- The engine ---------------------------------------------------------------------------------------------


def admitted_in_turn(pol, pods: list[dict], hard: str = "1", check=None) -> list[bool]:
    """Each pod judged by the engine against a 1-GPU quota holding the asks admitted before it."""
    from webhook.admission.engine import evaluate
    from webhook.admission.policy.model import ClusterChecks, PolicySet

    if check is not None:
        pol = replace(pol, cluster_checks=ClusterChecks(quota=check))
    policies = PolicySet((pol,))
    budget = gpu_quota(quota({"requests.nvidia.com/gpu": hard}))
    used, answers = Fraction(0), []
    for obj in pods:
        decision = evaluate(obj, NS, policies, budget=[Usage(budget, used)])
        answers.append(decision.allowed)
        if decision.allowed and decision.ask is not None:
            used += decision.ask.total
    return answers


def test_a_one_gpu_quota_admits_four_replicas_at_four_replicas_and_refuses_the_fifth():
    pods = [pod(gpu(1), name=f"p{i}") for i in range(6)]
    assert admitted_in_turn(TIME_SLICING, pods) == [True, True, True, True, False, False]


def test_a_one_gpu_quota_admits_two_3g40gb_slices_and_four_ack_quarters():
    fractional = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=GPU(model="A100-80GB"), fractional=Fractional.MIG
    )
    assert admitted_in_turn(fractional, [pod(gpu("0.5"), name=f"p{i}") for i in range(3)]) == [True, True, False]
    quarters = [pod(gpu("0.25"), name=f"p{i}") for i in range(5)]
    assert admitted_in_turn(memory(Backend.ACK), quarters) == [True] * 4 + [False]


def test_the_engine_refuses_in_one_line_warns_under_warn_and_judges_nothing_under_off():
    from webhook.admission.engine import evaluate
    from webhook.admission.policy.model import Check, ClusterChecks, PolicySet

    budget = [Usage(team_quota(), Fraction(3, 4))]
    two = pod(gpu(1), container("second", limits={"nvidia.com/gpu": 1}), name="train-1")
    denied = evaluate(two, NS, PolicySet((TIME_SLICING,)), budget=budget)
    assert not denied.allowed
    assert denied.violations == [
        'pod "train-1": quota "gpus" of namespace "team": 0.75 of 1 GPU used; this pod asks 0.5 (2 replicas of 4); '
        "0.25 fits; ask for at most 0.25, free some by ending pods, or raise the quota's requests.nvidia.com/gpu"
    ]
    assert denied.ask is not None and denied.ask.total == Fraction(1, 2)
    warned = evaluate(two, NS, PolicySet((replace(TIME_SLICING, cluster_checks=ClusterChecks(quota=Check.WARN)),)),
                      budget=budget)  # fmt: skip
    assert warned.allowed and any('quota "gpus"' in w for w in warned.warnings)
    off = evaluate(two, NS, PolicySet((replace(TIME_SLICING, cluster_checks=ClusterChecks(quota=Check.OFF)),)),
                   budget=budget)  # fmt: skip
    assert off.allowed and off.warnings == evaluate(two, NS, PolicySet((TIME_SLICING,))).warnings
    assert evaluate(pod(container()), NS, PolicySet((TIME_SLICING,)), budget=budget).ask is None
    assert evaluate(two, NS, PolicySet((TIME_SLICING,))).ask is None  # no budget given: no ask worked out
    assert evaluate(two, NS, PolicySet((TIME_SLICING,)), budget=[]).ask == denied.ask


def test_the_policy_field_reads_deny_by_default_and_off_unquoted():
    from webhook.admission.policy.loader import parse_policy_sources
    from webhook.admission.policy.model import Check

    def read(cluster: str) -> Check:
        text = f"""
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {{name: team}}
spec:
  namespaces: [team]
{cluster}
"""
        return parse_policy_sources({"team.yaml": text}).policies[0].cluster_checks.quota

    assert read("") is Check.DENY
    assert read("  cluster: {quota: warn}") is Check.WARN
    assert read("  cluster: {quota: off}") is Check.OFF
