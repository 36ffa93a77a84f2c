"""`gpu-webhook audit`: what the current policies would deny or mutate in a running cluster.

The report a platform team reads before turning enforcement on. Objects whose controller the audit listed and
judged (a Deployment's ReplicaSets, their Pods, a CronJob's Jobs) are left out by default: the owner's
template is what gets fixed, and reporting every replica would bury it. Objects of other controllers (an
operator's StatefulSet, the Pods of a custom resource) are reported with their owner, and so are their Pods:
the webhook leaves a controller-owned workload alone and judges its Pods. Owners are matched by uid, so a
custom resource that shares a kind's name (Volcano's `Job`) is no batch Job. `--include-owned` reports
everything. Objects the webhook would leave alone are counted, not listed, unless `--all`: a cluster has
thousands of them.

A resource the identity may not list (403) is skipped, with one stderr line each, and the rest is reported:
the built-in `view` role grants no podtemplates, and a read-only auditor should still get a report. The exit
code is then 2 whatever the report says (unless `--allow-incomplete`), so an incomplete audit never passes a
CI gate unnoticed; when nothing at all may be listed there is no report, only one line. Owners that were
skipped cover nothing, so what they own is judged on its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from webhook.admission.base.podspec import controller_reference
from webhook.cli.common import (
    CommandError,
    add_report_arguments,
    evaluate_one,
    fail,
    local_evaluator,
)
from webhook.cli.options import add_kubeconfig_arguments, custom_kind_table
from webhook.cli.policysource import PolicySource, load_policy_set

if TYPE_CHECKING:
    from webhook.admission.cluster.nodes import ClusterView
    from webhook.cli.budgets import BudgetReport
    from webhook.cli.kube import Resource
    from webhook.cli.output import Result


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="report what the policies would deny or mutate among a cluster's Pods and workloads",
        description=(
            "List Pods and workloads with the kubeconfig (or in-cluster) credentials and evaluate each as "
            "the webhook would: exit 0 when all would be admitted, 1 when any would be denied, 2 on errors "
            "or when a resource could not be listed (403: skipped, the rest reported; see --allow-incomplete)."
        ),
    )
    add_kubeconfig_arguments(parser)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="audit one namespace (default: all namespaces)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="audit every namespace (the default)")
    parser.add_argument(
        "--include-owned",
        action="store_true",
        help="also report ReplicaSets, Jobs and Pods owned by a listed workload",
    )
    parser.add_argument(
        "--all",
        dest="show_all",
        action="store_true",
        help="list every object, not only those the policies would deny, change or warn about",
    )
    parser.add_argument(
        "--page-size", type=int, default=500, metavar="N", help="objects per list request (default: 500)"
    )
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="a resource the identity may not list (403) is still skipped and named, but does not make the "
        "exit code 2 (for a read-only identity, such as the built-in view role, which grants no podtemplates)",
    )
    add_report_arguments(parser)  # --custom-resources among them
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _audit(args)
    except CommandError as exc:
        _progress_done()
        return fail("audit", str(exc))


def _audit(args: argparse.Namespace) -> int:
    if args.diff and args.output != "table":
        raise CommandError("--diff is an output format of its own; drop -o/--output")
    if args.page_size < 1:
        raise CommandError(f"--page-size {args.page_size}: must be at least 1")
    from webhook.cli.output import report

    policies = load_policy_set(PolicySource.of(args), "audit")
    try:
        kinds = custom_kind_table(args.custom_resources)
    except ValueError as exc:
        raise CommandError(str(exc)) from None

    from webhook.cli.kube import RESOURCES, ClusterError, Forbidden, KubeClient

    cluster = KubeClient(kubeconfig=args.kubeconfig, context=args.context)
    namespace = None if args.all_namespaces else args.namespace
    listed: list[list[dict[str, Any]]] = []  # each resource's objects, owners first
    skipped: list[Forbidden] = []
    try:
        # The GPU custom resources the cluster serves first: they own workloads and Pods (a RayJob's RayCluster,
        # a JobSet's Jobs), so what they own is covered by their judged templates.
        served = cluster.custom_resources(list(kinds.kinds.values()))
        for resource in (*served, *RESOURCES):  # owners before what they own: workloads, then Jobs, then Pods
            try:
                listed.append(cluster.list_objects(resource, namespace, page_size=args.page_size, on_page=_progress))
            except Forbidden as exc:
                skipped.append(exc)  # its objects cover nothing: what they own is judged on its own
        listed_any = len(skipped) < len(served) + len(RESOURCES)
        view = _nodes(cluster, args.page_size) if listed_any else None
        quotas = _quotas(cluster, namespace, args.page_size) if listed_any else None
    finally:
        cluster.close()
        _progress_done()
    # Judged once the nodes are known: the policies' cluster checks run against them; a pod's claims and
    # templates (listed before the Pods) count with its GPUs.
    from webhook.admission.dra.podclaims import ClaimIndex
    from webhook.cli.common import namespace_of

    claims = ClaimIndex()
    for objects in listed:
        for obj in objects:
            claims.add(obj, namespace_of(obj, None))
    evaluator = local_evaluator(policies, view, kinds, claims)
    results: list[Result] = []
    covered: set[str] = set()  # uids of objects whose pod template the report judges (here or at their owner)
    for objects in listed:
        for obj in objects:
            ref = controller_reference(obj)
            if ref is not None and ref.get("uid") in covered and not args.include_owned:
                _cover(covered, obj)  # a ReplicaSet's Pods are its Deployment's too
                continue
            result = evaluate_one(
                evaluator,
                obj,
                source=cluster.name,
                document=len(results),
                owner=f"{ref.get('kind', '?')}/{ref.get('name', '?')}" if ref is not None else None,
            )
            if not result.skipped:
                _cover(covered, obj)
            results.append(result)
    if len(skipped) == len(served) + len(RESOURCES):
        first = skipped[0]
        raise ClusterError(
            f"forbidden (403) to list any of the resources the audit reads {first.where} ({first.detail}); "
            f"grant list on {_resource_list(RESOURCES)}"
        )
    for skip in skipped:
        sys.stderr.write(
            f"gpu-webhook audit: skipped {skip.resource.name} {skip.where}: forbidden (403): {skip.detail}; "
            f"grant list on {skip.resource.name} for a complete report\n"
        )
    from webhook.admission.checks.clusterdrift import drift_of
    from webhook.cli.budgets import budgets_json, print_budgets
    from webhook.cli.drift import drift_json, print_drift

    drift = drift_of(policies, view) if view is not None else None
    budgets = _budgets(policies, quotas, listed, results, evaluator, claims) if quotas is not None else None
    code = report(
        results,
        args.output,
        sys.stdout,
        sys.stderr,
        diff=args.diff,
        fail_on_warn=args.fail_on_warn,
        only_affected=not args.show_all,
        redact=not args.show_env_values,  # other teams' workloads: their values are theirs
        skipped_resources=[
            {"resource": exc.resource.name, "namespace": exc.namespace, "status": 403, "message": exc.detail}
            for exc in skipped
        ],
        drift=[drift_json(item) for item in drift] if drift is not None else None,
        budgets=budgets_json(budgets) if budgets is not None else None,
    )
    if drift and view is not None and (args.output != "json" or args.diff):
        # Under the objects' table (it is about the policies, and a clean cluster adds nothing); on stderr under
        # YAML and a diff, whose stdout is for tools
        stream = sys.stdout if args.output == "table" and not args.diff else sys.stderr
        if stream is sys.stdout:
            print(file=stream)
        print_drift(drift, view, stream)
    if budgets is not None and budgets.shown and (args.output != "json" or args.diff):
        # Under the objects' table (and the drift), where the cluster has GPU quotas; on stderr under YAML
        # and a diff.
        stream = sys.stdout if args.output == "table" and not args.diff else sys.stderr
        if stream is sys.stdout:
            print(file=stream)
        print_budgets(budgets, stream)
    return 2 if skipped and not args.allow_incomplete else code


def _quotas(cluster: Any, namespace: str | None, page_size: int) -> list[dict[str, Any]] | None:
    """The ResourceQuotas, for the GPU budgets; None (said on stderr) when the identity may not list them."""
    from webhook.cli.kube import RESOURCE_QUOTAS, Forbidden

    try:
        return cluster.list_objects(RESOURCE_QUOTAS, namespace, page_size=page_size)
    except Forbidden as exc:
        sys.stderr.write(
            f"gpu-webhook audit: skipped resourcequotas {exc.where}: forbidden (403): {exc.detail}; grant list on "
            "resourcequotas for the GPU budgets\n"
        )
        return None


def _budgets(
    policies: Any,
    quotas: list[dict[str, Any]],
    listed: list[list[dict[str, Any]]],
    results: list[Result],
    evaluator: Any,
    claims: Any,
) -> BudgetReport:
    """Each namespace's GPU use against its quotas: the Pods as the report judged them (mapped), the others
    (left to their owner) through the engine once more; each weighed with the claims the audit listed."""
    from webhook.cli.budgets import BudgetReport

    judged = {id(result.original): result.object for result in results if result.kind == "Pod" and not result.skipped}
    pods = [obj for objects in listed for obj in objects if obj.get("kind") == "Pod"]
    return BudgetReport(policies, quotas, pods, evaluator, claims, mapped=lambda pod: judged.get(id(pod)))


def _nodes(cluster: Any, page_size: int) -> ClusterView | None:
    """The nodes, for the cluster checks and the drift; None (said on stderr) when the identity may not list
    them: the objects are still judged, without the cluster checks."""
    from webhook.cli.drift import list_view
    from webhook.cli.kube import Forbidden

    try:
        return list_view(cluster, page_size=page_size)
    except Forbidden as exc:
        sys.stderr.write(
            f"gpu-webhook audit: skipped nodes: forbidden (403): {exc.detail}; grant list on nodes for the "
            "cluster checks and the policy drift\n"
        )
        return None


def _resource_list(resources: Sequence[Resource]) -> str:
    """`pods, podtemplates and jobs.batch`, as `kubectl create role --resource` spells them."""
    names = [resource.name for resource in resources]
    return ", ".join(names[:-1]) + f" and {names[-1]}"


def _cover(covered: set[str], obj: dict[str, Any]) -> None:
    """Record that `obj`'s pod template is judged in the report (an object without a uid covers nothing)."""
    metadata = obj.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    if isinstance(uid, str) and uid:
        covered.add(uid)


_progress_shown = False


def _progress(resource: Any, count: int) -> None:
    """`listing pods: 1500` on one refreshed stderr line, on a terminal only."""
    global _progress_shown
    if not sys.stderr.isatty():
        return
    sys.stderr.write(f"\r\033[Klisting {resource.name}: {count}")
    sys.stderr.flush()
    _progress_shown = True


def _progress_done() -> None:
    global _progress_shown
    if _progress_shown:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
        _progress_shown = False
