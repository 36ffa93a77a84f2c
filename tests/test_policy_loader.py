"""Policy files: what loads, and the exact message line for every problem the loader reports."""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.policy import yamlreader
from webhook.admission.policy.loader import (
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_FILE_BYTES,
    MAX_PROBLEMS_PER_FILE,
    PolicyLoadError,
    load_policies,
    parse_policy_sources,
)
from webhook.admission.policy.model import (
    DEFAULT_POLICY,
    Backend,
    Enforcement,
    Fractional,
    Mode,
    Policy,
    PolicySet,
)
from webhook.admission.policy.yamltext import FAST_PARSER, PURE_PARSER
from webhook.admission.sharing.registry import backend_of


def most_replicas(policy: Policy) -> int:
    """The most shared replicas (whole GPUs where none are shared) one container may hold, as the backend says."""
    return backend_of(policy).max_per_container(policy, "replica")


def shared_fraction(policy: Policy) -> Fraction | None:
    return backend_of(policy).shared_fraction(policy)


ROOT = Path(__file__).resolve().parent.parent
HEAD = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata:\n  name: p\n"
SHARED = "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 2}\n"  # a mode where memoryFraction applies


def doc(spec: str, head: str = HEAD) -> str:
    """A policy document whose spec is `spec` (YAML, dedented)."""
    body = textwrap.indent(textwrap.dedent(spec).strip("\n"), "  ")
    return f"{head}spec:\n{body}\n"


def named(name: str, spec: str) -> str:
    return doc(spec, head=HEAD.replace("name: p", f"name: {name}"))


def load(text: str, name: str = "p.yaml") -> PolicySet:
    return parse_policy_sources({name: text})


def problems(text: str | dict[str, str], name: str = "p.yaml") -> list[str]:
    sources = text if isinstance(text, dict) else {name: text}
    with pytest.raises(PolicyLoadError) as info:
        parse_policy_sources(sources)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def only_policy(text: str) -> Policy:
    (policy,) = load(text).policies
    return policy


# --- What loads --------------------------------------------------------------------------------------------


def test_a_full_policy_loads_every_field() -> None:
    policy = only_policy(
        doc(
            """
            namespaces: ["inference", "notebook-*"]
            enforcement: warn
            sharing:
              mode: mps
              replicas: 4
              resourceName: nvidia.com/mig-1g.10gb.shared
            gpu:
              model: A100-80GB
              memoryMiB: 40960
            limits:
              maxPerContainer: 2
              maxPerPod: 3
            fractional: mig
            memoryFraction: 0.1
            frameworkEnv: [pytorch, jax]
            blockVisibleDevicesOverride: false
            """
        )
    )
    assert policy.name == "p"
    assert policy.source == "p.yaml#0"
    assert policy.namespaces == ("inference", "notebook-*")
    assert policy.enforcement is Enforcement.WARN
    assert (policy.sharing.mode, policy.sharing.replicas) == (Mode.MPS, 4)
    assert policy.sharing.resource_name == "nvidia.com/mig-1g.10gb.shared"
    assert (policy.gpu.model, policy.gpu.memory_mib, policy.gpu_memory_mib) == ("A100-80GB", 40960, 40960)
    assert (policy.limits.max_per_container, policy.limits.max_per_pod) == (2, 3)
    assert policy.fractional is Fractional.MIG
    assert policy.memory_fraction == Fraction(1, 10)  # exactly a tenth, not the float 0.1
    assert policy.framework_env == ("pytorch", "jax")
    assert policy.block_visible_devices_override is False


def test_defaults_of_a_minimal_policy() -> None:
    policy = only_policy(doc("namespaces: [team-a]"))
    assert policy.enforcement is Enforcement.ENFORCE
    assert policy.sharing.mode is Mode.EXCLUSIVE
    assert policy.sharing.replicas is None and policy.sharing.mig_profile is None
    assert policy.sharing.resource_name == "nvidia.com/gpu.shared"
    assert (policy.gpu.model, policy.gpu.memory_mib) == (None, None)
    assert (most_replicas(policy), policy.limits.max_per_pod) == (8, 8)
    assert policy.fractional is Fractional.REJECT
    assert policy.memory_fraction is None
    assert policy.framework_env == ("jax", "tensorflow", "cupy", "tgi", "generic")
    assert policy.block_visible_devices_override is True


def test_shared_modes_default_to_one_gpu_per_container_and_one_over_replicas() -> None:
    policy = only_policy(doc("namespaces: [a]\nsharing: {mode: time-slicing, replicas: 4}"))
    assert most_replicas(policy) == 1  # the device plugin's failRequestsGreaterThanOne
    assert backend_of(policy).shared_fraction(policy) == Fraction(1, 4)
    assert policy.sharing.resource_name == "nvidia.com/gpu.shared"


def test_a_mig_policy() -> None:
    policy = only_policy(doc("namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb+me}\ngpu: {model: H100-80GB}"))
    assert policy.sharing.mig_profile == "1g.10gb+me"
    assert policy.gpu_memory_mib == 81_559  # NVML's figure for an H100 80GB


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.1", Fraction(1, 10)),
        ("0.25", Fraction(1, 4)),
        ("0.50", Fraction(1, 2)),  # one replica's share of 2, the most memoryFraction may be here
        ("5.0e-1", Fraction(1, 2)),
        ("0.333_3", Fraction(3333, 10000)),
        ("2.5e-1", Fraction(1, 4)),
        (".5", Fraction(1, 2)),
        ("1.0e-300", Fraction(1, 10**300)),
    ],
)
def test_memory_fraction_is_exact(text: str, expected: Fraction) -> None:
    assert only_policy(doc(f"{SHARED}memoryFraction: {text}")).memory_fraction == expected


def test_memory_fraction_applies_under_time_slicing_and_mps() -> None:
    assert shared_fraction(only_policy(doc(f"{SHARED}memoryFraction: 0.5"))) == Fraction(1, 2)
    mps = "namespaces: [a]\nsharing: {mode: mps, replicas: 2}\ngpu: {memoryMiB: 1024}\nmemoryFraction: 0.5"
    assert shared_fraction(only_policy(doc(mps))) == Fraction(1, 2)


def test_yaml_integer_forms_are_whole_numbers() -> None:
    policy = only_policy(doc("namespaces: [a]\nlimits: {maxPerContainer: 0x4, maxPerPod: 1_0}"))
    assert (policy.limits.max_per_container, policy.limits.max_per_pod) == (4, 10)


def test_files_in_name_order_documents_in_file_order_and_empty_documents_skipped() -> None:
    sources = {
        "b.yaml": "---\n---\n" + named("b1", "namespaces: [b1]") + "---\n" + named("b2", "namespaces: [b2]") + "---\n",
        "a.yml": named("a", "namespaces: [a]") + "...\n",
    }
    policies = parse_policy_sources(sources).policies
    assert [(p.name, p.source) for p in policies] == [("a", "a.yml#0"), ("b1", "b.yaml#1"), ("b2", "b.yaml#2")]


def test_an_empty_file_and_no_files_give_an_empty_set() -> None:
    assert load("").policies == ()
    assert load("# nothing yet\n").policies == ()
    assert parse_policy_sources({}).policies == ()


def test_anchors_without_aliases_are_fine() -> None:
    assert only_policy(doc("namespaces: &ns [a]")).namespaces == ("a",)


