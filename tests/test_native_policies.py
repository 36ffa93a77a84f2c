"""The native policies proven equal to the webhook: the same Pods, and the same pod specs as a Deployment's, a
Job's, a CronJob's and a PodTemplate's template, through `engine.evaluate` and through the compiled
MutatingAdmissionPolicy and ValidatingAdmissionPolicy objects, as the API server runs them on CREATE:

1. the policies' matchConstraints (the object's group, resource and operation), the bindings' namespaceSelector
   (the excluded namespaces, the ignore label) and each policy's matchConditions (exactly one compiled policy
   is a namespace's; a workload made by its controller is left alone);
2. the MAP's mutations in order, each a JSON Patch applied as evanphx/json-patch does (its variables evaluated
   anew for each, on the object as patched so far), then the MAP again (reinvocationPolicy IfNeeded), which
   must change nothing;
3. the API server's own validation of extended resources in the pod spec (tests/apiserver_rules.py);
4. the VAP's variables and validation, its message and the binding's validationAction.

For every case the compiled set claims to cover (`native.scope.outside` says which it does not, with a reason the
compiler prints), the verdict, the pod spec (every container's `resources` and `env`, the node constraints), and
the denial's message must be the webhook's. Where the API server's own validation refuses the object first, both
refuse (its message is its own). A template is also judged as rendered `--beside-webhook` (the MAPs change Pods
only): the webhook's output, run through the VAP alone, gets the webhook's verdict and message, unchanged.
Objects come as the API server decodes them: quantities as canonical strings, requests defaulted from limits.
"""

from __future__ import annotations

import io
import json
from fractions import Fraction
from functools import cache
from itertools import permutations
from random import Random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import apiserver_rules, kube_cel, yamldocs
from tests.engine_support import GPU, Enforcement, Fractional, Limits, Mode, Sharing, container, pod
from tests.native_admission import Outcome, admit
from webhook.admission.base.podspec import POD_SPEC_PATHS, get_path
from webhook.admission.engine import evaluate
from webhook.admission.native import commandline, gaps, maxima, memshares, userenv
from webhook.admission.native.compile import MESSAGE_LIMIT, PODS, SEPARATOR, NativeSet, compile_native, too_long
from webhook.admission.native.scope import HUGE_COUNT, outside
from webhook.admission.phases import engines
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Backend, MigStrategy, Placement, Policy, PolicySet
from webhook.admission.sharing.memshare import HAMI_GPU_POLICY, HAMI_NODE_POLICY

EXCLUDED = ("kube-system", "gpu-operator")


def _policy(name: str, namespaces: tuple[str, ...], **fields: Any) -> Policy:
    return Policy(name=name, namespaces=namespaces, **fields)


# Exact names, globs of several specificities, a tie (team-* and *-team, 5 literal characters each: file order
# picks "whole-tie"), warn and audit, modes the native set does not carry, and the built-in defaults elsewhere.
POLICIES = PolicySet(
    (
        _policy(
            "whole",
            ("research", "ml-*"),
            limits=Limits(max_per_container=2, max_per_pod=3),
            trusted_schedulers=("kai-scheduler",),
        ),
        _policy("shared", ("shared", "ml-exact", "ml-shared-*"), sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4)),
        _policy(
            "mps",
            ("mps-*",),
            sharing=Sharing(mode=Mode.MPS, replicas=4),
            gpu=GPU(model="A100-80GB"),
            enforcement=Enforcement.WARN,
            steering=True,  # on nodes with 4 MPS replicas
        ),
        _policy("whole-tie", ("team-*",), steering=True),  # whole GPUs kept off shared and MIG-single nodes
        _policy(
            "shared-tie",
            ("*-team",),
            sharing=Sharing(mode=Mode.TIME_SLICING, replicas=2),
            limits=Limits(max_per_container=2, max_per_pod=4),
            framework_env=("pytorch", "generic"),
            fractional=Fractional.SHARED,
        ),
        _policy("audited", ("audit",), enforcement=Enforcement.AUDIT, block_visible_devices_override=False),
        _policy("mig", ("mig",), sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=GPU(model="A100-80GB")),
        _policy(
            "mig-fractions",
            ("mig-frac",),
            sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"),
            gpu=GPU(model="A100-80GB"),
            fractional=Fractional.MIG,
            limits=Limits(max_per_pod=2),
        ),
        _policy(
            "mig-listed",
            ("mig-listed",),
            sharing=Sharing(mode=Mode.MIG, mig_profile="3g.40gb", mig_profiles=("1g.10gb", "3g.40gb")),
            gpu=GPU(model="A100-80GB"),
            fractional=Fractional.MIG,
            limits=Limits(max_per_container=2, max_per_pod=3),
        ),
        _policy(
            "mig-single",
            ("mig-single",),
            sharing=Sharing(mode=Mode.MIG, mig_profile="3g.40gb", mig_strategy=MigStrategy.SINGLE),
            gpu=GPU(model="A100-80GB"),
            fractional=Fractional.MIG,
            enforcement=Enforcement.WARN,
            steering=True,  # on nodes with 3g.40gb slices under migStrategy single
        ),
        # an unknown model: any profile is the pool's where none is listed; a listed one is the nodes' layout
        _policy("mig-any", ("mig-any",), sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb")),
        _policy(
            "mig-any-listed",
            ("mig-any-listed",),
            sharing=Sharing(mode=Mode.MIG, mig_profile="2g.20gb", mig_profiles=("2g.20gb",)),
        ),
        _policy(
            "fractions", ("frac",), sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), fractional=Fractional.SHARED
        ),
        _policy(
            "mps-fractions",
            ("mps-frac",),
            sharing=Sharing(mode=Mode.MPS, replicas=4),
            gpu=GPU(model="A100-80GB"),
            fractional=Fractional.SHARED,
            framework_env=("jax", "tgi", "pytorch", "generic"),
            enforcement=Enforcement.WARN,
        ),
        _policy(
            "capped",
            ("capped",),
            sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4),
            fractional=Fractional.SHARED,
            memory_fraction=Fraction(1, 5),
        ),
        # memory slices: HAMi (its placement as pod annotations, 1.5 times the memory registered), Volcano's vGPU
        # (units of 10 MiB), ACK (an A10's 24 GiB, steered)
        _policy(
            "hami",
            ("hami-*",),
            sharing=Sharing(
                mode=Mode.MEMORY,
                backend=Backend.HAMI,
                placement=Placement.BINPACK,
                device_memory_scaling=Fraction(3, 2),  # 122,880 MiB registered per GPU
            ),
            gpu=GPU(model="A100-80GB"),
            limits=Limits(max_per_pod=4),
        ),
        _policy(
            "volcano",
            ("vgpu",),
            sharing=Sharing(mode=Mode.MEMORY, backend=Backend.VOLCANO, gpu_memory_factor=10),
            gpu=GPU(model="H100-80GB"),
            limits=Limits(max_per_container=2, max_per_pod=3),
        ),
        _policy(
            "ack",
            ("ack",),
            sharing=Sharing(mode=Mode.MEMORY, backend=Backend.ACK, placement=Placement.SPREAD),
            gpu=GPU(memory_mib=24576),
            steering=True,  # shares on the pools that cap memory, placed by spread
        ),
        _policy(  # not steered: a pod spread over several GPUs by its label is compiled
            "ack-plain",
            ("ack-plain",),
            sharing=Sharing(mode=Mode.MEMORY, backend=Backend.ACK),
            gpu=GPU(memory_mib=16384),
            limits=Limits(max_per_pod=4),
        ),
    )
)
NAMESPACES = (
    "research", "ml-train", "ml-exact", "ml-shared-a", "shared", "mps-1", "team-a", "a-team", "team-x-team",
    "audit", "mig", "mig-frac", "mig-listed", "mig-single", "mig-any", "mig-any-listed", "frac", "mps-frac",
    "capped", "hami-a", "vgpu", "ack", "ack-plain", "default", "kube-system",
)  # fmt: skip
NATIVE = compile_native(POLICIES, EXCLUDED)
# The least count the compiled integers do not hold (gaps.MEMORY_COUNTS), of Volcano's vGPUs and ACK's GiB.
VGPU_MOST = memshares.most_count(POLICIES.for_namespace("vgpu"))
ACK_MOST = memshares.most_count(POLICIES.for_namespace("ack-plain"))
BESIDE = compile_native(POLICIES, EXCLUDED, beside_webhook=True)  # for a cluster that runs the webhook too


# --- The webhook's denial as the native set says it ------------------------------------------------


def said(violations: list[str], policy: Policy) -> str:
    """The webhook's denial as the native set says it: its lines on one line, or past the API server's limit the
    validation's static message."""
    joined = SEPARATOR.join(violations)
    return joined if len(joined.encode()) <= MESSAGE_LIMIT else too_long(policy)


# --- Objects as the API server decodes them -----------------------------------------------------------------

# The corpus's: the Pod and one kind for each place a pod spec sits in a workload (a Job's, a StatefulSet's...
# is a Deployment's `spec.template`); generated pods take every kind.
KINDS = ("Pod", "Deployment", "CronJob", "PodTemplate")
API_VERSIONS = {
    "Pod": "v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "ReplicaSet": "apps/v1",
    "ReplicationController": "v1", "Job": "batch/v1", "CronJob": "batch/v1", "PodTemplate": "v1",
}  # fmt: skip


