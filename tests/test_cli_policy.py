"""`gpu-webhook policy lint` and `policy explain`: the installed console script, its output and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_WEBHOOK = Path(sys.executable).parent / "gpu-webhook"


def gpu_webhook(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "GPU_ADMISSION_POLICIES"}
    environ.update(env or {})
    return subprocess.run([str(GPU_WEBHOOK), *args], capture_output=True, text=True, cwd=cwd, env=environ, timeout=60)


def policy(name: str, spec: str) -> str:
    spec = textwrap.indent(textwrap.dedent(spec).strip("\n"), "  ")
    return f"apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {{name: {name}}}\nspec:\n{spec}\n"


@pytest.fixture
def tied(tmp_path: Path) -> Path:
    """`pol/`: a.yaml holds "teams" (team-*, ml) and "everyone" (*, audit); b.yaml holds "prod" (*-prod)."""
    directory = tmp_path / "pol"
    directory.mkdir()
    (directory / "a.yaml").write_text(
        policy("teams", 'namespaces: ["team-*", "ml"]')
        + "---\n"
        + policy("everyone", 'namespaces: ["*"]\nenforcement: audit')
    )
    (directory / "b.yaml").write_text(
        policy("prod", 'namespaces: ["*-prod"]\nsharing: {mode: time-slicing, replicas: 2}\nfractional: shared')
    )
    return tmp_path


# --- lint --------------------------------------------------------------------------------------------------

TIED_LINT = """\
teams  (pol/a.yaml#0)
  exclusive: whole GPUs; enforcement enforce; fractional reject; max 8 per container, 8 per pod
  namespaces: ml
  globs:      team-*
everyone  (pol/a.yaml#1)
  exclusive: whole GPUs; enforcement audit; fractional reject; max 8 per container, 8 per pod
  globs:      *
prod  (pol/b.yaml#0)
  time-slicing: 2 replicas per GPU as nvidia.com/gpu.shared; enforcement enforce; fractional shared; \
memory fraction 0.5 (1/replicas); max 1 per container, 8 per pod
  globs:      *-prod
selection order (the first match wins):
  ml                       -> teams  (exact name)
  team-*                   -> teams  (glob, 5 literal characters)
  *-prod                   -> prod  (glob, 5 literal characters)
  *                        -> everyone  (glob, 0 literal characters)
warning: glob "team-*" (policy teams, pol/a.yaml#0) ties with "*-prod" (policy prod, pol/b.yaml#0) for \
namespaces such as "team-prod": equally specific, so file order picks teams; make one glob more specific or \
list those namespaces by name
3 policies in 2 files: no errors, 1 glob tie warning
"""


def test_lint_prints_what_each_policy_covers_the_selection_order_and_tie_warnings(tied: Path) -> None:
    run = gpu_webhook("policy", "lint", "pol", cwd=tied)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == TIED_LINT


def test_lint_reads_the_environment_variable_then_policies(tied: Path) -> None:
    assert gpu_webhook("policy", "lint", cwd=tied, env={"GPU_ADMISSION_POLICIES": "pol"}).stdout == TIED_LINT
    (tied / "pol").rename(tied / "policies")
    run = gpu_webhook("policy", "lint", cwd=tied)
    assert run.returncode == 0
    assert run.stdout == TIED_LINT.replace("pol/", "policies/")


def test_lint_lists_every_error_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "mig.yaml").write_text(
        policy("m", "namespaces: [m]\nsharing: {mode: mig, migProfile: 1g.11gb, replica: 2}\ngpu: {model: A100-80GB}")
    )
    (tmp_path / "pol" / "x.yaml").write_text("a: *b\n")
    run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (1, "")
    assert run.stdout == (
        'pol/mig.yaml#0 spec.sharing.replica: unknown field (did you mean "replicas"?)\n'
        'pol/mig.yaml#0 spec.sharing.migProfile: "1g.11gb" is not a MIG profile of A100-80GB (valid: 1g.10gb, '
        "1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)\n"
        "pol/x.yaml#0: YAML alias *b at line 1, column 4 is not allowed in policy files (aliases can expand "
        "exponentially); write the value out\n"
        "3 problems in pol: nothing was loaded\n"
    )


def test_lint_of_a_missing_directory_exits_1(tmp_path: Path) -> None:
    run = gpu_webhook("policy", "lint", "nope", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stdout == (
        "nope: no such policy directory; create it, or name the directory that holds the policy files\n"
        "1 problem in nope: nothing was loaded\n"
    )


def test_lint_of_an_empty_directory_says_the_built_in_defaults_apply(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    run = gpu_webhook("policy", "lint", cwd=tmp_path)
    assert run.returncode == 0
    assert run.stdout == (
        "policies: no policy files (*.yaml, *.yml): every namespace gets the built-in defaults\n"
        "  exclusive: whole GPUs; enforcement enforce; fractional reject; max 8 per container, 8 per pod\n"
    )


@pytest.mark.parametrize(
    ("files", "said"),
    [
        (
            {"empty.yaml": "", "dashes.yaml": "---\n---\n", "notes.yml": "# policies go here\n"},
            "3 policy files (*.yaml, *.yml) read, but they hold no policies",
        ),
        ({"default.yaml": "# nothing yet\n---\n"}, "1 policy file (*.yaml, *.yml) read, but it holds no policies"),
    ],
)
def test_lint_of_files_without_policies_says_how_many_were_read(
    tmp_path: Path, files: dict[str, str], said: str
) -> None:
    (tmp_path / "pol").mkdir()
    for name, text in files.items():
        (tmp_path / "pol" / name).write_text(text)
    run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == (
        f"pol: {said}, only comments and empty documents: every namespace gets the built-in defaults\n"
        "  exclusive: whole GPUs; enforcement enforce; fractional reject; max 8 per container, 8 per pod\n"
    )


@pytest.fixture
def mistagged(tmp_path: Path) -> Path:
    """`pol/p.yaml`: a policy whose values do not fit their explicit YAML tags (PyYAML would raise on them)."""
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "p.yaml").write_text(
        policy("p", "namespaces: [a]\nlimits: {maxPerPod: !!int abc}\nblockVisibleDevicesOverride: !!bool maybe")
    )
    return tmp_path


MISTAGGED = [
    'pol/p.yaml#0 spec.limits.maxPerPod: !!int "abc" at line 6, column 23 is not a whole number; write one (e.g. 4) '
    "or remove the tag",
    'pol/p.yaml#0 spec.blockVisibleDevicesOverride: !!bool "maybe" at line 7, column 32 is not a boolean; write true '
    "or false",
]


def test_lint_reports_a_value_its_yaml_tag_cannot_hold_as_one_line(mistagged: Path) -> None:
    run = gpu_webhook("policy", "lint", "pol", cwd=mistagged)
    assert (run.returncode, run.stderr) == (1, "")
    assert run.stdout.splitlines() == [*MISTAGGED, "2 problems in pol: nothing was loaded"]


def test_explain_reports_a_value_its_yaml_tag_cannot_hold_and_exits_2(mistagged: Path) -> None:
    run = gpu_webhook("policy", "explain", "--policies", "pol", "a", cwd=mistagged)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.splitlines() == ["gpu-webhook policy explain: invalid policies in pol:"] + [
        f"  {line}" for line in MISTAGGED
    ]


def test_lint_of_the_shipped_policy() -> None:
    run = gpu_webhook("policy", "lint", cwd=ROOT)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.endswith("1 policy in 1 file: no errors, no glob ties\n")
    assert "  *                        -> default  (glob, 0 literal characters)\n" in run.stdout
    assert "warning" not in run.stdout


def test_lint_of_the_example_policies() -> None:
    run = gpu_webhook("policy", "lint", "examples/policies", cwd=ROOT)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.endswith("6 policies in 6 files: no errors, no glob ties, 1 MIG slice size warning\n")
    assert "  notebook-*               -> notebooks-time-slicing  (glob, 9 literal characters)\n" in run.stdout
    # The example's batch-mig keeps 1g.10gb for a whole GPU, the trade-off its comments describe: lint says so.
    assert [line for line in run.stdout.splitlines() if line.startswith("warning")] == [
        "warning: policy batch-mig (examples/policies/mig.yaml#0) makes nvidia.com/gpu: 1 one 1g.10gb slice "
        "(sharing.migProfile), smaller than the slices fractions become (2g.20gb for up to 0.25, 3g.40gb for up to "
        "0.5): asking for a whole GPU gets less memory than asking for a fraction of one; set sharing.migProfile to "
        "3g.40gb, or fractional: reject"
    ]


def test_policy_without_a_subcommand_prints_help_and_exits_2(tmp_path: Path) -> None:
    run = gpu_webhook("policy", cwd=tmp_path)
    assert run.returncode == 2
    assert "lint" in run.stderr and "explain" in run.stderr


# --- explain -----------------------------------------------------------------------------------------------

# What explain says of a namespace of whole GPUs' budget (docs/policies.md, GPU budgets).
WHOLE_GPU_BUDGET = (
    "  budget    cluster.quota deny: a ResourceQuota's requests.nvidia.com/gpu: N is N GPU-equivalents on every "
    "route, and the webhook refuses a pod past it\n"
    "  unit      nvidia.com/gpu = 1 GPU: a whole GPU\n"
    "            deviceclass.resource.kubernetes.io/gpu.nvidia.com = 1 GPU: a whole GPU (DRA)\n"
    "            deviceclass.resource.kubernetes.io/mig.nvidia.com = 1 GPU: a MIG device (DRA; in a claim, by the "
    "profile it selects)\n"
)


def test_explain_says_which_policy_why_and_what_it_does(tied: Path) -> None:
    run = gpu_webhook("policy", "explain", "--policies", "pol", "team-prod", "other", cwd=tied)
    assert (run.returncode, run.stderr) == (0, "")
    fractional = (
        'container "app": nvidia.com/gpu "0.5" is fractional, but GPUs are whole devices (the API '
        "server refuses it anyway); request a whole number of "
        'GPUs (policy "{}" gives whole GPUs only; ask for a namespace with sharing)'
    )
    assert run.stdout == (
        "namespace team-prod\n"
        "  policy    teams (pol/a.yaml#0)\n"
        "  why       glob 'team-*' (5 literal characters) in pol/a.yaml#0\n"
        '  tie       glob "*-prod" of policy prod (pol/b.yaml#0) matches as specifically; file order picked teams\n'
        "  settings  exclusive: whole GPUs; enforcement enforce; fractional reject; max 8 per container, 8 per pod\n"
        "  share     whole GPUs only\n"
        "  dra       GPUs from DeviceClasses gpu.nvidia.com; MIG devices from mig.nvidia.com\n"
        f"{WHOLE_GPU_BUDGET}"
        "  nvidia.com/gpu: 1\n"
        "    verdict    allow\n"
        "    resources  nvidia.com/gpu: 1 (requests = limits)\n"
        "  nvidia.com/gpu: 0.5\n"
        "    verdict    deny\n"
        "    resources  nvidia.com/gpu: 0.5 (requests = limits)\n"
        f"    denied     {fractional.format('teams')}\n"
        "\n"
        "namespace other\n"
        "  policy    everyone (pol/a.yaml#1)\n"
        "  why       glob '*' (0 literal characters) in pol/a.yaml#1\n"
        "  settings  exclusive: whole GPUs; enforcement audit; fractional reject; max 8 per container, 8 per pod\n"
        "  share     whole GPUs only\n"
        "  dra       GPUs from DeviceClasses gpu.nvidia.com; MIG devices from mig.nvidia.com\n"
        f"{WHOLE_GPU_BUDGET}"
        "  nvidia.com/gpu: 1\n"
        "    verdict    allow\n"
        "    resources  nvidia.com/gpu: 1 (requests = limits)\n"
        "  nvidia.com/gpu: 0.5\n"  # the API server refuses a fraction: denied under audit too
        "    verdict    deny\n"
        "    resources  nvidia.com/gpu: 0.5 (requests = limits)\n"
        f"    denied     {fractional.format('everyone')}\n"
    )


def test_explain_a_time_slicing_namespace_shows_the_mapping_and_env(tied: Path) -> None:
    run = gpu_webhook("policy", "explain", "--policies", "pol", "x-prod", cwd=tied)
    assert run.returncode == 0
    lines = run.stdout.splitlines()
    assert lines[:4] == [
        "namespace x-prod",
        "  policy    prod (pol/b.yaml#0)",
        "  why       glob '*-prod' (5 literal characters) in pol/b.yaml#0",
        "  settings  time-slicing: 2 replicas per GPU as nvidia.com/gpu.shared; enforcement enforce; fractional "
        "shared; memory fraction 0.5 (1/replicas); max 1 per container, 8 per pod",
    ]
    one, half = run.stdout.split("  nvidia.com/gpu: 0.5\n")
    assert "    verdict    allow (mutated)\n    resources  nvidia.com/gpu.shared: 1 (requests = limits)\n" in one
    assert "GPU_MEMORY_FRACTION=0.5\n" in one
    assert "    verdict    allow (mutated)\n    resources  nvidia.com/gpu.shared: 1 (requests = limits)\n" in half
    assert "GPU_MEMORY_FRACTION=0.5\n" in half  # the requested fraction
    assert "warning    gpu-admission: " in half


def test_explain_an_exact_name_and_the_built_in_defaults(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    spec = "namespaces: [batch]\nsharing: {mode: mig, migProfile: 1g.10gb}\ngpu: {model: A100-80GB}\nfractional: mig"
    (tmp_path / "pol" / "p.yaml").write_text(policy("batch", spec))
    run = gpu_webhook("policy", "explain", "--policies", "pol", "batch", "unlisted", cwd=tmp_path)
    assert run.returncode == 0
    batch, unlisted = run.stdout.split("\n\n")
    assert batch.splitlines()[1:3] == [
        "  policy    batch (pol/p.yaml#0)",
        "  why       exact name 'batch' in pol/p.yaml#0",
    ]
    assert "    resources  nvidia.com/mig-1g.10gb: 1 (requests = limits)" in batch
    assert "    resources  nvidia.com/mig-3g.40gb: 1 (requests = limits)" in batch  # 0.5 of an A100-80GB
    assert unlisted.splitlines()[1:3] == [
        "  policy    built-in-default (<built-in defaults>)",
        "  why       no policy matches; built-in defaults apply",
    ]


def test_explain_the_example_policies() -> None:
    namespaces = ("notebook-alice", "inference", "batch", "team-a")
    run = gpu_webhook("policy", "explain", "--policies", "examples/policies", *namespaces, cwd=ROOT)
    assert (run.returncode, run.stderr) == (0, "")
    notebook, inference, batch, team = run.stdout.split("\n\n")
    assert "  policy    notebooks-time-slicing (examples/policies/time-slicing.yaml#0)" in notebook
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20389M" in inference  # 1/4 of an H100-80GB (81,559 MiB)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40779M" not in inference  # 0.5 is more than one replica's share
    assert (
        "  share     one nvidia.com/gpu.shared is 1/4 of a GPU (mps); nvidia.com/gpu up to 0.25 becomes one, "
        "more is denied" in inference
    )
    assert (
        "  share     MIG slices of A100-80GB, 1 per container; offered: 1g.10gb (0.125 of the memory), 2g.20gb "
        "(0.25 of the memory), 3g.40gb (0.5 of the memory)" in batch
    )
    assert "nvidia.com/mig-3g.40gb: 1" in batch
    assert "  policy    built-in-default (<built-in defaults>)" in team  # what policies/default.yaml says
    assert "    verdict    deny" in team


@pytest.mark.parametrize(
    ("namespace", "shown"),
    [("Team_A", '"Team_A"'), ("a\x1b[31m", '"a\\u001b[31m"')],  # a terminal escape is quoted, not obeyed
)
def test_explain_an_invalid_namespace_exits_2(tmp_path: Path, namespace: str, shown: str) -> None:
    run = gpu_webhook("policy", "explain", "--policies", "pol", namespace, cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (
        f"gpu-webhook policy explain: {shown} is not a valid namespace name; namespace names are 1-63 lowercase "
        "letters, digits and '-', starting and ending with a letter or digit\n"
    )


def test_explain_with_invalid_policies_exits_2(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "p.yaml").write_text(policy("p", "namespaces: [a]\nenforcement: strict"))
    run = gpu_webhook("policy", "explain", "--policies", "pol", "a", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (
        "gpu-webhook policy explain: invalid policies in pol:\n"
        '  pol/p.yaml#0 spec.enforcement: "strict" is not one of enforce, warn, audit\n'
    )


def test_describe_policy_shows_an_explicit_fraction_exactly() -> None:
    from webhook.admission.loader import parse_policy_sources
    from webhook.cli.policy_cmd import describe_policy

    spec = "namespaces: [a]\nsharing: {mode: mps, replicas: 3}\ngpu: {memoryMiB: 24576}\nmemoryFraction: 0.125"
    (shared,) = parse_policy_sources({"p.yaml": policy("p", spec)}).policies
    assert describe_policy(shared) == (
        "mps: 3 replicas per GPU as nvidia.com/gpu.shared; GPU memory (24576 MiB); enforcement enforce; "
        "fractional reject; memory fraction 0.125; max 1 per container, 8 per pod"
    )
    (thirds,) = parse_policy_sources({"p.yaml": policy("p", spec.replace("memoryFraction: 0.125", ""))}).policies
    assert "memory fraction 1/3 (1/replicas)" in describe_policy(thirds)


def test_describe_policy_shows_a_memory_fraction_only_where_memory_hints_are_set() -> None:
    """Only time-slicing and mps inject memory hints; the loader refuses memoryFraction elsewhere, and a Policy
    built in code with one under exclusive or mig is described without it."""
    from fractions import Fraction

    from webhook.admission.policy import Mode, Policy, Sharing
    from webhook.cli.policy_cmd import describe_policy

    exclusive = Policy("p", memory_fraction=Fraction(1, 4))
    mig = Policy("p", sharing=Sharing(Mode.MIG, mig_profile="1g.10gb"), memory_fraction=Fraction(1, 4))
    shared = Policy("p", sharing=Sharing(Mode.TIME_SLICING, replicas=2), memory_fraction=Fraction(1, 4))
    assert describe_policy(exclusive) == (
        "exclusive: whole GPUs; enforcement enforce; fractional reject; max 8 per container, 8 per pod"
    )
    assert describe_policy(mig) == (
        "mig: one GPU becomes nvidia.com/mig-1g.10gb; enforcement enforce; fractional reject; max 1 per container, "
        "8 per pod"
    )
    assert "; memory fraction 0.25; " in describe_policy(shared)


def test_lint_warns_when_fractional_mig_may_pick_a_profile_the_nodes_do_not_offer(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    spec = "namespaces: [batch]\nsharing: {mode: mig, migProfile: 1g.10gb}\ngpu: {model: A100-80GB}\nfractional: mig"
    (tmp_path / "pol" / "mig.yaml").write_text(policy("batch-mig", spec))
    run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    lines = run.stdout.splitlines()
    assert lines[-3] == (
        "warning: policy batch-mig (pol/mig.yaml#0) has fractional: mig without sharing.migProfiles: a fraction "
        "may become any MIG profile of A100-80GB, not only 1g.10gb, and a pod asking for a slice the nodes lack "
        "stays Pending; list the profiles the nodes' MIG layout offers (mig-parted's config) in "
        "sharing.migProfiles"
    )
    assert lines[-1] == "1 policy in 1 file: no errors, no glob ties, 1 MIG layout warning, 1 MIG slice size warning"
    listed = spec.replace("migProfile: 1g.10gb}", "migProfile: 1g.10gb, migProfiles: [1g.10gb]}")
    (tmp_path / "pol" / "mig.yaml").write_text(policy("batch-mig", listed))
    run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
    assert run.stdout.splitlines()[-1] == "1 policy in 1 file: no errors, no glob ties"


def test_lint_warns_when_a_whole_gpu_becomes_a_smaller_mig_slice_than_a_fraction(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    spec = (
        "namespaces: [batch]\nsharing: {mode: mig, migProfile: 1g.10gb, migProfiles: [1g.10gb, 3g.40gb, 7g.80gb]}\n"
        "gpu: {model: A100-80GB}\nfractional: mig"
    )
    (tmp_path / "pol" / "mig.yaml").write_text(policy("batch-mig", spec))
    run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")  # a warning: the policy is valid
    assert run.stdout.splitlines()[-2:] == [
        "warning: policy batch-mig (pol/mig.yaml#0) makes nvidia.com/gpu: 1 one 1g.10gb slice (sharing.migProfile), "
        "smaller than the slices fractions become (3g.40gb for up to 0.5, 7g.80gb for up to 1): asking for a whole "
        "GPU gets less memory than asking for a fraction of one; set sharing.migProfile to 7g.80gb, or fractional: "
        "reject",
        "1 policy in 1 file: no errors, no glob ties, 1 MIG slice size warning",
    ]
    clean = [
        spec.replace("migProfile: 1g.10gb", "migProfile: 7g.80gb"),  # a whole GPU is the largest slice
        spec.replace("[1g.10gb, 3g.40gb, 7g.80gb]", "[1g.10gb]"),  # no larger slice is offered
        spec.replace("fractional: mig", "fractional: reject"),  # fractions are denied, not converted
    ]
    for text in clean:
        (tmp_path / "pol" / "mig.yaml").write_text(policy("batch-mig", text))
        run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
        assert run.stdout.splitlines()[-1] == "1 policy in 1 file: no errors, no glob ties", text


def test_lint_refuses_a_memory_fraction_that_overcommits_every_gpu(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    spec = "namespaces: [a]\nsharing: {mode: time-slicing, replicas: 8}\nmemoryFraction: 0.9"
    (tmp_path / "pol" / "ts.yaml").write_text(policy("ts", spec))
    run = gpu_webhook("policy", "lint", "pol", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stdout == (
        "pol/ts.yaml#0 spec.memoryFraction: 0.9 is more than one replica's share (1/8 of a GPU): 8 containers "
        "share each GPU, so every GPU would be overcommitted; set at most 0.125\n"
        "1 problem in pol: nothing was loaded\n"
    )


def test_explain_says_an_excluded_namespace_is_never_sent_to_the_webhook(tmp_path: Path) -> None:
    from webhook.cli.webhooks import EXCLUDED_NAMESPACES

    (tmp_path / "pol").mkdir()
    run = gpu_webhook("policy", "explain", "--policies", "pol", "kube-system", "team-a", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == [
        "namespace kube-system",
        "  webhook   never sent: the shipped webhook configurations exclude kube-system (Kubernetes' own; "
        "manifests/base/excluded-namespaces.yaml): its pods and workloads are admitted as written, whatever a "
        "policy says",
    ]
    assert lines[2:4] == ["", "namespace team-a"] and lines[4].startswith("  policy    built-in-default")
    assert [name for name, _ in EXCLUDED_NAMESPACES] == [
        "kube-system", "kube-node-lease", "gpu-admission", "gpu-operator", "nvidia-gpu-operator",
        "nvidia-device-plugin", "nvidia-dra-driver-gpu",
    ]  # fmt: skip