def test_a_utf8_byte_order_mark_is_fine() -> None:
    assert only_policy("\ufeff" + doc("namespaces: [a]")).name == "p"


def test_the_set_is_immutable() -> None:
    policies = load(doc("namespaces: [a]"))
    assert isinstance(policies.policies, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policies.policies[0].name = "other"  # type: ignore[misc]


def test_the_shipped_policies_are_the_default_only_and_the_examples_cover_every_sharing_mode() -> None:
    """policies/ holds what the manifests ship: nothing that maps pods to resources a cluster may not
    advertise. The sharing policies are examples, each for its own example namespaces."""
    (default,) = load_policies(ROOT / "policies").policies
    assert (default.name, default.namespaces) == ("default", ("*",))
    assert (default.sharing.mode, default.enforcement, default.fractional) == (
        Mode.EXCLUSIVE,
        Enforcement.ENFORCE,
        Fractional.REJECT,
    )
    assert (most_replicas(default), default.limits.max_per_pod) == (8, 8)
    examples = load_policies(ROOT / "examples" / "policies")
    modes = {p.name: p.sharing.mode for p in examples.policies}
    assert modes == {
        "batch-mig": Mode.MIG, "inference-mps": Mode.MPS, "notebooks-time-slicing": Mode.TIME_SLICING,
        "notebooks-ack-sharing": Mode.MEMORY, "inference-hami": Mode.MEMORY, "batch-volcano-vgpu": Mode.MEMORY,
    }  # fmt: skip
    assert {p.sharing.backend for p in examples.policies if p.sharing.mode is Mode.MEMORY} == set(Backend)
    for policy in examples.policies:
        assert "*" not in policy.namespaces  # examples select example namespaces only
    assert examples.for_namespace("some-team") is DEFAULT_POLICY


def test_the_built_in_defaults_are_the_shipped_default_policy() -> None:
    """So a server given only examples/policies (`make run`) treats every other namespace as a cluster with
    policies/ would."""
    (default,) = load_policies(ROOT / "policies").policies
    built_in = DEFAULT_POLICY
    assert dataclasses.replace(default, name=built_in.name, source=built_in.source, limits=built_in.limits) == built_in
    assert (most_replicas(default), default.limits.max_per_pod) == (most_replicas(built_in), 8)


# --- Every problem, with its exact line ---------------------------------------------------------------------

SPEC_CASES = [
    # namespaces
    (
        "enforcement: warn",
        "p.yaml#0 spec.namespaces: required; list the namespaces or globs this policy applies "
        'to, e.g. ["team-a", "ml-*"]',
    ),
    (
        "namespaces: team-a",
        'p.yaml#0 spec.namespaces: expected a list of namespaces or globs, got "team-a" (a string); write ["team-a"]',
    ),
    ("namespaces: {a: 1}", "p.yaml#0 spec.namespaces: expected a list of namespaces or globs, got a mapping"),
    (
        "namespaces: []",
        'p.yaml#0 spec.namespaces: empty; list at least one namespace or glob ("*" for every namespace)',
    ),
    ("namespaces: [1]", "p.yaml#0 spec.namespaces[0]: expected a namespace name or glob, got 1 (a whole number)"),
    (
        "namespaces: [a, Team_A]",
        'p.yaml#0 spec.namespaces[1]: "Team_A" is not a valid namespace name; namespace '
        "names are 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    ),
    (
        f"namespaces: [{'a' * 64}]",
        f'p.yaml#0 spec.namespaces[0]: "{"a" * 59}…" is not a valid namespace name; '
        "namespace names are 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    ),
    (
        "namespaces: ['team-[a']",
        'p.yaml#0 spec.namespaces[0]: "team-[a" is not a valid glob: it has a "[" without a closing "]"',
    ),
    (
        "namespaces: ['team-[]']",
        'p.yaml#0 spec.namespaces[0]: "team-[]" is not a valid glob: it has an empty character class "[]"',
    ),
    (
        "namespaces: ['team-[A-Z]']",
        'p.yaml#0 spec.namespaces[0]: "team-[A-Z]" is not a valid glob: it has "A" in '
        "a character class, which no namespace name can contain",
    ),
    (
        "namespaces: ['team-[z-a]']",
        'p.yaml#0 spec.namespaces[0]: "team-[z-a]" is not a valid glob: it has a '
        'character class "[z-a]" that matches no character',
    ),
    (
        "namespaces: ['Team-*']",
        'p.yaml#0 spec.namespaces[0]: "Team-*" is not a valid glob: it contains "T", which '
        "no namespace name can contain",
    ),
    (
        'namespaces: ["team-\\u001b*"]',
        'p.yaml#0 spec.namespaces[0]: "team-\\u001b*" is not a valid glob: it contains '
        '"\\u001b", which no namespace name can contain',
    ),
    (
        'namespaces: ["team-[\\u0085]"]',
        'p.yaml#0 spec.namespaces[0]: "team-[\\u0085]" is not a valid glob: it has '
        '"\\u0085" in a character class, which no namespace name can contain',
    ),
    (
        "namespaces: ['*-']",
        'p.yaml#0 spec.namespaces[0]: "*-" is not a valid glob: it matches no valid namespace '
        "name (names are 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit)",
    ),
    (
        f"namespaces: ['{'?' * 64}']",
        f'p.yaml#0 spec.namespaces[0]: "{"?" * 59}…" is not a valid glob: it matches no '
        "valid namespace name (names are 1-63 lowercase letters, digits and '-', starting and ending with a letter or "
        "digit)",
    ),
    (
        f"namespaces: ['{'*' * 254}']",
        f'p.yaml#0 spec.namespaces[0]: "{"*" * 59}…" is not a valid glob: it is longer than 253 characters',
    ),
    ("namespaces: [a, b, a]", 'p.yaml#0 spec.namespaces[2]: "a" is listed twice in this policy; remove one'),
    # enforcement, fractional
    (
        "namespaces: [a]\nenforcement: Warn",
        'p.yaml#0 spec.enforcement: "Warn" is not one of enforce, warn, audit (did you mean "warn"?)',
    ),
    ("namespaces: [a]\nenforcement: deny", 'p.yaml#0 spec.enforcement: "deny" is not one of enforce, warn, audit'),
    (
        "namespaces: [a]\nenforcement: [warn]",
        "p.yaml#0 spec.enforcement: expected one of enforce, warn, audit, got a list",
    ),
    (
        "namespaces: [a]\nfractional: share",
        'p.yaml#0 spec.fractional: "share" is not one of reject, shared, mig (did you mean "shared"?)',
    ),
    (
        "namespaces: [a]\nfractional: mig",
        "p.yaml#0 spec.fractional: mig needs spec.gpu.model to pick the smallest "
        "MIG profile that holds the fraction; set gpu.model",
    ),
    (
        "namespaces: [a]\nfractional: shared",
        "p.yaml#0 spec.fractional: shared turns a fraction into 1 shared GPU, "
        "which needs sharing.mode time-slicing or mps (mode is exclusive); use reject or mig, or change the mode",
    ),
    (
        "namespaces: [a]\nfractional: shared\nsharing: {mode: mig, migProfile: 1g.10gb}",
        "p.yaml#0 spec.fractional: "
        "shared turns a fraction into 1 shared GPU, which needs sharing.mode time-slicing or mps (mode is mig); use "
        "reject or mig, or change the mode",
    ),
    # sharing
    (
        "namespaces: [a]\nsharing: mig",
        "p.yaml#0 spec.sharing: expected a mapping of mode, replicas, resourceName, "
        "migProfile, migProfiles, migStrategy, backend, placement, isolation, gpuMemoryFactor, deviceMemoryScaling; "
        'got "mig" (a string)',
    ),
    (
        "namespaces: [a]\nsharing: {mode: timeslicing}",
        'p.yaml#0 spec.sharing.mode: "timeslicing" is not one of '
        'exclusive, time-slicing, mps, mig, memory (did you mean "time-slicing"?)',
    ),
    (
        "namespaces: [a]\nsharing: {replica: 4}",
        'p.yaml#0 spec.sharing.replica: unknown field (did you mean "replicas"?)',
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing}",
        "p.yaml#0 spec.sharing.replicas: required when mode is "
        "time-slicing; set the device plugin's replicas per GPU (>= 2)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 1}",
        "p.yaml#0 spec.sharing.replicas: 1 is too small; time-slicing and mps share each GPU as at least 2 replicas",
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: yes}",
        "p.yaml#0 spec.sharing.replicas: expected a "
        "whole number, got true (a boolean; YAML also reads yes/no/on/off as booleans)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: '4'}",
        'p.yaml#0 spec.sharing.replicas: expected a whole number, got "4" (a string)',
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 2.5}",
        "p.yaml#0 spec.sharing.replicas: expected a whole number, got 2.5 (a decimal number)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: " + "9" * 40 + "}",
        "p.yaml#0 spec.sharing.replicas: "
        + "9" * 29
        + "… is too large; time-slicing and mps share each GPU as at least 2 replicas",
    ),
    (
        "namespaces: [a]\nsharing: {replicas: 4}",
        "p.yaml#0 spec.sharing.replicas: only applies when mode is time-slicing or mps (mode is exclusive); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb, resourceName: nvidia.com/gpu.shared}",
        "p.yaml#0 spec.sharing.resourceName: only applies when mode is time-slicing or mps (mode is mig); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mps, replicas: 2, resourceName: gpu shared}\ngpu: {memoryMiB: 1024}",
        'p.yaml#0 spec.sharing.resourceName: "gpu shared" is not an extended resource name; use <domain>/<name>, e.g. '
        "nvidia.com/gpu.shared",
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 2, resourceName: 'nvidia.com/'}",
        "p.yaml#0 "
        'spec.sharing.resourceName: "nvidia.com/" is not an extended resource name; use <domain>/<name>, e.g. '
        "nvidia.com/gpu.shared",
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 2, resourceName: kubernetes.io/gpu}",
        "p.yaml#0 "
        'spec.sharing.resourceName: "kubernetes.io/gpu" is in the kubernetes.io domain, which extended resources may '
        "not use; use <domain>/<name>, e.g. nvidia.com/gpu.shared",
    ),
    # The device plugin may rename to anything; the webhook's rules (and the manifests' matchConditions)
    # recognise only these, so another name would pass every check unseen.
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 2, resourceName: nvidia.com/gpu-ts}",
        "p.yaml#0 "
        'spec.sharing.resourceName: "nvidia.com/gpu-ts" is not a shared GPU resource that the webhook checks; use '
        "nvidia.com/gpu.shared (the device plugin's name with renameByDefault: true) "
        "or nvidia.com/mig-<profile>.shared",
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 2, resourceName: 7}",
        "p.yaml#0 spec.sharing.resourceName: expected a string, got 7 (a whole number)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig}",
        "p.yaml#0 spec.sharing.migProfile: required when mode is mig; name the profile one GPU becomes, e.g. 1g.10gb",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig}\ngpu: {model: A30-24GB}",
        "p.yaml#0 spec.sharing.migProfile: required "
        "when mode is mig; name the profile one GPU becomes, one of 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.11gb}\ngpu: {model: A100-80GB}",
        "p.yaml#0 "
        'spec.sharing.migProfile: "1g.11gb" is not a MIG profile of A100-80GB (valid: 1g.10gb, 1g.10gb+me, 1g.20gb, '
        "2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g10gb}",
        'p.yaml#0 spec.sharing.migProfile: "1g10gb" is '
        "not a MIG profile name; use <slices>g.<memory>gb[+me], e.g. 1g.10gb",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1}",
        "p.yaml#0 spec.sharing.migProfile: expected a string, got 1 (a whole number)",
    ),
    (
        "namespaces: [a]\nsharing: {migProfile: 1g.10gb}",
        "p.yaml#0 spec.sharing.migProfile: only applies when mode is mig (mode is exclusive); remove it",
    ),
    # gpu
    (
        "namespaces: [a]\ngpu: {model: T4}",
        'p.yaml#0 spec.gpu.model: "T4" is not a known GPU model (known: A30-24GB, '
        "A100-40GB, A100-80GB, H100-80GB, H100-NVL-94GB, H200-141GB, GH200-96GB, B200-180GB); or leave it out and "
        "give gpu.memoryMiB",
    ),
    (
        "namespaces: [a]\ngpu: {model: a100-80gb}",
        'p.yaml#0 spec.gpu.model: "a100-80gb" is not a known GPU model '
        "(known: A30-24GB, A100-40GB, A100-80GB, H100-80GB, H100-NVL-94GB, H200-141GB, GH200-96GB, B200-180GB); did "
        'you mean "A100-80GB"?',
    ),
    ("namespaces: [a]\ngpu: {model: 80}", "p.yaml#0 spec.gpu.model: expected a string, got 80 (a whole number)"),
    (
        "namespaces: [a]\ngpu: {memoryMiB: 0}",
        "p.yaml#0 spec.gpu.memoryMiB: 0 is too small; the GPU's memory in MiB is at least 1",
    ),
    (
        "namespaces: [a]\ngpu: {memoryMiB: 80Gi}",
        'p.yaml#0 spec.gpu.memoryMiB: expected a whole number, got "80Gi" (a string)',
    ),
    ("namespaces: [a]\ngpu: {memory: 1}", 'p.yaml#0 spec.gpu.memory: unknown field (did you mean "memoryMiB"?)'),
    (
        "namespaces: [a]\nsharing: {mode: mps, replicas: 2}",
        "p.yaml#0 spec.gpu: mps mode needs gpu.model or "
        "gpu.memoryMiB: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is a share of the GPU's memory; add one",
    ),
    # memory-sliced sharing
    (
        "namespaces: [a]\nsharing: {mode: memory}\ngpu: {model: A100-80GB}",
        "p.yaml#0 spec.sharing.backend: required "
        "when mode is memory; name the device plugin that slices the GPU's memory: ack, hami or volcano",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: gke}\ngpu: {model: A100-80GB}",
        'p.yaml#0 spec.sharing.backend: "gke" is not one of ack, hami, volcano',
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami, placement: pack}\ngpu: {model: A100-80GB}",
        'p.yaml#0 spec.sharing.placement: "pack" is not one of binpack, spread (did you mean "binpack"?)',
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: ack}",
        "p.yaml#0 spec.gpu: memory mode needs gpu.model or "
        "gpu.memoryMiB: a fraction of a GPU becomes that share of its memory; add one",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: volcano, placement: spread}\ngpu: {memoryMiB: 24576}",
        "p.yaml#0 spec.sharing.placement: Volcano reads binpack or spread only from its scheduler's configuration "
        "(the deviceshare plugin's deviceshare.SchedulePolicy), for every pod alike; set it there and remove placement",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami, isolation: none}\ngpu: {model: A100-80GB}",
        "p.yaml#0 spec.sharing.isolation: applies only to backend ack, whose node pools differ in it "
        "(ack.node.gpu.schedule); hami's vGPUs always cap the memory a container sees; remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: ack, isolation: cgpu}\ngpu: {model: A100-80GB}",
        'p.yaml#0 spec.sharing.isolation: "cgpu" is not one of required, none',
    ),
    (
        "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 4, isolation: required}",
        "p.yaml#0 spec.sharing.isolation: only applies when mode is memory (mode is time-slicing); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami}\ngpu: {model: A100-80GB}\nfractional: shared",
        "p.yaml#0 spec.fractional: does not apply when mode is memory: every fraction becomes the backend's share of "
        "the GPU's memory; remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami}\ngpu: {model: A100-80GB}\nmemoryFraction: 0.5",
        "p.yaml#0 spec.memoryFraction: only applies when mode is time-slicing or mps (mode is memory); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {backend: ack}",
        "p.yaml#0 spec.sharing.backend: only applies when mode is memory (mode is exclusive); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb, placement: spread}",
        "p.yaml#0 spec.sharing.placement: only applies when mode is memory (mode is mig); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami, gpuMemoryFactor: 10}\ngpu: {model: A100-80GB}",
        "p.yaml#0 spec.sharing.gpuMemoryFactor: is the Volcano vGPU device plugin's gpuMemoryFactor: it only applies "
        "when backend is volcano (backend is hami); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: volcano, deviceMemoryScaling: 2}\ngpu: {model: H100-80GB}",
        "p.yaml#0 spec.sharing.deviceMemoryScaling: is HAMi's deviceMemoryScaling: it only applies when backend is "
        "hami (backend is volcano); the Volcano vGPU device plugin registers each GPU's memory unscaled, whatever its "
        "own; remove it",
    ),
    (
        "namespaces: [a]\nsharing: {deviceMemoryScaling: 2}",
        "p.yaml#0 spec.sharing.deviceMemoryScaling: is HAMi's deviceMemoryScaling: it only applies when backend is "
        "hami (mode is not memory); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: volcano, gpuMemoryFactor: 0}\ngpu: {model: H100-80GB}",
        "p.yaml#0 spec.sharing.gpuMemoryFactor: 0 is too small; one unit of volcano.sh/vgpu-memory is at least 1 MiB "
        "(the device plugin's gpuMemoryFactor, default 1)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: volcano, gpuMemoryFactor: 2.5}\ngpu: {model: H100-80GB}",
        "p.yaml#0 spec.sharing.gpuMemoryFactor: expected a whole number, got 2.5 (a decimal number)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami, deviceMemoryScaling: 0}\ngpu: {model: A100-80GB}",
        "p.yaml#0 spec.sharing.deviceMemoryScaling: 0 is out of range; HAMi registers each GPU's memory times this: "
        "greater than 0 and at most 100 (default 1)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami, deviceMemoryScaling: 100.5}\ngpu: {model: A100-80GB}",
        "p.yaml#0 spec.sharing.deviceMemoryScaling: 100.5 is out of range; HAMi registers each GPU's memory times "
        "this: greater than 0 and at most 100 (default 1)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: memory, backend: hami, deviceMemoryScaling: two}\ngpu: {model: A100-80GB}",
        'p.yaml#0 spec.sharing.deviceMemoryScaling: expected a number, got "two" (a string); HAMi registers each '
        "GPU's memory times this: greater than 0 and at most 100 (default 1)",
    ),
    # limits
    (
        "namespaces: [a]\nlimits: {maxPerContainer: 0}",
        "p.yaml#0 spec.limits.maxPerContainer: 0 is too small; a container may hold at least 1 GPU",
    ),
    (
        "namespaces: [a]\nlimits: {maxPerPod: -1}",
        "p.yaml#0 spec.limits.maxPerPod: -1 is too small; a pod may hold at least 1 GPU",
    ),
    (
        "namespaces: [a]\nlimits: {maxPerPod: on}",
        "p.yaml#0 spec.limits.maxPerPod: expected a whole number, got true "
        "(a boolean; YAML also reads yes/no/on/off as booleans)",
    ),
    (
        "namespaces: [a]\nlimits: {maxPerNode: 1}",
        'p.yaml#0 spec.limits.maxPerNode: unknown field (did you mean "maxPerPod"?)',
    ),
    (
        "namespaces: [a]\nlimits:",
        "p.yaml#0 spec.limits: expected a mapping of maxPerContainer, maxPerPod; got an empty value (null)",
    ),
    # memoryFraction
    (
        SHARED + "memoryFraction: 0.75",
        "p.yaml#0 spec.memoryFraction: 0.75 is more than one replica's share (1/2 of "
        "a GPU): 2 containers share each GPU, so every GPU would be overcommitted; set at most 0.5",
    ),
    (
        SHARED + "memoryFraction: 1",
        "p.yaml#0 spec.memoryFraction: 1 is more than one replica's share (1/2 of "
        "a GPU): 2 containers share each GPU, so every GPU would be overcommitted; set at most 0.5",
    ),
    # migProfiles
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb, migProfiles: [2g.20gb]}\ngpu: {model: A100-80GB}",
        'p.yaml#0 spec.sharing.migProfile: "1g.10gb" is not in migProfiles (2g.20gb): one GPU would become a slice '
        "the nodes do not offer; pick one of them",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb, migProfiles: [1g.10gb, 1g.5gb]}\n"
        "gpu: {model: A100-80GB}",
        'p.yaml#0 spec.sharing.migProfiles[1]: "1g.5gb" is not a MIG profile of A100-80GB (valid: 1g.10gb, '
        "1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb, migProfiles: []}\ngpu: {model: A100-80GB}",
        "p.yaml#0 spec.sharing.migProfiles: is empty; list the profiles the nodes' MIG layout offers (mig-parted's "
        "config)",
    ),
    (
        SHARED.replace("replicas: 2", "replicas: 2, migProfiles: [1g.10gb]"),
        "p.yaml#0 spec.sharing.migProfiles: only applies when mode is mig (mode is time-slicing); remove it",
    ),
    (
        SHARED + "memoryFraction: 0",
        "p.yaml#0 spec.memoryFraction: 0 is out of range; a share of the GPU's "
        "memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: 1.5",
        "p.yaml#0 spec.memoryFraction: 1.5 is out of range; a share of the "
        "GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: -0.25",
        "p.yaml#0 spec.memoryFraction: -0.25 is out of range; a share of the "
        "GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: 1.0e+99999",
        "p.yaml#0 spec.memoryFraction: 1.0e+99999 is out of range; a "
        "share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: 0." + "0" * 5000 + "1",
        "p.yaml#0 spec.memoryFraction: 0." + "0" * 27 + "… is "
        "out of range; a share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: .inf",
        "p.yaml#0 spec.memoryFraction: expected a number, got .inf (a decimal "
        "number); a share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: '0.5'",
        'p.yaml#0 spec.memoryFraction: expected a number, got "0.5" (a '
        "string); a share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: 50%",
        'p.yaml#0 spec.memoryFraction: expected a number, got "50%" (a '
        "string); a share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: true",
        "p.yaml#0 spec.memoryFraction: expected a number, got true (a "
        "boolean; YAML also reads yes/no/on/off as booleans); a share of the GPU's memory is greater than 0 and at "
        "most 1, e.g. 0.25",
    ),
    (
        SHARED + "memoryFraction: 2024-01-01",
        "p.yaml#0 spec.memoryFraction: expected a number, got "
        "2024-01-01 (a date); a share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25",
    ),
    (
        "namespaces: [a]\nmemoryFraction: 0.25",
        "p.yaml#0 spec.memoryFraction: only applies when mode is time-slicing or mps (mode is exclusive); remove it",
    ),
    (
        "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb}\nmemoryFraction: 0.25",
        "p.yaml#0 spec.memoryFraction: only applies when mode is time-slicing or mps (mode is mig); remove it",
    ),
    # frameworkEnv
    (
        "namespaces: [a]\nframeworkEnv: [torch]",
        'p.yaml#0 spec.frameworkEnv[0]: "torch" is not one of jax, '
        'tensorflow, cupy, tgi, generic, pytorch (did you mean "pytorch"?)',
    ),
    ("namespaces: [a]\nframeworkEnv: [jax, jax]", 'p.yaml#0 spec.frameworkEnv[1]: "jax" is listed twice; remove one'),
    # trustedSchedulers
    (
        "namespaces: [a]\ntrustedSchedulers: [KAI_Scheduler]",
        'p.yaml#0 spec.trustedSchedulers[0]: "KAI_Scheduler" is '
        "not a scheduler name (spec.schedulerName is a DNS subdomain: lowercase letters, digits, '-' and '.'); "
        "write it as pods name it, e.g. kai-scheduler",
    ),
    (
        "namespaces: [a]\ntrustedSchedulers: [kai-scheduler, kai-scheduler]",
        'p.yaml#0 spec.trustedSchedulers[1]: "kai-scheduler" is listed twice; remove one',
    ),
    (
        "namespaces: [a]\ntrustedSchedulers: kai-scheduler",
        'p.yaml#0 spec.trustedSchedulers: expected a list of scheduler names, got "kai-scheduler" (a string)',
    ),
    (
        "namespaces: [a]\nframeworkEnv: jax",
        "p.yaml#0 spec.frameworkEnv: expected a list of frameworks (jax, "
        'tensorflow, cupy, tgi, generic, pytorch), got "jax" (a string)',
    ),
    (
        "namespaces: [a]\nframeworkEnv: [{jax: 1}]",
        "p.yaml#0 spec.frameworkEnv[0]: expected a framework name, got a mapping",
    ),
    # blockVisibleDevicesOverride
    (
        "namespaces: [a]\nblockVisibleDevicesOverride: 'no'",
        'p.yaml#0 spec.blockVisibleDevicesOverride: expected true or false, got "no" (a string)',
    ),
    (
        "namespaces: [a]\nblockVisibleDevicesOverride: 1",
        "p.yaml#0 spec.blockVisibleDevicesOverride: expected true or false, got 1 (a whole number)",
    ),
    # unknown and duplicate fields
    (
        "namespaces: [a]\nmemoryfraction: 0.5",
        'p.yaml#0 spec.memoryfraction: unknown field (did you mean "memoryFraction"?)',
    ),
    (
        "namespaces: [a]\nflavour: blue",
        "p.yaml#0 spec.flavour: unknown field (known fields: namespaces, enforcement, "
        "sharing, gpu, limits, fractional, memoryFraction, frameworkEnv, blockVisibleDevicesOverride, "
        "trustedSchedulers, steering, cluster, deviceClasses)",
    ),
    (
        "namespaces: [a]\nenforcement: warn\nenforcement: enforce",
        "p.yaml#0 spec.enforcement: duplicate key; remove one of them",
    ),
]