def as_kind(kind: str, obj: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """The Pod `obj`'s spec as the pod template of a `kind` (the Pod itself for "Pod")."""
    if kind == "Pod":
        return obj
    labels = {**(obj["metadata"].get("labels") or {}), "app": "a"}  # the pod's own labels (ACK's gpu-count) kept
    template = {"metadata": {"labels": labels}, "spec": obj["spec"]}
    selector = {"app": "a"} if kind == "ReplicationController" else {"matchLabels": {"app": "a"}}
    if kind == "CronJob":
        body: dict[str, Any] = {"spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}}
    elif kind == "PodTemplate":
        body = {"template": template}
    elif kind == "Job":
        body = {"spec": {"template": template}}
    else:
        body = {"spec": {"selector": selector, "template": template}}
    return {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": {"name": "w", **metadata}, **body}


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    return get_path(obj, POD_SPEC_PATHS[obj["kind"]])


def placed(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod's annotations that a memory backend reads its placement from (memshare.place)."""
    metadata = get_path(obj, (*POD_SPEC_PATHS[obj["kind"]][:-1], "metadata")) or {}
    return {k: v for k, v in (metadata.get("annotations") or {}).items() if k in (HAMI_NODE_POLICY, HAMI_GPU_POLICY)}


def decoded(obj: dict[str, Any]) -> dict[str, Any]:
    """Quantities as strings (the API server serializes them so), and in a Pod a request defaulted from each limit
    (SetDefaults_Pod: a template is stored as written), each resource map's keys sorted (as the webhook receives
    them); a JSON document, whose parts are never shared (a generated pod's may be)."""
    obj = json.loads(json.dumps(obj))
    defaulted = obj["kind"] == "Pod"
    for section in ("initContainers", "containers"):
        for body in spec_of(obj).get(section, []):
            resources = body.get("resources")
            if not resources:
                continue
            for which in ("requests", "limits"):
                if which in resources:
                    resources[which] = {k: str(v) for k, v in resources[which].items()}
            for name, value in resources.get("limits", {}).items() if defaulted else ():
                resources.setdefault("requests", {}).setdefault(name, value)
            for which in ("requests", "limits"):  # the API server writes a map's keys sorted (encoding/json)
                if which in resources:
                    resources[which] = dict(sorted(resources[which].items()))
    return obj


def _containers(obj: dict[str, Any]) -> list[tuple[Any, Any]]:
    spec = spec_of(obj)
    return [
        (body.get("resources"), body.get("env"), body.get("command"), body.get("args"))
        for section in ("initContainers", "containers")
        for body in spec.get(section, [])
    ]


def compare(
    namespace: str,
    obj: dict[str, Any],
    policies: PolicySet = POLICIES,
    compiled: NativeSet = NATIVE,
    beside_webhook: NativeSet = BESIDE,
) -> gaps.Gap | None:
    """Drive `obj` through both; None where they agree in full, else the gap that explains why they are not
    compared (asserted to be one the compiler prints for the namespace's policy). `policies` and their native
    sets (alone and beside the webhook): the corpus's unless given."""
    obj = decoded(obj)
    policy = policies.for_namespace(namespace)
    if namespace in EXCLUDED:  # the webhook configurations do not send these: neither judges them
        native = admit(compiled, namespace, obj)
        assert native.verdict == "allow" and native.obj == obj
        return None
    gap = outside(obj, policy)
    printed = compiled.gaps_of(policy.name)
    if gap is not None:  # not claimed: the native set's answer is not compared (it may even be an error)
        assert gap in printed
        return gap
    native = admit(compiled, namespace, obj)
    decision = evaluate(obj, namespace, policies)
    if native.verdict == "refused":  # the API server's own validation, before any VAP
        if decision.allowed and apiserver_rules.pod_spec_errors(spec_of(decision.mutated)) == native.errors:
            return None  # the webhook lets it through to the same refusal (a resource it does not manage)
        assert decision.verdict == "deny" and decision.refusals, (decision.violations, native.errors)
        assert gaps.BUILT_IN_REFUSAL in printed
        return gaps.BUILT_IN_REFUSAL
    assert native.verdict == decision.verdict, (decision.violations, native.message)
    assert native.message == said(decision.violations, policy)
    assert _containers(native.obj) == _containers(decision.mutated)
    assert spec_of(native.obj) == spec_of(decision.mutated)  # the node constraints among the rest
    assert placed(native.obj) == placed(decision.mutated)  # HAMi's placement annotations
    if obj["kind"] != "Pod":  # beside the webhook: its output, judged by the VAP alone, as the webhook judged it
        beside = admit(beside_webhook, namespace, decision.mutated)
        assert (beside.verdict, beside.message, beside.obj) == (native.verdict, native.message, decision.mutated)
    return None


# --- The corpus -----------------------------------------------------------------------------------------------

GPU_ = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_2G = "nvidia.com/mig-2g.20gb"
AMD, INTEL_GPU, INTEL_MILLICORES = "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/millicores"
INTEL_XE, MIG_3G = "gpu.intel.com/xe", "nvidia.com/mig-3g.40gb"
DEVICE_CLASS = "deviceclass.resource.kubernetes.io/"
DC_GPU, DC_MIG = DEVICE_CLASS + "gpu.nvidia.com", DEVICE_CLASS + "mig.nvidia.com"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
FROM_MAP = {"configMapKeyRef": {"name": "limits", "key": "fraction"}}
FROM_SECRET = {"secretKeyRef": {"name": "limits", "key": "fraction"}}
PRODUCT, STRATEGY, SLICES = "nvidia.com/gpu.product", "nvidia.com/gpu.sharing-strategy", "nvidia.com/gpu.slices.gi"
MIG_STRATEGY = "nvidia.com/mig.strategy"
ACK_SCHEDULE, ACK_PLACEMENT = "ack.node.gpu.schedule", "ack.node.gpu.placement"
ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
SLICES_2 = {"key": SLICES, "operator": "In", "values": ["2"]}
HAMI_MEM, HAMI_CORES, ACK_MEM = "nvidia.com/gpumem", "nvidia.com/gpucores", "aliyun.com/gpu-mem"
ACK_COUNT = "aliyun.com/gpu-count"
HAMI_NODE, HAMI_GPU = HAMI_NODE_POLICY, HAMI_GPU_POLICY
VOLCANO_NUM, VOLCANO_MEM, VOLCANO_PERCENT = (
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-memory",
    "volcano.sh/vgpu-memory-percentage",
)


def with_annotations(obj: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


def spread(obj: dict[str, Any], gpus: str) -> dict[str, Any]:
    """The pod with ACK's label aliyun.com/gpu-count (the GPUs its memory spreads over)."""
    return {**obj, "metadata": {**obj["metadata"], "labels": {ACK_COUNT: gpus}}}


REQUIRED, PREFERRED = (
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # requests into limits, every mode
    "whole: requests only": ("research", pod(container(requests={GPU_: 1, "cpu": "2"}))),
    "whole: requests only, limits map with cpu": ("research", pod(container(requests={GPU_: 2}, limits={"cpu": 1}))),
    "whole: limit only": ("research", pod(container(limits={GPU_: 1}))),
    "whole: no GPU": ("research", pod(container(requests={"cpu": 1}))),
    "whole: zero": ("research", pod(container(limits={GPU_: 0}))),
    "mig: requests only": ("mig", pod(container(requests={GPU_: 1}))),
    "default: requests only": ("default", pod(container(requests={GPU_: 1}))),
    "default: requests only, amd": ("default", pod(container(requests={"amd.com/gpu": 1}))),
    # per-container and per-pod maxima
    "whole: over the container maximum": ("research", pod(container(limits={GPU_: 3}))),
    "whole: glob, over the pod maximum": (
        "ml-train", pod(container("a", limits={GPU_: 2}), container("b", requests={GPU_: 2})),
    ),
    "whole: both maxima": ("research", pod(container("a", limits={GPU_: 3}), container("b", limits={GPU_: 1}))),
    "default: nine GPUs": ("default", pod(container(limits={GPU_: 9}))),
    "default: nine GPUs in three containers": (
        "default", pod(*(container(f"c{i}", limits={GPU_: 3}) for i in range(3))),
    ),
    "tie: whole wins by file order": ("team-x-team", pod(container(limits={GPU_: 9}))),
    "audit: over the maximum": ("audit", pod(container(limits={GPU_: 9}))),
    # another pool's resource
    "whole: a shared replica is another pool's": ("research", pod(container(limits={SHARED: 1}))),
    "default: nine shared replicas, two lines of one container": ("default", pod(container(limits={SHARED: 9}))),
    # time-slicing and MPS replicas
    "shared: one GPU becomes a replica": ("shared", pod(container(requests={GPU_: 1}))),
    "shared: exact name beats a glob": (
        "ml-exact", pod(container(limits={GPU_: 1}, env=[{"name": "A", "value": "1"}])),
    ),
    "shared: most specific glob": ("ml-shared-a", pod(container(limits={GPU_: 1}, env=[]))),
    "shared: two GPUs are two replicas": ("shared", pod(container(limits={GPU_: 2}))),
    "shared: two replicas": ("shared", pod(container(limits={SHARED: 2}))),
    "shared: a replica as written": ("shared", pod(container(limits={SHARED: 1}))),
    "shared: nine containers": ("shared", pod(*(container(f"c{i}", limits={GPU_: 1}) for i in range(9)))),
    "shared-tie: pytorch hint, two replicas allowed": ("a-team", pod(container(limits={GPU_: 2}))),
    "shared-tie: over both maxima": (
        "a-team", pod(container("a", limits={GPU_: 3}), container("b", limits={SHARED: 2})),
    ),
    "shared-tie: pod total": ("a-team", pod(*(container(f"c{i}", limits={SHARED: 2}) for i in range(3)))),
    "mps: warn, two GPUs": ("mps-1", pod(container(limits={GPU_: 2}))),
    "mps: a replica gets the MPS limits": ("mps-1", pod(container(requests={GPU_: 1}))),
    # the API server refuses first
    "whole: 500m": ("research", pod(container(limits={GPU_: "500m"}))),
    "shared: 500m under fractional reject": ("shared", pod(container(limits={GPU_: "500m"}))),
    "whole: request differs from limit": ("research", pod(container(requests={GPU_: 1}, limits={GPU_: 2}))),
    "whole: negative": ("research", pod(container(limits={GPU_: -1}))),
    # fractional: shared, a fraction of nvidia.com/gpu as one shared replica with its memory variables
    # Within a thousandth below a whole number: the API server's own check takes it as whole (milli-units rounded
    # up), the webhook refuses it as fractional; converted below 1 by both.
    "whole: a ten-millionth below one GPU": ("research", pod(container(limits={GPU_: "0.9999999"}))),
    # Counts past what the compiled int64 sums hold (a pod of them could overflow them): the webhook's alone.
    "whole: two containers of five quintillion GPUs": (
        "research", pod(container("a", limits={GPU_: "5000000000000000000"}), container("b", limits={GPU_: "5E18"}))
    ),
    "shared: a trillion GPUs": ("shared", pod(container(limits={GPU_: "1T"}))),
    "shared: a nano below two GPUs": ("shared", pod(container(limits={GPU_: "1999999999n"}))),
    "fractions: a ten-millionth below one GPU, converted": ("frac", pod(container(limits={GPU_: "0.9999999"}))),
    # ... as the API server sends it (its canonical form): the compiled line refuses it as the webhook does
    "whole: 999999900n, a ten-millionth below one GPU": ("research", pod(container(limits={GPU_: "999999900n"}))),
    "whole: 999500u, written with an exponent": ("ml-train", pod(container(limits={GPU_: "999500e-6"}))),
    "whole: AMD's 1999999999n": ("research", pod(container(limits={AMD: "1999999999n"}))),
    "default: Intel's 12345999999900n, in an init container": (
        "default", pod(container(limits={GPU_: 1}), init=(container("setup", limits={INTEL_GPU: "12345999999900n"}),)),
    ),
    "whole-tie: 999999900n, steered": ("team-a", pod(container(limits={GPU_: "999999900n"}))),
    "shared-tie: a replica of 999999900n": ("a-team", pod(container(limits={SHARED: "999999900n"}))),
    "fractions: 1999999999n, more than one GPU": ("frac", pod(container(limits={GPU_: "1999999999n"}))),
    "mps: 999999999e-9, warned": ("mps-1", pod(container(limits={GPU_: "999999999e-9"}))),
    "mig: a MIG slice of 999999u": ("mig", pod(container(limits={MIG_1G: "999999u"}))),
    "mig-any: 999999900n, no model to advise by": ("mig-any", pod(container(limits={GPU_: "999999900n"}))),
    "mig-frac: 999999900n, advised by the model's slices": ("mig-frac", pod(container(limits={GPU_: "999999900n"}))),
    "mig-frac: near-whole counts past one GPU, no slice holds them": (
        "mig-frac", pod(container("a", limits={GPU_: "1999999900n"}), container("b", limits={GPU_: "12345999001u"})),
    ),
    "mig-single: near-whole counts, more than the one slice": (
        "mig-single", pod(container("a", limits={GPU_: "999999900n"}), container("b", limits={GPU_: "2999999999n"})),
    ),
    "hami: 999999900n beside its own memory": ("hami-a", pod(container(limits={GPU_: "999999900n", HAMI_MEM: 100}))),
    "hami: near-whole counts past one GPU": (
        "hami-a", pod(container("a", limits={GPU_: "1999999900n"}), container("b", limits={GPU_: "12345999001u"})),
    ),
    "volcano: a near-whole count past one GPU beside a whole one": (
        "vgpu", pod(container("a", limits={GPU_: "2999999999n"}), container("b", limits={GPU_: 1})),
    ),
    "ack: a near-whole count past one GPU, advised in ACK's own form": (
        "ack-plain", pod(container(limits={GPU_: "1999999900n"})),
    ),
    "ack: near-whole counts past one GPU, in micros and over a thousand GPUs, spread by its label": (
        "ack",
        spread(pod(container("a", limits={GPU_: "2999999u"}), container("b", limits={GPU_: "1234999999001n"})), "2"),
    ),
    "hami: its memory 99999999900n beside a whole GPU": (
        "hami-a", pod(container(limits={GPU_: 1, HAMI_MEM: "99999999900n"})),
    ),
    "vgpu: a vGPU count of 999999900n beside its memory": (
        "vgpu", pod(container(limits={VOLCANO_MEM: 100, VOLCANO_NUM: "999999900n"})),
    ),
    "fractions: 500m, more than one replica's share": ("frac", pod(container(limits={GPU_: "500m"}))),
    "fractions: 250m, one replica's share, requests only": ("frac", pod(container(requests={GPU_: "250m"}))),
    "fractions: 0.1 written plainly, beside a variable of the user's": (
        "frac", pod(container(limits={GPU_: "0.1"}, env=[{"name": "A", "value": "x"}])),
    ),
    "fractions: 10m, CuPy's 1%": ("frac", pod(container(limits={GPU_: "10m"}))),
    "shared-tie: 50u, too little to write": ("a-team", pod(container(limits={GPU_: "50u"}))),
    "fractions: a fraction and a whole GPU, two containers": (
        "frac", pod(container("a", limits={GPU_: "125m"}), container("b", requests={GPU_: 1}), init=(
            container("setup", limits={GPU_: "0.3"}),
        )),
    ),
    "fractions: request differs from limit": ("frac", pod(container(requests={GPU_: "250m"}, limits={GPU_: "500m"}))),
    "fractions: a fractional shared replica": ("frac", pod(container(limits={SHARED: "500m"}))),
    "shared-tie: 300m, pytorch hint": ("a-team", pod(container(limits={GPU_: "300m"}))),
    "shared-tie: 0.75 over the share of 2 replicas, env empty": (
        "a-team", pod(container(limits={GPU_: "0.75"}, env=[])),
    ),
    "mps-fractions: 100m, the MPS limits of the fraction": ("mps-frac", pod(container(limits={GPU_: "100m"}))),
    "mps-fractions: 5m, below 1%, no CuPy": ("mps-frac", pod(container(requests={GPU_: "5m"}))),
    "mps-fractions: warn, 900m over the share": ("mps-frac", pod(container(limits={GPU_: "900m"}))),
    "mps-fractions: 1n, the least": ("mps-frac", pod(container(limits={GPU_: "1n"}))),
    # memoryFraction: the policy's own variables whatever the fraction, each over a smaller one said
    "capped: 100m under memoryFraction": ("capped", pod(container(limits={GPU_: "100m"}))),
    "fractions: 5m below CuPy's 1%": ("frac", pod(container(limits={GPU_: "5m"}))),
    "capped: 220m within the share but over memoryFraction, 400m over the share, 0.15 under memoryFraction": (
        "capped",
        pod(
            container("a", limits={GPU_: "220m"}),
            container("b", limits={GPU_: "400m"}),
            container("c", limits={GPU_: "0.15"}),
        ),
    ),
    "capped: 5m, below 1%, an init container": (
        "capped", pod(container(), init=(container("setup", requests={GPU_: "5m"}, env=[]),)),
    ),
    "capped: 50u, recorded as 0, nothing judged": ("capped", pod(container(limits={GPU_: "50u"}))),
    "fractions: 100u, the least recorded, CuPy's 1% over it": ("frac", pod(container(limits={GPU_: "100u"}))),
    # a container's own variables: kept, the policy's others added; one from a ConfigMap or Secret is not judged
    "shared: the user's TF_FORCE_GPU_ALLOW_GROWTH kept, GPU_MEMORY_FRACTION from a ConfigMap": (
        "shared",
        pod(
            container(
                limits={GPU_: 1},
                env=[
                    {"name": "TF_FORCE_GPU_ALLOW_GROWTH", "value": "false"},
                    {"name": "GPU_MEMORY_FRACTION", "valueFrom": FROM_MAP},
                ],
            )
        ),
    ),
    "capped: 100m, the user's XLA_PYTHON_CLIENT_PREALLOCATE, JAX's fraction judged, CuPy's from a Secret not": (
        "capped",
        pod(
            container(
                limits={GPU_: "100m"},
                env=[
                    {"name": "XLA_PYTHON_CLIENT_PREALLOCATE", "value": "1"},
                    {"name": "CUPY_GPU_MEMORY_LIMIT", "valueFrom": FROM_SECRET},
                ],
            )
        ),
    ),
    "fractions: 5m, XLA_CLIENT_MEM_FRACTION from a Secret, JAX's pair skipped": (
        "frac",
        pod(container(limits={GPU_: "5m"}, env=[{"name": "XLA_CLIENT_MEM_FRACTION", "valueFrom": FROM_SECRET}])),
    ),
    "mps-fractions: 100m, the user's MPS limits": (
        "mps-frac",
        pod(
            container(
                limits={GPU_: "100m"},
                env=[
                    {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=1G"},
                    {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "50"},
                ],
            )
        ),
    ),
    # a container's own memory variable with a plain decimal value, judged against its share as the webhook does:
    # at it, just below and just above (a claim rounded down to 4 places, the same text as the share's), in
    # every form (leading and trailing zeros, no digit before or after the point, CuPy's percent and bytes)
    "shared: the user's memory variables at one replica's share, just below it, and neither judged (CuPy's bytes "
    "with the GPU's memory unknown, no number)": (
        "shared",
        pod(
            container("at", limits={GPU_: 1}, env=[
                {"name": "GPU_MEMORY_FRACTION", "value": "0.250"},
                {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": ".25"},
                {"name": "XLA_CLIENT_MEM_FRACTION", "value": "00.2500"},
                {"name": "CUDA_MEMORY_FRACTION", "value": "0.25"},
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "25.%"},
            ]),
            container("below", limits={GPU_: 1}, env=[
                {"name": "GPU_MEMORY_FRACTION", "value": "0.2499"},
                {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0"},
                {"name": "CUDA_MEMORY_FRACTION", "value": ".24999999999"},
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "24.99%"},
            ]),
            container("neither", limits={GPU_: 1}, env=[
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "90000000000"},
                {"name": "GPU_MEMORY_FRACTION", "value": "most"},
                {"name": "CUDA_MEMORY_FRACTION", "value": "."},
            ]),
        ),
    ),
    "shared: the user's memory variables just above one replica's share, in env order": (
        "shared",
        pod(container(limits={GPU_: 1}, env=[
            {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "25.01%"},
            {"name": "GPU_MEMORY_FRACTION", "value": "0.2501"},
            {"name": "A", "value": "x"},
            {"name": "XLA_CLIENT_MEM_FRACTION", "value": "0.250000001"},
            {"name": "CUDA_MEMORY_FRACTION", "value": "1."},
            {"name": "TF_FORCE_GPU_ALLOW_GROWTH", "value": "false"},
        ]), init=(container("setup", limits={GPU_: 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.90"}]),)),
    ),
    "mps: warn, CuPy's bytes at a quarter of 80 GiB and one over, TGI's not judged under MPS": (
        "mps-1",
        pod(
            container("at", limits={GPU_: 1}, env=[
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "21474836480"},
                {"name": "CUDA_MEMORY_FRACTION", "value": "0.9"},
            ]),
            container("above", limits={GPU_: 1}, env=[
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "21474836481"},
                {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0.3"},
            ]),
        ),
    ),
    "fractions: 100m, the user's variables at the converted fraction, below and above it; 400m over the share, "
    "a variable over one replica's share after it": (
        "frac",
        pod(
            container("at", limits={GPU_: "100m"}, env=[
                {"name": "GPU_MEMORY_FRACTION", "value": "0.1"},
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "10%"},
            ]),
            container("below", limits={GPU_: "100m"}, env=[
                {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0.0999"},
                {"name": "CUDA_MEMORY_FRACTION", "value": "0.09"},
            ]),
            container("above", limits={GPU_: "100m"}, env=[
                {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0.1000000001"},
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "10.5%"},
                {"name": "GPU_MEMORY_FRACTION", "value": "0.25"},
            ]),
            container("over", limits={GPU_: "400m"}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.3"}]),
        ),
    ),
    "mps-fractions: 5m, the user's JAX fraction above it, the policy's own others": (
        "mps-frac",
        pod(container(limits={GPU_: "5m"}, env=[{"name": "XLA_CLIENT_MEM_FRACTION", "value": "0.006"}])),
    ),
    "shared-tie: 300m, the user's fraction at one replica's share, above the converted one": (
        "a-team", pod(container(limits={GPU_: "300m"}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.5"}])),
    ),
    "capped: 100m, the policy's own value set by the user said after the user's other": (
        "capped",
        pod(container(limits={GPU_: "100m"}, env=[
            {"name": "GPU_MEMORY_FRACTION", "value": "0.2"},
            {"name": "CUDA_MEMORY_FRACTION", "value": "0.15"},
        ])),
    ),
    # inference engines (phases/engines.py): the memory flag appended where the command line has none; an
    # engine's container gets the MPS variables alone
    "shared: vllm serve, a path-qualified lead, the model in args": (
        "shared", pod(container(limits={GPU_: 1}, command=["/usr/local/bin/vllm"], args=["serve", "m"])),
    ),
    "shared: SGLang as python3 -u -m, the user's variable kept, empty args": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "A", "value": "1"}], args=[], command=[
            "python3", "-u", "-m", "sglang.launch_server"
        ])),
    ),
    "shared: python3.11 -m vLLM's OpenAI server in args alone, an init container": (
        "shared", pod(container(), init=(container("serve", requests={GPU_: 1}, args=[
            "/opt/py/bin/python3.11", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"
        ]),)),
    ),
    "shared: trtllm-serve, and trtllm-serve grpc (no engine: its variables)": (
        "shared", pod(
            container("a", limits={GPU_: 1}, command=["trtllm-serve", "m"]),
            container("b", limits={GPU_: 1}, command=["trtllm-serve"], args=["grpc", "--config", "c.yaml"]),
        ),
    ),
    "shared: the vllm-openai image with args alone": (
        "shared", pod(container(limits={SHARED: 1}, image="docker.io/vllm/vllm-openai:v0.9.1", args=["--model", "m"])),
    ),
    "shared: a script, python -m after it, and a shell line: no engine": (
        "shared", pod(
            container("a", limits={GPU_: 1}, command=["python", "serve.py", "-m", "sglang.launch_server"]),
            container("b", limits={GPU_: 1}, command=["sh", "-c", "vllm serve m"]),
            container("c", limits={GPU_: 1}, command=["vllm", "bench"]),
        ),
    ),
    "mps: vLLM gets the MPS limits and its flag; SGLang the MPS limits alone": (
        "mps-1", pod(
            container("a", requests={GPU_: 1}, command=["vllm", "serve", "m"]),
            container("b", limits={GPU_: 1}, command=["python", "-m", "sglang.launch_server", "--mem-fraction-static",
                                                    "0.9"]),
        ),
    ),
    "fractions: 300m vLLM, its flag for the fraction; 500m TensorRT-LLM, one replica's": (
        "frac", pod(
            container("a", limits={GPU_: "300m"}, command=["vllm", "serve", "m"], args=["--port", "1"]),
            container("b", limits={GPU_: "500m"}, command=["trtllm-serve", "m"], env=[]),
        ),
    ),
    "mps-fractions: 100m vLLM, the MPS limits of the fraction and its flag; 1n SGLang": (
        "mps-frac", pod(
            container("a", limits={GPU_: "100m"}, command=["vllm", "serve", "m"]),
            container("b", requests={GPU_: "1n"}, command=["python3", "-m", "sglang.launch_server"]),
        ),
    ),
    "capped: a vLLM replica under memoryFraction": (
        "capped", pod(container(limits={GPU_: 1}, command=["vllm", "serve"], env=[{"name": "A", "value": "1"}])),
    ),
    "capped: 100m SGLang, judged against its fraction": (
        "capped", pod(
            container("a", limits={GPU_: "100m"}, command=["python", "-m", "sglang.launch_server"]),
        ),
    ),
    # memoryFraction's flag (0.18 of 1/5) at a converted fraction: judged against the recorded fraction below the
    # share (at it no line; over the share, the share's line alone; recorded as 0: one replica's share)
    "capped: memoryFraction's flag at 180m vLLM, 179m TensorRT-LLM, 300m SGLang, 50u vLLM": (
        "capped", pod(
            container("a", limits={GPU_: "180m"}, command=["vllm", "serve", "m"]),
            container("b", requests={GPU_: "179m"}, args=["/usr/bin/trtllm-serve", "m"], env=[]),
            container("c", limits={GPU_: "300m"}, command=["python3", "-m", "sglang.launch_server"]),
            container("d", limits={GPU_: "50u"}, image="vllm/vllm-openai:v0.9.1", args=["--model", "m"]),
        ),
    ),
    "capped: memoryFraction's flag at a sidecar's 5m, an init container's 0.17": (
        "capped", pod(container("app", limits={GPU_: 1}), init=(
            container("proxy", limits={GPU_: "5m"}, command=["vllm", "serve"], restartPolicy="Always"),
            container("warm", limits={GPU_: "0.17"}, command=["trtllm-serve"]),
        )),
    ),
    "shared: vLLM beside the user's memory variables, one over the share": (
        "shared", pod(container(limits={GPU_: 1}, command=["vllm", "serve", "m"], env=[
            {"name": "GPU_MEMORY_FRACTION", "value": "0.2"}, {"name": "CUDA_MEMORY_FRACTION", "value": "0.5"}
        ])),
    ),
    "shared-tie: 15m vLLM, below the headroom: half the fraction": (
        "a-team", pod(container(limits={GPU_: "15m"}, command=["vllm", "serve", "m"])),
    ),
    # MIG slices: nvidia.com/gpu: N renamed to the policy's profile, a fraction to the smallest slice holding it
    "mig: one GPU": ("mig", pod(container(limits={GPU_: 1}))),
    "mig: two GPUs, one slice per container": ("mig", pod(container(limits={GPU_: 2}))),
    "mig: two slices as written": ("mig", pod(container(limits={MIG_1G: 2}))),
    "mig: 500m under fractional reject": ("mig", pod(container(limits={GPU_: "500m"}))),
    "mig-fractions: 125m, the bound of 1g.10gb": ("mig-frac", pod(container(requests={GPU_: "125m"}))),
    "mig-fractions: 125000001n becomes 1g.20gb": ("mig-frac", pod(container(limits={GPU_: "125000001n"}))),
    "mig-fractions: 0.5 becomes 3g.40gb, a GPU beside it": (
        "mig-frac", pod(container("a", limits={GPU_: "0.5"}), container("b", limits={GPU_: 1})),
    ),
    "mig-fractions: 999m becomes 7g.80gb, in an init container": (
        "mig-frac", pod(container(), init=(container("setup", limits={GPU_: "999m"}),)),
    ),
    "mig-fractions: three 1g.10gb, the pod maximum": (
        "mig-frac", pod(*(container(f"c{i}", limits={GPU_: "0.1"}) for i in range(3))),
    ),
    "mig-listed: 200m becomes 3g.40gb, 1g.20gb not offered": ("mig-listed", pod(container(limits={GPU_: "200m"}))),
    "mig-listed: three GPUs over it": ("mig-listed", pod(container(limits={GPU_: 3}))),
    "mig-listed: three slices of 1g.10gb": ("mig-listed", pod(container(limits={MIG_1G: 3}))),
    "mig-listed: two GPUs within the maximum of 2, and fractions: 3g.40gb over the pod's": (
        "mig-listed",
        pod(container("a", limits={GPU_: 2}), container("b", limits={GPU_: "0.4"}), container("c", requests={
            GPU_: "0.3"
        })),
    ),
    "mig-single: one GPU is one slice": ("mig-single", pod(container(requests={GPU_: 1}))),
    "mig-single: warn, two slices": ("mig-single", pod(container(limits={GPU_: 2}))),
    "mig: another profile of the model, two of them": ("mig", pod(container(limits={"nvidia.com/mig-3g.40gb": 2}))),
    "mig: a media-extension profile, requests only": ("mig", pod(container(requests={"nvidia.com/mig-1g.10gb.me": 1}))),
    "mig-single: 300m in place": ("mig-single", pod(container(limits={GPU_: "300m"}))),
    "mig-single: 0.6 more than the slice": ("mig-single", pod(container(limits={GPU_: "0.6"}))),
    # another pool's resource: a MIG resource outside the pool's names (by prefix), the shared replica (by name)
    "mig: a profile the model does not have": ("mig", pod(container(limits={"nvidia.com/mig-2g.10gb": 1}))),
    "mig-listed: a profile the nodes do not offer": (
        "mig-listed", pod(container(limits={"nvidia.com/mig-1g.20gb": 1})),
    ),
    "mig-listed: a media-extension profile the model does not have, three, in an init container": (
        "mig-listed", pod(container(), init=(container("setup", limits={"nvidia.com/mig-2g.20gb.me": 3}),)),
    ),
    "mig: a MIG slice's replica, two, and the shared replica in two containers, over the pod maximum": (
        "mig",
        pod(
            container("a", limits={MIG_1G + ".shared": 2}),
            container("b", limits={SHARED: 5}),
            container("c", limits={SHARED: 4}),
        ),
    ),
    "mig: a name that is no profile": ("mig", pod(container(limits={"nvidia.com/mig-big": 1}))),
    "mig: a name that is no profile and a profile the model does not have, the greater first": (
        "mig", pod(container(limits={"nvidia.com/mig-big": 2, "nvidia.com/mig-2g.10gb": 1})),
    ),
    "mig: four MIG names judged by prefix in one container": (
        "mig",
        pod(container(limits={"nvidia.com/mig-big": 2, MIG_3G: 9, "nvidia.com/mig-2g.10gb": 1, MIG_2G + ".shared": 3})),
    ),
    "mig-single: warn, a MIG profile and the shared replica": (
        "mig-single", pod(container("a", limits={MIG_1G: 2}), container("b", limits={SHARED: 2})),
    ),
    "mig-any: any profile is the pool's, two in one container": (
        "mig-any", pod(container("a", limits={"nvidia.com/mig-2g.20gb": 1}), container("b", limits={MIG_2G: 2})),
    ),
    "mig-any: a slice's replica and a name that is no profile": (
        "mig-any",
        pod(container("a", limits={MIG_1G + ".shared": 1}), container("b", limits={"nvidia.com/mig-1g": "2"})),
    ),
    "mig-any-listed: a profile the nodes do not offer, and the one they do": (
        "mig-any-listed", pod(container("a", limits={"nvidia.com/mig-1g.10gb.me": 1}), container("b", limits={
            MIG_2G: 1
        })),
    ),
    "whole: three MIG slices, over the maximum, a zero of another": (
        "research", pod(container("a", limits={MIG_1G: 3}), container("b", limits={MIG_2G: "0"})),
    ),
    "whole: three of a MIG slice's replica, over the maximum, a name that is no profile": (
        "research", pod(container("a", limits={MIG_1G + ".shared": 3}), container("b", limits={"nvidia.com/mig-x": 1})),
    ),
    "shared: a MIG slice, two, and a slice's replica, two": (
        "shared", pod(container("a", limits={MIG_2G: 2}), container("b", limits={MIG_1G + ".shared": 2})),
    ),
    "default: a MIG slice in a sidecar and the app": (
        "default",
        pod(container(limits={MIG_2G: 1}), init=(container("log", limits={MIG_2G: 1}, restartPolicy="Always"),)),
    ),
    "mig-listed: an unoffered profile over the pod maximum": (
        "mig-listed", pod(container("a", limits={MIG_2G: 2}), container("b", limits={MIG_2G: 2})),
    ),
    "mig-listed: another profile's total said between the pool's own": (
        "mig-listed", pod(*(container(f"c{i}", limits={name: 2}) for i, name in enumerate(
            (MIG_3G, MIG_2G, MIG_1G, MIG_3G, MIG_2G, MIG_1G),
        ))),
    ),
    "mig-frac: a slice's replica over the pod maximum": (
        "mig-frac", pod(*(container(f"c{i}", limits={MIG_1G + ".shared": 1}) for i in range(3))),
    ),
    "mig-any: any profile over the pod maximum": (
        "mig-any", pod(container("a", limits={MIG_2G: 5}), container("b", limits={MIG_2G: 5})),
    ),
    # not covered
    "mig: a profile outside the pool's names, requests only": ("mig", pod(container(requests={MIG_2G + ".me": 1}))),
    "mig: both names": ("mig", pod(container(limits={GPU_: 1, MIG_1G: "0"}))),
    "shared: user's memory variable": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.9"}])),
    ),
    "capped: the user's GPU_MEMORY_FRACTION over the share": (
        "capped", pod(container(limits={GPU_: "100m"}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "2e-1"}])),
    ),
    "shared: the user's memory variable with an exponent": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "9e-1"}])),
    ),
    # an exponent after a plain decimal: the CEL moves its power of ten onto the digits or the power they are over
    "shared: the user's memory variables with exponents within the share": (
        "shared", pod(container(limits={GPU_: 1}, env=[
            {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "2E-1"},
            {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "2.5e1%"},
            {"name": "GPU_MEMORY_FRACTION", "value": " +.025e+01 "},
        ])),
    ),
    "shared: the user's memory variables with exponents over the share": (
        "shared", pod(container(limits={GPU_: 1}, env=[
            {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "3e01%"},
            {"name": "CUDA_MEMORY_FRACTION", "value": "1e-0"},
            {"name": "GPU_MEMORY_FRACTION", "value": "2.6E-1"},
        ])),
    ),
    "mps-frac: 100m, CuPy's byte count with an exponent": (
        "mps-frac", pod(container(limits={GPU_: "100m"}, env=[{"name": "CUPY_GPU_MEMORY_LIMIT", "value": "9e+9"}])),
    ),
    # past the digit budget (its mantissa and its exponent's size more than 12), and a byte count that is no whole
    "shared: the user's memory variable with an exponent past the digit budget": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.5e-11"}])),
    ),
    "mps-frac: 100m, CuPy's byte count with a negative exponent": (
        "mps-frac", pod(container(limits={GPU_: "100m"}, env=[{"name": "CUPY_GPU_MEMORY_LIMIT", "value": "9e-1"}])),
    ),
    # a `+` before a plain decimal and ASCII spaces around it: stripped by the webhook, dropped by the CEL
    "shared: the user's memory variables with a sign and spaces": (
        "shared", pod(
            container("a", limits={GPU_: 1}, env=[{"name": "XLA_CLIENT_MEM_FRACTION", "value": "+0.9"}]),
            container("b", limits={GPU_: 1}, env=[
                {"name": "CUPY_GPU_MEMORY_LIMIT", "value": " 90% "}, {"name": "GPU_MEMORY_FRACTION", "value": " +.2"},
            ]),
        ),
    ),
    "mps-fractions: 100m, the user's memory variables with a sign and spaces": (
        "mps-frac", pod(container(limits={GPU_: "100m"}, env=[
            {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "+8589934593 "},
            {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "per_process_memory_fraction: +0.1 "},
            {"name": "TGI_CUDA_MEMORY_FRACTION", "value": "  0.11"},
        ])),
    ),
    "shared: the user's memory variable with a space before its percent sign": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "CUPY_GPU_MEMORY_LIMIT", "value": " 90 %"}])),
    ),
    "fractions: 100m, the user's memory variable longer than 12 characters": (
        "frac", pod(container(limits={GPU_: "100m"}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.10000000001"}])),
    ),
    "shared-tie: the user's PYTORCH_ALLOC_CONF": (
        "a-team",
        pod(container(limits={GPU_: 1}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": "expandable_segments:True"}])),
    ),
    "shared: vLLM": ("shared", pod(container(limits={GPU_: 1}, command=["vllm", "serve", "m"]))),
    "shared: both names": ("shared", pod(container(limits={GPU_: 1, SHARED: "0"}))),
    "shared: the user's --gpu-memory-utilization": (
        "shared", pod(container(limits={GPU_: 1}, command=["vllm", "serve", "m", "--gpu-memory-utilization", "0.9"])),
    ),
    "shared: the user's --mem-fraction-static= in args, --kv_cache_free_gpu_memory_fraction in command": (
        "shared", pod(
            container("a", limits={GPU_: 1}, command=["python", "-m", "sglang.launch_server"], args=[
                "--mem-fraction-static=0.5"
            ]),
            container("b", limits={GPU_: 1}, command=["trtllm-serve", "--kv_cache_free_gpu_memory_fraction", "0.1"]),
        ),
    ),
    "fractions: the user's --free_gpu_memory_fraction=": (
        "frac", pod(container(limits={GPU_: "250m"}, command=["trtllm-serve"], args=["--free_gpu_memory_fraction=.1"])),
    ),
    # an engine's own flag, judged as validation judges it (the last in any spelling; a plain decimal)
    "shared: the user's flag twice, the last counts; at the line's end, with =, no number, negative, as a word": (
        "shared", pod(
            container("a", limits={GPU_: 1}, command=["vllm", "serve", "m", "--gpu-memory-utilization", "0.9"], args=[
                "--gpu-memory-utilization=.2"
            ]),
            container("b", limits={GPU_: 1}, command=["vllm", "serve", "--gpu-memory-utilization=0.2"], args=[
                "--gpu-memory-utilization"
            ]),
            container("c", limits={GPU_: 1}, command=["trtllm-serve"], args=["--free_gpu_memory_fraction=0.9=1"]),
            container("d", limits={GPU_: 1}, command=["vllm", "serve"], args=["--gpu-memory-utilization", "most"]),
            container("e", limits={SHARED: 1}, command=["vllm", "serve"], args=["--gpu-memory-utilization=-0.9"]),
            container("f", limits={GPU_: 1}, command=["trtllm-serve", "--free_gpu_memory_fraction"], args=[
                "--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction=0.2500001"
            ]),
        ),
    ),
    "mps: vLLM's own flag 007.50 over the share; SGLang's not judged": (
        "mps-1", pod(
            container("a", limits={GPU_: 1}, image="vllm/vllm-openai", args=["--gpu-memory-utilization=007.50"]),
            container("b", limits={GPU_: 1}, command=["python", "-m", "sglang.launch_server"], args=[
                "--mem-fraction-static=0.9"
            ]),
        ),
    ),
    "shared-tie: the user's variable, then the flag, then NVIDIA_VISIBLE_DEVICES over": (
        "a-team", pod(container(limits={GPU_: 1}, command=["trtllm-serve", "m", "--free_gpu_memory_fraction", "1."],
                                env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.75"},
                                     {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
    ),
    "fractions: 100m vLLM, its own flag over the fraction; 300m SGLang, over one replica's share": (
        "frac", pod(
            container("a", limits={GPU_: "100m"}, command=["vllm", "serve", "m", "--gpu-memory-utilization=0.2"]),
            container("b", limits={GPU_: "300m"}, command=["python3", "-m", "sglang.launch_server"], args=[
                "--mem-fraction-static", "0.26"
            ]),
        ),
    ),
    "capped: 100m SGLang with its own flag over its fraction": (
        "capped", pod(container(limits={GPU_: "100m"}, command=["python", "-m", "sglang.launch_server"], args=[
            "--mem-fraction-static=0.15"
        ])),
    ),
    "shared: the user's flag with an exponent": (
        "shared", pod(container(limits={GPU_: 1}, command=["vllm", "serve", "--gpu-memory-utilization", "9e-1"])),
    ),
    "capped: the user's flags with an exponent, within and over their fractions": (
        "capped", pod(
            container("a", limits={GPU_: "100m"}, command=["vllm", "serve", "--gpu-memory-utilization=5E-2"]),
            container("b", limits={GPU_: "100m"}, command=["python", "-m", "sglang.launch_server"], args=[
                "--mem-fraction-static", " +.25e0 "
            ]),
        ),
    ),
    "shared: the user's flag with an exponent past the digit budget": (
        "shared", pod(container(limits={GPU_: 1}, command=["vllm", "serve", "--gpu-memory-utilization", "5e-12"])),
    ),
    "shared: the user's flags with spaces and a sign": (
        "shared", pod(
            container("a", limits={GPU_: 1}, command=["vllm", "serve", "--gpu-memory-utilization= 0.9"]),
            container("b", limits={GPU_: 1}, command=["trtllm-serve", "--free_gpu_memory_fraction", "+.2 "]),
            container("c", limits={GPU_: 1}, command=["trtllm-serve", "--free_gpu_memory_fraction=+0.3"]),
        ),
    ),
    "shared: the user's flag with a tab": (
        "shared", pod(container(limits={GPU_: 1}, command=["vllm", "serve", "--gpu-memory-utilization=\t0.9"])),
    ),
    "shared: the user's flag with a vertical tab": (
        "shared", pod(container(limits={GPU_: 1}, command=["vllm", "serve", "--gpu-memory-utilization=\v0.9"])),
    ),
    "shared: the user's memory variables with a line break or a tab around them (a YAML block scalar's)": (
        "shared", pod(
            container("a", limits={GPU_: 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.9\n"}]),
            container("b", limits={GPU_: 1}, env=[{"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "\t0.2\r\n"}]),
        ),
    ),
    "shared: the user's memory variable with a vertical tab": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.9\v"}])),
    ),
    # a container's own PyTorch allocator config: PyTorch's hint merged into a plain one, its fraction judged
    "shared-tie: configs merged into (empty, both names), from a ConfigMap, a vLLM's; their fraction keys": (
        "a-team", pod(
            container("a", limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "max_split_size_mb:1"}]),
            container("b", limits={GPU_: 1}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": ""}]),
            container("c", limits={GPU_: 1}, env=[{"name": "PYTORCH_ALLOC_CONF", "valueFrom": {
                "configMapKeyRef": {"name": "m", "key": "k"}
            }}]),
            container("d", limits={GPU_: 1}, env=[
                {"name": "PYTORCH_ALLOC_CONF", "value": "per_process_memory_fraction:0.9,expandable_segments:True"},
                {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:False"},
            ]),
            container("e", limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": (
                "backend:native,per_process_memory_fraction:0.75,per_process_memory_fraction:0.1"
            )}]),
            container("f", limits={GPU_: 1}, command=["vllm", "serve"], env=[
                {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}
            ]),
        ),
    ),
    "shared: the user's PYTORCH_ALLOC_CONF judged, no hint to merge": (
        "shared", pod(
            container("a", limits={GPU_: 1}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": (
                "per_process_memory_fraction:.3"
            )}]),
            container("b", limits={GPU_: 1}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": (
                "per_process_memory_fraction:most"
            )}]),
        ),
    ),
    "mps-fractions: 100m, the fraction's key merged; 50m, the user's key over the fraction": (
        "mps-frac", pod(
            container("a", limits={GPU_: "100m"}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": "backend:native"}]),
            container("b", limits={GPU_: "50m"}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": (
                "per_process_memory_fraction:0.2,expandable_segments:True"
            )}]),
        ),
    ),
    "shared: a MIG slice's replica, the user's variable and flag over the share": (
        "shared", pod(container(limits={MIG_1G + ".shared": 1}, command=["vllm", "serve"], args=[
            "--gpu-memory-utilization", "0.3"
        ], env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.9"}])),
    ),
    # spaces around keys, values and items, a comma at the end: the webhook strips the keys, reads the value
    # stripped, and merges into the config less its last comma (its spaces kept)
    "shared-tie: allocator configs with spaces, a comma at the end, spaces alone": (
        "a-team", pod(
            container("a", limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": (
                " expandable_segments: True , max_split_size_mb :128,"
            )}]),
            container("b", limits={GPU_: "300m"}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": (
                "backend:native , per_process_memory_fraction :  0.35 "
            )}]),
            container("c", limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "   "}]),
            container("d", limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "a:1, "}]),
        ),
    ),
    "shared-tie: allocator configs with a bracketed list, merged into and judged": (
        "a-team", pod(
            container("a", limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": (
                "expandable_segments:True,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
            )}]),
            container("b", limits={GPU_: "300m"}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": (
                "roundup_power2_divisions: [ 256 : 1 , > : 8 ] , per_process_memory_fraction:0.9,"
            )}]),
        ),
    ),
    "shared-tie: an allocator config with a tab": (
        "a-team", pod(container(limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": (
            "expandable_segments:\tTrue"
        )}])),
    ),
    # a name set twice: the hint merged into the last entry of the name, each entry's fraction key judged
    "shared-tie: an allocator config set twice": (
        "a-team", pod(
            container("a", limits={GPU_: 1}, env=[
                {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "a:1"},
                {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "b:2"},
            ]),
            container("b", limits={GPU_: "200m"}, env=[
                {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "per_process_memory_fraction:0.9"},
                {"name": "PYTORCH_ALLOC_CONF", "value": "c:3"},
                {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "b:2"},
            ]),
            container("c", limits={GPU_: 1}, env=[
                {"name": "PYTORCH_ALLOC_CONF", "value": "a:1"},
                {"name": "PYTORCH_ALLOC_CONF", "value": "per_process_memory_fraction:0.6"},
            ]),
        ),
    ),
    "shared: an allocator config's fraction with an exponent": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": (
            "per_process_memory_fraction:9e1"
        )}])),
    ),
    "shared: an allocator config's fraction with a negative exponent": (
        "shared", pod(container(limits={GPU_: 1}, env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": (
            "expandable_segments:True, per_process_memory_fraction: 5e-1 ,"
        )}])),
    ),
    # init containers and sidecars: the pod's effective total as the scheduler counts it
    "whole: init container GPU": ("research", pod(container(), init=(container("setup", limits={GPU_: 1}),))),
    "whole: an init container's peak": (
        "research", pod(container("app", limits={GPU_: 1}), init=(container("setup", limits={GPU_: 2}),)),
    ),
    "default: sidecars run with the app": (
        "default",
        pod(
            container("app", limits={GPU_: 4}),
            init=(
                container("log", limits={GPU_: 3}, restartPolicy="Always"),
                container("setup", limits={GPU_: 8}),
                container("proxy", limits={GPU_: 2}, restartPolicy="Always"),
            ),
        ),
    ),
    "default: an init container above the sidecars and the app": (
        "default",
        pod(
            container("app", limits={GPU_: 1}),
            init=(
                container("log", limits={GPU_: 2}, restartPolicy="Always"),
                container("warm", limits={GPU_: 7}),
                container("also", limits={GPU_: 7}),
            ),
        ),
    ),
    "shared: a sidecar's replica": (
        "shared",
        pod(*(container(f"c{i}", limits={GPU_: 1}) for i in range(8)), init=(
            container("side", requests={GPU_: 1}, restartPolicy="Always"),
        )),
    ),
    # device selection past the device plugin: the variable, an envFrom prefix, device mounts
    "whole: NVIDIA_VISIBLE_DEVICES": (
        "research", pod(container(limits={GPU_: 1}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
    ),
    "mps: warn, NVIDIA_VISIBLE_DEVICES without a GPU, from a ConfigMap, no scheduler": (
        "mps-1", pod(container(env=[{"name": "A", "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
            "configMapKeyRef": {"name": "gpus", "key": "devices"}
        }}])),
    ),
    "whole: NVIDIA_VISIBLE_DEVICES from a ConfigMap, a trusted scheduler, another not": (
        "research",
        pod(
            container("a", limits={GPU_: 1}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
                "configMapKeyRef": {"name": "gpus", "key": "devices"}
            }}]),
            container("b", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": FROM_SECRET}]),
            schedulerName="kai-scheduler",
        ),
    ),
    "shared: envFrom prefixes, over the container maximum first; a ConfigMap's under another scheduler; a "
    "privileged container left alone": (
        "shared",
        pod(
            container("a", limits={SHARED: 2}, envFrom=[
                {"configMapRef": {"name": "x"}}, {"prefix": "APP_", "configMapRef": {"name": "y"}},
                {"prefix": "NVIDIA_", "secretRef": {"name": "z"}}, {"prefix": "NVIDIA_VISIBLE", "secretRef": {
                    "name": "w"
                }},
            ]),
            container("b", envFrom=[{"prefix": "NVIDIA_VISIBLE_DEVICES", "configMapRef": {"name": "v"}}]),
            container("c", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], securityContext={
                "privileged": True
            }),
            container("d", limits={GPU_: 1}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
                "configMapKeyRef": {"name": "gpus", "key": "devices"}
            }}]),
            schedulerName="volcano",
        ),
    ),
    "whole: device mounts, an init container's and the app's; /dev/shm and /devices are no device nodes": (
        "research",
        pod(
            container(limits={GPU_: 1}, volumeMounts=[
                {"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"},
                {"name": "devices", "mountPath": "/devices"},
                {"name": "list", "mountPath": "/var/run/nvidia-container-devices/all"},
                {"name": "nodes", "mountPath": "/host/dev"},
                {"name": "nvidia0", "mountPath": "/dev/nvidia0"},
            ], env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]),
            init=(container("setup", volumeMounts=[{"name": "data", "mountPath": "/run/nvidia-container-devices"}]),),
            volumes=[
                {"name": "data", "emptyDir": {}},
                {"name": "list", "emptyDir": {}},
                {"name": "nodes", "hostPath": {"path": "/dev"}},
                {"name": "nvidia0", "hostPath": {"path": "/dev/nvidia0", "type": "CharDevice"}},
                {"name": "devices", "hostPath": {"path": "/devices"}},
                {"name": "shm", "hostPath": {"path": "/dev/shm"}},
            ],
        ),
    ),
    "audit: NVIDIA_VISIBLE_DEVICES where the policy allows it": (
        "audit", pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], volumeMounts=[
            {"name": "n", "mountPath": "/n"}
        ]), volumes=[{"name": "n", "hostPath": {"path": "/dev//nvidia0"}}]),
    ),
    "whole: a hostPath the node resolves to its device nodes": (
        "research", pod(container(limits={GPU_: 1}, volumeMounts=[{"name": "n", "mountPath": "/n"}]), volumes=[
            {"name": "n", "hostPath": {"path": "/dev/../dev/nvidia0"}}
        ]),
    ),
    "default: a mount path the node resolves to the device list": (
        "default", pod(container(volumeMounts=[{"name": "n", "mountPath": "/run//nvidia-container-devices/0"}])),
    ),
    # node constraints: judged as any other pod where the policy does not steer it; a pin to a kept name said
    "whole: node selector": ("research", pod(container(limits={GPU_: 1}), nodeSelector={"pool": "a"})),
    "whole: nodeName, required and preferred node affinity, over the maximum": (
        "research", pod(container(limits={GPU_: 3}), nodeName="gpu-1", affinity={"nodeAffinity": {REQUIRED: {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB-SHARED"]}]}
            ]
        }, PREFERRED: [{"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]}}),
    ),
    "shared-tie: pinned to a kept name by the node selector, over the pod's maximum": (
        "a-team", pod(*(container(f"c{i}", limits={SHARED: 2}) for i in range(3)), nodeSelector={
            PRODUCT: "Tesla-T4-SHARED", "pool": "a"
        }),
    ),
    "shared: pinned by every term of the required affinity, a replica as written": (
        "shared", pod(container(limits={SHARED: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": PRODUCT, "operator": "In", "values": ["Tesla-T4"]},
                {"key": PRODUCT, "operator": "In", "values": ["Tesla-T4-SHARED", "NVIDIA-L4-SHARED"]},
            ]},
            {"matchExpressions": [
                {"key": "zone", "operator": "Exists"}, {"key": PRODUCT, "operator": "In", "values": ["A10-SHARED"]}
            ]},
        ]}}}),
    ),
    "shared: one term of the required affinity not pinned, one empty": (
        "shared", pod(container(requests={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["Tesla-T4-SHARED"]}]},
            {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["Tesla-T4-SHARED", "Tesla-T4"]}]},
            {},
        ]}}}),
    ),
    "shared: pinned to a kept name, a zero GPU": (
        "shared", pod(container(limits={GPU_: 0}), nodeSelector={PRODUCT: "Tesla-T4-SHARED"}),
    ),
    "mps: warn, pinned by the required affinity": (
        "mps-1", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["A100-SHARED"]}]}
        ]}}}),
    ),
    "shared: a product with a space": (
        "shared", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["T4-SHARED x-SHARED"]}]}
        ]}}}),
    ),
    "mig: a node selector, required and preferred affinity on the slices": (
        "mig", pod(container(limits={GPU_: 1}), nodeSelector={"pool": "a"}, affinity={"nodeAffinity": {
            REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [SLICES_2]}]},
            PREFERRED: [{"weight": 5, "preference": {"matchExpressions": [ZONE]}}],
        }}),
    ),
    "whole-tie: nodeName, never steered": ("team-a", pod(container(limits={GPU_: 1}), nodeName="gpu-1")),
    # steering: the policy's requirements merged into the pod's required node affinity, or its conflicts said
    "whole-tie: one GPU, a node selector of another label": (
        "team-a", pod(container(limits={GPU_: 1}), nodeSelector={"pool": "a"}),
    ),
    "whole-tie: an init container's GPU, pod anti-affinity only": (
        "team-a", pod(container(), init=(container("setup", requests={GPU_: 1}),), affinity={"podAntiAffinity": {
            PREFERRED: [{"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]
        }}),
    ),
    "whole-tie: preferred node affinity only, a node selector the pool admits": (
        "team-a", pod(container(limits={GPU_: 1}), nodeSelector={
            STRATEGY: "none", PRODUCT: "NVIDIA-A100-SXM4-80GB"
        }, affinity={"nodeAffinity": {
            PREFERRED: [{"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]
        }}),
    ),
    "whole-tie: every kind of term: another label's, fields only, empty, 0.1.0's, already steered": (
        "team-a", pod(container(limits={GPU_: 2}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]},
            {},
            {"matchExpressions": [
                {"key": MIG_STRATEGY, "operator": "NotIn", "values": ["single"]},
                {"key": STRATEGY, "operator": "NotIn", "values": ["time-slicing", "mps"]},
            ]},
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "NotIn", "values": ["mps", "time-slicing"]},
                {"key": SLICES, "operator": "DoesNotExist"},
            ]},
        ]}}}),
    ),
    "whole-tie: a node selector on a shared pool, MIG slices and a shared product, over the maximum": (
        "team-a", pod(container(limits={GPU_: 9}), nodeSelector={
            STRATEGY: "mps", SLICES: "2", PRODUCT: "Tesla-T4-SHARED"
        }),
    ),
    "whole-tie: each term on shared or MIG products, or on MIG slices": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["T4-SHARED", "A100-MIG-1g.10gb"]}]},
            {"matchExpressions": [SLICES_2, {"key": PRODUCT, "operator": "In", "values": ["L4-SHARED"]}]},
        ]}}}),
    ),
    "mig-single: its only term on another slice's product": (
        "mig-single", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["A100-MIG-1g.10gb", "A100"]}]}
        ]}}}),
    ),
    "whole-tie: each of its two terms on shared pools": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": STRATEGY, "operator": "In", "values": ["time-slicing", "mps", "mps"]}]},
            {"matchExpressions": [ZONE, {"key": STRATEGY, "operator": "In", "values": ["mps"]}]},
        ]}}}),
    ),
    "whole-tie: two expressions of its own on the sharing strategy": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "Exists"}, {"key": STRATEGY, "operator": "NotIn", "values": ["mps"]}
            ]}
        ]}}}),
    ),
    # a term's own expressions on a label the policy requires: whether some value (or the label's absence)
    # satisfies them all and the policy's requirement (steering._satisfiable)
    "whole-tie: its own Exists and DoesNotExist on the sharing strategy": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "Exists"}, ZONE, {"key": STRATEGY, "operator": "DoesNotExist"}
            ]}
        ]}}}),
    ),
    "whole-tie: an integer strategy of its own, MIG slices above 1 in another term": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": STRATEGY, "operator": "Gt", "values": ["2"]}]},
            {"matchExpressions": [{"key": SLICES, "operator": "Gt", "values": ["1"]}]},
        ]}}}),
    ),
    "whole-tie: a strategy below a bound that is no integer": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": STRATEGY, "operator": "Lt", "values": ["x"]}]},
        ]}}}),
    ),
    "whole-tie: strategies of its own, one with a space": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": STRATEGY, "operator": "In", "values": ["mps", "time slicing"]}]},
            {"matchExpressions": [{"key": STRATEGY, "operator": "In", "values": ["time-slicing", "mps"]}, ZONE]},
        ]}}}),
    ),
    "whole-tie: an In and a NotIn of its own on the sharing strategy": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "In", "values": ["mps", "none"]},
                {"key": STRATEGY, "operator": "NotIn", "values": ["none"]},
            ]}
        ]}}}),
    ),
    "whole-tie: a range of its own on the sharing strategy, an empty one in another term": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "Gt", "values": ["2"]},
                {"key": STRATEGY, "operator": "Lt", "values": ["3"]},
            ]},
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "Gt", "values": ["-1"]},
                {"key": STRATEGY, "operator": "Exists"},
                {"key": STRATEGY, "operator": "Lt", "values": ["+1"]},
            ]},
        ]}}}),
    ),
    "whole-tie: an empty range of its own on the sharing strategy": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "Lt", "values": ["5"]},
                {"key": STRATEGY, "operator": "Gt", "values": ["4"]},
            ]},
        ]}}}),
    ),
    "whole-tie: an In, a NotIn and an Exists of its own that leave a value": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "NotIn", "values": ["x", "mps"]},
                {"key": STRATEGY, "operator": "In", "values": ["mps", "x", "none"]},
                {"key": STRATEGY, "operator": "Exists"},
            ]},
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "In", "values": ["none"]},
                {"key": STRATEGY, "operator": "NotIn", "values": ["none"]},
            ]},
        ]}}}),
    ),
    "whole-tie: an In and a NotIn of its own past the pairs compared": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "In", "values": [f"v{i}" for i in range(40)]},
                {"key": STRATEGY, "operator": "NotIn", "values": [f"v{i}" for i in range(30)]},
            ]},
        ]}}}),
    ),
    "whole-tie: two Ins of its own on the sharing strategy": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "In", "values": ["mps", "none"]},
                {"key": STRATEGY, "operator": "In", "values": ["mps"]},
            ]},
        ]}}}),
    ),
    "whole-tie: a NotIn of its own beside a Gt on the sharing strategy": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": STRATEGY, "operator": "Gt", "values": ["2"]},
                {"key": STRATEGY, "operator": "NotIn", "values": ["3"]},
            ]},
        ]}}}),
    ),
    "whole-tie: a bound with an underscore": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": STRATEGY, "operator": "Gt", "values": ["1_0"]}]}
        ]}}}),
    ),
    "mig-single: slices between 2 and +4 of its own, below 3 in another term": (
        "mig-single", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": SLICES, "operator": "Gt", "values": ["2"]}, {"key": SLICES, "operator": "Lt", "values": ["+4"]}
            ]},
            {"matchExpressions": [{"key": SLICES, "operator": "Lt", "values": ["3"]}]},
        ]}}}),
    ),
    "mig-single: each term's slices or strategy excluded: above 03, or not 3 and below 5": (
        "mig-single", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": SLICES, "operator": "Gt", "values": ["03"]}]},
            {"matchExpressions": [
                {"key": SLICES, "operator": "NotIn", "values": ["3", "4"]},
                {"key": SLICES, "operator": "Exists"},
                {"key": MIG_STRATEGY, "operator": "Lt", "values": ["5"]},
            ]},
        ]}}}),
    ),
    "ack: pools of its own, one that caps memory": (
        "ack", pod(container(limits={GPU_: "0.3"}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": ACK_SCHEDULE, "operator": "In", "values": ["share", "mps"]},
                {"key": ACK_SCHEDULE, "operator": "NotIn", "values": ["cgpu"]},
                {"key": ACK_PLACEMENT, "operator": "Exists"},
            ]}
        ]}}}),
    ),
    "ack: pools of its own that cap nothing": (
        "ack", pod(container(limits={GPU_: "0.3"}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ACK_SCHEDULE, "operator": "NotIn", "values": ["cgpu", "mps", "core_mem"]}]}
        ]}}}),
    ),
    "whole-tie: a NUL in a value of its own": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a\x00b"]}]}
        ]}}}),
    ),
    "whole-tie: its only live term on MIG slices, an empty one beside": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {}, {"matchExpressions": [ZONE, {"key": SLICES, "operator": "In", "values": ["2"]}]}
        ]}}}),
    ),
    "whole-tie: two terms on MIG slices, one admits whole GPUs on its strategy and product": (
        "team-a", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": SLICES, "operator": "Exists"}]},
            {"matchExpressions": [
                {"key": SLICES, "operator": "NotIn", "values": ["2"]},
                {"key": STRATEGY, "operator": "In", "values": ["none"]},
                {"key": PRODUCT, "operator": "In", "values": ["Tesla-T4-SHARED", "Tesla-T4"]},
            ]},
        ]}}}),
    ),
    "mig-single: each of its two terms on another slice or strategy": (
        "mig-single", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": SLICES, "operator": "In", "values": ["2", "7"]}]},
            {"matchExpressions": [
                {"key": SLICES, "operator": "NotIn", "values": ["3"]},
                {"key": MIG_STRATEGY, "operator": "DoesNotExist"},
            ]},
        ]}}}),
    ),
    "mps: one GPU becomes a replica and is steered into a term, its replica count admitted": (
        "mps-1", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {
            "nodeSelectorTerms": [{"matchExpressions": [
                ZONE, {"key": "nvidia.com/gpu.replicas", "operator": "In", "values": ["2", "4"]}
            ]}]
        }}}),
    ),
    "mps: warn, a node selector on another replica count": (
        "mps-1", pod(container(limits={SHARED: 1}), nodeSelector={"nvidia.com/gpu.replicas": "2"}),
    ),
    "mig-single: one slice, a node selector on its product": (
        "mig-single", pod(container(limits={GPU_: 1}), nodeSelector={PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"}),
    ),
    "mig-single: a node selector on the MIG strategy and on another slice's product": (
        "mig-single", pod(container(limits={GPU_: 1}), nodeSelector={
            MIG_STRATEGY: "mixed", PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
        }),
    ),
    "whole: MIG profile": ("research", pod(container(limits={"nvidia.com/mig-1g.10gb": 1}))),
    "whole: a zero beside a GPU": ("research", pod(container(limits={GPU_: 1, SHARED: 0}))),
    "whole: AMD over the container maximum": ("research", pod(container(limits={AMD: 3}))),
    "whole: AMD over the pod maximum": (
        "research", pod(container("a", limits={AMD: 2}), container("b", limits={AMD: 2})),
    ),
    "whole: a zero of AMD's beside a GPU": ("research", pod(container(limits={GPU_: 1, AMD: 0}))),
    "whole: AMD and nvidia.com/gpu each over the container maximum, said by name": (
        "research", pod(container(limits={GPU_: 3, AMD: 3})),
    ),
    "whole: another pool's memory slice, the least name, beside GPUs over the maximum": (
        "research", pod(container(limits={GPU_: 3, AMD: 3, ACK_MEM: 5})),
    ),
    "whole: another pool's replica, not the least name, beside GPUs over the maximum": (
        "research", pod(container(limits={GPU_: 3, AMD: 3, SHARED: 1})),
    ),
    "mig: nvidia.com/gpu over one slice beside AMD over its maximum": ("mig", pod(container(limits={GPU_: 2, AMD: 9}))),
    "shared: two replicas beside AMD over its maximum": ("shared", pod(container(limits={SHARED: 2, AMD: 9}))),
    "shared: a memory-sliced resource": ("shared", pod(container(limits={"nvidia.com/gpumem": 1000}))),
    "mig: Volcano's vGPU number, over the maximum": ("mig", pod(container(limits={"volcano.sh/vgpu-number": 9}))),
    "whole: Intel's millicores": ("research", pod(container(limits={INTEL_MILLICORES: 100}))),
    "whole: Intel's millicores, requests only": (
        "research", pod(container(requests={INTEL_MILLICORES: 100}, limits={"cpu": 1})),
    ),
    "whole: Intel GPUs in requests only, over the maximum": ("research", pod(container(requests={INTEL_GPU: 3}))),
    "whole: resources judged by prefix in requests only, one with a limit": (
        "research",
        pod(
            container("a", requests={INTEL_GPU: 1, DEVICE_CLASS + "fpga.example.com": 2, GPU_: 1}),
            container("b", requests={INTEL_MILLICORES: 200, MIG_1G: 1}, limits={INTEL_MILLICORES: 200}),
            init=(container("setup", requests={INTEL_GPU: 1}, limits={"cpu": 1}),),
        ),
    ),
    "whole: a DeviceClass of no GPU in requests only, fractional": (
        "research", pod(container(requests={DEVICE_CLASS + "fpga.example.com": "500m"})),
    ),
    "whole: a name judged by prefix with a space, in requests only": (
        "research", pod(container(requests={"gpu.intel.com/i 915": 1})),
    ),
    "whole: an Intel GPU over the container maximum": ("research", pod(container(limits={INTEL_GPU: 3}))),
    "whole: Intel GPUs over the pod maximum": (
        "research", pod(container("a", limits={INTEL_GPU: 2}), container("b", limits={INTEL_GPU: 2})),
    ),
    "whole: one container over its maximum holds the Intel GPUs' total": (
        "research", pod(container("a", limits={INTEL_GPU: 4})),
    ),
    "whole: five totals, said in the order of their names": (
        "research", pod(
            container("a", limits={INTEL_XE: 2, MIG_2G: 2, GPU_: 2}),
            container("b", limits={INTEL_GPU: 2, INTEL_XE: 2, AMD: 2}),
            container("c", limits={INTEL_GPU: 2, MIG_2G: 2, GPU_: 2, AMD: 2}),
        ),
    ),
    "whole: Intel GPUs peak in an init container, with the sidecars started before it": (
        "research", pod(container("a", limits={INTEL_GPU: 1}), init=(
            container("s1", limits={INTEL_GPU: 1}, restartPolicy="Always"), container("i1", limits={INTEL_GPU: 2}),
            container("s2", limits={INTEL_GPU: 1}, restartPolicy="Always"), container("i2", limits={INTEL_GPU: 2}),
            container("i3", limits={INTEL_GPU: 2}),
        )),
    ),
    "whole: a DeviceClass of no GPU": ("research", pod(container(limits={DEVICE_CLASS + "fpga.example.com": 1}))),
    "whole: NVIDIA_VISIBLE_DEVICES beside a memory slice (no GPU to validation)": (
        "research", pod(container(limits={"nvidia.com/gpumem": 1024}, env=[{"name": VISIBLE, "value": "all"}])),
    ),
    "whole: NVIDIA_VISIBLE_DEVICES beside an AMD GPU": (
        "research", pod(container(limits={AMD: 1}, env=[{"name": VISIBLE, "value": "all"}])),
    ),
    "shared: the user's memory variable beside a MIG slice's replica": (
        "shared", pod(container(limits={MIG_1G + ".shared": 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.9"}])),
    ),
    "shared: the user's memory variable beside both names": (
        "shared", pod(container(limits={GPU_: 1, SHARED: 0}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.9"}])),
    ),
    "whole: a DeviceClass of no GPU, fractional": (
        "research", pod(container(limits={DEVICE_CLASS + "fpga.example.com": "500m"})),
    ),
    # Names judged by prefix beside names judged by name, each saying a line: validation says them by name
    "whole: Intel's device and nvidia.com/gpu each over the maximum": (
        "research", pod(container(limits={GPU_: 3, INTEL_GPU: 3})),
    ),
    "mig: Intel's device and a slice each over the maximum": ("mig", pod(container(limits={MIG_1G: 2, INTEL_GPU: 9}))),
    "whole: another pool's MIG slice beside Intel's device over the maximum": (
        "research", pod(container(limits={INTEL_GPU: 3, MIG_1G: 1})),
    ),
    "whole: two of Intel's devices over the maximum": ("research", pod(container(limits={INTEL_GPU: 3, INTEL_XE: 3}))),
    "whole: three of other pools' resources beside GPUs over the maximum": (
        "research",
        pod(container(limits={AMD: 3, "aliyun.com/gpu-mem": 4, GPU_: 3, SHARED: 3, "volcano.sh/vgpu-number": 2})),
    ),
    "whole: another pool's MIG slice and replica beside Intel's device and GPUs over the maximum": (
        "research", pod(container(limits={MIG_1G: 1, SHARED: 2, GPU_: 3, INTEL_XE: 3, "nvidia.com/gpumem": 100})),
    ),
    "whole: two of another pool's MIG slices beside GPUs over the maximum": (
        "research", pod(container(limits={MIG_1G: 1, MIG_3G: 2, GPU_: 3})),
    ),
    "whole: three of another pool's MIG slices and a slice's replica over the maximum, the greatest first": (
        "research", pod(container(limits={MIG_3G: 2, MIG_1G + ".shared": 9, MIG_2G: 5})),
    ),
    "whole: a near-whole MIG slice between two of another pool's over the maximum, the greatest first": (
        "research", pod(container(limits={MIG_3G: 9, MIG_2G: "999999900n", MIG_1G + ".shared": 9})),
    ),
    "whole: a near-whole Intel device between two over the maximum, the greatest first": (
        "research", pod(container(limits={INTEL_XE: 4, INTEL_GPU + "_monitoring": "1999999999n", INTEL_GPU: 4})),
    ),
    "whole: two of Intel's devices over the maximum, the greater name first": (
        "research", pod(container(limits={INTEL_XE: 4, INTEL_GPU: 3})),
    ),
    "whole: three of Intel's devices over the maximum beside nvidia.com/gpu over it": (
        "research",
        pod(container(limits={INTEL_XE: 3, GPU_: 3, INTEL_GPU + "_monitoring": 5, INTEL_GPU: 4})),
    ),
    "whole: four of Intel's devices over the maximum": (
        "research",
        pod(container(limits={INTEL_XE: 3, INTEL_GPU + "_monitoring": 3, INTEL_GPU: 3, "gpu.intel.com/a": 3})),
    ),
    "whole: a near-whole AMD GPU beside nvidia.com/gpu over the maximum": (
        "research", pod(container(limits={AMD: "1999999999n", GPU_: 3})),
    ),
    "whole: a near-whole GPU beside AMD's over the maximum": (
        "research", pod(container(limits={AMD: 3, GPU_: "999999900n"})),
    ),
    "whole: a near-whole GPU beside a near-whole AMD GPU": (
        "research", pod(container(limits={AMD: "999999900n", GPU_: "1999999999n"})),
    ),
    "whole: a near-whole shared replica beside AMD's over the maximum": (
        "research", pod(container(limits={SHARED: "999999900n", AMD: 3})),
    ),
    "whole: a near-whole slice of another pool beside AMD's over the maximum": (
        "research", pod(container(limits={MIG_1G: "999999900n", AMD: 3})),
    ),
    "whole: two near-whole slices of another pool": (
        "research", pod(container(limits={MIG_1G: "999999900n", MIG_3G: "1999999999n"})),
    ),
    "whole: a near-whole Intel device beside another over the maximum": (
        "research", pod(container(limits={INTEL_XE: 4, INTEL_GPU: "999999900n"})),
    ),
    "whole: two zeros beside a GPU": ("research", pod(container(limits={GPU_: 1, SHARED: 0, MIG_1G: 0}))),
    "whole: three zeros beside a GPU, two judged by prefix": (
        "research", pod(container(limits={GPU_: 1, INTEL_XE: 0, MIG_3G: 0, AMD: 0})),
    ),
    "whole: four zeros beside a GPU": (
        "research", pod(container(limits={GPU_: 1, SHARED: 0, MIG_1G: 0, MIG_2G: 0, AMD: 0})),
    ),
    "whole: seven zeros beside a GPU, three of MIG slices and two of Intel's": (
        "research",
        pod(container(limits={MIG_3G: 0, INTEL_XE: 0, GPU_: 1, SHARED: 0, MIG_1G: 0, INTEL_GPU: 0, MIG_2G: 0, AMD: 0})),
    ),
    "whole: four zeros of MIG slices beside a GPU": (
        "research", pod(container(limits={GPU_: 1, MIG_1G: 0, MIG_2G: 0, MIG_3G: 0, "nvidia.com/mig-7g.80gb": 0})),
    ),
    # NVIDIA's DeviceClasses asked as extended resources (DRA): their maxima by name, unshared under sharing
    "whole: NVIDIA's GPU DeviceClass over the maximum": ("research", pod(container(limits={DC_GPU: 3}))),
    "whole: NVIDIA's GPU DeviceClass in two containers over the pod's maximum": (
        "research", pod(container("a", limits={DC_GPU: 2}), container("b", limits={DC_GPU: 2})),
    ),
    "whole: NVIDIA's GPU DeviceClass beside AMD's, both over the maximum": (
        "research", pod(container(limits={DC_GPU: 3, AMD: 3})),
    ),
    "shared: NVIDIA's GPU DeviceClass, unshared under time-slicing": ("shared", pod(container(limits={DC_GPU: 1}))),
    "shared-tie: NVIDIA's GPU DeviceClass unshared and over the maximum, in requests only": (
        "a-team", pod(container(requests={DC_GPU: 3})),
    ),
    "shared: a zero of NVIDIA's GPU DeviceClass beside a GPU": (
        "shared", pod(container(limits={GPU_: 1, DC_GPU: 0})),
    ),
    "mig: two devices of NVIDIA's MIG DeviceClass, more than one slice": (
        "mig", pod(container(limits={DC_MIG: 2})),
    ),
    "whole: NVIDIA's GPU DeviceClass beside nvidia.com/gpu in another container": (
        "research", pod(container("a", limits={GPU_: 1}), container("b", limits={DC_GPU: 1})),
    ),
    "whole: nvidia.com/gpu and NVIDIA's GPU DeviceClass in one container, over its maximum together": (
        "research", pod(container(limits={GPU_: 1, DC_GPU: 2})),
    ),
    "whole: nvidia.com/gpu and NVIDIA's GPU DeviceClass in two containers, over the pod's maximum together": (
        "research", pod(container("a", limits={GPU_: 2}), container("b", limits={DC_GPU: 2})),
    ),
    "whole: NVIDIA's GPU DeviceClass in a sidecar beside nvidia.com/gpu, over the pod's maximum together": (
        "research",
        pod(
            container("a", limits={GPU_: 2}),
            container("b", limits={GPU_: 1}),
            init=(container("proxy", limits={DC_GPU: 1}, restartPolicy="Always"),),
        ),
    ),
    "whole: NVIDIA's GPU DeviceClass beside a near-whole nvidia.com/gpu": (
        "research", pod(container("a", limits={GPU_: "999999900n"}), container("b", limits={DC_GPU: 1})),
    ),
    "whole: NVIDIA's GPU DeviceClass of 1500m": ("research", pod(container(limits={DC_GPU: "1500m"}))),
    "hami: NVIDIA's GPU DeviceClass": ("hami-a", pod(container(limits={DC_GPU: 1}))),
    "hami: ACK's and Volcano's memory beside its own, over one GPU's memory": (
        "hami-a",
        pod(container(limits={
            GPU_: 1, "nvidia.com/gpumem": 90000, "aliyun.com/gpu-mem": 4, "volcano.sh/vgpu-memory": 1000,
        })),
    ),
    "ack-plain: HAMi's memory beside its own": (
        "ack-plain", pod(container(limits={"aliyun.com/gpu-mem": 10, "nvidia.com/gpumem": 1000})),
    ),
    "hami: NVIDIA's GPU DeviceClass over the pod's maximum": (
        "hami-a", pod(container("a", limits={DC_GPU: 3}), container("b", limits={DC_GPU: 3})),
    ),
    "hami: NVIDIA's GPU DeviceClass over the container's maximum": ("hami-a", pod(container(limits={DC_GPU: 9}))),
    "hami: NVIDIA's MIG DeviceClass in a sidecar, over the pod's maximum with the app's": (
        "hami-a",
        pod(container("a", limits={DC_MIG: 4}), init=(container("proxy", limits={DC_MIG: 1}, restartPolicy="Always"),)),
    ),
    "hami: NVIDIA's GPU DeviceClass beside a vGPU, over the pod's maximum together": (
        "hami-a", pod(container("a", limits={DC_GPU: 3}), container("b", limits={GPU_: 2})),
    ),
    "hami: NVIDIA's GPU DeviceClass beside memory, each over the pod's maximum": (
        "hami-a",
        pod(container("a", limits={DC_GPU: 5}), *(container(f"m{i}", limits={GPU_: "0.9"}) for i in range(5))),
    ),
    "volcano: NVIDIA's GPU DeviceClass over both maxima": (
        "vgpu", pod(container("a", limits={DC_GPU: 3}), container("b", limits={DC_GPU: 2})),
    ),
    "ack: NVIDIA's GPU DeviceClass beside a share, over the pod's maximum": (
        "ack-plain", pod(container("a", limits={DC_GPU: 4}), container("b", limits={GPU_: "0.5"}),
                         container("c", limits={DC_GPU: 1})),
    ),
    "whole: a zero copied from requests, after a zero of a greater name": (
        "research", pod(container(requests={AMD: 0}, limits={GPU_: 1, SHARED: 0})),
    ),
    "whole: a zero copied from requests, after a zero of a lesser name": (
        "research", pod(container(requests={SHARED: 0}, limits={AMD: 0, GPU_: 1})),
    ),
    "mig: two zeros of other profiles beside its slice": (
        "mig", pod(container(limits={MIG_1G: 1, MIG_3G: 0, MIG_2G: 0})),
    ),
    "mig: nvidia.com/gpu renamed to the slice beside three zeros": (
        "mig", pod(container(limits={GPU_: 1, AMD: 0, SHARED: 0, INTEL_GPU: 0})),
    ),
    "shared: both names, a replica held": ("shared", pod(container(limits={GPU_: 1, SHARED: 1}))),
    "shared: both names, over the maximum": ("shared", pod(container(limits={GPU_: 2, SHARED: 0}))),
    "mig: a zero beside two slices": ("mig", pod(container(limits={GPU_: 0, MIG_1G: 1, MIG_2G: 1}))),
    "mig: another pool's replica beside nvidia.com/gpu left unmapped": (
        "mig", pod(container(limits={GPU_: 1, MIG_1G: 0, SHARED: 1})),
    ),
    "mig-frac: a fraction beside its slice at 0": (
        "mig-frac", pod(container(limits={GPU_: "500m", "nvidia.com/mig-3g.40gb": 0})),
    ),
    # memory slices (HAMi, Volcano's vGPU): nvidia.com/gpu converted, the backend's lines
    "hami: 250m becomes a vGPU of its memory and cores, the pod annotated with its placement": (
        "hami-a", pod(container(limits={GPU_: "250m"})),
    ),
    "hami: two whole GPUs, one annotation of the pod's own kept": (
        "hami-a", with_annotations(pod(container(requests={GPU_: 2})), {HAMI_NODE: "binpack", HAMI_GPU: "spread"}),
    ),
    "hami: 5m, less than one percent of the compute": ("hami-a", pod(container(limits={GPU_: "5m"}))),
    "hami: 0.9999999 beside its own memory, whole to the API server": (
        "hami-a", pod(container(limits={GPU_: "0.9999999", HAMI_MEM: 100})),
    ),
    "hami: its own resources, over one GPU's memory and 100 percent of its compute": (
        "hami-a", pod(container(limits={GPU_: 1, HAMI_MEM: 130000, HAMI_CORES: 150})),
    ),
    "hami: nine GPUs, over the container maximum, left as written": ("hami-a", pod(container(limits={GPU_: 9}))),
    "hami: over the pod maximum, a sidecar running beside": (
        "hami-a", pod(container("a", limits={GPU_: 3}), container("b", limits={GPU_: "0.75"}), init=(
            container("s", limits={GPU_: "0.3"}, restartPolicy="Always"), container("i", limits={GPU_: 3}),
        )),
    ),
    "hami: a Volcano vGPU's memory is another pool's": ("hami-a", pod(container(limits={VOLCANO_MEM: 1000}))),
    "hami: a Volcano vGPU beside its own": ("hami-a", pod(container(limits={GPU_: 1, VOLCANO_MEM: 1000}))),
    "volcano: 0.25 becomes a vGPU in units of 10 MiB": ("vgpu", pod(container(requests={GPU_: "0.25"}))),
    "volcano: two whole GPUs, three over the container maximum": (
        "vgpu", pod(container("a", limits={GPU_: 2}), container("b", limits={GPU_: 3})),
    ),
    "volcano: its memory alone, more than one GPU's": ("vgpu", pod(container(limits={VOLCANO_MEM: 9000}))),
    "volcano: its memory beside whole GPUs, over the container maximum": (
        "vgpu", pod(container(limits={GPU_: 2, VOLCANO_MEM: 4000})),
    ),
    "volcano: a vGPU count beside nvidia.com/gpu": ("vgpu", pod(container(limits={GPU_: 1, VOLCANO_NUM: 1}))),
    "ack: the GPUs' count requested in a container, without a limit": (
        "ack", pod(container(requests={ACK_COUNT: "2", ACK_MEM: "4"})),
    ),
    "volcano: a vGPU count and nvidia.com/gpu, each over the maximum": (
        "vgpu", pod(container(limits={VOLCANO_NUM: 9, GPU_: 9})),
    ),
    "ack-plain: AMD's GPUs over the maximum beside GiB past the container's maximum": (
        "ack-plain", pod(container(limits={AMD: 100, ACK_MEM: 4000})),
    ),
    "ack: NVIDIA's GPU DeviceClass over the maximum beside GiB past the container's maximum": (
        "ack", pod(container(limits={DC_GPU: 9, ACK_MEM: 4000})),
    ),
    "hami: another pool's MIG slice over the maximum beside memory past the container's maximum": (
        "hami-a", pod(container(limits={MIG_1G: 9, HAMI_MEM: 80000, GPU_: 9})),
    ),
    "volcano: HAMi's cores are another pool's, a percentage over 100": (
        "vgpu", pod(container("a", limits={HAMI_CORES: 50}), container("b", limits={VOLCANO_PERCENT: 101})),
    ),
    "volcano: a million vGPUs": ("vgpu", pod(container(limits={VOLCANO_NUM: 10**6}))),
    # the most the compiled integers hold (memshares.most_count), in three containers, and one more
    "volcano: the most vGPUs, three containers": (
        "vgpu", pod(*(container(f"c{i}", limits={VOLCANO_NUM: VGPU_MOST - 1}) for i in range(3))),
    ),
    "volcano: one vGPU more than the compiled integers hold": ("vgpu", pod(container(limits={VOLCANO_NUM: VGPU_MOST}))),
    "ack-plain: the most GiB the compiled integers hold": ("ack-plain", pod(container(limits={ACK_MEM: ACK_MOST - 1}))),
    "ack-plain: one GiB more": ("ack-plain", pod(container(limits={ACK_MEM: ACK_MOST}))),
    "ack: 0.3 of an A10 becomes 7 GiB, steered to the spread pools that cap memory": (
        "ack", pod(container(limits={GPU_: "0.3"}), nodeSelector={"zone": "a"}),
    ),
    "ack: two containers' memory within one GPU's, an init container's too": (
        "ack", pod(container("a", limits={GPU_: "0.3"}), container("b", limits={ACK_MEM: 10}), init=(
            container("i", limits={ACK_MEM: 20}),
        )),
    ),
    "ack: its memory over one GPU's": ("ack", pod(container(limits={ACK_MEM: 30}))),
    "ack: a pool's label of another value in the node selector": (
        "ack", pod(container(limits={GPU_: "0.5"}), nodeSelector={"ack.node.gpu.schedule": "share"}),
    ),
    "ack: two containers' memory over one GPU's": (
        "ack", pod(container("a", limits={ACK_MEM: 16}), container("b", limits={ACK_MEM: 16})),
    ),
    "ack: whole GPUs, steered to the exclusive pool": ("ack", pod(container(limits={GPU_: 2}))),
    "ack: aliyun.com/gpu-count in a container's resources": (
        "ack", pod(container(limits={ACK_MEM: 4, "aliyun.com/gpu-count": 2})),
    ),
    "ack: aliyun.com/gpu-count in a container of no GPU, another holding one": (
        "ack", pod(container("a", limits={GPU_: "0.5"}), init=(container("i", limits={"aliyun.com/gpu-count": 1}),)),
    ),
    "ack: aliyun.com/gpu-count alone, no GPU in the pod": (
        "ack", pod(container(limits={"aliyun.com/gpu-count": 1})),
    ),
    "ack: the label aliyun.com/gpu-count no number": ("ack", spread(pod(container(limits={GPU_: "0.5"})), "two")),
    "ack: the label 0": ("ack", spread(pod(container(limits={ACK_MEM: 2})), "0")),
    "ack: a long label, its first 20 characters said": (
        "ack", spread(pod(container(limits={ACK_MEM: 3})), "abcdefghijklmnopqrstuvwxyz-0123"),
    ),
    "ack: the label on a pod of no GPU but its device path's variable": (
        "ack", spread(pod(container(env=[{"name": VISIBLE, "value": "all"}])), "x"),
    ),
    "ack: a share spread over two GPUs, steered": ("ack", spread(pod(container(limits={ACK_MEM: 30})), "2")),
    "ack: a share spread over two GPUs, a term of the pod's own": (
        "ack", spread(pod(container(limits={ACK_MEM: 30}), affinity={"nodeAffinity": {REQUIRED: {
            "nodeSelectorTerms": [{"matchExpressions": [ZONE]}],
        }}}), "2"),
    ),
    "ack: a share spread over two GPUs, the pool of allocated compute in the node selector": (
        "ack", spread(pod(container(limits={ACK_MEM: 20}), nodeSelector={"ack.node.gpu.schedule": "core_mem"}), "2"),
    ),
    "ack: the pool of allocated compute selected, the label no number": (
        "ack", spread(pod(container(limits={ACK_MEM: 20}), nodeSelector={"ack.node.gpu.schedule": "core_mem"}), "2x"),
    ),
    "ack: whole GPUs, the shares' pool in the node selector": (
        "ack", pod(container(limits={GPU_: 1}), nodeSelector={"ack.node.gpu.schedule": "cgpu"}),
    ),
    "ack: whole GPUs, a term of the pod's own in the shares' pool": (
        "ack", pod(container(limits={GPU_: 1}), affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "ack.node.gpu.schedule", "operator": "In", "values": ["mps"]}]},
        ]}}}),
    ),
    "ack: whole GPUs spread by the label, on a named node": (
        "ack", spread(pod(container(limits={GPU_: 2}), nodeName="n1"), "2"),
    ),
    "ack: a share and whole GPUs in one container": ("ack", pod(container(limits={ACK_MEM: 4, GPU_: 1}))),
    "ack: a share in an init container, whole GPUs in another container": (
        "ack", pod(container("a", limits={GPU_: 1}), container("b", limits={GPU_: 2}), init=(
            container("i", limits={ACK_MEM: 4}),
        )),
    ),
    "ack: three containers' memory over one GPU's, no even spread within the maximum": (
        "ack", pod(
            container("a", limits={ACK_MEM: 13}), container("b", limits={ACK_MEM: 13}),
            container("c", limits={ACK_MEM: 11}),
        ),
    ),
    "ack-plain: 30 GiB over the label's two GPUs": ("ack-plain", spread(pod(container(limits={ACK_MEM: 30})), "2")),
    "ack-plain: 40 GiB over two GPUs, more than their memory": (
        "ack-plain", spread(pod(container(limits={ACK_MEM: 40})), "02"),
    ),
    "ack-plain: the label over the per-pod maximum, the memory no multiple of it": (
        "ack-plain", spread(pod(container("a", limits={ACK_MEM: 7}), container("b", limits={GPU_: "0.4"})), "5"),
    ),
    "ack-plain: two containers' memory over their two GPUs'": (
        "ack-plain", spread(pod(container("a", limits={ACK_MEM: 20}), container("b", limits={ACK_MEM: 20})), "2"),
    ),
    "ack-plain: whole GPUs beside the label, not steered": (
        "ack-plain", spread(pod(container(limits={GPU_: 2})), "3"),
    ),
    "excluded namespace": ("kube-system", pod(container(limits={GPU_: 99}))),
}  # fmt: skip

