"""`gpu-webhook policy lint|explain|schema|crd`: check a policy directory; show which policy a namespace gets and
why; print the policy files' JSON Schema and the GPUPolicy CRD.

Both are views of the core: `loader.load_policies` finds every problem, `PolicySet.select` says which pattern
won, `globties.glob_ties` finds ties, and `engine.evaluate` says what a policy does to a request. Nothing here
decides anything. Heavy modules are imported inside the handlers so `gpu-webhook` starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from webhook.cli.common import CommandError, fail
from webhook.cli.options import (
    MAP_API_VERSIONS,
    POLICIES_HELP,
    add_kubeconfig_arguments,
    add_policy_source_arguments,
    kubeconfig_without_cluster,
)
from webhook.cli.policysource import PolicyRead, PolicySource, load_policy_set, read_policies, unserved_line

if TYPE_CHECKING:
    from webhook.admission.engine import Decision
    from webhook.admission.policy.model import Policy, PolicySet
    from webhook.cli.kube import OneCluster

EXPLAIN_QUANTITIES = ("1", "0.5")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "policy",
        help="lint the policy files; explain which policy a namespace gets and what it does",
        description="Check namespace policy files, and explain what they do to a namespace's GPU requests.",
    )
    commands = parser.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    lint = commands.add_parser(
        "lint",
        help="report every problem in a policy directory, or what each policy covers",
        description=(
            "Load every policy file in DIR. On errors, print each (file#document field: message) and exit 1; "
            "otherwise print which namespaces and globs each policy covers, the selection order and any "
            "glob ties (warnings), and exit 0."
        ),
    )
    lint.add_argument(
        "directory",
        nargs="?",
        metavar="DIR",
        help="the same as --policies DIR (the older form, kept working)",
    )
    add_policy_source_arguments(
        lint,
        from_cluster_help="instead of a directory, the cluster's GPUPolicy objects (kubeconfig); each line of an "
        "object the webhook does not serve is an error (exit 1)",
    )
    lint.add_argument(
        "--cluster",
        action="store_true",
        help="also compare each policy with the cluster's nodes (their GPU feature discovery labels) and print "
        "the drift; exit 1 when there is any",
    )
    lint.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="with --cluster: the drift and the unmatched namespaces as a table (default), or as one JSON or YAML "
        "document on stdout (the lint's own lines then go to stderr)",
    )
    lint.add_argument(
        "--native",
        action="store_true",
        help="also warn, one line per policy, of what its native admission policies (policy render native) "
        "cannot carry beyond what no native policy carries (with --from-cluster: done wherever the cluster holds "
        "native policies)",
    )
    add_kubeconfig_arguments(lint, when="--cluster or --from-cluster")
    explain = commands.add_parser(
        "explain",
        help="which policy a namespace gets, why, and what it does to nvidia.com/gpu: 1 and 0.5",
        description=(
            "For each NAMESPACE: the policy that applies, the pattern that won, and the webhook's decision for "
            "a container requesting nvidia.com/gpu: 1 and nvidia.com/gpu: 0.5. Exit 2 on invalid policies."
        ),
    )
    explain.add_argument("namespaces", nargs="+", metavar="NAMESPACE", help="namespace names to explain")
    add_policy_source_arguments(explain)
    add_kubeconfig_arguments(explain, when="--from-cluster")
    render = commands.add_parser(
        "render",
        help="render the GPU budget for Kueue (resources.transformations) or as native ResourceQuota entries",
        description=(
            "kueue: a Kueue Configuration whose resources.transformations count every served GPU resource in "
            "GPU-equivalents, in an integer unit, and the ClusterQueue quota to write for --gpus GPUs. quota: per "
            "policy whose namespaces have one resource that carries the whole budget, the native ResourceQuota "
            "that holds --gpus GPUs of it (the API server enforces it itself). What cannot be rendered is said "
            "on stderr. native: the policies as MutatingAdmissionPolicy and ValidatingAdmissionPolicy objects with "
            "their bindings, enforced by the API server itself, for what CEL can carry (docs/native-policies.md); "
            "what they do not carry, rule by rule, on stderr. Exit 2 on invalid policies."
        ),
    )
    render.add_argument("target", choices=("kueue", "quota", "native"), help="what to render")
    add_policy_source_arguments(render)
    add_kubeconfig_arguments(render, when="--from-cluster")
    render.add_argument(
        "--gpus",
        default="1",
        metavar="N",
        help="the GPUs of the budget the output is written for (a quantity such as 4 or 1.5; default 1)",
    )
    render.add_argument(
        "--beside-webhook",
        action="store_true",
        help="native: for a cluster that runs the webhook too: the MutatingAdmissionPolicies change Pods only, "
        "and the webhook the workloads' templates, with its re-apply record (docs/native-policies.md)",
    )
    render.add_argument(
        "--name", default="gpu-equivalents", help="quota: the ResourceQuota objects' name (default gpu-equivalents)"
    )
    render.add_argument(
        "--api-version",
        choices=MAP_API_VERSIONS,
        default="v1",
        help="native: the MutatingAdmissionPolicy objects' version (v1 from Kubernetes 1.36; v1beta1 for the beta "
        "API on 1.34 and 1.35, behind its feature gate; default v1)",
    )
    export = commands.add_parser(
        "export",
        help="write the cluster's GPUPolicy objects as policy files, one per object",
        description=(
            "Write each GPUPolicy object of the cluster (kubeconfig) to DIR/NAME.yaml as a policy file: "
            "apiVersion, kind, metadata.name and spec, never the API server's fields, so the files apply back "
            "unchanged and --policies DIR loads the set --from-cluster reads. Files are written over; nothing "
            "is removed. Objects the webhook does not serve are written too, each named on stderr. Exit 2 when "
            "the objects cannot be listed or a file cannot be written."
        ),
    )
    export.add_argument("--out", metavar="DIR", required=True, help="the directory to write (made if missing)")
    add_kubeconfig_arguments(export)
    compare = commands.add_parser(
        "compare",
        help="whether the cluster's GPUPolicy objects serve exactly the policies of a directory",
        description=(
            "Compare the policies of --policies DIR (the files a ConfigMap serves) with the set the cluster's "
            "GPUPolicy objects serve (kubeconfig), policy by policy and in order: the check before a running "
            "install moves from the ConfigMap to GPUPolicy objects (docs/operations.md). Prints each difference "
            "and exits 1 when they differ (an object not served is one); 0 when every namespace gets the same "
            "policy from either; 2 when either cannot be read."
        ),
    )
    compare.add_argument("--policies", metavar="DIR", default=None, help=POLICIES_HELP)
    add_kubeconfig_arguments(compare)
    commands.add_parser(
        "schema",
        help="print the JSON Schema of policy files, for editors",
        description=(
            "Print the JSON Schema (draft 2020-12) of one policy document, generated from the loader's own "
            "field tables; the repository keeps a copy in schema/gpu-policy.schema.json. Editors that use the "
            "YAML language server check and complete a policy file that starts with "
            "`# yaml-language-server: $schema=<path or URL of the schema>`."
        ),
    )
    commands.add_parser(
        "crd",
        help="print the GPUPolicy CustomResourceDefinition",
        description=(
            "Print the GPUPolicy CustomResourceDefinition, generated from the loader's own field tables (the "
            "Helm chart's crds/gpupolicies.yaml is its copy). Helm installs a chart's CRDs on the first install "
            "only: apply this before an upgrade, `gpu-webhook policy crd | kubectl apply --server-side -f -`."
        ),
    )
    parser.set_defaults(handler=run, policy_parser=parser)


def run(args: argparse.Namespace) -> int:
    if args.policy_command == "lint":
        if args.directory and args.policies and args.directory != args.policies:
            print(
                f"gpu-webhook policy lint: two directories given ({args.directory} and --policies {args.policies});"
                " give one",
                file=sys.stderr,
            )
            return 2
        if args.directory and args.from_cluster:
            return fail("policy lint", f"a directory ({args.directory}) and --from-cluster given; give one")
        if (misuse := kubeconfig_without_cluster(args)) is not None:
            return fail("policy lint", misuse)
        if args.output != "table" and not args.cluster:
            return fail("policy lint", "-o/--output only applies with --cluster")
        args.policies = args.policies or args.directory
        from webhook.cli.kube import OneCluster

        cluster = OneCluster(args.kubeconfig, args.context)  # made at its first read, if any
        try:
            try:
                read = read_policies(PolicySource.of(args), cluster)
            except CommandError as exc:
                return fail("policy lint", str(exc))
            said = sys.stdout if args.output == "table" else sys.stderr
            code, policies = lint(read, said)
            if policies is not None and (args.native or (args.from_cluster and native_installed(cluster, said))):
                lint_native(policies, said)
            if args.cluster and policies is not None:
                return lint_cluster(args, policies, sys.stdout, sys.stderr, cluster)
            return code
        finally:
            cluster.close()
    if args.policy_command == "schema":
        from webhook.admission.policy.schema import schema_text

        sys.stdout.write(schema_text())
        return 0
    if args.policy_command == "crd":
        from webhook.admission.policy.crd import crd_text

        sys.stdout.write(crd_text())
        return 0
    if args.policy_command in ("explain", "render") and (misuse := kubeconfig_without_cluster(args)) is not None:
        return fail(f"policy {args.policy_command}", misuse)
    if args.policy_command == "explain":
        return explain(args.namespaces, PolicySource.of(args), sys.stdout, sys.stderr)
    if args.policy_command == "render" and args.target == "native":
        try:
            policies = load_policy_set(PolicySource.of(args), "policy render", sys.stderr)
        except CommandError as exc:
            return fail("policy render", str(exc))
        return render_native(policies, sys.stdout, sys.stderr, args.api_version, args.beside_webhook)
    if args.policy_command == "render":
        return render(args, sys.stdout, sys.stderr)
    if args.policy_command == "export":
        return export(args.out, PolicySource.of(args), sys.stdout, sys.stderr)
    if args.policy_command == "compare":
        return compare(PolicySource.of(args), sys.stdout, sys.stderr)
    args.policy_parser.print_help(sys.stderr)
    return 2


# --- lint --------------------------------------------------------------------------------------------------


def _whole_gpu_smaller_than_fractions(policy: Policy) -> str | None:
    """Under MIG, `nvidia.com/gpu: 1` becomes `migProfile`, and a fraction the smallest offered slice that holds
    it (resources.slices_fractions_become): a migProfile smaller than those slices gives a whole-GPU request
    less than a fraction gets."""
    from webhook.admission.base.quantity import format_fraction
    from webhook.admission.base.resources import GPU_MODELS, slices_fractions_become
    from webhook.admission.sharing.registry import backend_of

    sharing = policy.sharing
    model = GPU_MODELS.get(policy.gpu.model or "")
    single = backend_of(policy).single_slice(policy) is not None
    if policy.fractional.value != "mig" or single or not sharing.mig_profile or model is None:
        return None
    whole = model.profile(sharing.mig_profile)
    if whole is None:
        return None
    offered = sharing.mig_profiles
    larger = [(share, p) for share, p in slices_fractions_become(model, offered) if p.memory_share > whole.memory_share]
    if not larger:
        return None
    examples = ", ".join(f"{p.name} for up to {format_fraction(share)}" for share, p in larger)
    return (
        f"warning: policy {policy.name} ({policy.source}) makes nvidia.com/gpu: 1 one {sharing.mig_profile} slice "
        f"(sharing.migProfile), smaller than the slices fractions become ({examples}): asking for a whole GPU "
        f"gets less memory than asking for a fraction of one; set sharing.migProfile to {larger[-1][1].name}, "
        "or fractional: reject"
    )


def lint(read: PolicyRead, out: TextIO) -> tuple[int, PolicySet | None]:
    """Check the policies read (a directory, or the cluster's objects) and describe them: the exit code, and the
    policies when they loaded. Any problem fails: a directory with one loads nothing, and an object with one is
    not served by the webhook (the others are: that set is not described, as a directory's is not)."""
    from webhook.admission.policy.globties import glob_ties
    from webhook.admission.policy.model import Fractional

    chosen, policies = read.where, read.policies
    for problem in read.problems:
        print(problem, file=out)
    count = len(read.problems)
    if policies is None:
        print(f"{count} problem{'s' if count != 1 else ''} in {chosen}: nothing was loaded", file=out)
        return 1, None
    if read.unserved:
        unserved, served, listed = len(read.unserved), len(policies.policies), read.objects or 0
        print(
            f"{count} problem{'s' if count != 1 else ''} in {chosen}: {unserved} of {listed} GPUPolicy "
            f"object{'s' if listed != 1 else ''} not served (the webhook serves the other {served})",
            file=out,
        )
        return 1, None
    if not policies.policies:
        files = len(policies.files)
        if read.objects is not None:
            what = "no GPUPolicy objects"
        elif not files:
            what = "no policy files (*.yaml, *.yml)"
        else:  # a file without errors and without policies holds nothing else
            what = (
                f"{files} policy file{'s' if files != 1 else ''} (*.yaml, *.yml) read, but "
                f"{'they hold' if files != 1 else 'it holds'} no policies, only comments and empty documents"
            )
        print(f"{chosen}: {what}: every namespace gets the built-in defaults", file=out)
        print(f"  {describe_policy(policies.for_namespace('default'))}", file=out)
        return 0, policies

    for policy in policies.policies:
        print(f"{policy.name}  ({policy.source})", file=out)
        print(f"  {describe_policy(policy)}", file=out)
        exact = [p for p in policy.namespaces if not _is_glob(p)]
        globs = [p for p in policy.namespaces if _is_glob(p)]
        if exact:
            print(f"  namespaces: {', '.join(exact)}", file=out)
        if globs:
            print(f"  globs:      {', '.join(globs)}", file=out)

    print("selection order (the first match wins):", file=out)
    for pattern, policy, literals in policies.selection_order():
        kind = "exact name" if literals is None else f"glob, {literals} literal characters"
        print(f"  {pattern:<24} -> {policy.name}  ({kind})", file=out)

    ties = glob_ties(policies)
    for tie in ties:
        (winner_glob, winner), *others = tie.globs
        rivals = ", ".join(f'"{glob}" (policy {policy.name}, {policy.source})' for glob, policy in others)
        print(
            f'warning: glob "{winner_glob}" (policy {winner.name}, {winner.source}) ties with {rivals} for '
            f'namespaces such as "{tie.example}": equally specific, so file order picks {winner.name}; '
            "make one glob more specific or list those namespaces by name",
            file=out,
        )
    unlisted = [p for p in policies.policies if p.fractional is Fractional.MIG and p.sharing.mig_profiles is None]
    for policy in unlisted:
        print(
            f"warning: policy {policy.name} ({policy.source}) has fractional: mig without sharing.migProfiles: a "
            f"fraction may become any MIG profile of {policy.gpu.model}, not only {policy.sharing.mig_profile}, "
            "and a pod asking for a slice the nodes lack stays Pending; list the profiles the nodes' MIG layout "
            "offers (mig-parted's config) in sharing.migProfiles",
            file=out,
        )
    smaller = [line for line in map(_whole_gpu_smaller_than_fractions, policies.policies) if line]
    for line in smaller:
        print(line, file=out)
    from webhook.admission.sharing import memshare

    kept = [p for p in policies.policies if _kept_name_budget(p)]
    for policy in kept:
        replicas = policy.sharing.replicas or "replicas"
        print(
            f"warning: policy {policy.name} ({policy.source}) keeps the name nvidia.com/gpu for {policy.sharing.mode} "
            f"replicas: the API server counts each replica as one nvidia.com/gpu itself, so a ResourceQuota of "
            f"requests.nvidia.com/gpu: N admits N replicas (N/{replicas} GPUs) before the webhook's budget of N GPUs "
            f"is reached; write N x {replicas} for N GPUs, or serve replicas as nvidia.com/gpu.shared",
            file=out,
        )
    unsteered = [p for p in policies.policies if memshare.unsteered(p)]
    for policy in unsteered:
        print(f"warning: policy {policy.name} ({policy.source}) {memshare.UNSTEERED}", file=out)
    files = len({policy.source.rsplit("#", 1)[0] for policy in policies.policies})
    unit = ("file" if read.objects is None else "GPUPolicy object") + ("s" if files != 1 else "")
    count = len(policies.policies)
    summary = f"{len(ties)} glob tie warning{'s' if len(ties) != 1 else ''}" if ties else "no glob ties"
    if unlisted:
        summary += f", {len(unlisted)} MIG layout warning{'s' if len(unlisted) != 1 else ''}"
    if smaller:
        summary += f", {len(smaller)} MIG slice size warning{'s' if len(smaller) != 1 else ''}"
    if unsteered:
        summary += f", {len(unsteered)} steering warning{'s' if len(unsteered) != 1 else ''}"
    if kept:
        summary += f", {len(kept)} quota unit warning{'s' if len(kept) != 1 else ''}"
    print(
        f"{count} polic{'ies' if count != 1 else 'y'} in {files} {unit}: no errors, {summary}",
        file=out,
    )
    return 0, policies


def lint_cluster(args: argparse.Namespace, policies: PolicySet, out: TextIO, err: TextIO, shared: OneCluster) -> int:
    """Through the command's one connection (`shared`): the drift between the policies lint loaded and the
    cluster's nodes, the policies' namespace entries that match no namespace, and the namespaces' GPU budgets
    (budgets.py): 0 when no drift, no unmatched entry and no GPU quota entry that neither the API server nor the
    webhook holds, else 1; 2 when the nodes or namespaces cannot be listed (ResourceQuotas and Pods that may not
    be listed are said, and left out)."""
    from webhook.admission.checks.clusterdrift import drift_of, unmatched_namespaces
    from webhook.cli.budgets import budget_report, budgets_json, list_budget_objects, print_budgets
    from webhook.cli.common import CommandError
    from webhook.cli.drift import drift_json, list_namespaces, list_view, print_drift, print_unmatched, unmatched_json

    try:
        cluster = shared.client()
        view = list_view(cluster)
        namespaces = list_namespaces(cluster)
        objects = list_budget_objects(cluster, err)
    except CommandError as exc:
        err.write(f"gpu-webhook policy lint: {exc}\n")
        return 2
    drift = drift_of(policies, view)
    unmatched = unmatched_namespaces(policies, namespaces)
    budgets = budget_report(policies, view, objects) if objects is not None else None
    if args.output == "table":
        print_drift(drift, view, out)
        print_unmatched(unmatched, len(namespaces), out)
        for line in view.unread:
            out.write(f"note: {line}\n")
        if budgets is not None and budgets.shown:
            print_budgets(budgets, out)
    else:
        from webhook.cli.output import dump_yaml

        document = {
            "nodes": len(view.nodes),
            "namespaces": len(namespaces),
            "drift": [drift_json(item) for item in drift],
            "unmatchedNamespaces": [unmatched_json(item) for item in unmatched],
        }
        if view.unread:  # DeviceClass selectors read in part: said, never an error
            document["unreadSelectors"] = list(view.unread)
        if budgets is not None:
            document["budgets"] = budgets_json(budgets)
        out.write(json.dumps(document, indent=2) + "\n" if args.output == "json" else dump_yaml(document))
    unheld = budgets is not None and any(finding.failing for finding in budgets.findings)
    return 1 if drift or unmatched or unheld else 0


def _kept_name_budget(policy: Policy) -> bool:
    """Time-slicing or MPS replicas served as nvidia.com/gpu with the budget on: the API server's own quota counts
    them as GPUs, one each."""
    from webhook.admission.base.resources import NVIDIA_GPU
    from webhook.admission.policy.model import Check
    from webhook.admission.sharing.registry import backend_of

    return (
        backend_of(policy).shared_resource(policy.sharing) == NVIDIA_GPU
        and policy.cluster_checks.quota is not Check.OFF
    )


def _is_glob(pattern: str) -> bool:
    from webhook.admission.policy.globs import is_glob

    return is_glob(pattern)


def describe_policy(policy: Policy) -> str:
    """One line: what the policy's settings are (the engine decides what they do)."""
    from webhook.admission.base.quantity import exact_text
    from webhook.admission.sharing.registry import backend_of

    backend = backend_of(policy)
    parts = [backend.explain_mode(policy)]
    if policy.gpu.model or policy.gpu.memory_mib:
        memory = policy.gpu_memory_mib
        parts.append(f"GPU {policy.gpu.model or 'memory'} ({memory} MiB)" if memory else f"GPU {policy.gpu.model}")
    parts.append(f"enforcement {policy.enforcement}")
    if not backend.converts_itself(policy):  # memory mode converts every fraction itself
        parts.append(f"fractional {policy.fractional}")
    shared_fraction = backend.shared_fraction(policy)
    if backend.maps_to_shared(policy) and shared_fraction is not None:  # replicas: their memory hints
        implied = " (1/replicas)" if policy.memory_fraction is None else ""
        parts.append(f"memory fraction {exact_text(shared_fraction)}{implied}")
    per_container = backend.max_per_container(policy)
    parts.append(f"max {per_container} per container, {policy.limits.max_per_pod} per pod")
    return "; ".join(parts)


def describe_device_classes(policy: Policy) -> str:
    """Which DRA DeviceClasses count as GPUs here (claims, templates and deviceclass.resource.kubernetes.io/*)."""
    from webhook.admission.base.resources import NVIDIA_GPU_CLASSES
    from webhook.admission.sharing.registry import backend_of

    classes = policy.device_classes
    text = (
        f"GPUs from DeviceClasses {', '.join(classes.gpu_classes)}; MIG devices from {', '.join(classes.mig_classes)}"
    )
    strategy = backend_of(policy).gpu_config_strategy()
    if strategy is not None:  # NVIDIA's whole GPUs share nothing without a GpuConfig (dra/claimrules.py)
        text += f"; {', '.join(NVIDIA_GPU_CLASSES)} only in claims whose GpuConfig sets sharing.strategy {strategy}"
    return text


def describe_share(policy: Policy) -> str:
    """What one container may get here: a replica's share, the MIG slices offered, or whole GPUs."""
    from webhook.admission.sharing.registry import backend_of

    return backend_of(policy).explain_share(policy)


# --- render ------------------------------------------------------------------------------------------------


def render(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`policy render kueue|quota`: the budget in Kueue's transformations, or as native ResourceQuotas."""
    from fractions import Fraction

    import yaml

    from webhook.admission.base.equivalents import format_gpus
    from webhook.admission.base.quantity import quantity_or_none
    from webhook.admission.budgets import schedulers
    from webhook.admission.policy.globs import is_glob

    gpus = quantity_or_none(args.gpus)
    if gpus is None or gpus <= 0:
        print(f"gpu-webhook policy render: --gpus {args.gpus}: give a positive quantity, such as 4 or 1.5", file=err)
        return 2
    try:
        policies = load_policy_set(PolicySource.of(args), "policy render", err)
    except CommandError as exc:
        return fail("policy render", str(exc), err)
    budget = Fraction(gpus)
    if args.target == "kueue":
        rendered = schedulers.kueue(policies)
        quota = rendered.quota_for(budget)
        shown = format_gpus(quota) if quota.denominator == 1 else str(int(quota))
        unit_text = "1 GPU" if rendered.unit == 1 else f"1/{rendered.unit} GPU"
        out.write(
            "# Kueue Configuration (merge into the manager's config): every served GPU resource counted as\n"
            f"# {schedulers.OUTPUT}, one unit = {unit_text}. A ClusterQueue's nominalQuota for\n"
            f'# {format_gpus(budget)} GPU{"s" if budget > 1 else ""}: {schedulers.OUTPUT}: "{shown}" '
            f"({rendered.unit} per GPU).\n"
        )
        out.write(yaml.safe_dump(rendered.configuration, sort_keys=False))
        for line in rendered.left_out:
            print(f"gpu-webhook policy render: not counted: {line}", file=err)
        return 0
    documents = []
    for native in schedulers.native(policies):
        if native.entry is None:
            print(f"gpu-webhook policy render: policy {native.policy}: no native entry: {native.note}", file=err)
            continue
        for namespace in native.namespaces:
            if is_glob(namespace):
                print(
                    f"gpu-webhook policy render: policy {native.policy}: namespaces {namespace}: write "
                    f"{native.entry}: {native.hard(budget)} in each ({native.note})",
                    file=err,
                )
                continue
            obj = schedulers.native_quota_object(native, namespace, budget, args.name)
            documents.append(f"# policy {native.policy}: {native.note}\n" + yaml.safe_dump(obj, sort_keys=False))
    out.write("---\n".join(documents))
    return 0


# --- compare -----------------------------------------------------------------------------------------------


def compare(source: PolicySource, out: TextIO, err: TextIO) -> int:
    """`policy compare --policies DIR`: the directory's set against the cluster's, without their sources. Equal
    policies in the same order select the same policy for every namespace (PolicySet.select reads nothing else)."""
    import dataclasses

    from webhook.admission.policy.globties import glob_ties

    try:
        files = load_policy_set(source, "policy compare", err)
        cluster = read_policies(dataclasses.replace(source, from_cluster=True))
    except CommandError as exc:
        return fail("policy compare", str(exc), err)
    assert cluster.policies is not None  # the cluster serves the objects that pass

    def bare(policies: PolicySet) -> list[Policy]:
        return [dataclasses.replace(p, source="", memo={}) for p in policies.policies]

    differences = [f"not served: {unserved_line(verdict)}" for verdict in cluster.unserved]
    mine, theirs = bare(files), bare(cluster.policies)
    by_name = {p.name: p for p in theirs}
    for policy in mine:
        found = by_name.get(policy.name)
        if found is None:
            differences.append(f"only in {source.directory or 'the directory'}: policy {policy.name}")
        elif found != policy:
            differences.append(f"differs: policy {policy.name} (gpu-webhook policy export writes the cluster's)")
    names = {p.name for p in mine}
    differences += [f"only in {cluster.where}: policy {p.name}" for p in theirs if p.name not in names]
    reordered = not differences and mine != theirs
    if reordered:  # order decides only glob ties: the same ties with the same winners select alike
        for tie in glob_ties(files):
            winner = cluster.policies.select(tie.example).policy.name
            if winner != tie.globs[0][1].name:
                differences.append(
                    f'glob tie: namespace "{tie.example}" gets policy {tie.globs[0][1].name} from the directory and '
                    f"policy {winner} from the cluster (the cluster's order is the order of its names)"
                )
    for line in differences:
        print(line, file=out)
    if differences:
        print(f"{len(differences)} difference{'s' if len(differences) != 1 else ''}", file=out)
        return 1
    order = "in another order, which no glob tie makes matter" if reordered else "in the same order"
    print(f"the same {len(mine)} policies, {order}: every namespace gets the same policy", file=out)
    return 0


# --- export ------------------------------------------------------------------------------------------------


def export(directory: str, source: PolicySource, out: TextIO, err: TextIO) -> int:
    """`policy export --out DIR`: each GPUPolicy object as DIR/NAME.yaml (objects.policy_text), for a repository
    to hold what the cluster serves. Every file is written, nothing removed: a file of DIR that is no object of
    the cluster is named on stderr, since `--policies DIR` would read it too. Names are unique in the cluster,
    so no two objects share a file."""
    import os
    import re

    from webhook.admission.policy.objects import file_name, judge_objects, object_name, policy_text
    from webhook.cli.policysource import list_policy_objects, unserved_line

    try:
        listed, _ = list_policy_objects(source.kubeconfig, source.context)
    except CommandError as exc:
        return fail("policy export", str(exc), err)
    verdicts = judge_objects(listed).verdicts
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        return fail("policy export", f"--out {directory}: {exc.strerror or exc}", err)
    code, written = 0, set()
    for obj in sorted(listed, key=file_name):
        name = object_name(obj)
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name):  # the API server allows no other names
            code = fail("policy export", f"a GPUPolicy named {name!r} cannot be a file name; not written", err)
            continue
        path = os.path.join(directory, file_name(obj))
        try:
            with open(path, "w", encoding="utf-8") as stream:
                stream.write(policy_text(obj))
        except OSError as exc:
            code = fail("policy export", f"{path}: {exc.strerror or exc}", err)
            continue
        written.add(file_name(obj))
        print(f"wrote {path}", file=out)
        if name in verdicts and not verdicts[name].ready:
            print(f"gpu-webhook policy export: warning: {unserved_line(verdicts[name])}; written as it is", file=err)
    for other in sorted(set(os.listdir(directory)) - written):
        if other.endswith((".yaml", ".yml")) and os.path.isfile(os.path.join(directory, other)):
            print(
                f"gpu-webhook policy export: warning: {os.path.join(directory, other)} holds no GPUPolicy of the "
                "cluster (left as it is; --policies reads it too)",
                file=err,
            )
    return code


def native_installed(shared: OneCluster, out: TextIO) -> bool:
    """`policy lint --from-cluster`: whether the cluster holds native policies that `policy render native` wrote
    (its component label), so that lint warns what they cannot carry without being asked (`--native`). A
    cluster that cannot say is a note, never a failure: lint's verdict is the policies'."""
    from webhook.cli import kube
    from webhook.cli.webhooks import NATIVE_LABELS

    component = "app.kubernetes.io/component"
    try:
        listed = shared.client().list_objects(kube.VALIDATING_ADMISSION_POLICIES, None)
    except CommandError as exc:
        print(f"note: whether native policies are installed is not known ({exc}); --native warns regardless", file=out)
        return False
    installed = [
        obj
        for obj in listed
        if ((obj.get("metadata") or {}).get("labels") or {}).get(component) == NATIVE_LABELS[component]
    ]
    if installed:
        print(
            f"note: native admission policies are installed ({component}={NATIVE_LABELS[component]}: "
            f"{len(installed)} ValidatingAdmissionPolicy object{'' if len(installed) == 1 else 's'}): a warning "
            "follows for each policy with rules they cannot carry",
            file=out,
        )
    return bool(installed)


def lint_native(policies: PolicySet, out: TextIO) -> None:
    """`policy lint --native`: per policy, the rules of its own that its native policies do not carry."""
    from webhook.admission.native.compile import compile_native

    native = compile_native(policies, [])
    common = native.compiled[-1].gaps  # the built-in defaults' (a mode not compiled has fewer of them)
    for one in native.compiled[:-1]:  # the last: the built-in defaults
        own = [gap.rule for gap in one.gaps if gap not in common]
        if own:
            print(
                f"warning: policy {one.policy.name} ({one.policy.source}): its native policies do not carry "
                f"{'; '.join(own)} (docs/native-policies.md)",
                file=out,
            )


def render_native(
    policies: PolicySet, out: TextIO, err: TextIO, api_version: str = "v1", beside_webhook: bool = False
) -> int:
    """`policy render native`: the policies as MutatingAdmissionPolicy and ValidatingAdmissionPolicy objects with
    their bindings (docs/native-policies.md); what they do not carry, rule by rule, on stderr."""
    from webhook.admission.native.compile import compile_native
    from webhook.cli.webhooks import native_documents

    native = compile_native(policies, [], beside_webhook)
    out.write(
        "# The GPU policies as the API server's own admission policies (gpu-webhook policy render native).\n"
        "# MutatingAdmissionPolicy: admissionregistration.k8s.io/v1 from Kubernetes 1.36 (beta behind a feature\n"
        "# gate on 1.34 and 1.35: --api-version v1beta1); ValidatingAdmissionPolicy: v1 from 1.30.\n"
    )
    out.write(native_documents(policies, api_version, beside_webhook))
    prefix = "gpu-webhook policy render native"
    common = [gap for gap in native.compiled[0].gaps if all(gap in one.gaps for one in native.compiled)]
    for gap in [*native.every, *common]:
        print(f"{prefix}: every policy: not compiled: {gap}", file=err)
    for one in native.compiled:
        for gap in one.gaps:
            if gap not in common:
                print(f"{prefix}: policy {one.policy.name}: not compiled: {gap}", file=err)
    return 0


# --- explain -----------------------------------------------------------------------------------------------


def explain(namespaces: list[str], source: PolicySource | str | None, out: TextIO, err: TextIO) -> int:
    """`policy explain`: each namespace's policy; `source` a PolicySource, or a directory (None: the default)."""
    from webhook.admission.policy.globs import is_namespace_name, quote

    bad = [name for name in namespaces if not is_namespace_name(name)]
    for name in bad:
        print(
            f"gpu-webhook policy explain: {quote(name)} is not a valid namespace name; namespace names are 1-63 "
            "lowercase letters, digits and '-', starting and ending with a letter or digit",
            file=err,
        )
    if bad:
        return 2
    if not isinstance(source, PolicySource):
        source = PolicySource(source)
    try:
        policies = load_policy_set(source, "policy explain", err)
    except CommandError as exc:
        return fail("policy explain", str(exc), err)
    for index, namespace in enumerate(namespaces):
        if index:
            print(file=out)
        _explain_one(namespace, policies, out)
    return 0


def _explain_one(namespace: str, policies: PolicySet, out: TextIO) -> None:
    from webhook.admission.engine import evaluate
    from webhook.admission.phases import steering
    from webhook.cli.webhooks import EXCLUDED, EXCLUDED_NAMESPACES

    print(f"namespace {namespace}", file=out)
    excluded = dict(EXCLUDED_NAMESPACES).get(namespace)
    if excluded is not None:  # the policies never see it: say so, rather than what they would do
        print(
            f"  webhook   never sent: the shipped webhook configurations exclude {namespace} ({excluded}; "
            f"{EXCLUDED}): its pods and workloads are admitted as written, whatever a policy says",
            file=out,
        )
        return
    selection = policies.select(namespace)
    policy = selection.policy
    print(f"  policy    {policy.name} ({policy.source})", file=out)
    print(f"  why       {selection.reason}", file=out)
    tied = [(glob, other) for glob, other in policies.ties(namespace) if other is not policy]
    for glob, other in tied:
        print(
            f'  tie       glob "{glob}" of policy {other.name} ({other.source}) matches as specifically; '
            f"file order picked {policy.name}",
            file=out,
        )
    print(f"  settings  {describe_policy(policy)}", file=out)
    print(f"  share     {describe_share(policy)}", file=out)
    print(f"  dra       {describe_device_classes(policy)}", file=out)
    if steering.requirements(policy):  # only policies that steer: the others' output stays as it was
        print(f"  steering  {steering.describe(policy)}", file=out)
    _explain_budget(policy, out)
    for quantity in EXPLAIN_QUANTITIES:
        decision = evaluate(_example_pod(namespace, quantity), namespace, policies)
        _print_decision(f"nvidia.com/gpu: {quantity}", decision, out)


def _explain_budget(policy: Policy, out: TextIO) -> None:
    """The namespace's GPU budget: what `cluster.quota` does, and what one of each served resource weighs."""
    from webhook.admission.base.equivalents import format_gpus
    from webhook.admission.budgets.budget import units
    from webhook.admission.policy.model import Check

    check = policy.cluster_checks.quota
    if check is Check.OFF:
        print("  budget    cluster.quota off: the namespace's ResourceQuota GPU entries are not read", file=out)
        return
    does = "refuses a pod past it" if check is Check.DENY else "warns on a pod past it"
    print(
        f"  budget    cluster.quota {check}: a ResourceQuota's requests.nvidia.com/gpu: N is N GPU-equivalents on "
        f"every route, and the webhook {does}",
        file=out,
    )
    for index, (resource, weight, what) in enumerate(units(policy)):
        print(f"  {'unit' if index == 0 else '':<9} {resource} = {format_gpus(weight)} GPU: {what}", file=out)


def _example_pod(namespace: str, quantity: str) -> dict[str, Any]:
    """A Pod as the webhook sees it: one container, requests defaulted from limits by the API server."""
    resources = {"nvidia.com/gpu": quantity}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "explain", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "example",
                    "resources": {"limits": dict(resources), "requests": dict(resources)},
                }
            ]
        },
    }


def _print_decision(label: str, decision: Decision, out: TextIO) -> None:
    print(f"  {label}", file=out)
    print(f"    verdict    {decision.verdict}" + (" (mutated)" if decision.mutated_any else ""), file=out)
    containers = decision.mutated.get("spec", {}).get("containers", [])
    container = containers[0] if containers else {}
    resources = container.get("resources", {})
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    shown = ", ".join(f"{name}: {value}" for name, value in limits.items())
    if requests == limits:
        print(f"    resources  {shown} (requests = limits)", file=out)
    else:
        print(f"    limits     {shown}", file=out)
        print(f"    requests   {', '.join(f'{name}: {value}' for name, value in requests.items())}", file=out)
    env = container.get("env", [])
    for position, variable in enumerate(env):
        value = variable.get("value") if "value" in variable else "(from valueFrom)"
        print(f"    {'env' if position == 0 else '':<10} {variable.get('name')}={value}", file=out)
    for warning in decision.warnings:
        print(f"    warning    {warning}", file=out)
    judged = {"deny": "denied", "audit": "audited"}.get(decision.verdict)
    if judged:
        for line in decision.violations:
            print(f"    {judged:<10} {line}", file=out)