@pytest.mark.parametrize(("spec", "line"), SPEC_CASES, ids=[line.split(":")[0] for _, line in SPEC_CASES])
def test_each_spec_problem_is_one_exact_line(spec: str, line: str) -> None:
    assert problems(doc(spec)) == [line]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("- a\n", "p.yaml#0: a policy document must be a mapping with apiVersion, kind, metadata, spec; got a list"),
        (
            "hello\n",
            'p.yaml#0: a policy document must be a mapping with apiVersion, kind, metadata, spec; got "hello" '
            "(a string)",
        ),
        (
            doc("namespaces: [a]").replace("apiVersion: gpu-admission.io/v1\n", ""),
            "p.yaml#0 apiVersion: required; set it to gpu-admission.io/v1",
        ),
        (
            doc("namespaces: [a]").replace("gpu-admission.io/v1", "v1"),
            'p.yaml#0 apiVersion: "v1" is not supported; use gpu-admission.io/v1',
        ),
        (
            doc("namespaces: [a]").replace("gpu-admission.io/v1", "1"),
            "p.yaml#0 apiVersion: expected a string, got 1 (a whole number)",
        ),
        (
            doc("namespaces: [a]").replace("kind: GPUPolicy", "kind: Policy"),
            'p.yaml#0 kind: "Policy" is not supported; use GPUPolicy',
        ),
        (doc("namespaces: [a]").replace("kind: GPUPolicy\n", ""), "p.yaml#0 kind: required; set it to GPUPolicy"),
        (
            doc("namespaces: [a]") + "status: {}\n",
            "p.yaml#0 status: unknown field (known fields: apiVersion, kind, metadata, spec)",
        ),
        (
            doc("namespaces: [a]").replace("metadata:\n  name: p\n", ""),
            "p.yaml#0 metadata.name: required; give the policy a unique name",
        ),
        (
            doc("namespaces: [a]").replace("metadata:\n  name: p\n", "metadata: p\n"),
            'p.yaml#0 metadata: expected a mapping of name; got "p" (a string)',
        ),
        (
            doc("namespaces: [a]").replace("  name: p\n", "  labels: {}\n  name: p\n"),
            "p.yaml#0 metadata.labels: unknown field (known fields: name)",
        ),
        (
            doc("namespaces: [a]").replace("name: p", "name: My_Policy"),
            "p.yaml#0 metadata.name: \"My_Policy\" is not a valid name; use lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit",
        ),
        (
            doc("namespaces: [a]").replace("name: p", "name: 7"),
            "p.yaml#0 metadata.name: expected a string, got 7 (a whole number)",
        ),
        (HEAD, "p.yaml#0 spec: required; a policy needs at least spec.namespaces"),
        (
            HEAD + "spec: [a]\n",
            "p.yaml#0 spec: expected a mapping of namespaces, enforcement, sharing, gpu, limits, "
            "fractional, memoryFraction, frameworkEnv, blockVisibleDevicesOverride, trustedSchedulers, "
            "steering, cluster, deviceClasses; got a list",
        ),
        (doc("namespaces: [a]") + "1: x\n", "p.yaml#0: keys must be strings, got 1 (a whole number)"),
        (doc("namespaces: [a]") + "? [a]\n: x\n", "p.yaml#0: keys must be strings, got a list"),
    ],
)
def test_each_document_problem_is_one_exact_line(text: str, line: str) -> None:
    assert problems(text) == [line]


