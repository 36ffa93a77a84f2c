"""Node-pool steering and sharing that keeps the name `nvidia.com/gpu` (steering.py, and its call in mutate.py).

Table cases for each mode and for merging with the user's nodeSelector, node affinity (required and preferred
terms) and tolerations; property tests that evaluate node selector terms on generated node labels: the merged
constraints select exactly the nodes that both the user's and the policy's select.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import evanphx
from tests.engine_support import NS, container, pod, policy, run
from webhook.admission.base.violation import SHORT_LIMIT
from webhook.admission.cluster.nodes import MIG_STRATEGY_LABEL as MIG_STRATEGY
from webhook.admission.cluster.nodes import REPLICAS_LABEL as REPLICAS
from webhook.admission.cluster.nodes import STRATEGY_LABEL as SHARING_STRATEGY
from webhook.admission.cluster.nodes import ClusterView, NodeInfo
from webhook.admission.engine import evaluate
from webhook.admission.phases import steering
from webhook.admission.phases.steering import REQUIRED, term_matches
from webhook.admission.policy.loader import PolicyLoadError, parse_policy_sources
from webhook.admission.policy.model import GPU, Enforcement, Fractional, MigStrategy, Mode, PolicySet, Sharing

WHOLE = policy(steering=True)
SLICED = policy(sharing=Sharing(Mode.TIME_SLICING, 4, "nvidia.com/gpu"), fractional=Fractional.SHARED, steering=True)
SLICED_MPS = policy(sharing=Sharing(Mode.MPS, 2, "nvidia.com/gpu"), gpu=GPU(model="A100-80GB"), steering=True)
RENAMED = policy(sharing=Sharing(Mode.TIME_SLICING, 4), steering=True)
MIG_SINGLE = policy(
    sharing=Sharing(Mode.MIG, mig_profile="3g.40gb", mig_strategy=MigStrategy.SINGLE),
    gpu=GPU(model="A100-80GB"),
    fractional=Fractional.MIG,
    steering=True,
)
MIG_MIXED = policy(sharing=Sharing(Mode.MIG, mig_profile="1g.10gb"), gpu=GPU(model="A100-80GB"), steering=True)

NOT_SLICED = {"key": SHARING_STRATEGY, "operator": "NotIn", "values": ["mps", "time-slicing"]}
NOT_MIG_SINGLE = {"key": "nvidia.com/gpu.slices.gi", "operator": "DoesNotExist"}
WHOLE_TERM = [NOT_SLICED, NOT_MIG_SINGLE]


def gpu(quantity: str = "1", **extra) -> dict:
    return container(limits={"nvidia.com/gpu": quantity}, requests={"nvidia.com/gpu": quantity}, **extra)


def required_terms(obj: dict, path: tuple[str, ...] = ("spec",)) -> list:
    spec = obj
    for key in path:
        spec = spec[key]
    return spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]


# --- What each mode requires ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pol", "expected"),
    [
        (WHOLE, ["nvidia.com/gpu.sharing-strategy notin (mps,time-slicing)", "!nvidia.com/gpu.slices.gi"]),
        (SLICED, ["nvidia.com/gpu.sharing-strategy in (time-slicing)", "nvidia.com/gpu.replicas in (4)"]),
        (SLICED_MPS, ["nvidia.com/gpu.sharing-strategy in (mps)", "nvidia.com/gpu.replicas in (2)"]),
        (RENAMED, ["nvidia.com/gpu.sharing-strategy in (time-slicing)", "nvidia.com/gpu.replicas in (4)"]),
        (MIG_SINGLE, ["nvidia.com/mig.strategy in (single)", "nvidia.com/gpu.slices.gi in (3)"]),
        (MIG_MIXED, []),  # nvidia.com/mig-1g.10gb exists only where that slice does
        (policy(), []),  # steering off
        (policy(sharing=Sharing(Mode.TIME_SLICING, 4, "nvidia.com/mig-1g.10gb.shared"), steering=True), []),
    ],
    ids=["exclusive", "time-slicing", "mps", "renamed", "mig-single", "mig-mixed", "off", "mig-replicas"],
)
def test_requirements_per_mode(pol, expected) -> None:
    assert [str(r) for r in steering.requirements(pol)] == expected


# --- Sharing that keeps the name nvidia.com/gpu ---------------------------------------------------------------


def test_a_fraction_becomes_one_replica_in_place_with_its_fraction_recorded_and_memory_hints() -> None:
    decision = run(pod(gpu("0.25")), SLICED)
    body = decision.mutated["spec"]["containers"][0]
    assert body["resources"] == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    env = {e["name"]: e["value"] for e in body["env"]}
    assert env["GPU_ADMISSION_MEMORY_FRACTION"] == "0.25"
    assert env["GPU_MEMORY_FRACTION"] == "0.25"
    assert decision.warnings[0] == (
        'gpu-admission: container "app": nvidia.com/gpu 0.25 became nvidia.com/gpu 1 (one time-slicing replica)'
    )
    assert decision.mutation_kinds == ["fractional", "env", "steering"]


def test_a_replica_keeps_its_name_and_gets_the_memory_hints() -> None:
    decision = run(pod(gpu("1")), SLICED_MPS)
    body = decision.mutated["spec"]["containers"][0]
    assert body["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    env = {e["name"]: e["value"] for e in body["env"]}
    assert env["GPU_MEMORY_FRACTION"] == "0.5"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40960M"


def test_at_most_one_replica_per_container_as_for_shared() -> None:
    decision = run(pod(gpu("2")), SLICED)
    assert decision.verdict == "deny"
    assert decision.violations == [
        'container "app": nvidia.com/gpu "2" exceeds 1 per container under time-slicing (policy "team"): 2 '
        "time-slicing replicas are not 2 GPUs: the device plugin hands them out (failRequestsGreaterThanOne is off "
        "by default), on one GPU or several, each still shared with other pods; request 1, or use a namespace with "
        "whole GPUs"
    ]


@pytest.mark.parametrize("quantity", ["0.25", "0.5"])  # 3g.40gb holds 4/8 of an A100-80GB
def test_mig_single_a_fraction_within_the_profiles_memory_share_is_one_slice(quantity) -> None:
    decision = run(pod(gpu(quantity)), MIG_SINGLE)
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert decision.warnings[0] == (
        f'gpu-admission: container "app": nvidia.com/gpu {quantity} became nvidia.com/gpu 1 (one 3g.40gb MIG slice)'
    )


def test_a_fraction_where_the_policy_rejects_them_is_advised_as_one_replica_that_keeps_its_name() -> None:
    pol = policy(sharing=Sharing(Mode.TIME_SLICING, 4, "nvidia.com/gpu"), steering=True)
    decision = run(pod(gpu("0.5")), pol)
    assert decision.violations == [
        'container "app": nvidia.com/gpu "0.5" is fractional, but GPUs are whole devices (the API server refuses it '
        'anyway); request nvidia.com/gpu: 1, which is one of 4 time-slicing shares of a GPU under policy "team"'
    ]


def test_mig_single_a_fraction_above_the_slice_is_left_for_validation() -> None:
    decision = run(pod(gpu("0.75")), MIG_SINGLE)
    assert decision.verdict == "deny"
    assert decision.violations == [
        'container "app": nvidia.com/gpu "0.75" is fractional, and the one MIG slice offered here (3g.40gb) does not '
        'hold 0.75 of one A100-80GB (policy "team"; the API server refuses it anyway); request nvidia.com/gpu: 1 '
        "(one 3g.40gb slice), or whole GPUs in a namespace that has them"
    ]


def test_mig_single_whole_slices_are_not_renamed() -> None:
    decision = run(pod(gpu("2")), MIG_SINGLE)
    assert decision.mutated["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}


# --- Merging with the user's constraints ----------------------------------------------------------------------


def test_no_affinity_gets_one_required_term() -> None:
    decision = run(pod(gpu()), WHOLE)
    assert decision.patch[1:] == [
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": WHOLE_TERM}]}}},
        }
    ]
    assert decision.warnings == [
        "gpu-admission: pod: node affinity added on nvidia.com/gpu.sharing-strategy, nvidia.com/gpu.slices.gi"
    ]


def test_pods_without_the_policys_gpu_are_not_steered() -> None:
    decision = run(pod(container(limits={"cpu": "1"}), container(name="b", limits={"nvidia.com/gpu": "0"})), WHOLE)
    assert decision.patch == []


def test_other_affinity_and_preferred_terms_and_tolerations_are_kept() -> None:
    preferred = [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
    ]
    pod_affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    obj = pod(
        gpu(),
        affinity={**pod_affinity, "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}},
        tolerations=tolerations,
    )
    decision = run(obj, SLICED)
    spec = decision.mutated["spec"]
    assert spec["tolerations"] == tolerations
    assert spec["affinity"]["podAntiAffinity"] == pod_affinity["podAntiAffinity"]
    assert spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert decision.patch[-1]["path"] == f"/spec/affinity/nodeAffinity/{REQUIRED}"


def test_affinity_without_node_affinity_gets_it_added() -> None:
    decision = run(pod(gpu(), affinity={"podAffinity": {}}), WHOLE)
    assert [op["path"] for op in decision.patch] == ["/metadata/annotations", "/spec/affinity/nodeAffinity"]


def test_every_required_term_gets_every_requirement_and_the_users_expressions_stay() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    host = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    terms = [{"matchExpressions": [zone]}, host, {}]
    obj = pod(gpu(), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}})
    decision = run(obj, WHOLE)
    at = f"/spec/affinity/nodeAffinity/{REQUIRED}/nodeSelectorTerms"
    assert decision.patch[1:] == [
        {"op": "add", "path": f"{at}/0/matchExpressions/-", "value": NOT_SLICED},
        {"op": "add", "path": f"{at}/0/matchExpressions/-", "value": NOT_MIG_SINGLE},
        {"op": "add", "path": f"{at}/1/matchExpressions", "value": WHOLE_TERM},
    ]
    assert required_terms(decision.mutated) == [
        {"matchExpressions": [zone, *WHOLE_TERM]},
        {**host, "matchExpressions": WHOLE_TERM},
        {},  # an empty term selects no node: left as it is
    ]


def test_a_compatible_node_selector_is_kept() -> None:
    selector = {SHARING_STRATEGY: "time-slicing", REPLICAS: "4", "pool": "inference"}
    decision = run(pod(gpu(), nodeSelector=selector), SLICED)
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["nodeSelector"] == selector
    assert required_terms(decision.mutated) == [
        {"matchExpressions": [r.expression for r in steering.requirements(SLICED)]}
    ]


SELECTOR_CONFLICT = (
    'pod: nodeSelector nvidia.com/gpu.sharing-strategy=time-slicing conflicts with policy "team" (exclusive: whole '
    "GPUs), whose GPU pods run only on nodes with nvidia.com/gpu.sharing-strategy notin (mps,time-slicing); remove "
    "it, or use a namespace whose policy shares GPUs"
)


@pytest.mark.parametrize(
    ("enforcement", "verdict"),
    [(Enforcement.ENFORCE, "deny"), (Enforcement.WARN, "warn"), (Enforcement.AUDIT, "audit")],
)
def test_a_node_selector_for_a_sliced_pool_in_a_whole_gpu_namespace_conflicts(enforcement, verdict) -> None:
    pol = policy(steering=True, enforcement=enforcement)
    decision = run(pod(gpu(), nodeSelector={SHARING_STRATEGY: "time-slicing"}), pol)
    assert (decision.verdict, decision.violations) == (verdict, [SELECTOR_CONFLICT])
    assert "affinity" not in decision.mutated["spec"]  # never made unschedulable: admitted as written, or denied
    if verdict == "warn":  # the short form: the whole line is the log's and the CLI's
        assert decision.warnings == [
            "gpu-admission: pod: nodeSelector nvidia.com/gpu.sharing-strategy=time... conflicts with the policy's GPU "
            "pool; remove it"
        ]


def test_a_node_selector_for_another_replica_count_conflicts() -> None:
    decision = run(pod(gpu(), nodeSelector={REPLICAS: "2"}), SLICED)
    assert decision.violations == [
        'pod: nodeSelector nvidia.com/gpu.replicas=2 conflicts with policy "team" (time-slicing, 4 replicas), whose '
        "GPU pods run only on nodes with nvidia.com/gpu.replicas in (4); remove it, or make it select the policy's pool"
    ]


@pytest.mark.parametrize(
    ("pol", "product", "needed"),
    [
        (WHOLE, "Tesla-T4-SHARED", "nvidia.com/gpu.product neither ending in -SHARED nor holding -MIG-"),
        (
            WHOLE,
            "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
            "nvidia.com/gpu.product neither ending in -SHARED nor holding -MIG-",
        ),
        (SLICED, "Tesla-T4", "nvidia.com/gpu.product ending in -SHARED"),
        (MIG_SINGLE, "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "nvidia.com/gpu.product ending in -MIG-3g.40gb"),
    ],
    ids=["whole-on-sliced", "whole-on-mig", "sliced-on-whole", "mig-other-profile"],
)
def test_a_node_selector_for_a_product_of_another_pool_conflicts(pol, product, needed) -> None:
    decision = run(pod(gpu(), nodeSelector={"nvidia.com/gpu.product": product}), pol)
    assert len(decision.violations) == 1
    assert decision.violations[0].startswith(f"pod: nodeSelector nvidia.com/gpu.product={product} conflicts with ")
    assert f"whose GPU pods run only on nodes with {needed}; " in decision.violations[0]


@pytest.mark.parametrize(
    ("pol", "product"),
    [(WHOLE, "Tesla-T4"), (SLICED, "Tesla-T4-SHARED"), (MIG_SINGLE, "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb")],
)
def test_a_node_selector_for_a_product_of_the_pool_is_kept(pol, product) -> None:
    decision = run(pod(gpu(), nodeSelector={"nvidia.com/gpu.product": product}), pol)
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["affinity"]


def test_required_affinity_on_products_of_another_pool_conflicts() -> None:
    products = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4-SHARED", "NVIDIA-L4-SHARED"]}
    obj = pod(gpu(), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [products]}]}}})
    decision = run(obj, WHOLE)
    assert decision.violations == [
        'pod: required node affinity on nvidia.com/gpu.product conflicts with policy "team" (exclusive: whole GPUs): '
        "its only term excludes the nodes with nvidia.com/gpu.product neither ending in -SHARED nor holding -MIG-, "
        "where its GPU pods must run; remove it, or use a namespace whose policy shares GPUs"
    ]


@pytest.mark.parametrize("name", ["team", "a-policy-name-as-long-as-kubernetes-allows-" + "x" * 200])
def test_a_conflicts_short_form_fits_a_warning(name) -> None:
    pol = policy(name=name, steering=True)
    spec = {"containers": [gpu()], "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4-" + "y" * 60 + "-SHARED"}}
    steered = steering.steer(spec, "/spec", pol)
    assert steered is not None and steered.conflicts
    short = steered.conflicts[0].short
    assert len(short) <= SHORT_LIMIT and short.endswith("remove it")


def test_required_affinity_conflicts_only_when_every_term_does() -> None:
    sliced = {"matchExpressions": [{"key": SHARING_STRATEGY, "operator": "In", "values": ["mps"]}]}
    whole = {"matchExpressions": [{"key": SHARING_STRATEGY, "operator": "In", "values": ["none"]}]}
    one_fits = run(pod(gpu(), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [sliced, whole]}}}), WHOLE)
    assert one_fits.verdict == "allow"
    none_fit = run(pod(gpu(), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [sliced]}}}), WHOLE)
    assert none_fit.violations == [
        'pod: required node affinity on nvidia.com/gpu.sharing-strategy conflicts with policy "team" (exclusive: '
        "whole GPUs): its only term excludes the nodes with nvidia.com/gpu.sharing-strategy notin (mps,time-slicing), "
        "where its GPU pods must run; remove it, or use a namespace whose policy shares GPUs"
    ]
    assert none_fit.verdict == "deny"


def test_constraints_already_there_give_no_patch() -> None:
    terms = [{"matchExpressions": [{**NOT_SLICED, "values": ["time-slicing", "mps"]}, NOT_MIG_SINGLE]}]
    decision = run(pod(gpu(), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}), WHOLE)
    assert decision.patch == []


def test_malformed_affinity_is_left_for_the_api_server() -> None:
    decision = run(pod(gpu(), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": "x"}}}), WHOLE)
    assert decision.patch == []


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Deployment", ("spec", "template", "spec")),
        ("CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
        ("PodTemplate", ("template", "spec")),
    ],
)
def test_templates_are_steered_too(kind, path) -> None:
    obj: dict = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "w", "namespace": NS}}
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = {"containers": [gpu()]}
    decision = run(obj, WHOLE)
    assert decision.patch[-1]["path"] == "/" + "/".join(path) + "/affinity"
    assert required_terms(decision.mutated, path) == [{"matchExpressions": WHOLE_TERM}]


# --- Policies: loading, the auto switch, explain --------------------------------------------------------------


def doc(name: str, namespace: str, spec: str = "") -> str:
    return (
        f"apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {{name: {name}}}\n"
        f"spec:\n  namespaces: [{namespace}]\n{spec}---\n"
    )


SLICED_DOC = doc(
    "sliced",
    "sliced",
    "  sharing: {mode: time-slicing, replicas: 4, resourceName: nvidia.com/gpu}\n  fractional: shared\n",
)


@pytest.mark.parametrize(
    ("text", "steers"),
    [
        (SLICED_DOC + doc("whole", "whole"), {"sliced": True, "whole": True}),
        (doc("whole", "whole"), {"whole": False}),  # no pool keeps the name: nvidia.com/gpu is a whole GPU anywhere
        (doc("r", "r", "  sharing: {mode: mps, replicas: 2}\n  gpu: {memoryMiB: 1000}\n"), {"r": False}),
        (
            doc("r", "r", "  steering: true\n  sharing: {mode: mps, replicas: 2}\n  gpu: {memoryMiB: 1000}\n"),
            {"r": True},
        ),
        (SLICED_DOC + doc("whole", "whole", "  steering: false\n"), {"sliced": True, "whole": False}),
        (doc("m", "m", "  sharing: {mode: mig, migStrategy: single, migProfile: 1g.10gb}\n"), {"m": True}),
    ],
    ids=["auto-with-sliced-pool", "auto-alone", "auto-renamed", "on", "off", "mig-single"],
)
def test_the_steering_switch(text, steers) -> None:
    policies = parse_policy_sources({"p.yaml": text})
    assert {p.name: p.steering for p in policies.policies} == steers


def test_loader_accepts_the_kept_name_and_the_mig_strategy() -> None:
    policies = parse_policy_sources({"p.yaml": SLICED_DOC})
    assert policies.policies[0].sharing.resource_name == "nvidia.com/gpu"
    mig = doc("m", "m", "  sharing: {mode: mig, migProfile: 1g.10gb}\n")
    assert parse_policy_sources({"p.yaml": mig}).policies[0].sharing.mig_strategy is MigStrategy.MIXED


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            "  sharing: {mode: time-slicing, replicas: 2, migStrategy: single}\n",
            "p.yaml#0 spec.sharing.migStrategy: only applies when mode is mig (mode is time-slicing); remove it",
        ),
        (
            "  sharing: {mode: mig, migProfile: 1g.10gb, migStrategy: singel}\n",
            'p.yaml#0 spec.sharing.migStrategy: "singel" is not one of mixed, single (did you mean "single"?)',
        ),
        ("  steering: always\n", 'p.yaml#0 spec.steering: expected true, false or auto, got "always" (a string)'),
    ],
)
def test_loader_problems(spec, problem) -> None:
    with pytest.raises(PolicyLoadError) as error:
        parse_policy_sources({"p.yaml": doc("x", "x", spec)})
    assert error.value.problems == [problem]


def test_check_diff_shows_the_constraints(tmp_path, capsys) -> None:
    from webhook.cli.main import main

    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(SLICED_DOC + doc("whole", "whole"))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: train, namespace: whole}\nspec:\n  containers:\n"
        "  - name: app\n    resources:\n      limits: {nvidia.com/gpu: 1}\n"
    )
    assert main(["check", "--policies", str(tmp_path / "policies"), "--diff", str(manifest)]) == 0
    out = capsys.readouterr().out
    assert (
        "+  affinity:\n"
        "+    nodeAffinity:\n"
        "+      requiredDuringSchedulingIgnoredDuringExecution:\n"
        "+        nodeSelectorTerms:\n"
        "+        - matchExpressions:\n"
        "+          - key: nvidia.com/gpu.sharing-strategy\n"
        "+            operator: NotIn\n"
        "+            values:\n"
        "+            - mps\n"
        "+            - time-slicing\n"
        "+          - key: nvidia.com/gpu.slices.gi\n"
        "+            operator: DoesNotExist\n"
    ) in out


def test_policy_explain_shows_the_constraints(tmp_path) -> None:
    from webhook.cli.policy_cmd import explain

    mig = doc("m", "m", "  gpu: {model: A100-80GB}\n  sharing: {mode: mig, migStrategy: single, migProfile: 3g.40gb}\n")
    (tmp_path / "p.yaml").write_text(SLICED_DOC + doc("whole", "whole") + mig)
    out, err = io.StringIO(), io.StringIO()
    assert explain(["sliced", "whole", "m"], str(tmp_path), out, err) == 0
    lines = out.getvalue().splitlines()
    assert (
        "  settings  mig (single): nvidia.com/gpu is one 3g.40gb slice; GPU A100-80GB (81920 MiB); enforcement "
        "enforce; fractional reject; max 1 per container, 8 per pod" in lines
    )
    assert (
        "  steering  pods holding nvidia.com/gpu need node labels nvidia.com/mig.strategy in (single), "
        "nvidia.com/gpu.slices.gi in (3)" in lines
    )
    assert (
        "  steering  pods holding nvidia.com/gpu need node labels nvidia.com/gpu.sharing-strategy in "
        "(time-slicing), nvidia.com/gpu.replicas in (4)" in lines
    )
    assert (
        "  steering  pods holding nvidia.com/gpu need node labels nvidia.com/gpu.sharing-strategy notin "
        "(mps,time-slicing), !nvidia.com/gpu.slices.gi" in lines
    )


# --- Properties: the merge selects exactly what both select ---------------------------------------------------

KEYS = [SHARING_STRATEGY, REPLICAS, MIG_STRATEGY, "nvidia.com/gpu.slices.gi", "zone"]
VALUES = ["none", "time-slicing", "mps", "1", "2", "4", "single", "mixed", "a", "3"]

node_labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=5)
expressions = st.one_of(
    st.builds(
        lambda k, o, v: {"key": k, "operator": o, "values": v},
        st.sampled_from(KEYS),
        st.sampled_from(["In", "NotIn"]),
        st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True),
    ),
    st.builds(
        lambda k, o: {"key": k, "operator": o}, st.sampled_from(KEYS), st.sampled_from(["Exists", "DoesNotExist"])
    ),
    st.builds(
        lambda k, o, v: {"key": k, "operator": o, "values": [v]},
        st.sampled_from(KEYS),
        st.sampled_from(["Gt", "Lt"]),
        st.sampled_from(["0", "1", "2", "3", "4"]),
    ),
)
terms = st.one_of(
    st.builds(lambda e: {"matchExpressions": e}, st.lists(expressions, max_size=3)),
    st.just({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}]}),
)
STEERING_POLICIES = [WHOLE, SLICED, SLICED_MPS, MIG_SINGLE]
SETTINGS = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def selects(spec: dict, labels: dict) -> bool:
    """Whether the scheduler's node-label filters admit a node: nodeSelector and required node affinity."""
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = (spec.get("affinity") or {}).get("nodeAffinity", {}).get(REQUIRED)
    if required is None:
        return True
    return any(term_matches(term, labels) for term in required["nodeSelectorTerms"])


