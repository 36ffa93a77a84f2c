"""Where a command's policies come from: `--policies DIR` or `--from-cluster` (the cluster's GPUPolicy objects),
chosen in one place for `check`, `audit`, `policy lint`, `policy explain`, `policy render` and read the same way
for `policy export`.

Not in common.py: it lists through kube.py, which imports common.py. From the cluster the set is the one the
webhook serves (objects.judge_objects), so a command never applies what the server would not.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from webhook.cli.common import CommandError, manifests_not_policies
from webhook.cli.options import missing_policy_directory, policy_directory

if TYPE_CHECKING:
    from webhook.admission.policy.model import PolicySet
    from webhook.admission.policy.objects import Verdict
    from webhook.cli.kube import OneCluster


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Where a command reads its policies: a directory (`--policies DIR`, else the default one) or the
    cluster's GPUPolicy objects (`--from-cluster`, through the kubeconfig)."""

    directory: str | None = None
    from_cluster: bool = False
    kubeconfig: str | None = None
    context: str | None = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> PolicySource:
        return cls(
            getattr(args, "policies", None),
            bool(getattr(args, "from_cluster", False)),
            getattr(args, "kubeconfig", None),
            getattr(args, "context", None),
        )


@dataclass(frozen=True, slots=True)
class PolicyRead:
    """The policies read from a source. A directory with errors loads nothing (`policies` None, `problems` its
    loader lines); the cluster serves the objects that pass, as the webhook does, and `unserved` holds the
    verdicts of the others."""

    policies: PolicySet | None
    where: str  # the directory, or "cluster CONTEXT"
    problems: tuple[str, ...] = ()
    unserved: tuple[Verdict, ...] = ()
    objects: int | None = None  # the GPUPolicy objects listed; None for a directory


def list_policy_objects(
    kubeconfig: str | None, context: str | None, shared: OneCluster | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Every GPUPolicy object of the cluster, paged as the other lists are, and the kubeconfig context's name; a
    one-line ClusterError when they cannot be listed (no CRD: says so and names --policies DIR). `shared`: the
    command's one connection, left open for its other reads."""
    from webhook.cli import kube

    connection = shared or kube.OneCluster(kubeconfig, context)
    try:
        cluster = connection.client()
        return cluster.list_objects(kube.GPU_POLICIES, None, page_size=kube.PAGE_SIZE), cluster.name
    finally:
        if shared is None:
            connection.close()


def read_policies(source: PolicySource, shared: OneCluster | None = None) -> PolicyRead:
    """The one place a command's policies come from, whichever the source; a CommandError (one line) when the
    directory cannot be read or the cluster cannot be listed. `shared`: the command's one connection, where it
    reads the cluster again."""
    if source.from_cluster:
        from webhook.admission.policy.objects import judge_objects

        listed, name = list_policy_objects(source.kubeconfig, source.context, shared)
        judged = judge_objects(listed)
        unserved = tuple(verdict for _, verdict in sorted(judged.verdicts.items()) if not verdict.ready)
        problems = tuple(line for verdict in unserved for line in verdict.problems)
        where = f"cluster {name}"
        return PolicyRead(judged.policies, where, problems, unserved, len(listed))

    from webhook.admission.policy.loader import PolicyLoadError, load_policies

    chosen = policy_directory(source.directory)
    try:
        return PolicyRead(load_policies(chosen), chosen)
    except PolicyLoadError as exc:
        return PolicyRead(None, chosen, tuple(exc.problems or [str(exc)]))
    except OSError as exc:
        raise CommandError(f"cannot read policies in {chosen}: {exc.strerror or exc}") from None


def load_policy_set(source: PolicySource, command: str, err: TextIO | None = None) -> PolicySet:
    """The policy set a command applies, or a one-line CommandError. A directory must exist and load whole;
    from the cluster, the set the webhook serves, with one warning on `err` for each object it does not serve
    (the command goes on, as the webhook does: `policy lint --from-cluster` is what fails on them)."""
    if not source.from_cluster and (problem := missing_policy_directory(source.directory)):
        raise CommandError(problem)
    read = read_policies(source)
    if read.policies is None:
        lines = manifests_not_policies(read.where, list(read.problems))
        raise CommandError(f"invalid policies in {read.where}:\n  " + "\n  ".join(lines))
    for verdict in read.unserved:
        (err or sys.stderr).write(f"gpu-webhook {command}: warning: {unserved_line(verdict)}; left out\n")
    return read.policies


def unserved_line(verdict: Verdict) -> str:
    """One line for an object the webhook does not serve: its name and the loader's lines."""
    return f"GPUPolicy {verdict.name} is not served by the webhook: {'; '.join(verdict.problems)}"