def test_every_problem_is_listed_not_just_the_first() -> None:
    text = doc(
        """
        namespaces: [Bad_Name]
        enforcement: maybe
        sharing: {mode: mig, migProfile: 9g.99gb}
        gpu: {model: A100-80GB}
        limits: {maxPerPod: 0}
        """
    )
    assert problems(text) == [
        'p.yaml#0 spec.namespaces[0]: "Bad_Name" is not a valid namespace name; namespace names are 1-63 lowercase '
        "letters, digits and '-', starting and ending with a letter or digit",
        'p.yaml#0 spec.enforcement: "maybe" is not one of enforce, warn, audit',
        'p.yaml#0 spec.sharing.migProfile: "9g.99gb" is not a MIG profile of A100-80GB (valid: 1g.10gb, 1g.10gb+me, '
        "1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)",
        "p.yaml#0 spec.limits.maxPerPod: 0 is too small; a pod may hold at least 1 GPU",
    ]


def test_problems_name_the_file_and_document_in_file_then_document_order() -> None:
    sources = {
        "b.yaml": "---\n" + named("b0", "namespaces: [b]") + "---\n" + named("b1", "namespaces: [c]\nenforcement: x"),
        "a.yaml": named("a", "namespaces: [a]\nfractional: x"),
    }
    assert problems(sources) == [
        'a.yaml#0 spec.fractional: "x" is not one of reject, shared, mig',
        'b.yaml#1 spec.enforcement: "x" is not one of enforce, warn, audit',
    ]