def policy_selects(pol, labels: dict) -> bool:
    return all(steering.matches(r.expression, labels) for r in steering.requirements(pol))


@st.composite
def user_specs(draw):
    spec: dict = {"containers": [gpu()]}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2))
    shape = draw(st.sampled_from(["none", "preferred", "required", "required"]))
    if shape == "preferred":
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    elif shape == "required":
        spec["affinity"] = {
            "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": draw(st.lists(terms, min_size=1, max_size=3))}}
        }
    return spec


@SETTINGS
@given(user_specs(), st.sampled_from(STEERING_POLICIES), st.lists(node_labels, min_size=1, max_size=12))
def test_the_merged_constraints_select_exactly_the_nodes_both_select(spec, pol, nodes) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    decision = evaluate(copy.deepcopy(obj), NS, PolicySet((pol,)))
    merged = evanphx.apply(obj, decision.patch)
    assert merged == decision.mutated
    both = [selects(spec, labels) and policy_selects(pol, labels) for labels in nodes]
    if any("conflicts with" in line for line in decision.violations):  # denied, or admitted as the user wrote it
        assert not any(both), "a conflict was reported where a node satisfies both"
        assert merged["spec"].get("affinity") == spec.get("affinity")
    else:
        assert [selects(merged["spec"], labels) for labels in nodes] == both