NOT_COVERED = {
    "mig: four MIG names judged by prefix in one container": gaps.BOTH_NAMES,
    "whole: four of Intel's devices over the maximum": gaps.BOTH_NAMES,
    "whole: a DeviceClass of no GPU, fractional": gaps.OTHER_RESOURCES,
    "whole: NVIDIA's GPU DeviceClass beside a near-whole nvidia.com/gpu": gaps.SAME_GPUS,
    "whole: NVIDIA's GPU DeviceClass of 1500m": gaps.OTHER_RESOURCES,
    "whole: a DeviceClass of no GPU in requests only, fractional": gaps.OTHER_RESOURCES,
    "whole: a name judged by prefix with a space, in requests only": gaps.PREFIXED_LIMITS,
    "whole: four zeros of MIG slices beside a GPU": gaps.BOTH_NAMES,
    "mig-frac: a fraction beside its slice at 0": gaps.BUILT_IN_REFUSAL,
    "whole: a ten-millionth below one GPU": gaps.NEAR_WHOLE,
    "whole: two containers of five quintillion GPUs": gaps.HUGE_COUNTS,
    "shared: a trillion GPUs": gaps.HUGE_COUNTS,
    "hami: 999999900n beside its own memory": gaps.NEAR_WHOLE,
    "whole: 500m": gaps.BUILT_IN_REFUSAL,
    "shared: 500m under fractional reject": gaps.BUILT_IN_REFUSAL,
    "fractions: request differs from limit": gaps.BUILT_IN_REFUSAL,
    "fractions: a fractional shared replica": gaps.BUILT_IN_REFUSAL,
    "whole: request differs from limit": gaps.BUILT_IN_REFUSAL,
    "whole: negative": gaps.BUILT_IN_REFUSAL,
    "mig: 500m under fractional reject": gaps.BUILT_IN_REFUSAL,
    "mig-single: 0.6 more than the slice": gaps.BUILT_IN_REFUSAL,
    "shared: the user's memory variable with a space before its percent sign": gaps.USER_VALUES,
    "fractions: 100m, the user's memory variable longer than 12 characters": gaps.USER_VALUES,
    "shared: the user's memory variable with an exponent past the digit budget": gaps.USER_VALUES,
    "mps-frac: 100m, CuPy's byte count with a negative exponent": gaps.USER_VALUES,
    "shared-tie: an allocator config with a tab": gaps.USER_CONFIG,
    "shared: the user's flag with an exponent past the digit budget": gaps.ENGINE_FLAGS,
    "shared: the user's flag with a vertical tab": gaps.ENGINE_FLAGS,
    "shared: the user's memory variable with a vertical tab": gaps.USER_VALUES,
    "whole: a hostPath the node resolves to its device nodes": gaps.DEVICE_PATHS,
    "default: a mount path the node resolves to the device list": gaps.DEVICE_PATHS,
    "whole-tie: two Ins of its own on the sharing strategy": gaps.STEERED_LABELS,
    "whole-tie: an In and a NotIn of its own past the pairs compared": gaps.STEERED_LABELS,
    "whole-tie: a bound with an underscore": gaps.STEERED_LABELS,
    "whole-tie: a NotIn of its own beside a Gt on the sharing strategy": gaps.STEERED_LABELS,
    "whole-tie: a NUL in a value of its own": gaps.NUL_VALUES,
    "shared: a product with a space": gaps.SPACED_PRODUCT,
    "hami: 5m, less than one percent of the compute": gaps.BUILT_IN_REFUSAL,
    "hami: 0.9999999 beside its own memory, whole to the API server": gaps.NEAR_WHOLE,
    "volcano: one vGPU more than the compiled integers hold": gaps.MEMORY_COUNTS,
    "ack-plain: one GiB more": gaps.MEMORY_COUNTS,
    "ack: the label on a pod of no GPU but its device path's variable": gaps.ACK_PODS,
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_corpus_agrees_with_the_webhook(case: str, kind: str) -> None:
    """Every case as a Pod, and its spec as a Deployment's, a CronJob's and a PodTemplate's template:
    the same result, or the same reason for none."""
    namespace, obj = CASES[case]
    assert compare(namespace, as_kind(kind, obj)) == NOT_COVERED.get(case)


def test_the_corpus_counts() -> None:
    """Compared in full (the excluded namespace among them, left alone by both), and not compared, by reason;
    each case in every kind."""
    covered = [case for case in CASES if case not in NOT_COVERED]
    assert (len(covered), len(NOT_COVERED), len(KINDS)) == (339, 42, 4)


@pytest.mark.parametrize("size", range(gaps.MOST_ZEROS + 1))
def test_the_zeros_are_put_in_the_order_of_their_names(size: int) -> None:
    """A CEL map's keys come in any order: the zero rule's comparisons (maxima.in_order) put every arrangement
    of up to MOST_ZEROS names in the webhook's order (a name before a longer one it begins)."""
    names = sorted((GPU_, SHARED, MIG_1G)[:size])
    for arrangement in permutations(names):
        assert kube_cel.evaluate(maxima.in_order("z"), {"z": list(arrangement)}) == names


def test_the_zeros_of_names_and_prefixes_are_put_in_the_order_of_their_names() -> None:
    """The names judged by name in a list written in order, each prefix's names at the prefix's place
    (maxima.zeros_in_order): whatever order the container's limits come in, the zeros come in the webhook's."""
    zeros = sorted((MIG_3G, INTEL_XE, SHARED, MIG_1G, INTEL_GPU, MIG_2G, AMD))
    names = [*zeros, GPU_]
    random = Random(7)
    for _ in range(20):
        random.shuffle(names)
        limits = {name: "1" if name == GPU_ else "0" for name in names}
        assert kube_cel.evaluate(maxima.zeros_in_order(()), {"c": {"resources": {"limits": limits}}}) == zeros


def test_intels_devices_over_the_maximum_are_said_in_the_order_of_their_names() -> None:
    """Up to MOST_ZEROS of Intel's devices over the maximum in one container: whatever order the container's
    limits come in, the rule's lines come in the webhook's, the order of their names (maxima.intel_rule)."""
    rule = maxima.intel_rule(Rules.of(POLICIES.for_namespace("research")))
    devices = [INTEL_GPU, INTEL_GPU + "_monitoring", INTEL_XE]
    for arrangement in permutations(devices):
        limits = {name: "3" for name in arrangement} | {GPU_: "1"}
        lines = kube_cel.evaluate(rule.sentence, {"c": {"name": "app", "resources": {"limits": limits}}})
        assert [line.split(" ")[0] for line in lines] == devices


def test_mig_names_judged_by_prefix_are_said_in_the_order_of_their_names() -> None:
    """Up to MOST_ZEROS MIG names judged by prefix in one container, each with another pool's line and one over the
    maximum: whatever order the container's limits come in, the rule says them name by name in the order of the
    names, each name's two lines as validation says them (maxima.mig_rule)."""
    rule = maxima.mig_rule(Rules.of(POLICIES.for_namespace("research")))
    names = sorted([MIG_1G, MIG_2G + ".shared", MIG_3G])
    for arrangement in permutations(names):
        limits = {name: "9" for name in arrangement}
        lines = kube_cel.evaluate(rule.sentence, {"c": {"name": "app", "resources": {"limits": limits}}})
        assert [line.split(" ")[0] for line in lines] == [name for name in names for _ in range(2)]
        assert ["exceeds the per-container maximum" in line for line in lines] == [False, True] * len(names)


@pytest.mark.parametrize(
    "body",
    [{"command": "vllm serve"}, {"args": None}, {"args": ["serve", 1]}, {"command": ["vllm"], "image": 5}],
    ids=["a string", "null", "a number", "an image"],
)
def test_a_command_line_that_is_no_list_of_strings_is_the_webhooks(body: dict[str, Any]) -> None:
    """The API server decodes none of these; an object given as such is left to the webhook, which reads it as no
    engine (the CEL would stop on it)."""
    obj = decoded(pod(container(limits={GPU_: 1}, **body)))
    assert outside(obj, POLICIES.for_namespace("shared")) == gaps.COMMAND_LINES


def test_a_denial_reads_as_the_webhooks() -> None:
    native = admit(NATIVE, "research", decoded(pod(container("a", limits={GPU_: 3}), container("b", limits={GPU_: 1}))))
    assert native.verdict == "deny"
    assert native.message == (
        'container "a": nvidia.com/gpu "3" exceeds the per-container maximum of 2 (policy "whole"); request at most 2'
        ' | pod: nvidia.com/gpu effective total 4 (containers running together: "a"=3, "b"=1) exceeds the per-pod '
        'maximum of 3 (policy "whole"); request fewer or split the pod'
    )


def test_a_denial_past_what_the_api_server_shows_says_how_to_read_it() -> None:
    """The API server shows a message of at most 5 KiB: past it, the validation's static message."""
    many = decoded(pod(*(container(f"container-{i}", limits={SHARED: 9}) for i in range(16))))
    decision = evaluate(many, "default", POLICIES)
    assert len(SEPARATOR.join(decision.violations).encode()) > MESSAGE_LIMIT
    native = admit(NATIVE, "default", many)
    assert (native.verdict, native.message) == ("deny", too_long(POLICIES.for_namespace("default")))
    assert native.message.startswith('denied by GPU policy "built-in-default"')


def test_lines_of_one_container_are_said_together() -> None:
    native = admit(NATIVE, "default", decoded(pod(container("a", limits={SHARED: 9}))))
    assert native.message == (
        'container "a": nvidia.com/gpu.shared "9" is a shared GPU, but policy "built-in-default" gives this namespace '
        "whole GPUs (mode exclusive); request nvidia.com/gpu instead | "
        'container "a": nvidia.com/gpu.shared "9" exceeds the per-container maximum of 8 (policy "built-in-default"); '
        "request at most 8"
    )  # and no pod line: one container over its own maximum says it


def test_a_replica_is_renamed_and_told_its_share() -> None:
    native = admit(NATIVE, "shared", decoded(pod(container(requests={GPU_: 1}))))
    (body,) = native.obj["spec"]["containers"]
    assert body["resources"] == {"requests": {SHARED: "1"}, "limits": {SHARED: "1"}}
    assert {e["name"]: e["value"] for e in body["env"]}["GPU_MEMORY_FRACTION"] == "0.25"


def test_the_ignore_label_leaves_a_namespace_alone() -> None:
    obj = decoded(pod(container(limits={GPU_: 99})))
    assert admit(NATIVE, "research", obj, {"gpu-admission.io/ignore": "true"}).obj == obj


TOKENS = (
    *sorted(engines.LEADS), "/usr/bin/vllm", "python3.11", "/opt/python3.12", "python2", "pythonx", "python/",
    "a\n/python3", "serve", *sorted(engines.TRTLLM_OTHER_COMMANDS), *engines.MODULES, "-m", "-u", "-X", "dev",
    "serve.py", "--gpu-memory-utilization=0.5", "-", "sh", "-c",
)  # fmt: skip
IMAGES = (
    "vllm/vllm-openai:v0.9.1", "vllm-openai", "r.io:5000/vllm/vllm-openai@sha256:ab", "vllm-openai-x",
    "x/vllm-openai/y:1", "vllm-openai:1@x/y", "a@b/vllm-openai", "nginx",
)  # fmt: skip


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    command=st.one_of(st.none(), st.lists(st.sampled_from(TOKENS), max_size=4)),
    args=st.one_of(st.none(), st.lists(st.sampled_from(TOKENS), max_size=4)),
    image=st.one_of(st.none(), st.sampled_from(IMAGES)),
)
def test_the_engine_is_told_as_the_webhook_tells_it(
    command: list[str] | None, args: list[str] | None, image: str | None
) -> None:
    """commandline.engine_of, on any command line of the leads, modules and options engines.py reads."""
    body = {key: value for key, value in (("command", command), ("args", args), ("image", image)) if value is not None}
    found = engines.detect(body)
    assert kube_cel.evaluate(commandline.engine_of(), {"c": body}) == (found.name if found else "")