def test_a_long_value_is_shortened_in_its_message() -> None:
    (line,) = problems(doc(f"namespaces: [a]\nenforcement: {'x' * 200}"))
    assert line == f'p.yaml#0 spec.enforcement: "{"x" * 59}…" is not one of enforce, warn, audit'


def test_a_key_that_is_not_plain_is_quoted_so_its_problem_stays_one_line() -> None:
    text = doc('namespaces: [a]\n"foo\\nDENY fake\\u001b[31m": 1\n"x y": 2\nteam_a.b/c-d: 3')
    known = (
        "unknown field (known fields: namespaces, enforcement, sharing, gpu, limits, fractional, memoryFraction, "
        "frameworkEnv, blockVisibleDevicesOverride, trustedSchedulers, steering, cluster, deviceClasses)"
    )
    assert problems(text) == [
        f'p.yaml#0 spec."foo\\nDENY fake\\u001b[31m": {known}',
        f'p.yaml#0 spec."x y": {known}',
        f"p.yaml#0 spec.team_a.b/c-d: {known}",  # letters, digits, _ - . / stay as they are
    ]


def test_a_quoted_value_escapes_every_character_a_terminal_would_not_show_as_written() -> None:
    # NEL and LINE SEPARATOR break lines for some readers; RIGHT-TO-LEFT OVERRIDE reorders what follows it.
    assert problems(doc('namespaces: [a]\nenforcement: "\\u0085x\\u2028\\u202e"')) == [
        'p.yaml#0 spec.enforcement: "\\u0085x\\u2028\\u202e" is not one of enforce, warn, audit'
    ]


