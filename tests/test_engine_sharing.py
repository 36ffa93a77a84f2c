"""Sharing that never overcommits a GPU, MIG slices that are handed out as the nodes offer them, and lines that
speak of what the user wrote: table tests, each asserting the exact lines and verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from tests.conftest import shipped_and_example_policies
from tests.engine_support import EXCLUSIVE, container, env_of, pod, policy, run
from webhook.admission.base.violation import WARNING_LIMIT
from webhook.admission.engine import evaluate
from webhook.admission.policy.loader import load_policies
from webhook.admission.policy.model import GPU, Enforcement, Fractional, Limits, MigStrategy, Mode, Sharing

ROOT = Path(__file__).resolve().parent.parent
TIME_SLICING_4 = policy(
    name="inference", sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), fractional=Fractional.SHARED
)
MPS_8_WARN = policy(
    name="inference",
    sharing=Sharing(mode=Mode.MPS, replicas=8),
    gpu=GPU(model="H100-80GB"),
    fractional=Fractional.SHARED,
    enforcement=Enforcement.WARN,
)
BALANCED = ("1g.10gb", "2g.20gb", "3g.40gb")  # mig-parted's all-balanced layout of an A100-80GB
MIG_OFFERED = policy(
    name="batch-mig",
    sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_profiles=BALANCED),
    gpu=GPU(model="A100-80GB"),
    fractional=Fractional.MIG,
)


# 1. A fraction may never hand out more GPU memory than the share it gets


def test_a_fraction_above_one_replicas_share_is_refused_with_the_share_offered():
    decision = run(pod(container("srv", limits={"nvidia.com/gpu": "0.5"})), TIME_SLICING_4)
    assert decision.verdict == "deny"
    assert decision.violations == [
        'container "srv": nvidia.com/gpu 0.5 is more than one share here (time-slicing gives 1/4 of a GPU per '
        'replica, policy "inference"); ask for 0.25 or less, or for whole GPUs in a namespace that has them'
    ]
    assert decision.refusals == []  # the policy's rule: /validate judges it, per enforcement


def test_under_warn_the_object_is_admitted_but_its_variables_never_say_more_than_one_share():
    decision = run(pod(container("srv", limits={"nvidia.com/gpu": "0.9"})), MPS_8_WARN)
    assert (decision.allowed, decision.verdict) == (True, "warn")
    assert decision.warnings == [
        'gpu-admission: container "srv": nvidia.com/gpu 0.9 became nvidia.com/gpu.shared 1',
        'gpu-admission: container "srv": set 8 memory env vars for GPU fraction 0.125',
        'gpu-admission: container "srv": nvidia.com/gpu 0.9 exceeds one share (1/8); ask for 0.125 or less, '
        "or whole GPUs",
    ]
    assert env_of(decision) == {
        "GPU_ADMISSION_MEMORY_FRACTION": "0.9",  # what was asked, for validation and the second pass
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.1187",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "CUPY_GPU_MEMORY_LIMIT": "12%",
        # No CUDA_MEMORY_FRACTION under MPS: TGI's `free - (1 - f) * total` is negative where free is capped.
        "GPU_MEMORY_FRACTION": "0.125",
        # The device plugin's MPS daemon gives each of 8 replicas of an 81,559 MiB GPU 81559 // 8 = 10194 MiB
        # and 100 // 8 = 12 percent of the SMs: the injected values are at most those.
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10194M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "12",
    }


@pytest.mark.parametrize("fraction", ["0.25", "250m", "0.1"])
def test_a_fraction_within_one_share_becomes_one_replica_and_its_variables_say_it(fraction):
    decision = run(pod(container("srv", limits={"nvidia.com/gpu": fraction})), TIME_SLICING_4)
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu.shared": "1"}}
    assert env_of(decision)["GPU_MEMORY_FRACTION"] == ("0.1" if fraction == "0.1" else "0.25")


# 2. MIG: slices are not GPUs, and only offered slices are handed out


def test_two_mig_slices_for_nvidia_gpu_2_are_refused_in_the_users_words():
    decision = run(pod(container("train", limits={"nvidia.com/gpu": "2"})), MIG_OFFERED)
    assert (decision.verdict, decision.patch) == ("deny", [])
    assert decision.violations == [
        'container "train": nvidia.com/gpu 2 (nvidia.com/mig-1g.10gb 2 under mig) is more than one MIG slice per '
        'container (policy "batch-mig"): CUDA sees one MIG device per process, and slices have no NVLink or P2P '
        "between them; request one bigger profile, or whole GPUs in a namespace that has them"
    ]


def test_two_mig_slices_written_directly_are_refused_too():
    decision = run(pod(container("train", limits={"nvidia.com/mig-2g.20gb": "2"})), MIG_OFFERED)
    assert decision.violations == [
        'container "train": nvidia.com/mig-2g.20gb "2" is more than one MIG slice per container (policy '
        '"batch-mig"): CUDA sees one MIG device per process, and slices have no NVLink or P2P between them; '
        "request one bigger profile, or whole GPUs in a namespace that has them"
    ]


def test_max_per_container_set_by_the_policy_allows_several_slices():
    roomy = policy(sharing=MIG_OFFERED.sharing, gpu=MIG_OFFERED.gpu, limits=Limits(max_per_container=2))
    decision = run(pod(container("train", limits={"nvidia.com/gpu": "2"})), roomy)
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": "2"}}


@pytest.mark.parametrize(
    ("fraction", "resource"),
    [("0.125", "nvidia.com/mig-1g.10gb"), ("0.25", "nvidia.com/mig-2g.20gb"), ("0.5", "nvidia.com/mig-3g.40gb")],
)
def test_fractions_become_only_offered_slices(fraction, resource):
    decision = run(pod(container("train", limits={"nvidia.com/gpu": fraction})), MIG_OFFERED)
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["containers"][0]["resources"] == {"limits": {resource: "1"}}


def test_a_fraction_no_offered_slice_holds_is_refused_with_what_is_offered():
    decision = run(pod(container("train", limits={"nvidia.com/gpu": "0.75"})), MIG_OFFERED)
    assert decision.verdict == "deny"
    assert (
        decision.violations
        == decision.refusals
        == [  # left fractional: the API server refuses it anyway
            'container "train": nvidia.com/gpu "0.75" is fractional, and no MIG slice offered here holds 0.75 of one '
            'A100-80GB (policy "batch-mig" offers 1g.10gb, 2g.20gb, 3g.40gb; the API server refuses it anyway); '
            "request nvidia.com/gpu: 1, or a MIG profile it offers"
        ]
    )


def test_a_profile_the_layout_does_not_offer_is_refused():
    decision = run(pod(container("train", limits={"nvidia.com/mig-1g.20gb": "1"})), MIG_OFFERED)
    assert decision.violations == [
        'container "train": nvidia.com/mig-1g.20gb "1" asks for MIG profile 1g.20gb, which the nodes\' MIG layout '
        'does not offer (policy "batch-mig" offers 1g.10gb, 2g.20gb, 3g.40gb): the pod would stay Pending; use one '
        "of those"
    ]


def test_the_shipped_mig_policy_offers_exactly_mig_parteds_all_balanced_layout():
    shipped = load_policies(ROOT / "examples" / "policies").for_namespace("batch")
    assert shipped.sharing.mig_profiles == BALANCED
    assert shipped.sharing.mig_profile in BALANCED


# 3. Denials and warnings speak of what the user wrote, and warnings fit whole


def test_a_warning_from_a_long_container_name_names_it_by_its_place_and_keeps_its_advice():
    name = "a" * 63
    decision = run(pod(container(name, limits={"nvidia.com/gpu": "9"})), policy(enforcement=Enforcement.WARN))
    assert decision.warnings == [
        'gpu-admission: containers[0]: nvidia.com/gpu "9": at most 8 per container; ask for fewer'
    ]
    assert decision.violations == [  # the whole line, for the CLI and the log
        f'container "{name}": nvidia.com/gpu "9" exceeds the per-container maximum of 8 (policy "team"); request '
        "at most 8"
    ]


def test_mutation_notices_of_a_long_container_name_fit_whole():
    decision = run(pod(container("b" * 63, limits={"nvidia.com/gpu": "0.2"})), TIME_SLICING_4)
    assert decision.warnings == [
        "gpu-admission: containers[0]: nvidia.com/gpu 0.2 became nvidia.com/gpu.shared 1",
        "gpu-admission: containers[0]: set 7 memory env vars for GPU fraction 0.2",
    ]
    assert all(len(warning) <= WARNING_LIMIT and not warning.endswith("...") for warning in decision.warnings)


# 5. The GPU stack's own pods are not broken by the NVIDIA_VISIBLE_DEVICES rule

STACK = sorted((ROOT / "tests" / "fixtures" / "gpu-stack").glob("*.yaml"))


@pytest.mark.parametrize("manifest", STACK, ids=[path.stem for path in STACK])
def test_the_gpu_stacks_own_pods_are_admitted_unchanged_under_the_default_and_every_example_policy(manifest):
    obj = yaml.safe_load(manifest.read_text())
    policies = shipped_and_example_policies()
    for namespace in ("gpu-operator", "notebooks", "inference", "batch"):
        decision = evaluate(obj, namespace, policies)
        assert (decision.verdict, decision.patch, decision.warnings) == ("allow", [], []), namespace


def test_a_privileged_container_may_set_nvidia_visible_devices_and_an_unprivileged_one_may_not():
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    privileged = container("plugin", env=env, securityContext={"privileged": True})
    assert run(pod(privileged)).verdict == "allow"
    unprivileged = container("plugin", env=env, securityContext={"privileged": False})
    assert run(pod(unprivileged), EXCLUSIVE).violations == [
        'container "plugin": sets NVIDIA_VISIBLE_DEVICES but requests no GPU; the NVIDIA container toolkit would '
        'expose GPUs without allocating them (policy "team"): remove the variable or request nvidia.com/gpu'
    ]


def test_a_pod_total_of_mapped_requests_says_what_the_policy_made_of_them():
    small_pods = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), limits=Limits(max_per_pod=1))
    obj = pod(container("a", limits={"nvidia.com/gpu": "1"}), container("b", limits={"nvidia.com/gpu": "1"}))
    assert run(obj, small_pods).violations == [
        "pod: nvidia.com/gpu.shared (what nvidia.com/gpu becomes under time-slicing) effective total 2 (containers "
        'running together: "a"=1, "b"=1) exceeds the per-pod maximum of 1 (policy "team"); request fewer or split '
        "the pod"
    ]


# The same rules where the device plugin keeps the name nvidia.com/gpu (time-slicing, MPS, MIG single)


def test_a_replica_that_keeps_the_name_is_one_share_too():
    kept = policy(
        name="inference",
        sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4, resource_name="nvidia.com/gpu"),
        fractional=Fractional.SHARED,
    )
    decision = run(pod(container("srv", limits={"nvidia.com/gpu": "0.5"})), kept)
    assert decision.mutated["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert env_of(decision)["GPU_MEMORY_FRACTION"] == "0.25"
    assert decision.violations == [
        'container "srv": nvidia.com/gpu 0.5 is more than one share here (time-slicing gives 1/4 of a GPU per '
        'replica, policy "inference"); ask for 0.25 or less, or for whole GPUs in a namespace that has them'
    ]


def test_under_mig_single_nvidia_gpu_is_one_slice_per_container():
    single = policy(
        name="batch-mig",
        sharing=Sharing(mode=Mode.MIG, mig_profile="3g.40gb", mig_strategy=MigStrategy.SINGLE),
        gpu=GPU(model="A100-80GB"),
    )
    decision = run(pod(container("train", limits={"nvidia.com/gpu": "2"})), single)
    assert decision.violations == [
        'container "train": nvidia.com/gpu "2" is more than one MIG slice per container (policy "batch-mig"): CUDA '
        "sees one MIG device per process, and slices have no NVLink or P2P between them; request one bigger "
        "profile, or whole GPUs in a namespace that has them"
    ]


def test_the_short_form_of_a_share_overrun_fits_whole_for_a_long_named_init_container():
    """A share such as 1/6 is a long decimal (0.1666), and a long container name leaves the short form only the
    container's place: the advice must still fit the 120 characters of a warning, not be cut."""
    six = dataclasses.replace(MPS_8_WARN, sharing=dataclasses.replace(MPS_8_WARN.sharing, replicas=6), memo={})
    init = container("x" * 80, limits={"nvidia.com/gpu": "0.9999"})
    decision = run(pod(container("app"), init=(init,)), six)
    (overrun,) = [w for w in decision.warnings if "exceeds one share" in w]
    assert overrun == (
        "gpu-admission: initContainers[0]: nvidia.com/gpu 0.9999 exceeds one share (1/6); ask for 0.1666 or less, "
        "or whole GPUs"
    )
    assert len(overrun) <= 120