@SETTINGS
@given(user_specs(), st.sampled_from(STEERING_POLICIES))
def test_steering_is_idempotent(spec, pol) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    policies = PolicySet((pol,))
    first = evaluate(obj, NS, policies)
    again = evaluate(first.mutated, NS, policies)
    assert again.patch == []
    assert again.violations == first.violations


# --- The real server ------------------------------------------------------------------------------------------


def test_the_server_steers_and_denies_a_conflicting_selector(start_server, tmp_path) -> None:
    import base64
    import json

    import jsonpatch

    from tests.test_server import review

    (tmp_path / "p.yaml").write_text(SLICED_DOC + doc("whole", "whole"))
    server = start_server(tmp_path)
    obj = pod(gpu("0.25"))  # one replica's share of 4
    obj["metadata"]["namespace"] = "sliced"
    response = review(server, "mutate", obj)
    mutated = jsonpatch.apply_patch(copy.deepcopy(obj), json.loads(base64.b64decode(response["patch"])))
    assert mutated["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert required_terms(mutated) == [{"matchExpressions": [r.expression for r in steering.requirements(SLICED)]}]
    assert review(server, "validate", mutated)["allowed"] is True

    conflicting = pod(gpu(), nodeSelector={SHARING_STRATEGY: "mps"})
    conflicting["metadata"]["namespace"] = "whole"
    assert "patch" not in review(server, "mutate", conflicting)  # nothing added that would make it unschedulable
    denied = review(server, "validate", conflicting)
    assert denied["allowed"] is False
    assert (
        'nodeSelector nvidia.com/gpu.sharing-strategy=mps conflicts with policy "whole"' in denied["status"]["message"]
    )


# --- Pods bound to a node by spec.nodeName: never steered, judged against the node where the snapshot knows it -


def bound_view() -> ClusterView:
    """A whole-GPU node, a time-sliced node that keeps the name and one that renames it, as GPU feature discovery
    labels them (its product label gets -SHARED where the name is kept)."""

    def gpu_node(name: str, allocatable: dict, labels: dict) -> NodeInfo:
        node = {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": allocatable}}
        info = NodeInfo.from_object(node)
        assert info is not None
        return info

    product = "NVIDIA-A100-SXM4-80GB"
    return ClusterView.of(
        [
            gpu_node("gpu-whole", {"nvidia.com/gpu": "8"},
                     {SHARING_STRATEGY: "none", REPLICAS: "1", "nvidia.com/gpu.product": product}),
            gpu_node("gpu-sliced", {"nvidia.com/gpu": "32"},
                     {SHARING_STRATEGY: "time-slicing", REPLICAS: "4", "nvidia.com/gpu.product": f"{product}-SHARED"}),
            gpu_node("gpu-renamed", {"nvidia.com/gpu.shared": "32"},
                     {SHARING_STRATEGY: "time-slicing", REPLICAS: "4", "nvidia.com/gpu.product": product}),
        ]
    )  # fmt: skip


def validator(node: str, resource: str) -> dict:
    """The GPU Operator's device plugin validator as it creates itself: bound to its node by spec.nodeName, its
    init container asking for one of the first GPU resource that node advertises."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nvidia-device-plugin-validator-x7k2p", "namespace": NS},
        "spec": {
            "nodeName": node,
            "restartPolicy": "OnFailure",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "initContainers": [
                {
                    "name": "plugin-validation",
                    "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.0",
                    "command": ["sh", "-c"],
                    "args": ["vectorAdd"],
                    "resources": {"limits": {resource: "1"}},
                }
            ],
            "containers": [
                {
                    "name": "nvidia-device-plugin-validator",
                    "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.0",
                    "command": ["sh", "-c"],
                    "args": ["echo device-plugin workload validation is successful"],
                }
            ],
        },
    }


BOUND_WHOLE_ON_SLICED = (
    'pod: spec.nodeName binds it to node "gpu-sliced", whose labels nvidia.com/gpu.sharing-strategy=time-slicing, '
    'nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-SHARED does not match policy "team" (exclusive: whole GPUs), '
    "whose GPU pods run only on nodes with nvidia.com/gpu.sharing-strategy notin (mps,time-slicing); "
    "nvidia.com/gpu.product neither ending in -SHARED nor holding -MIG-; bind it to a node of the policy's pool, "
    "or leave spec.nodeName out and let the scheduler place it"
)
BOUND_SLICED_ON_WHOLE = (
    'pod: spec.nodeName binds it to node "gpu-whole", whose labels nvidia.com/gpu.sharing-strategy=none, '
    'nvidia.com/gpu.replicas=1, nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB does not match policy "team" '
    "(time-slicing, 4 replicas), whose GPU pods run only on nodes with nvidia.com/gpu.sharing-strategy in "
    "(time-slicing); nvidia.com/gpu.replicas in (4); nvidia.com/gpu.product ending in -SHARED; bind it to a node of "
    "the policy's pool, or leave spec.nodeName out and let the scheduler place it"
)
SHARED_IN_WHOLE = (
    'init container "plugin-validation": nvidia.com/gpu.shared "1" is a shared GPU, but policy "team" gives this '
    "namespace whole GPUs (mode exclusive); request nvidia.com/gpu instead"
)
SHARED_IN_KEPT_NAME = (
    'init container "plugin-validation": nvidia.com/gpu.shared "1" is a shared GPU, but policy "team" gives this '
    "namespace time-slicing replicas as nvidia.com/gpu; request nvidia.com/gpu instead"
)


@pytest.mark.parametrize(
    ("pol", "node", "resource", "known", "violations"),
    [
        # A whole-GPU default policy: bound to a time-sliced node, no affinity that the kubelet would reject.
        (WHOLE, "gpu-sliced", "nvidia.com/gpu", False, []),
        (WHOLE, "gpu-sliced", "nvidia.com/gpu", True, [BOUND_WHOLE_ON_SLICED]),
        (WHOLE, "gpu-whole", "nvidia.com/gpu", True, []),
        (WHOLE, "gpu-renamed", "nvidia.com/gpu.shared", True, [SHARED_IN_WHOLE]),  # the policy's own rule
        (WHOLE, "gpu-elsewhere", "nvidia.com/gpu", True, []),  # a node the snapshot does not know: left alone
        # A time-slicing policy that keeps the name nvidia.com/gpu.
        (SLICED, "gpu-sliced", "nvidia.com/gpu", False, []),
        (SLICED, "gpu-sliced", "nvidia.com/gpu", True, []),
        (SLICED, "gpu-whole", "nvidia.com/gpu", True, [BOUND_SLICED_ON_WHOLE]),
        # Another team's pool (renamed replicas) asked for by name: the per-mode pool rule, nodeName or not.
        (SLICED, "gpu-renamed", "nvidia.com/gpu.shared", True, [SHARED_IN_KEPT_NAME]),
    ],
)
def test_a_pod_bound_to_its_node_is_never_steered_and_is_judged_against_that_node(
    pol, node, resource, known, violations
) -> None:
    obj = validator(node, resource)
    decision = evaluate(obj, NS, PolicySet((pol,)), nodes=bound_view() if known else None)
    assert decision.violations == violations
    assert decision.verdict == ("deny" if violations else "allow")
    assert all("affinity" not in op["path"] for op in decision.patch)
    assert "affinity" not in evanphx.apply(obj, decision.patch)["spec"]
    assert all("node affinity added" not in w for w in decision.warnings)
    warn = dataclasses.replace(pol, enforcement=Enforcement.WARN)
    warned = evaluate(obj, NS, PolicySet((warn,)), nodes=bound_view() if known else None)
    short = (
        f'gpu-admission: pod: spec.nodeName "{node}" is outside the policy\'s GPU pool; bind it to a node in the pool'
    )
    assert (short in warned.warnings) == any(line.startswith("pod: spec.nodeName") for line in violations)
    assert all(len(w) <= 120 for w in warned.warnings)


def test_the_same_pod_without_a_node_name_is_steered() -> None:
    obj = validator("gpu-sliced", "nvidia.com/gpu")
    del obj["spec"]["nodeName"]
    decision = run(obj, WHOLE)
    assert required_terms(decision.mutated) == [{"matchExpressions": WHOLE_TERM}]


# --- Pinned to GPUs shared without renaming, in a namespace whose policy renames them --------------------------

PINNED_LINE = (
    "pod: {pin} pins it to nodes whose time-slicing replicas keep the name nvidia.com/gpu (GPU feature discovery's "
    '-SHARED suffix), but policy "team" gives this namespace nvidia.com/gpu.shared (what nvidia.com/gpu becomes '
    "here), which those nodes do not advertise: the pod would stay Pending; remove it, or use a namespace whose "
    "policy keeps the name nvidia.com/gpu"
)


@pytest.mark.parametrize("steer", [False, True])  # renamed replicas are not steered unless the policy says so
@pytest.mark.parametrize(
    ("spec", "pin"),
    [
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED"}},
         "nodeSelector nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED"),
        ({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4-SHARED", "NVIDIA-A10-SHARED"]},
        ]}]}}}},
         "required node affinity nvidia.com/gpu.product in (NVIDIA-L4-SHARED,NVIDIA-A10-SHARED)"),
    ],
)  # fmt: skip
def test_a_pod_pinned_to_a_shared_product_that_keeps_the_name_is_denied_in_a_renamed_namespace(spec, pin, steer):
    pol = policy(sharing=Sharing(Mode.TIME_SLICING, 4), steering=steer)
    decision = run(pod(gpu("1"), **copy.deepcopy(spec)), pol)  # mapped to nvidia.com/gpu.shared
    assert decision.verdict == "deny"
    assert decision.violations == [PINNED_LINE.format(pin=pin)]
    decision = run(pod(container(limits={"nvidia.com/gpu.shared": "1"}), **copy.deepcopy(spec)), pol)
    assert decision.violations == [PINNED_LINE.format(pin=pin)]  # written so by the user: the same


def test_other_pins_in_a_renamed_namespace_are_fine():
    pol = policy(sharing=Sharing(Mode.TIME_SLICING, 4))
    for spec in (
        {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}},
        {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4-SHARED"]}]},
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}]},
        ]}}}},  # one term can select renamed nodes
    ):  # fmt: skip
        assert run(pod(gpu("1"), **copy.deepcopy(spec)), pol).verdict == "allow"
    # A namespace that keeps the name is what a -SHARED pin needs.
    spec = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED"}}
    assert run(pod(gpu("1"), **spec), SLICED).verdict == "allow"


def test_whole_gpu_pods_still_reach_whole_gpu_nodes_where_the_clusters_mig_strategy_is_single() -> None:
    """The GPU Operator's default MIG strategy is `single`, and GPU feature discovery then labels every GPU node
    `nvidia.com/mig.strategy=single`, MIG enabled or not (internal/lm/mig-strategy.go: the strategy labeler is
    merged whenever the strategy is not none). Only MIG-enabled nodes get `nvidia.com/gpu.slices.gi`."""
    whole_under_single = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    sliced_under_single = {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.slices.gi": "1",
                           "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}  # fmt: skip
    terms = required_terms(run(pod(container(limits={"nvidia.com/gpu": "1"})), WHOLE).mutated)
    assert [term_matches(term, whole_under_single) for term in terms] == [True]
    assert [term_matches(term, sliced_under_single) for term in terms] == [False]


OLD_WHOLE_GPU_TERM = [NOT_SLICED, {"key": MIG_STRATEGY, "operator": "NotIn", "values": ["single"]}]


def test_the_expression_version_0_1_0_added_for_whole_gpus_is_replaced_on_the_next_review() -> None:
    """A workload admitted by 0.1.0 carries `mig.strategy notin (single)`, which no whole-GPU node of a cluster on
    the GPU Operator's default strategy matches; kubectl apply never deletes it (the user's file never had it).
    The next review takes it out of every term and adds what selects those nodes; the user's expressions stay."""
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    spec = {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": copy.deepcopy(OLD_WHOLE_GPU_TERM)},
        {"matchExpressions": [zone, *copy.deepcopy(OLD_WHOLE_GPU_TERM)]},
    ]}}}}  # fmt: skip
    decision = run(pod(gpu("1"), **spec), WHOLE)
    assert required_terms(decision.mutated) == [
        {"matchExpressions": WHOLE_TERM},
        {"matchExpressions": [zone, *WHOLE_TERM]},
    ]
    assert decision.warnings == [
        "gpu-admission: pod: node affinity added on nvidia.com/gpu.sharing-strategy, nvidia.com/gpu.slices.gi",
        "gpu-admission: pod: node affinity nvidia.com/mig.strategy notin (single) removed (0.1.0's; it excludes "
        "whole GPUs)",
    ]
    whole_under_single = {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.sharing-strategy": "none"}
    assert [term_matches(term, {**whole_under_single, "zone": "a"}) for term in required_terms(decision.mutated)] == [
        True,
        True,
    ]


def test_the_old_expression_is_kept_outside_whole_gpu_namespaces() -> None:
    """Only a whole-GPU policy replaces it: elsewhere it is the user's own constraint, judged as such."""
    spec = {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": copy.deepcopy(OLD_WHOLE_GPU_TERM)},
    ]}}}}  # fmt: skip
    decision = run(pod(gpu("1"), **spec), SLICED)
    assert {"key": MIG_STRATEGY, "operator": "NotIn", "values": ["single"]} in required_terms(decision.mutated)[0][
        "matchExpressions"
    ]