FLAG_VALUES = (
    "0.9", ".2", "1.", "0.25", "0.2500001", "007.50", "0.000000001", "0.0000000001", "9e-1", "25E-2", "5e-12",
    " 0.2", "1/8", "-0.5", "+.1", "x", "", "0.9=1",
)  # fmt: skip
FLAG_TOKENS = (
    *(spelling for engine in engines.ENGINES for spelling in engine.spellings),
    *(f"{spelling}={value}" for spelling in ("--gpu-memory-utilization", "--free_gpu_memory_fraction")
      for value in FLAG_VALUES),
    *FLAG_VALUES, "m", "--port",
)  # fmt: skip
FLAG_LEADS = (
    (["vllm", "serve"], engines.VLLM), (["trtllm-serve"], engines.TRTLLM),
    (["python3", "-m", "sglang.launch_server"], engines.SGLANG), (["/bin/vllm", "bench"], engines.VLLM),
)  # fmt: skip


@st.composite
def flag_lines(draw: st.DrawFn) -> list[str]:
    """An engine's command line (one lead is no engine) with its flag in a spelling, its value the next word or
    after `=`, among other tokens (another engine's flag, values alone)."""
    lead, engine = draw(st.sampled_from(FLAG_LEADS))
    words = list(lead)
    for _ in range(draw(st.integers(1, 3))):
        spelling, value = draw(st.sampled_from(engine.spellings)), draw(st.sampled_from(FLAG_VALUES))
        form = draw(st.sampled_from(("next", "=", "other")))
        other = draw(st.sampled_from(FLAG_TOKENS))
        words += [spelling, value] if form == "next" else [f"{spelling}={value}"] if form == "=" else [other]
    return words


