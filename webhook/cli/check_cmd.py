"""`gpu-webhook check`: the webhook's exact decisions for manifests, offline or from a running webhook.

Platform teams run it in CI and GitOps repositories before turning the webhook on. Every decision comes from
`engine.evaluate` (or, with `--server`, from the webhook itself): this module only reads, loops and reports.
Heavy modules are imported inside `run` so `gpu-webhook` starts fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from webhook.cli.options import (
    POLICIES_HELP,
    add_custom_resources_argument,
    add_kubeconfig_arguments,
    custom_kind_table,
    kubeconfig_without_cluster,
    missing_policy_directory,
    policy_directory,
)

if TYPE_CHECKING:
    from webhook.admission.cluster import ClusterView
    from webhook.admission.customresources import KindTable
    from webhook.admission.dra import ClaimsView
    from webhook.admission.engine import Decision
    from webhook.admission.policy import PolicySet
    from webhook.cli.output import Result

    Evaluator = Callable[[dict[str, Any], str], Decision]

DEFAULT_NAMESPACE = "default"


class CommandError(Exception):
    """A usage, input, policy or connection problem: one line on stderr, exit 2."""


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `check` and `audit` share: policies, output format, diff, warnings as failures."""
    parser.add_argument(
        "--policies",
        metavar="DIR",
        default=None,
        help=POLICIES_HELP,
    )
    add_custom_resources_argument(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "yaml", "json"),
        default="table",
        help="table (default), yaml (every object, mutated as the webhook would), or json",
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="print a unified diff (YAML) of each object the webhook would change",
    )
    parser.add_argument(
        "--fail-on-warn", action="store_true", help="exit 1 on warnings too, not only on denials"
    )
    parser.add_argument(
        "--show-env-values",
        action="store_true",
        help="print containers' env values in --diff (and in audit's yaml and json); by default they are "
        "redacted, all but the webhook's own memory-fraction variables",
    )


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
    add_kubeconfig_arguments(nodes, when="--cluster")
    remote = parser.add_argument_group("against a running webhook")
    remote.add_argument(
        "--server", metavar="URL", help="send AdmissionReviews to this webhook (https://host:port)"
    )
    trust = remote.add_mutually_exclusive_group()
    trust.add_argument("--ca-file", metavar="FILE", help="CA bundle that signed the webhook's certificate")
    trust.add_argument("--insecure", action="store_true", help="do not verify the webhook's certificate")
    remote.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="per request (default: 10)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _check(args)
    except CommandError as exc:
        return fail("check", str(exc))


def fail(command: str, message: str) -> int:
    sys.stderr.write(f"gpu-webhook {command}: {message}\n")
    return 2


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
    if args.server:
        from webhook.cli.remote import RemoteEvaluator  # its errors are CommandErrors

        remote = RemoteEvaluator(
            args.server, ca_file=args.ca_file, insecure=args.insecure, timeout=args.timeout, kinds=kinds
        )
        evaluator: Evaluator = remote
    else:
        remote = None
        applied_policies = policy_directory(args.policies)
        policies = load_policy_set(args.policies)
        from webhook.admission.dra import ClaimIndex

        claims = ClaimIndex()  # a pod's claims and templates: those in the same input (offline)
        for item in items:
            claims.add(item.obj, namespace_of(item.obj, args.namespace))
        view = cluster_view(args.kubeconfig, args.context) if args.cluster else None
        evaluator = local_evaluator(policies, view, kinds, claims)

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
    return 2 if errors else code


def load_policy_set(directory: str | None) -> PolicySet:
    """The policy set that `--policies` (options.policy_directory) names, or a one-line CommandError."""
    from webhook.admission.loader import PolicyLoadError, load_policies

    problem = missing_policy_directory(directory)
    if problem:
        raise CommandError(problem)
    chosen = policy_directory(directory)
    try:
        return load_policies(chosen)
    except PolicyLoadError as exc:
        problems = exc.problems or [str(exc)]
        raise CommandError("invalid policies:\n  " + "\n  ".join(manifests_not_policies(chosen, problems))) from None
    except OSError as exc:
        raise CommandError(f"cannot read policies in {chosen}: {exc.strerror or exc}") from None


def manifests_not_policies(directory: str, problems: list[str]) -> list[str]:
    """The loader's problems, with the files that hold Kubernetes manifests (a Pod, a Deployment: not a
    GPUPolicy) said once for all, instead of every field of every object as an unknown policy field."""
    import re

    foreign: dict[str, str] = {}  # file -> a kind it holds
    for problem in problems:
        match = re.match(r'(.+?)#\d+ kind: "([^"]*)" is not supported; use GPUPolicy$', problem)
        if match:
            foreign.setdefault(match[1], match[2])
    if not foreign:
        return problems
    kept = [p for p in problems if not any(p.startswith(f"{name}#") for name in foreign)]
    kinds = sorted(set(foreign.values()))
    shown = ", ".join(kinds[:4]) + (", ..." if len(kinds) > 4 else "")
    files = len(foreign)
    said = (
        f"{directory}: {files} file{'s' if files != 1 else ''} hold{'s' if files == 1 else ''} Kubernetes "
        f"manifests ({shown}), not GPUPolicy documents: --policies takes a directory of policies; give "
        "manifests as the paths to check"
    )
    return [said, *kept]


def local_evaluator(
    policies: PolicySet,
    cluster: ClusterView | None = None,
    kinds: KindTable | None = None,
    claims: ClaimsView | None = None,
) -> Evaluator:
    """The engine, after the API server's own defaulting (limits without requests get requests); with
    `cluster`, the policies' cluster checks run against it; with `claims`, a pod's DRA claims count with it.
    Custom resources of `kinds` (the built-in table when None) are judged by their pod templates, as the
    server's /validate judges them."""
    from webhook.admission.customresources import BUILTIN, evaluate
    from webhook.admission.podspec import default_requests_from_limits

    table = kinds if kinds is not None else BUILTIN

    def evaluate_local(obj: dict[str, Any], namespace: str) -> Decision:
        return evaluate(default_requests_from_limits(obj), namespace, policies, None, cluster, claims, table)

    return evaluate_local


def cluster_view(kubeconfig: str | None, context: str | None) -> ClusterView:
    """The cluster's nodes, listed once (a ClusterError, one line, when that cannot be done)."""
    from webhook.cli.drift import list_view
    from webhook.cli.kube import Cluster

    cluster = Cluster(kubeconfig=kubeconfig, context=context)
    try:
        return list_view(cluster)
    finally:
        cluster.close()


def namespace_of(obj: dict[str, Any], default: str | None) -> str:
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    if isinstance(namespace, str) and namespace:
        return namespace
    return default or DEFAULT_NAMESPACE


def evaluate_one(
    evaluator: Evaluator,
    obj: dict[str, Any],
    *,
    source: str,
    document: int,
    item: int | None = None,
    owner: str | None = None,
    default_namespace: str | None = None,
) -> Result:
    """One object through the evaluator into a `Result`; an engine failure is a one-line error, exit 2."""
    from webhook.cli.output import make_result

    namespace = namespace_of(obj, default_namespace)
    try:
        decision = evaluator(obj, namespace)
    except CommandError:
        raise
    except Exception as exc:  # a bug in the engine must still be one line naming the object
        where = f"{source}#{document}" + (f" items[{item}]" if item is not None else "")
        raise CommandError(
            f"{where}: the admission engine failed on this object ({type(exc).__name__}: {exc}); "
            "please report it with the manifest"
        ) from None
    return make_result(
        decision, obj, source=source, document=document, namespace=namespace, item=item, owner=owner
    )