def test_too_many_problems_in_one_file_are_summarised() -> None:
    entries = ", ".join(f"Bad{i}" for i in range(MAX_PROBLEMS_PER_FILE + 5))
    lines = problems(doc(f"namespaces: [{entries}]"))
    assert len(lines) == MAX_PROBLEMS_PER_FILE + 1
    assert lines[-1] == "p.yaml: 5 more problems in this file not shown"


# --- Across the set ----------------------------------------------------------------------------------------


def test_policy_names_are_unique_across_files() -> None:
    assert problems({"a.yaml": named("x", "namespaces: [a]"), "b.yaml": named("x", "namespaces: [b]")}) == [
        'b.yaml#0 metadata.name: "x" is already the name of the policy in a.yaml#0; give each policy a unique name'
    ]


def test_the_same_glob_in_two_policies_names_both() -> None:
    sources = {"a.yaml": named("a", "namespaces: ['team-*']"), "b.yaml": named("b", "namespaces: [b, 'team-*']")}
    assert problems(sources) == [
        'b.yaml#0 spec.namespaces[1]: glob "team-*" is listed by both policy "a" (a.yaml#0) and policy "b" '
        "(b.yaml#0); keep it in one of them"
    ]


def test_the_same_namespace_in_two_policies_of_one_file_names_both() -> None:
    text = named("a", "namespaces: [x]") + "---\n" + named("b", "namespaces: [x]")
    assert problems(text) == [
        'p.yaml#1 spec.namespaces[0]: namespace "x" is listed by both policy "a" (p.yaml#0) and policy "b" '
        "(p.yaml#1); keep it in one of them"
    ]


def test_different_globs_that_may_tie_are_not_a_load_error() -> None:
    sources = {"a.yaml": named("a", "namespaces: ['team-*']"), "b.yaml": named("b", "namespaces: ['*-dev']")}
    policies = parse_policy_sources(sources)
    assert policies.for_namespace("team-dev").name == "a"  # file order; `policy lint` warns


# --- YAML, and hostile input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: 1\n b: 2\n", "p.yaml#0: invalid YAML at line 2, column 3: mapping values are not allowed in this context"),
        (
            "a: [1\n",
            "p.yaml#0: invalid YAML at line 2, column 1: did not find expected ',' or ']' (while parsing a "
            "flow sequence)",
        ),
        (
            "a: 'x\n",
            "p.yaml#0: invalid YAML at line 2, column 1: found unexpected end of stream (while scanning a "
            "quoted scalar)",
        ),
        ("a: 1\nb: é\x00\n", "p.yaml#0: invalid YAML at line 2: control characters are not allowed (character #x0000)"),
        ("a: \ud800\n", "p.yaml#0: not valid Unicode text (a lone surrogate?); save the file as UTF-8"),
        (
            "a: &x [1]\nb: *x\n",
            "p.yaml#0: YAML alias *x at line 2, column 4 is not allowed in policy files (aliases "
            "can expand exponentially); write the value out",
        ),
        ("a: !foo 1\n", "p.yaml#0: unsupported YAML tag !foo at line 1, column 4; remove the tag"),
        (
            "a: !!python/name:os.system ''\n",
            "p.yaml#0: unsupported YAML tag tag:yaml.org,2002:python/name:os.system "
            "at line 1, column 4; remove the tag",
        ),
        ("a: !!set {x}\n", "p.yaml#0: unsupported YAML tag tag:yaml.org,2002:set at line 1, column 4; remove the tag"),
        (
            "[" * 40 + "]" * 40,
            f"p.yaml#0: nesting deeper than {MAX_DEPTH} levels at line 1, column {MAX_DEPTH + 1}; "
            "a policy document nests 4 levels deep",
        ),
    ],
)
def test_yaml_problems_are_one_exact_line(text: str, line: str) -> None:
    assert problems(text) == [line]