@settings(max_examples=50, deadline=None, derandomize=True)
@given(
    argv=flag_lines(),
    split=st.integers(0, 6),
    recorded=st.sampled_from((None, "0.1", "0.05", "0.25")),
)
def test_an_engines_own_flag_is_read_as_the_webhook_reads_it(argv: list[str], split: int, recorded: str | None) -> None:
    """engineflags.UserFlags' CEL on a container holding a replica (under `fractions`, at a recorded fraction
    as mutation writes it, or none): the webhook's line for its flag, or none; or, where the engine reads a number
    the CEL does not (engines.find), the gap that leaves the container to the webhook."""
    from webhook.admission.native import engineflags
    from webhook.admission.phases.mutate import RECORDED_FRACTION
    from webhook.admission.phases.validate import validate

    policy = POLICIES.for_namespace("frac")
    env = [{"name": RECORDED_FRACTION, "value": recorded}] if recorded else []
    body = container(limits={SHARED: "1"}, command=argv[:split], args=argv[split:], env=env)
    engine = engines.detect(body)
    found = engines.find(body, engine) if engine else None
    if found is not None and found.value is not None and not userenv.plain(found.text or ""):
        assert engineflags.outside(body, policy) == gaps.ENGINE_FLAGS
        return
    (rule,) = engineflags.UserFlags().container_rules(policy)
    said = kube_cel.evaluate(rule.sentence, {"c": body}) if kube_cel.evaluate(rule.condition, {"c": body}) else []
    expected = [str(v) for v in validate(decoded(pod(body)), policy)]
    assert [f'container "app": {line}' for line in said] == expected


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=st.sampled_from(("shared", "mps-1", "frac", "a-team", "capped")),
    gpu=st.sampled_from((1, "100m", "300m")),
    argv=flag_lines(),
    split=st.integers(0, 6),
)
def test_a_pod_with_an_engines_own_flag_agrees_with_the_webhook(
    namespace: str, gpu: int | str, argv: list[str], split: int
) -> None:
    """The whole pod through both: the same verdict and lines, or the flag's gap (a fraction where the policy does
    not convert it: the API server's refusal)."""
    found = compare(namespace, pod(container(limits={GPU_: gpu}, command=argv[:split], args=argv[split:])))
    assert found in (None, gaps.BUILT_IN_REFUSAL, gaps.ENGINE_FLAGS)


