"""What the commands share: the one-line error, the report options, the local engine, one object through an
evaluator. A module of its own so that the commands and the modules they use (kube, remote) import it, not each
other; the policy set the commands apply is chosen in policysource.py, which lists through kube.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from webhook.cli.options import (
    add_custom_resources_argument,
    add_policy_source_arguments,
)

if TYPE_CHECKING:
    from webhook.admission.budgets.tally import Tally
    from webhook.admission.cluster.nodes import ClusterView
    from webhook.admission.customresources import KindTable
    from webhook.admission.dra.podclaims import ClaimsView
    from webhook.admission.engine import Decision
    from webhook.admission.policy.model import PolicySet
    from webhook.cli.output import Result

    Evaluator = Callable[[dict[str, Any], str], Decision]

DEFAULT_NAMESPACE = "default"
REQUEST_TIMEOUT_S = 10.0  # `check --server`: each AdmissionReview sent to the webhook


class CommandError(Exception):
    """A usage, input, policy or connection problem: one line on stderr, exit 2."""


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `check` and `audit` share: policies, output format, diff, warnings as failures."""
    add_policy_source_arguments(parser)
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
    parser.add_argument("--fail-on-warn", action="store_true", help="exit 1 on warnings too, not only on denials")
    parser.add_argument(
        "--show-env-values",
        action="store_true",
        help="print containers' env values in --diff (and in audit's yaml and json); by default they are "
        "redacted, all but the webhook's own memory-fraction variables",
    )


def fail(command: str, message: str, err: TextIO | None = None) -> int:
    (err or sys.stderr).write(f"gpu-webhook {command}: {message}\n")
    return 2


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
    nodes: ClusterView | None = None,
    kinds: KindTable | None = None,
    claims: ClaimsView | None = None,
    tally: Tally | None = None,
) -> Evaluator:
    """The engine, after the API server's own defaulting (limits without requests get requests); with
    `nodes`, the policies' cluster checks run against them; with `claims`, a pod's DRA claims count with it.
    Custom resources of `kinds` (the built-in table when None) are judged by their pod templates, as the
    server's /validate judges them. With `tally`, each Pod is judged against its namespace's GPU quotas, and
    each admitted one counts for the next (the budgets of the input, in order)."""
    from webhook.admission.base.podspec import default_requests_from_limits
    from webhook.admission.customresources import BUILTIN, evaluate

    table = kinds if kinds is not None else BUILTIN

    def evaluate_local(obj: dict[str, Any], namespace: str) -> Decision:
        pod = default_requests_from_limits(obj)
        budget = tally.usages(namespace, pod) if tally is not None and obj.get("kind") == "Pod" else None
        decision = evaluate(pod, namespace, policies, None, nodes, claims, table, budget)
        if tally is not None and decision.allowed and decision.ask is not None:
            tally.admit(namespace, decision.mutated, decision.ask)
        return decision

    return evaluate_local


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
    return make_result(decision, obj, source=source, document=document, namespace=namespace, item=item, owner=owner)