NOT_WHOLE = "is not a whole number; write one (e.g. 4) or remove the tag"


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        (
            "namespaces: [a]\nlimits: {maxPerPod: !!int abc}",
            f'p.yaml#0 spec.limits.maxPerPod: !!int "abc" at line 7, column 23 {NOT_WHOLE}',
        ),
        (
            "namespaces: [a]\nlimits: {maxPerPod: !!int ''}",
            f'p.yaml#0 spec.limits.maxPerPod: !!int "" at line 7, column 23 {NOT_WHOLE}',
        ),
        (
            "namespaces: [a]\nlimits: {maxPerPod: !!int 0x}",
            f'p.yaml#0 spec.limits.maxPerPod: !!int "0x" at line 7, column 23 {NOT_WHOLE}',
        ),
        (
            "namespaces: [a]\nlimits: {maxPerPod: !!int 0xZZ}",
            f'p.yaml#0 spec.limits.maxPerPod: !!int "0xZZ" at line 7, column 23 {NOT_WHOLE}',
        ),
        (
            "namespaces: [a]\nlimits: {maxPerPod: !!int 09}",  # a leading 0 is octal in YAML 1.1
            f'p.yaml#0 spec.limits.maxPerPod: !!int "09" at line 7, column 23 {NOT_WHOLE}',
        ),
        (
            "namespaces: [a]\nlimits: {maxPerPod: !<tag:yaml.org,2002:int> abc}",
            f'p.yaml#0 spec.limits.maxPerPod: !!int "abc" at line 7, column 23 {NOT_WHOLE}',
        ),
        # Untagged, YAML 1.1 still reads a 0x or 0b prefix as a number.
        (
            "namespaces: [a]\nlimits: {maxPerPod: 0x_}",
            'p.yaml#0 spec.limits.maxPerPod: "0x_" at line 7, column 23 '
            "is not a whole number (a 0x or 0b prefix needs digits); write one (e.g. 4) or quote it",
        ),
        (
            "namespaces: [a]\nblockVisibleDevicesOverride: !!bool maybe",
            "p.yaml#0 spec.blockVisibleDevicesOverride: "
            '!!bool "maybe" at line 7, column 32 is not a boolean; write true or false',
        ),
        (
            SHARED + "memoryFraction: !!float abc",
            'p.yaml#0 spec.memoryFraction: !!float "abc" at line 8, column 19 is '
            "not a number; write one (e.g. 0.25) or remove the tag",
        ),
        ("namespaces: [a, !!int x]", f'p.yaml#0 spec.namespaces[1]: !!int "x" at line 6, column 19 {NOT_WHOLE}'),
        (
            "namespaces: [a]\n!!bool maybe: 1",
            'p.yaml#0 spec: !!bool "maybe" at line 7, column 3 is not a boolean; write true or false',
        ),
        # Kept as text, and shown on one line whatever it holds.
        (
            SHARED + 'memoryFraction: !!binary "a\\nb"',
            'p.yaml#0 spec.memoryFraction: expected a number, got "a\\nb" '
            "(binary); a share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25",
        ),
    ],
)
def test_a_value_that_its_yaml_tag_cannot_hold_is_one_exact_line_at_its_position(spec: str, line: str) -> None:
    """Reported once, where it stands: validation does not describe the same value again."""
    assert problems(doc(spec)) == [line]


def test_tagged_values_that_fit_their_tags_load() -> None:
    policy = only_policy(
        doc(
            f"{SHARED}limits: {{maxPerPod: !!int 0x10}}\nmemoryFraction: !!float 0.5\n"
            "blockVisibleDevicesOverride: !!bool off"
        )
    )
    assert (policy.limits.max_per_pod, policy.memory_fraction, policy.block_visible_devices_override) == (
        16,
        Fraction(1, 2),
        False,
    )


def test_a_yaml_error_in_a_later_document_names_that_document() -> None:
    text = named("a", "namespaces: [a]") + "---\n" + "b: [\n"
    assert problems(text) == [
        "p.yaml#1: invalid YAML at line 9, column 1: did not find expected node content (while parsing a flow node)"
    ]


def test_a_billion_laughs_bomb_fails_fast() -> None:
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [{','.join(['*' + previous] * 9)}]\n"
    start = time.perf_counter()
    assert problems(bomb) == [
        "p.yaml#0: YAML alias *a at line 2, column 8 is not allowed in policy files (aliases can expand "
        "exponentially); write the value out"
    ]
    assert time.perf_counter() - start < 1


def test_a_50_mb_source_fails_fast() -> None:
    start = time.perf_counter()
    assert problems("x" * (50 * 1024 * 1024)) == [
        "p.yaml: 52428800 bytes is larger than the 1 MiB limit for a policy file; policy files are small: split or "
        "trim it"
    ]
    assert time.perf_counter() - start < 1