CONF_ITEMS = (
    "expandable_segments:True", "max_split_size_mb:128", "backend:native", "k:", "per_process_memory_fraction:0.9",
    "roundup_power2_divisions:[256:1,512:2,>:8]", "roundup_power2_divisions:[ > : 4 ]",
    "per_process_memory_fraction:.25", "per_process_memory_fraction:0.05", "per_process_memory_fraction:1.",
    "per_process_memory_fraction:x", "per_process_memory_fraction_x:0.9", "per_process_memory_fraction:9e1",
    "per_process_memory_fraction:2.5E-1",
)  # fmt: skip
# Not read (a fraction key's number in another form: the webhook's) or not plain (a tab, more spaces than a plain
# config holds, brackets, an empty item: the webhook's)
OTHER_CONF_ITEMS = (
    "per_process_memory_fraction:5e-12", "\tbackend:native", "per_process_memory_fraction:          0.9",
    "roundup_power2_divisions:[256:1", "roundup_power2_divisions:[per_process_memory_fraction:0.9]", "",
)  # fmt: skip


@st.composite
def allocator_configs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """PyTorch's config variables, one or both (now and then a name twice), each a config of items joined by
    commas (mostly plain), or from a ConfigMap."""
    names = ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"]
    names = draw(st.sampled_from((names[:1], names[1:], names, names[::-1], names[:1] * 2)))
    env: list[dict[str, Any]] = []
    for name in names:
        if draw(st.integers(0, 9)) == 0:
            env.append({"name": name, "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}})
            continue
        items = draw(st.lists(st.sampled_from(CONF_ITEMS), max_size=3))
        if draw(st.integers(0, 9)) == 0:
            items.append(draw(st.sampled_from(OTHER_CONF_ITEMS)))
        separator, end = draw(st.sampled_from((",", ", ", " , "))), draw(st.sampled_from(("", "", ",", " ")))
        env.append({"name": name, "value": separator.join(items) + end})
    return env


@st.composite
def spaced_configs(draw: st.DrawFn) -> str:
    """An allocator config of CONF_ITEMS (now and then another) with spaces around its keys, values and items (up
    to 11: the most a plain config holds is 9), a comma at its end or two, a tab; or spaces alone."""
    spaces = st.integers(0, 11).map(lambda n: " " * n)
    items = []
    for item in draw(st.lists(st.sampled_from(CONF_ITEMS + OTHER_CONF_ITEMS[:1]), max_size=3)):
        key, _, value = item.partition(":")
        items.append(draw(spaces) + key + draw(spaces) + ":" + draw(spaces) + value + draw(spaces))
    end = draw(st.sampled_from(("", "", ",", ", ", ",,", "\t")))
    return ",".join(items) + end if items else draw(spaces) + draw(st.sampled_from(("", "", ",")))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(config=spaced_configs())
def test_an_allocator_configs_key_is_read_and_merged_as_the_webhook_does(config: str) -> None:
    """In a plain config (userenv.plain_conf: spaces and a comma at the end among them), the CEL reads the
    fraction key's number that the webhook reads (memory_claim), or the gap says it does not; and merges the
    hint as merge_alloc_conf does (no merge where the config has the key). Any other config is the webhook's."""
    from webhook.admission.native import memvars
    from webhook.admission.native.cel import lit
    from webhook.admission.phases.envhints import memory_claim, merge_alloc_conf

    name, policy, hint = "PYTORCH_CUDA_ALLOC_CONF", POLICIES.for_namespace("a-team"), "per_process_memory_fraction:.5"
    entry = {"name": name, "value": config}
    if not userenv.plain_conf(entry):
        assert userenv.outside([entry], policy) == gaps.USER_CONFIG
        return
    mergeable = kube_cel.evaluate(userenv.without_key("v"), {"v": config})
    merged = kube_cel.evaluate(userenv.merged("v", lit(hint)), {"v": config}) if mergeable else None
    assert merged == merge_alloc_conf(config, hint)
    number = kube_cel.evaluate(userenv.conf_number_cel("v"), {"v": config})
    pattern = userenv.readings(policy)[name].pattern
    claim = memory_claim(name, config, None)
    read = f"v.matches({lit(userenv.SHORT)}) && v.matches({lit(pattern)}) && {memvars.scaled_cel('v')}"
    if kube_cel.evaluate(read, {"v": number}):
        n, d = kube_cel.evaluate(memvars.parts("v"), {"v": number})
        assert Fraction(n, d) == claim
    else:
        assert claim is None or userenv.outside([entry], policy) == gaps.USER_VALUES


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=st.sampled_from(("shared", "a-team", "frac", "mps-frac", "capped")),
    gpu=st.sampled_from((1, "100m", "50m")),
    env=allocator_configs(),
)
def test_an_allocator_config_of_the_containers_own_agrees_with_the_webhook(
    namespace: str, gpu: int | str, env: list[dict[str, Any]]
) -> None:
    """PyTorch's hint merged into a plain config as the webhook merges it, its fraction key judged as the webhook
    judges it; any other config the webhook's."""
    found = compare(namespace, pod(container(limits={GPU_: gpu if namespace != "shared" else 1}, env=env)))
    assert found in (None, gaps.USER_CONFIG, gaps.USER_VALUES)


# --- Generated pods ---------------------------------------------------------------------------------------------

QUANTITIES = ("0", "1", "2", "3", "9", "500m", "250m", "0.1", "5m")
RESOURCES = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "requests": st.dictionaries(
                st.sampled_from((GPU_, SHARED, MIG_1G, MIG_2G, INTEL_GPU, "cpu")),
                st.sampled_from(QUANTITIES),
                max_size=2,
            )
        },
    ),
    st.builds(
        lambda n, q: {"limits": {n: q}},
        st.sampled_from(
            (GPU_, SHARED, MIG_1G, MIG_2G, MIG_1G + ".shared", AMD, INTEL_GPU, "nvidia.com/gpumem", DC_GPU, DC_MIG)
        ),
        st.sampled_from(QUANTITIES),
    ),
    st.builds(lambda q: {"requests": {GPU_: q}}, st.sampled_from(QUANTITIES)),
    st.builds(  # two GPU resources in one container, zeros and near-whole values among them
        lambda limits: {"limits": limits},
        st.dictionaries(
            st.sampled_from((GPU_, SHARED, MIG_1G, MIG_2G, AMD, "volcano.sh/vgpu-number", DC_GPU)),
            st.sampled_from(("0", "1", "2", "3", "2999999999n")),
            min_size=2,
        ),
    ),
)
ENV = st.sampled_from((None, [], [{"name": "A", "value": "x"}]))
# A container's command line: none (mostly), each engine (its flag appended, where its mode applies it), no engine.
COMMAND_LINE = st.one_of(
    st.just({}),
    st.sampled_from(
        (
            {"command": ["vllm", "serve", "m"]},
            {"command": ["python3", "-m", "sglang.launch_server"], "args": []},
            {"args": ["/usr/bin/trtllm-serve", "m"]},
            {"image": "vllm/vllm-openai:v0.9.1", "args": ["--model", "m"]},
            {"command": ["sh", "-c", "vllm serve m"]},
        )
    ),
)
PINNED = {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["Tesla-T4-SHARED"]}]}
NODES = st.sampled_from(
    (
        {},
        {"nodeSelector": {PRODUCT: "Tesla-T4-SHARED"}},
        {"nodeName": "gpu-1"},
        {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [PINNED]}}}},
        {"nodeSelector": {STRATEGY: "time-slicing"}},
        {"nodeSelector": {PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"}},
        {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [SLICES_2]}]}}}},
        {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{}, {"matchExpressions": [ZONE]}]}}}},
    )
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    count, inits = draw(st.integers(1, 4)), draw(st.integers(0, 3))
    bodies = [container(f"c{i}", **draw(RESOURCES), env=draw(ENV), **draw(COMMAND_LINE)) for i in range(count)]
    restart = st.sampled_from(({}, {"restartPolicy": "Always"}))
    init = [container(f"i{i}", **draw(RESOURCES), env=draw(ENV), **draw(restart)) for i in range(inits)]
    return pod(*bodies, init=tuple(init), **draw(NODES))


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(namespace=st.sampled_from(NAMESPACES), obj=pods(), kind=st.sampled_from(sorted(API_VERSIONS)))
def test_generated_pods_agree_with_the_webhook(namespace: str, obj: dict[str, Any], kind: str) -> None:
    compare(namespace, as_kind(kind, obj))


