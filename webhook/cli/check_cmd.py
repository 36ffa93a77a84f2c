"""`gpu-webhook check`: the webhook's exact decisions for manifests, offline or from a running webhook.

Platform teams run it in CI and GitOps repositories before turning the webhook on. Every decision comes from
`engine.evaluate` (or, with `--server`, from the webhook itself): this module only reads, loops and reports;
what `audit` shares with it is in common.py. Heavy modules are imported inside the functions that use them,
so that `gpu-webhook` starts fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from webhook.cli.common import (
    DEFAULT_NAMESPACE,
    REQUEST_TIMEOUT_S,
    CommandError,
    add_report_arguments,
    evaluate_one,
    fail,
    local_evaluator,
    namespace_of,
)
from webhook.cli.options import (
    add_kubeconfig_arguments,
    custom_kind_table,
    kubeconfig_without_cluster,
    policy_directory,
)
from webhook.cli.policysource import PolicySource, load_policy_set

if TYPE_CHECKING:
    from webhook.admission.budgets.tally import Tally
    from webhook.admission.cluster.nodes import ClusterView
    from webhook.cli.common import Evaluator
    from webhook.cli.manifests import Item


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="check manifests against the policies (offline, or with --server against a running webhook)",
        description=(
            "Evaluate every Pod, workload and GPU custom resource in PATHs exactly as the webhook would: "
            "exit 0 when all are admitted, 1 when any is denied, 2 on usage or policy errors and, after "
            "judging the rest, when a file does not parse."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="manifest files, directories (searched for *.yaml, *.yml, *.json), or - for stdin",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help=f"namespace for objects without metadata.namespace (default: {DEFAULT_NAMESPACE})",
    )
    add_report_arguments(parser)
    nodes = parser.add_argument_group("against a cluster's nodes (off by default: check is offline)")
    nodes.add_argument(
        "--cluster",
        action="store_true",
        help="list the cluster's nodes (kubeconfig, as audit does) and run the policies' cluster checks: "
        "fits, offered, drift",
    )
    add_kubeconfig_arguments(nodes, when="--cluster or --from-cluster")
    remote = parser.add_argument_group("against a running webhook")
    remote.add_argument("--server", metavar="URL", help="send AdmissionReviews to this webhook (https://host:port)")
    trust = remote.add_mutually_exclusive_group()
    trust.add_argument("--ca-file", metavar="FILE", help="CA bundle that signed the webhook's certificate")
    trust.add_argument("--insecure", action="store_true", help="do not verify the webhook's certificate")
    remote.add_argument(
        "--timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help=f"per request (default: {REQUEST_TIMEOUT_S:g})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _check(args)
    except CommandError as exc:
        return fail("check", str(exc))


def _check(args: argparse.Namespace) -> int:
    if not args.paths:
        raise CommandError("no input: give manifest files, directories, or - to read stdin")
    if args.diff and args.output != "table":
        raise CommandError("--diff is an output format of its own; drop -o/--output")
    if (args.ca_file or args.insecure) and not args.server:
        raise CommandError("--ca-file and --insecure only apply with --server URL")
    if not args.timeout > 0:
        raise CommandError(f"--timeout {args.timeout:g}: must be more than 0 seconds")
    if (misuse := kubeconfig_without_cluster(args)) is not None:
        raise CommandError(misuse)
    if args.cluster and args.server:
        raise CommandError("--cluster and --server: a running webhook uses its own node inventory; drop one")
    if args.from_cluster and args.server:
        raise CommandError("--from-cluster and --server: a running webhook applies its own policies; drop one")

    from webhook.cli.manifests import load_items

    documents, items, errors = load_items(args.paths)
    if errors and not items:
        for error in errors:
            fail("check", str(error))
        return 2
    try:
        kinds = custom_kind_table(args.custom_resources)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    policies_given = [item for item in items if item.is_policy]  # e.g. `check examples/` meets examples/policies/
    items = [item for item in items if not item.is_policy]

    applied_policies = None  # the directory whose policies this run applies (the server's own, with --server)
    quota_errors: list[str] = []  # GPU quotas of the input that cannot be read (offline)
    if args.server:
        from webhook.cli.remote import RemoteEvaluator  # its errors are CommandErrors

        remote = RemoteEvaluator(
            args.server, ca_file=args.ca_file, insecure=args.insecure, timeout=args.timeout, kinds=kinds
        )
        evaluator: Evaluator = remote
    else:
        remote = None
        applied_policies = None if args.from_cluster else policy_directory(args.policies)
        policies = load_policy_set(PolicySource.of(args), "check")
        from webhook.admission.dra.podclaims import ClaimIndex

        claims = ClaimIndex()  # a pod's claims and templates: those in the same input (offline)
        for item in items:
            claims.add(item.obj, namespace_of(item.obj, args.namespace))
        tally, quota_errors = read_budgets(items, args.namespace)
        view = cluster_view(args.kubeconfig, args.context) if args.cluster else None
        evaluator = local_evaluator(policies, view, kinds, claims, tally)

    from webhook.cli.output import report

    try:
        results = [
            evaluate_one(
                evaluator,
                item.obj,
                source=item.document.source,
                document=item.document.index,
                item=item.item,
                default_namespace=args.namespace,
            )
            for item in items
        ]
    finally:
        if remote is not None:
            remote.close()
    code = report(
        results,
        args.output,
        sys.stdout,
        sys.stderr,
        diff=args.diff,
        documents=documents,
        fail_on_warn=args.fail_on_warn,
        redact=args.diff and not args.show_env_values,  # yaml and json: the user's own manifests, as written
    )
    sys.stdout.flush()
    sys.stderr.write("".join(item.policy_note(applied_policies) + "\n" for item in policies_given))
    # A file that does not parse stops nothing: the others are judged, then it is named (file and line, as
    # kubectl names it) and the run fails.
    for error in errors:
        fail("check", str(error))
    for problem in quota_errors:
        fail("check", problem)
    return 2 if errors or quota_errors else code


def read_budgets(items: list[Item], default_namespace: str | None) -> tuple[Tally | None, list[str]]:
    """The GPU budgets among the input (ResourceQuota objects with a GPU entry, budget.py): the tally the pods
    of the input are judged against in order, None where there is none; and a line for each GPU quota that
    cannot be read (named like a file that does not parse: the run fails after judging the rest)."""
    from webhook.admission.budgets.tally import Tally
    from webhook.admission.cluster.quota import gpu_quota, quota_problem

    tally, problems = Tally(), []
    for item in items:
        namespace = namespace_of(item.obj, default_namespace)
        quota = gpu_quota(item.obj, namespace)
        if quota is not None:
            tally.add(quota)
        elif (problem := quota_problem(item.obj, namespace)) is not None:
            problems.append(f"{item.document.source}#{item.document.index}: {problem}")
    return (tally if tally.quotas else None), problems


def cluster_view(kubeconfig: str | None, context: str | None) -> ClusterView:
    """The cluster's nodes, listed once (a ClusterError, one line, when that cannot be done)."""
    from webhook.cli.drift import list_view
    from webhook.cli.kube import KubeClient

    cluster = KubeClient(kubeconfig=kubeconfig, context=context)
    try:
        return list_view(cluster)
    finally:
        cluster.close()