def test_the_size_limit_counts_utf8_bytes() -> None:
    text = "é" * (MAX_FILE_BYTES // 2 + 1)  # fewer characters than the limit, more bytes
    assert problems(text) == [
        f"p.yaml: {MAX_FILE_BYTES + 2} bytes is larger than the 1 MiB limit for a policy file; policy files are "
        "small: split or trim it"
    ]


def test_a_file_of_too_many_values_fails_fast() -> None:
    text = "[" + "1," * MAX_EVENTS + "1]"
    start = time.perf_counter()
    (line,) = problems(text)
    assert line == (
        f"p.yaml#0: has more than {MAX_EVENTS} YAML values (at line 1, column {2 * MAX_EVENTS - 4}); policy files "
        "are small: split or trim it"
    )
    assert time.perf_counter() - start < 2


def test_deep_nesting_fails_fast_without_recursion() -> None:
    deep = "[" * 400_000 + "]" * 400_000
    start = time.perf_counter()
    assert problems(deep)[0].startswith(f"p.yaml#0: nesting deeper than {MAX_DEPTH} levels")
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize("parser", [FAST_PARSER, PURE_PARSER], ids=["libyaml", "pure-python"])
@pytest.mark.parametrize("depth", [40, 1_500, 50_000])
def test_the_nesting_message_is_ours_whichever_parser_reads(parser: type, depth: int) -> None:
    # libyaml from 0.2.6 refuses 1,000 levels itself, in words of its own: the loader's limit must speak first.
    _, stopped = yamlreader.read_documents("a: " + "[" * depth + "]" * depth + "\n", parser)
    assert stopped == f"nesting deeper than {MAX_DEPTH} levels at line 1, column {MAX_DEPTH + 3}; " + (
        "a policy document nests 4 levels deep"
    )


# --- load_policies: the directory ---------------------------------------------------------------------------


@pytest.fixture
def policy_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty `pol/` directory, as the current directory's child (messages name it as given)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pol").mkdir()
    return tmp_path / "pol"


def load_problems(directory: str | Path) -> list[str]:
    with pytest.raises(PolicyLoadError) as info:
        load_policies(directory)
    return info.value.problems


def test_files_are_named_as_the_directory_was_given(policy_dir: Path) -> None:
    (policy_dir / "mig.yaml").write_text(
        named("a", "namespaces: [a]")
        + "---\n"
        + named("m", "namespaces: [m]\nsharing: {mode: mig, migProfile: 1g.11gb}\ngpu: {model: A100-80GB}")
    )
    expected = (
        'spec.sharing.migProfile: "1g.11gb" is not a MIG profile of A100-80GB (valid: 1g.10gb, 1g.10gb+me, 1g.20gb, '
        "2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)"
    )
    assert load_problems("pol") == [f"pol/mig.yaml#1 {expected}"]
    assert load_problems("pol/") == [f"pol/mig.yaml#1 {expected}"]
    assert load_problems(Path("pol")) == [f"pol/mig.yaml#1 {expected}"]


def test_sources_of_loaded_policies(policy_dir: Path) -> None:
    (policy_dir / "b.yml").write_text(named("b", "namespaces: [b]"))
    (policy_dir / "a.yaml").write_text(named("a", "namespaces: [a]"))
    (policy_dir / "notes.md").write_text("not a policy")
    (policy_dir / "c.json").write_text("{}")
    (policy_dir / ".hidden.yaml").write_text("not: loaded")
    assert [(p.name, p.source) for p in load_policies("pol").policies] == [("a", "pol/a.yaml#0"), ("b", "pol/b.yml#0")]


def test_the_set_names_every_file_read_even_those_without_policies(policy_dir: Path) -> None:
    (policy_dir / "a.yaml").write_text(named("a", "namespaces: [a]"))
    (policy_dir / "b.yml").write_text("# later\n---\n")
    (policy_dir / "notes.md").write_text("not a policy")
    assert load_policies("pol").files == ("pol/a.yaml", "pol/b.yml")  # `policy lint` counts them
    assert parse_policy_sources({"x.yaml": ""}).files == ("x.yaml",)


def test_a_configmap_volume_layout_loads_once(policy_dir: Path) -> None:
    """Kubernetes mounts a ConfigMap as `..<timestamp>/` files, `..data -> ..<timestamp>` and `x -> ..data/x`."""
    version = policy_dir / "..2026_01_01_00_00_00.000000001"
    version.mkdir()
    (version / "default.yaml").write_text(named("default", "namespaces: ['*']"))
    (policy_dir / "..data").symlink_to(version.name)
    (policy_dir / "default.yaml").symlink_to("..data/default.yaml")
    assert [(p.name, p.source) for p in load_policies("pol").policies] == [("default", "pol/default.yaml#0")]


def test_an_empty_directory_is_an_empty_set(policy_dir: Path) -> None:
    assert load_policies("pol").policies == ()


def test_a_missing_directory_is_an_error(policy_dir: Path) -> None:
    assert load_problems("nope") == [
        "nope: no such policy directory; create it, or name the directory that holds the policy files"
    ]


def test_a_file_instead_of_a_directory_is_an_error(policy_dir: Path) -> None:
    (policy_dir / "x.yaml").write_text("")
    assert load_problems("pol/x.yaml") == ["pol/x.yaml: not a directory; policies are *.yaml files in a directory"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads anything")
def test_an_unreadable_directory_and_file_are_errors(policy_dir: Path) -> None:
    (policy_dir / "x.yaml").write_text("")
    (policy_dir / "x.yaml").chmod(0)
    assert load_problems("pol") == ["pol/x.yaml: cannot read: Permission denied"]
    policy_dir.chmod(0)
    try:
        assert load_problems("pol") == ["pol: cannot read the policy directory: Permission denied"]
    finally:
        policy_dir.chmod(0o755)


def test_a_file_that_is_not_utf8(policy_dir: Path) -> None:
    (policy_dir / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert load_problems("pol") == ["pol/latin1.yaml: not UTF-8 text (byte 0xe9 at offset 9); save the file as UTF-8"]


def test_a_utf16_file_is_not_utf8(policy_dir: Path) -> None:
    (policy_dir / "wide.yaml").write_bytes(named("a", "namespaces: [a]").encode("utf-16"))
    assert load_problems("pol") == ["pol/wide.yaml: not UTF-8 text (byte 0xff at offset 0); save the file as UTF-8"]


def test_a_large_file_is_refused_before_reading(policy_dir: Path) -> None:
    with open(policy_dir / "big.yaml", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # sparse: 50 MB of NULs without writing them
    start = time.perf_counter()
    assert load_problems("pol") == [
        "pol/big.yaml: 52428800 bytes is larger than the 1 MiB limit for a policy file; policy files are small: split "
        "or trim it"
    ]
    assert time.perf_counter() - start < 1


def test_a_symlink_to_an_endless_device_is_refused(policy_dir: Path) -> None:
    (policy_dir / "zero.yaml").symlink_to("/dev/zero")
    assert load_problems("pol") == ["pol/zero.yaml: not a regular file; a policy file must be a plain YAML file"]


def test_a_fifo_is_refused_without_blocking(policy_dir: Path) -> None:
    os.mkfifo(policy_dir / "pipe.yaml")
    assert load_problems("pol") == ["pol/pipe.yaml: not a regular file; a policy file must be a plain YAML file"]


def test_a_directory_named_like_a_policy_file_is_refused(policy_dir: Path) -> None:
    (policy_dir / "dir.yaml").mkdir()
    assert load_problems("pol") == ["pol/dir.yaml: not a regular file; a policy file must be a plain YAML file"]


def test_a_broken_symlink_is_an_error(policy_dir: Path) -> None:
    (policy_dir / "gone.yaml").symlink_to("nowhere.yaml")
    assert load_problems("pol") == ["pol/gone.yaml: cannot read: no such file (a broken symlink?)"]


def test_problems_from_reading_and_parsing_come_in_file_order(policy_dir: Path) -> None:
    (policy_dir / "a.yaml").write_bytes(b"\xff")
    (policy_dir / "b.yaml").write_text(named("b", "namespaces: [b]\nenforcement: nope"))
    (policy_dir / "c.yaml").symlink_to("missing")
    assert load_problems("pol") == [
        "pol/a.yaml: not UTF-8 text (byte 0xff at offset 0); save the file as UTF-8",
        'pol/b.yaml#0 spec.enforcement: "nope" is not one of enforce, warn, audit',
        "pol/c.yaml: cannot read: no such file (a broken symlink?)",
    ]


# --- Anything at all: problem lines, never a traceback ------------------------------------------------------

_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["*", "team-*", "mig", "mps", "time-slicing", "1g.10gb", "A100-80GB", "0.5", "jax"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
_FIELDS = {
    "namespaces": _VALUES,
    "enforcement": _VALUES,
    "sharing": st.fixed_dictionaries(
        {}, optional=dict.fromkeys(("mode", "replicas", "resourceName", "migProfile"), _VALUES)
    ),
    "gpu": st.fixed_dictionaries({}, optional=dict.fromkeys(("model", "memoryMiB"), _VALUES)),
    "limits": st.fixed_dictionaries({}, optional=dict.fromkeys(("maxPerContainer", "maxPerPod"), _VALUES)),
    "fractional": _VALUES,
    "memoryFraction": _VALUES,
    "frameworkEnv": _VALUES,
    "blockVisibleDevicesOverride": _VALUES,
}


def _loads_or_explains(text: str) -> None:
    """Loads, or fails with problem lines: one line each, nothing a terminal would not show as written."""
    try:
        parse_policy_sources({"p.yaml": text})
    except PolicyLoadError as exc:
        assert exc.problems
        assert all(line.startswith("p.yaml") and line.isprintable() for line in exc.problems), exc.problems


@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({}, optional=_FIELDS))
def test_any_spec_loads_or_fails_with_problem_lines(spec: dict) -> None:
    _loads_or_explains(HEAD + yaml.safe_dump({"spec": spec}))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_any_text_loads_or_fails_with_problem_lines(text: str) -> None:
    _loads_or_explains(text)


_TAGS = st.sampled_from(["!!int", "!!bool", "!!float", "!!null", "!!str", "!!timestamp", "!!binary", "!!map"])
_FIELD_PATHS = st.sampled_from(
    [
        "limits:\n    maxPerPod: {}",
        "blockVisibleDevicesOverride: {}",
        "memoryFraction: {}",
        "namespaces: [{}]",
        "sharing:\n    mode: {}",
        "{}: 1",
    ]
)


@settings(max_examples=200, deadline=None)
@given(_TAGS, st.text(max_size=12), _FIELD_PATHS)
def test_any_tagged_value_loads_or_fails_with_problem_lines(tag: str, text: str, where: str) -> None:
    value = f"{tag} {json.dumps(text)}"  # a JSON string is a YAML double-quoted scalar
    _loads_or_explains(HEAD + "spec:\n  " + where.format(value) + "\n")