# Steering's satisfiability check: a term's own expressions of every operator on the labels steered policies
# require (whole GPUs' NotIn and DoesNotExist, MIG single's In one value, or Exists where it names no profile,
# ACK's In several values), over values they name, integers and others.
STEERED_POLICIES = PolicySet(
    (
        *(policy for policy in POLICIES.policies if policy.name in ("whole-tie", "mig-single", "ack")),
        _policy(
            "mig-single-any",
            ("mig-single-any",),
            sharing=Sharing(mode=Mode.MIG, mig_strategy=MigStrategy.SINGLE),
            steering=True,  # on nodes with MIG slices of any size under migStrategy single
        ),
    )
)
# each namespace's GPU, and the labels its policy requires
STEERED_PODS = {
    "team-a": (1, (STRATEGY, SLICES)),
    "mig-single": (1, (SLICES, MIG_STRATEGY)),
    "mig-single-any": (1, (SLICES, MIG_STRATEGY)),
    "ack": ("0.3", (ACK_SCHEDULE, ACK_PLACEMENT)),
}
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_VALUES = ("none", "mps", "time-slicing", "single", "cgpu", "share", "spread", "1", "3", "4", "+3", "-1", "x")


@cache
def steered_native() -> tuple[NativeSet, NativeSet]:
    return compile_native(STEERED_POLICIES, EXCLUDED), compile_native(STEERED_POLICIES, EXCLUDED, beside_webhook=True)


@st.composite
def label_expressions(draw: st.DrawFn, keys: tuple[str, ...]) -> dict[str, Any]:
    key, operator = draw(st.sampled_from(keys)), draw(st.sampled_from(OPERATORS))
    if operator in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": operator}
    values = draw(st.lists(st.sampled_from(LABEL_VALUES), min_size=1, max_size=1 if operator in ("Gt", "Lt") else 3))
    return {"key": key, "operator": operator, "values": values}


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(namespace=st.sampled_from(sorted(STEERED_PODS)), data=st.data())
def test_a_terms_own_expressions_on_a_required_label_agree_with_the_webhook(
    namespace: str, data: st.DataObject
) -> None:
    """Terms of up to four expressions on the labels the policy requires: the same verdict, line and node
    affinity, or scope.outside's gap (several of the term's own that the compiled policies do not weigh)."""
    gpu, keys = STEERED_PODS[namespace]
    terms = data.draw(st.lists(st.lists(label_expressions(keys), min_size=1, max_size=4), min_size=1, max_size=2))
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": term} for term in terms]}}}
    compare(namespace, pod(container(limits={GPU_: gpu}), affinity=affinity), STEERED_POLICIES, *steered_native())


# Memory slices: nvidia.com/gpu alone (whole, fractions around the least that converts, near-whole past one GPU),
# each backend's own resource alone or beside whole GPUs (amounts around one GPU's memory and 100 percent, and just
# below a whole number), a pod's own placement.
MEMORY_GPUS = ("0", "1", "2", "3", "9", "500m", "333m", "0.1", "10m", "5m", "1n", "1999999900n", "2999999u")
MEMORY_OWN = (
    HAMI_MEM, HAMI_CORES, "nvidia.com/gpumem-percentage", VOLCANO_NUM, VOLCANO_MEM, VOLCANO_PERCENT, ACK_MEM,
    "aliyun.com/gpu-count",
)  # fmt: skip
MEMORY_AMOUNTS = ("0", "1", "7", "24", "25", "100", "101", "4000", "8156", "90000", "122881")
MEMORY_AMOUNTS += ("999999900n", "100999999900n")  # within a thousandth below a whole number: refused as fractional
MEMORY_RESOURCES = st.one_of(
    st.builds(
        lambda which, q: {which: {GPU_: q}}, st.sampled_from(("limits", "requests")), st.sampled_from(MEMORY_GPUS)
    ),
    st.builds(lambda name, q: {"limits": {name: q}}, st.sampled_from(MEMORY_OWN), st.sampled_from(MEMORY_AMOUNTS)),
    st.builds(
        lambda q, name, amount: {"limits": {GPU_: q, name: amount}},
        st.sampled_from(("1", "2", "3")),
        st.sampled_from(MEMORY_OWN),
        st.sampled_from(MEMORY_AMOUNTS),
    ),
    st.builds(  # two or three counts of devices, an amount among them or not
        lambda counts, name, amount: {"limits": {**counts, name: amount}},
        st.dictionaries(
            st.sampled_from((GPU_, VOLCANO_NUM, SHARED, AMD, DC_GPU, MIG_1G, INTEL_GPU)),
            st.sampled_from(("0", "1", "3", "9")),
            min_size=2,
            max_size=3,
        ),
        st.sampled_from(MEMORY_OWN),
        st.sampled_from(MEMORY_AMOUNTS),
    ),
)


@st.composite
def memory_pods(draw: st.DrawFn) -> dict[str, Any]:
    count, inits = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    bodies = [container(f"c{i}", **draw(MEMORY_RESOURCES)) for i in range(count)]
    restart = st.sampled_from(({}, {"restartPolicy": "Always"}))
    init = [container(f"i{i}", **draw(MEMORY_RESOURCES), **draw(restart)) for i in range(inits)]
    obj = pod(*bodies, init=tuple(init))
    own = draw(st.sampled_from(({}, {HAMI_GPU: "spread"}, {HAMI_NODE: "binpack"})))
    gpus = draw(st.sampled_from((None, "2", "3", "x")))  # ACK's label
    obj = spread(obj, gpus) if gpus else obj
    return with_annotations(obj, own) if own else obj


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=st.sampled_from(("hami-a", "vgpu", "ack", "ack-plain")), obj=memory_pods(), kind=st.sampled_from(KINDS)
)
def test_generated_memory_slices_agree_with_the_webhook(namespace: str, obj: dict[str, Any], kind: str) -> None:
    compare(namespace, as_kind(kind, obj))


# --- Fractions: every nano of a GPU, under shares and variables of every kind --------------------------------

# Each variable a fraction is written into (every framework's, MPS's with the GPU's memory and without it),
# shares that are no decimal (1/3), replicas auto (no share: nothing capped, nothing judged), and the corpus's.
FRACTION_POLICIES = PolicySet(
    (
        _policy(
            "every-variable",
            ("every",),
            sharing=Sharing(mode=Mode.TIME_SLICING, replicas=3),
            fractional=Fractional.SHARED,
            framework_env=("jax", "tensorflow", "cupy", "tgi", "generic", "pytorch"),
        ),
        _policy(
            "mps-every-variable",
            ("mps-every",),
            sharing=Sharing(mode=Mode.MPS, replicas=3),
            gpu=GPU(model="H100-80GB"),
            fractional=Fractional.SHARED,
            framework_env=("jax", "tensorflow", "cupy", "tgi", "generic", "pytorch"),
        ),
        _policy(
            "mps-no-memory",
            ("mps-plain",),
            sharing=Sharing(mode=Mode.MPS, replicas=7),
            fractional=Fractional.SHARED,
            framework_env=("jax", "generic"),
        ),
        _policy(
            "capped-every-variable",
            ("capped-every",),
            sharing=Sharing(mode=Mode.TIME_SLICING, replicas=3),
            fractional=Fractional.SHARED,
            memory_fraction=Fraction(1, 4),
            framework_env=("jax", "tensorflow", "cupy", "tgi", "generic", "pytorch"),
        ),
        _policy(
            "mps-capped",
            ("mps-capped",),
            sharing=Sharing(mode=Mode.MPS, replicas=3),
            gpu=GPU(model="H100-80GB"),
            fractional=Fractional.SHARED,
            memory_fraction=Fraction(3, 10),
            framework_env=("jax", "cupy", "tgi", "generic", "pytorch"),
        ),
        _policy(
            "auto",
            ("auto",),
            sharing=Sharing(mode=Mode.TIME_SLICING),
            fractional=Fractional.SHARED,
            framework_env=("jax", "pytorch"),
        ),
        *POLICIES.policies,
    )
)
FRACTION_NATIVE = compile_native(FRACTION_POLICIES, EXCLUDED)
FRACTION_BESIDE = compile_native(FRACTION_POLICIES, EXCLUDED, beside_webhook=True)


# ENV's, and a container's own variables: one no line reads, memory variables from a Secret and a ConfigMap
# (kept, JAX's pair skipped, none judged), and plain values judged against the fraction (CuPy's 1% as the policy
# writes it below 1%).
FRACTION_ENV = st.sampled_from(
    (
        *ENV.elements,
        [{"name": "TF_FORCE_GPU_ALLOW_GROWTH", "value": "false"}, {"name": "A", "value": "x"}],
        [
            {"name": "XLA_CLIENT_MEM_FRACTION", "valueFrom": FROM_SECRET},
            {"name": "CUPY_GPU_MEMORY_LIMIT", "valueFrom": FROM_MAP},
        ],
        [{"name": "CUPY_GPU_MEMORY_LIMIT", "value": "1%"}, {"name": "GPU_MEMORY_FRACTION", "value": "0.3"}],
        [{"name": "PYTORCH_ALLOC_CONF", "value": "expandable_segments:True"}],  # PyTorch's hint merged into it
    )
)


@st.composite
def fractions(draw: st.DrawFn) -> str:
    """A quantity below 1, as nanos, as a plain decimal or as the API server writes it."""
    nanos = draw(st.one_of(st.integers(1, 10**9 - 1), st.sampled_from((1, 10**5, 10**7 - 1, 10**7, 333333333))))
    written = draw(st.sampled_from(("n", "decimal", "canonical")))
    if written == "n":
        return f"{nanos}n"
    if written == "decimal":
        return f"0.{nanos:09d}".rstrip("0")
    for unit, scale in (("m", 10**6), ("u", 10**3)):
        if nanos % scale == 0:
            return f"{nanos // scale}{unit}"
    return f"{nanos}n"


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=st.sampled_from(
        ("every", "mps-every", "mps-plain", "capped-every", "mps-capped", "auto", "frac", "a-team", "mps-frac")
    ),
    fraction=fractions(),
    requested=st.booleans(),
    env=FRACTION_ENV,
    kind=st.sampled_from(KINDS),
    command_line=COMMAND_LINE,
)
def test_every_fraction_agrees_with_the_webhook(
    namespace: str,
    fraction: str,
    requested: bool,
    env: list[dict[str, str]] | None,
    kind: str,
    command_line: dict[str, Any],
) -> None:
    """The recorded fraction and every variable written from it, capped at one replica's share, and the line for
    one over it, and an inference engine's flag for it: the same as the webhook's for any nano count, or the gap
    the compiler prints."""
    resources = {"requests" if requested else "limits": {GPU_: fraction}}
    obj = as_kind(kind, pod(container(**resources, env=env, **command_line)))
    compare(namespace, obj, FRACTION_POLICIES, FRACTION_NATIVE, FRACTION_BESIDE)


# A container's own memory variable: plain decimals of every shape up to 12 characters, and the shares' neighbours
# (1/4, 1/2 and the converted fractions' 0.1, 0.3, 0.005), where a claim just over is written as the share.
NEIGHBOURS = ("0.25", "0.2500", "0.2499", "0.2501", "0.250000001", ".1", "0.0999", "0.1000001", "0.00501", "0.3001")
NEIGHBOURS += ("2.5e-1", "25E-2", "2.501e-01", ".2499E0", "1e-1", "0.01e+1", "1.000001e-1", "3e-1")
OWN_VARIABLES = (
    "GPU_MEMORY_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION", "CUDA_MEMORY_FRACTION",
    "CUPY_GPU_MEMORY_LIMIT",
)  # fmt: skip


@st.composite
def plain_decimals(draw: st.DrawFn) -> str:
    """ASCII digits with at most one point, a digit on one side of it at least; at most 12 characters."""
    whole = draw(st.text("0123456789", max_size=3))
    point = draw(st.booleans()) or not whole
    fraction = draw(st.text("0123456789", min_size=0 if whole else 1, max_size=11 - len(whole))) if point else ""
    return whole + ("." if point else "") + fraction


@st.composite
def own_variables(draw: st.DrawFn) -> dict[str, str]:
    name = draw(st.sampled_from(OWN_VARIABLES))
    number = draw(st.one_of(plain_decimals(), st.sampled_from(NEIGHBOURS)))
    if name == "CUPY_GPU_MEMORY_LIMIT":  # a percent, or bytes about a quarter of 80 GiB
        bytes_ = draw(st.integers(21474836480 - 2, 21474836480 + 2).map(str))
        number = draw(st.sampled_from((f"{number[:11]}%", bytes_)))
    sign, before, after = draw(st.sampled_from(("", "", "+"))), draw(st.sampled_from(("", "", " "))), ""
    if before:  # spaces around it now and then
        after = draw(st.sampled_from(("", "  ")))
    return {"name": name, "value": before + sign + number + after}


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    text=st.one_of(
        st.tuples(
            st.text(" \t+", max_size=2), plain_decimals(), st.sampled_from(("", "  ", "\t", "%", "% ", " %"))
        ).map("".join),
        st.text(" \t+-0123456789._eE%", max_size=15),
        st.tuples(
            st.sampled_from(("", " ", "+", " +")),
            plain_decimals(),
            st.sampled_from(("e", "E")),
            st.sampled_from(("", "+", "-")),
            st.text("0123456789", min_size=1, max_size=3),
            st.sampled_from(("", " ", "%", "\t", "_0", "%e1")),
        ).map("".join),
    )
)
def test_a_number_as_written_is_read_as_the_webhook_reads_it(text: str) -> None:
    """A value the CEL reads (userenv.SHORT, a Reading's pattern in RE2, within userenv.scaled's digit budget)
    holds the number the webhook reads, its spaces and `+` dropped, its exponent's power moved (memvars.parts): a
    memory variable's (memory_claim), CuPy's percent or bytes, an engine's flag's (engines.find); the Python mirror
    (`Reading.reads`) says the same of it."""
    from webhook.admission.native import memvars
    from webhook.admission.native.cel import lit
    from webhook.admission.phases.envhints import memory_claim

    cupy = userenv.readings(POLICIES.for_namespace("mps-frac"))["CUPY_GPU_MEMORY_LIMIT"]
    for reading, claim in (
        (userenv.VALUE, memory_claim("GPU_MEMORY_FRACTION", text, None)),
        (cupy, memory_claim("CUPY_GPU_MEMORY_LIMIT", text, 81920)),
    ):
        form = f"v.matches({lit(userenv.SHORT)}) && v.matches({lit(reading.pattern)}) && {memvars.scaled_cel('v')}"
        read = kube_cel.evaluate(form, {"v": text})
        assert read == reading.reads(text)
        if read:
            n, d = kube_cel.evaluate(
                memvars.parts("v", f" * {reading.scale}" if "%" not in text else " * 100"), {"v": text}
            )
            assert Fraction(n, d) == claim
    if userenv.plain(text):
        found = engines.find({"args": [f"--gpu-memory-utilization={text}"]}, engines.VLLM)
        assert found is not None and found.value == memory_claim("GPU_MEMORY_FRACTION", text, None)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=st.sampled_from(("shared", "mps-1", "frac", "mps-frac", "a-team", "capped")),
    gpu=st.sampled_from((1, "100m", "300m", "5m")),
    env=st.lists(own_variables(), min_size=1, max_size=3),
)
def test_a_plain_decimal_of_the_containers_own_is_judged_as_the_webhook_does(
    namespace: str, gpu: int | str, env: list[dict[str, str]]
) -> None:
    """Its claim over the share, exact in integers, and written rounded down as the engine writes it: the same
    verdict and lines, never a gap of its own (a fraction where the policy does not convert it: the API server's)."""
    assert compare(namespace, pod(container(limits={GPU_: gpu}, env=env))) in (None, gaps.BUILT_IN_REFUSAL)


def test_a_claim_is_written_as_format_fraction_writes_it() -> None:
    """The CEL of format_fraction for a value in units of 10^-4: whole part, point, the digits but trailing zeros."""
    from webhook.admission.base.quantity import format_fraction
    from webhook.admission.native.fractions import formatted

    units = (0, 1, 9, 10, 99, 100, 1000, 1001, 1010, 1100, 9999, 10000, 10001, 12345, 120000, 10**12 + 7)
    for u in units:
        assert kube_cel.evaluate(formatted("u0"), {"u0": u}) == format_fraction(Fraction(u, 10**4))


def test_the_counts_the_compiled_set_claims_sum_within_int64() -> None:
    """Each count below HUGE_COUNT, a pod's sum of as many as a request can hold stays an int64 (gaps.HUGE_COUNTS
    keeps the rest out)."""
    assert HUGE_COUNT * memshares.MOST_CONTAINERS < 2**63


def test_a_near_whole_count_past_one_gpu_is_spread_within_int64() -> None:
    """ACK's advice past one GPU (wholes._spread_numbers) multiplies the GPUs a claimed count comes to, below
    memshares.most_count, by 10^9: an int64 still."""
    for namespace in ("ack", "ack-plain"):
        assert (memshares.most_count(POLICIES.for_namespace(namespace)) + 1) * 10**9 < memshares.INT64_MAX


def test_a_share_past_the_integers_leaves_the_values_and_the_fractions_to_the_webhook() -> None:
    """Ten million replicas: a 12-digit number times the share's denominator is past int64, so no value is read,
    neither a variable's nor an engine's flag's (and fractions, whose appended values would go unjudged, are not
    compiled): all are gaps."""
    from webhook.admission.native import fractions, userenv

    many = _policy(
        "many", ("many",), sharing=Sharing(mode=Mode.TIME_SLICING, replicas=10**7), fractional=Fractional.SHARED
    )
    assert userenv.readings(many) == {}
    assert fractions.unsupported(many) == gaps.FRACTION_VARIABLES
    obj = decoded(pod(container(limits={GPU_: 1}, env=[{"name": "GPU_MEMORY_FRACTION", "value": "0.9"}])))
    assert outside(obj, many) == gaps.USER_VALUES
    flag = decoded(pod(container(limits={GPU_: 1}, command=["vllm", "serve", "--gpu-memory-utilization=0.9"])))
    assert outside(flag, many) == gaps.ENGINE_FLAGS


# fractional: mig on another model (the A30 cuts its memory in quarters), single and mixed, and the corpus's.
MIG_POLICIES = PolicySet(
    (
        _policy(
            "a30",
            ("a30",),
            sharing=Sharing(mode=Mode.MIG, mig_profile="1g.6gb"),
            gpu=GPU(model="A30-24GB"),
            fractional=Fractional.MIG,
        ),
        _policy(
            "a30-single",
            ("a30-single",),
            sharing=Sharing(mode=Mode.MIG, mig_profile="2g.12gb", mig_strategy=MigStrategy.SINGLE),
            gpu=GPU(model="A30-24GB"),
            fractional=Fractional.MIG,
        ),
        *POLICIES.policies,
    )
)
MIG_NATIVE = compile_native(MIG_POLICIES, EXCLUDED)
MIG_BESIDE = compile_native(MIG_POLICIES, EXCLUDED, beside_webhook=True)
BOUNDS = tuple(n + d for n in (125_000_000, 250_000_000, 500_000_000) for d in (-1, 0, 1))  # the slices' bounds


@settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=st.sampled_from(("a30", "a30-single", "mig-frac", "mig-listed", "mig-single", "mig")),
    fraction=st.one_of(fractions(), st.sampled_from(BOUNDS).map(lambda n: f"{n}n")),
    requested=st.booleans(),
    kind=st.sampled_from(KINDS),
)
def test_every_fraction_becomes_the_webhooks_mig_slice(
    namespace: str, fraction: str, requested: bool, kind: str
) -> None:
    """The smallest slice that holds the fraction (the engine's table, compared in nanos), in place under the
    single strategy, or left for the API server to refuse where none does: the same as the webhook's."""
    resources = {"requests" if requested else "limits": {GPU_: fraction}}
    gap = compare(namespace, as_kind(kind, pod(container(**resources))), MIG_POLICIES, MIG_NATIVE, MIG_BESIDE)
    assert gap in (None, gaps.BUILT_IN_REFUSAL)


def test_a_variable_whose_value_for_a_fraction_the_compiler_cannot_write_leaves_fractions_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A variable that depends on the fraction with no number the compiler writes (here: none at all): the
    policy's fractions are a gap, printed, and the MAP leaves them as written for the API server to refuse."""
    from webhook.admission.native import fractions as compiled_fractions

    monkeypatch.setattr(compiled_fractions, "_numbers", lambda policy: {})
    native = compile_native(POLICIES, EXCLUDED)
    assert gaps.FRACTION_VARIABLES in native.gaps_of("fractions")
    obj = decoded(pod(container(limits={GPU_: "250m"})))
    assert outside(obj, POLICIES.for_namespace("frac")) == gaps.FRACTION_VARIABLES
    assert admit(native, "frac", obj).verdict == "refused"


# --- Workloads: what the engine leaves alone, and what the native set does not match -------------------------

OVER = pod(container(limits={GPU_: 99}))


def test_the_policies_match_what_the_webhook_configurations_send_on_create() -> None:
    """The kinds of the webhook's pod-spec entries (the ephemeral containers' subresource aside: a gap), each
    matched on CREATE by every compiled policy."""
    from webhook.cli.webhooks import entries

    sent = {
        (group, resource)
        for entry in entries()
        if entry.name.split(".")[0] in ("pods", "workloads", "cronjobs", "podtemplates")
        for rule in entry.rules
        for group in rule.groups
        for resource in rule.resources
    }
    for policy in NATIVE.objects:
        if policy["kind"].endswith("AdmissionPolicy"):
            rules = policy["spec"]["matchConstraints"]["resourceRules"]
            matched = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
            assert matched == sent and all(rule["operations"] == ["CREATE"] for rule in rules)
    assert len(sent) == len(API_VERSIONS)


@pytest.mark.parametrize("kind", ["Deployment", "Job"])
def test_a_workload_made_by_its_controller_is_left_alone_by_both(kind: str) -> None:
    """A Job of a CronJob, a ReplicaSet of a Deployment: its controller's template was judged."""
    owner = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "u", "controller": True}
    obj = decoded(as_kind(kind, OVER, ownerReferences=[owner]))
    assert admit(NATIVE, "research", obj) == Outcome(True, "allow", obj)
    assert evaluate(obj, "research", POLICIES).skipped
    assert compare("research", obj) is None


def test_an_owner_that_is_not_the_controller_does_not_count() -> None:
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u"}
    assert admit(NATIVE, "research", decoded(as_kind("Deployment", OVER, ownerReferences=[owner]))).verdict == "deny"


def test_every_pod_is_judged_whatever_made_it() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": True}
    obj = decoded(OVER)
    obj["metadata"]["ownerReferences"] = [owner]
    assert admit(NATIVE, "research", obj).verdict == "deny"


@pytest.mark.parametrize("kind", ["Deployment", "CronJob", "PodTemplate"])
def test_a_workload_update_is_not_matched(kind: str) -> None:
    """The webhook's re-apply rules read its record: the native set judges templates on CREATE (the gap)."""
    obj = decoded(as_kind(kind, OVER))
    assert admit(NATIVE, "research", obj, operation="UPDATE") == Outcome(True, "allow", obj)
    assert f"every policy: not compiled: {gaps.WORKLOAD_UPDATES}" in _rendered()[1]


def test_why_updates_are_the_webhooks_a_reapply_read_without_the_record() -> None:
    """`kubectl apply` of the same file puts the user's request back beside the webhook's output: the webhook
    reads its record and gives the template it gave, while the native rules, which cannot read the record,
    would make it ask for a whole GPU and a replica. So the native set does not match UPDATE."""
    live = evaluate(decoded(as_kind("Deployment", pod(container(requests={GPU_: 1})))), "shared", POLICIES).mutated
    again = json.loads(json.dumps(live))
    spec_of(again)["containers"][0]["resources"]["requests"][GPU_] = "1"
    assert spec_of(evaluate(again, "shared", POLICIES, old=live).mutated) == spec_of(live)
    as_if_matched = admit(NATIVE, "shared", again).obj  # the same rules as on CREATE
    assert spec_of(as_if_matched)["containers"][0]["resources"]["limits"] == {SHARED: "1", GPU_: "1"}
    assert admit(NATIVE, "shared", again, operation="UPDATE") == Outcome(True, "allow", again)


def test_with_both_the_native_set_changes_a_template_first_and_the_webhook_records_nothing() -> None:
    """Why Both wants `--beside-webhook` (docs/native-policies.md): without it the MutatingAdmissionPolicies,
    which run before the webhooks, change the template first, so the webhook finds nothing to change and writes
    no record; the same file applied again is then judged as written, and refused."""
    user = decoded(as_kind("Deployment", pod(container(requests={GPU_: 1}))))
    live = evaluate(admit(NATIVE, "shared", user).obj, "shared", POLICIES).mutated
    assert "gpu-admission.io/requested" not in live["metadata"].get("annotations", {})
    again = json.loads(json.dumps(live))
    spec_of(again)["containers"][0]["resources"]["requests"][GPU_] = "1"
    assert evaluate(again, "shared", POLICIES, old=live).verdict == "deny"


def test_beside_the_webhook_the_maps_change_pods_only_and_the_vaps_judge_every_kind() -> None:
    for obj in BESIDE.objects:
        if obj["kind"].endswith("AdmissionPolicy"):
            resources = {r for rule in obj["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
            assert (resources == {"pods"}) == (obj["kind"] == "MutatingAdmissionPolicy")


def test_render_native_beside_the_webhook() -> None:

    from webhook.cli.policy_cmd import render_native

    out = io.StringIO()
    assert render_native(POLICIES, out, io.StringIO(), beside_webhook=True) == 0
    rendered = [obj for obj in yamldocs.load_all(out.getvalue()) if obj["kind"] == "MutatingAdmissionPolicy"]
    assert rendered and all(obj["spec"]["matchConstraints"] == PODS for obj in rendered)


def test_beside_the_webhook_a_template_is_the_webhooks_and_a_reapply_passes() -> None:
    """The webhook mutates the template and records it; the VAP judges what the webhook made, as the webhook
    does; the same file applied again gives the same template."""
    user = decoded(as_kind("Deployment", pod(container("a", requests={GPU_: 1}), container("b", limits={GPU_: 2}))))
    # The webhook down (failurePolicy Ignore): the template as written, a request without its limit refused.
    assert admit(BESIDE, "shared", user).verdict == "refused"
    decision = evaluate(user, "shared", POLICIES)
    native = admit(BESIDE, "shared", decision.mutated)
    expected = said(decision.violations, POLICIES.for_namespace("shared"))
    assert (native.verdict, native.message, native.obj) == ("deny", expected, decision.mutated)
    user = decoded(as_kind("Deployment", pod(container(requests={GPU_: 1}))))
    live = evaluate(admit(BESIDE, "shared", user).obj, "shared", POLICIES).mutated
    assert admit(BESIDE, "shared", live) == Outcome(True, "allow", live)
    again = json.loads(json.dumps(live))
    spec_of(again)["containers"][0]["resources"]["requests"][GPU_] = "1"
    assert spec_of(evaluate(again, "shared", POLICIES, old=live).mutated) == spec_of(live)


def test_beside_the_webhook_pods_are_judged_as_without_it() -> None:
    for case in ("whole: both maxima", "shared: one GPU becomes a replica", "mps: a replica gets the MPS limits"):
        namespace, obj = CASES[case]
        assert admit(BESIDE, namespace, decoded(obj)) == admit(NATIVE, namespace, decoded(obj))


def test_alone_a_limit_written_at_creation_stays_when_the_request_changes() -> None:
    """The native set alone (docs/native-policies.md): the file's request changed from 1 to 2 and applied again
    leaves the limit written from the old one, and the API server refuses the template."""
    live = admit(NATIVE, "research", decoded(as_kind("Job", pod(container(requests={GPU_: 1}))))).obj
    again = json.loads(json.dumps(live))
    spec_of(again)["containers"][0]["resources"]["requests"][GPU_] = "2"
    assert admit(NATIVE, "research", again, operation="UPDATE").obj == again
    assert apiserver_rules.pod_spec_errors(spec_of(again)) == [
        "spec.containers[0].resources.requests[nvidia.com/gpu]: must be equal to nvidia.com/gpu limit"
    ]


def test_a_workload_with_the_record_is_not_compared() -> None:
    obj = as_kind("Deployment", pod(container(requests={GPU_: 1})), annotations={"gpu-admission.io/requested": "{}"})
    assert compare("shared", obj) == gaps.RECORDED


def test_a_custom_resource_is_the_webhooks() -> None:
    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"}, "spec": {}}
    assert outside(ray, POLICIES.for_namespace("research")) == gaps.CUSTOM_RESOURCES
    assert admit(NATIVE, "research", ray) == Outcome(True, "allow", ray)
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {}}
    assert outside(claim, POLICIES.for_namespace("research")) == gaps.DRA


def test_a_workload_without_a_template_spec_is_allowed_untouched() -> None:
    for obj in ({**as_kind("Deployment", OVER), "spec": {}}, {**as_kind("PodTemplate", OVER), "template": {}}):
        assert admit(NATIVE, "research", obj) == Outcome(True, "allow", obj)
        assert evaluate(obj, "research", POLICIES).verdict == "allow"


def test_a_template_is_patched_where_its_kind_keeps_it() -> None:
    native = admit(NATIVE, "shared", decoded(as_kind("CronJob", pod(container(requests={GPU_: 1})))))
    (body,) = native.obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert body["resources"] == {"requests": {SHARED: "1"}, "limits": {SHARED: "1"}}


# --- What the compiler says it does not carry -----------------------------------------------------------------


@cache
def _rendered() -> tuple[str, str]:
    """`policy render native`'s output and its stderr (rendered once)."""
    from webhook.cli.policy_cmd import render_native

    out, err = io.StringIO(), io.StringIO()
    assert render_native(POLICIES, out, err) == 0
    return out.getvalue(), err.getvalue()


def test_every_reason_a_case_is_not_compared_is_printed_by_the_cli() -> None:
    printed = _rendered()[1]
    for gap in {*NOT_COVERED.values(), gaps.RECORDED, gaps.CUSTOM_RESOURCES, gaps.WORKLOAD_UPDATES}:
        assert str(gap) in printed


def test_render_native_prints_the_objects_and_lint_native_warns_per_policy() -> None:

    from webhook.cli.policy_cmd import lint_native, render_native

    out, err = io.StringIO(), io.StringIO()
    assert render_native(POLICIES, out, err) == 0
    kinds = [doc["kind"] for doc in yamldocs.load_all(out.getvalue())]
    # Every policy and the built-in defaults: a MAP and its binding; a VAP and its binding where any rule
    # judges (every one here).
    assert kinds.count("MutatingAdmissionPolicy") == kinds.count("MutatingAdmissionPolicyBinding") == 20
    assert kinds.count("ValidatingAdmissionPolicy") == kinds.count("ValidatingAdmissionPolicyBinding") == 20
    assert f"every policy: not compiled: {gaps.CUSTOM_RESOURCES}" in err.getvalue()
    assert "workload templates" not in err.getvalue()
    warned = io.StringIO()
    lint_native(POLICIES, warned)
    spaced, labels = gaps.SPACED_PRODUCT.rule, f"{gaps.STEERED_LABELS.rule}; {gaps.NUL_VALUES.rule}"
    shared = "; ".join(
        gap.rule
        for gap in (gaps.USER_VALUES, gaps.USER_CONFIG, gaps.ENGINE_FLAGS, gaps.COMMAND_LINES, gaps.SPACED_PRODUCT)
    )
    assert warned.getvalue().splitlines() == [
        f"warning: policy {name} (<built-in>): its native policies do not carry {carried} (docs/native-policies.md)"
        for name, carried in (
            ("shared", shared),
            ("mps", f"{shared}; {labels}"),
            ("whole-tie", f"{labels}; {spaced}"),
            ("shared-tie", shared),
            ("mig-single", f"{labels}; {spaced}"),
            ("fractions", shared),
            ("mps-fractions", shared),
            ("capped", shared),
            ("hami", gaps.MEMORY_COUNTS.rule),
            ("volcano", gaps.MEMORY_COUNTS.rule),
            ("ack", f"{gaps.MEMORY_COUNTS.rule}; {gaps.ACK_PODS.rule}; {labels}; {spaced}"),
            ("ack-plain", f"{gaps.MEMORY_COUNTS.rule}; {gaps.ACK_PODS.rule}"),
        )
    ]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    pattern=st.sampled_from(("team-*", "*-team", "ml-?-x", "a[!b-d]c*", "[a-c]*-[0-9]", "*", "gpu*a*")),
    name=st.text("abcdmlx-team0123", min_size=1, max_size=12),
)
def test_a_glob_as_a_regular_expression_matches_what_selection_matches(pattern: str, name: str) -> None:
    import fnmatch
    import re

    from webhook.admission.policy.globs import glob_regex

    assert bool(re.match(glob_regex(pattern), name)) == fnmatch.fnmatchcase(name, pattern)


def test_render_native_writes_the_beta_api_for_kubernetes_1_34_and_1_35() -> None:
    """--api-version v1beta1: the MutatingAdmissionPolicy objects in the beta API (same fields), the rest v1."""
    import subprocess
    from pathlib import Path

    from tests.conftest import gpu_webhook_command

    root = Path(__file__).resolve().parent.parent
    command = [
        *gpu_webhook_command(),
        "policy",
        "render",
        "native",
        "--policies",
        "policies",
        "--api-version",
        "v1beta1",
    ]
    run = subprocess.run(command, capture_output=True, text=True, cwd=root, timeout=60)
    assert run.returncode == 0, run.stderr
    versions = {(doc["kind"], doc["apiVersion"]) for doc in yamldocs.load_all(run.stdout)}
    assert versions == {
        ("MutatingAdmissionPolicy", "admissionregistration.k8s.io/v1beta1"),
        ("MutatingAdmissionPolicyBinding", "admissionregistration.k8s.io/v1beta1"),
        ("ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1"),
        ("ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io/v1"),
    }


def test_the_native_benchmarks_pod_is_admitted_by_its_model_as_the_webhook_admits_it() -> None:
    """bench/native.py admits its Pod through this module's model of the API server (without the second pass):
    the native set covers the Pod, and creates what the webhook's patch makes of it."""
    from bench.engine import NAMESPACE, TARGET_POLICY
    from bench.native import Native, bench_pod
    from webhook.admission.policy.loader import parse_policy_sources

    admitted = Native().admit(bench_pod())
    decision = evaluate(bench_pod(), NAMESPACE, parse_policy_sources({"inference.yaml": TARGET_POLICY}))
    assert decision.allowed and _containers(admitted) == _containers(decoded(decision.mutated))
