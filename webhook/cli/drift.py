"""The node snapshot for the CLI (`check --cluster`, `policy lint --cluster`, `audit`) and the drift table.

One list of Nodes with the kubeconfig's credentials becomes the same `ClusterView` the server watches; the
drift of each policy (clustercheck.drift) is printed as a table a person can act on: which policy field,
what it says, what the nodes say, which nodes, and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from webhook.admission import clustercheck
from webhook.admission.cluster import ClusterView, NodeInfo

if TYPE_CHECKING:
    from webhook.cli.kube import Cluster

HEADERS = ("POLICY", "FIELD", "POLICY SAYS", "NODES SAY", "NODES", "FIX")


def list_view(cluster: Cluster, page_size: int = 500) -> ClusterView:
    """Every Node, as the server's inventory keeps them."""
    from webhook.cli.kube import NODES

    nodes = cluster.list_objects(NODES, None, page_size=page_size)
    return ClusterView.of(info for info in map(NodeInfo.from_object, nodes) if info is not None)


def print_drift(drift: Sequence[clustercheck.Drift], view: ClusterView, out: TextIO) -> None:
    """The table, then one summary line (also when there is no drift: the reader knows it was looked at)."""
    count = len(view.nodes)
    if not drift:
        print(f"no policy drift: every policy agrees with the GPU labels of {count} node"
              f"{'s' if count != 1 else ''}", file=out)
        return
    rows = [(d.policy, d.field, d.policy_says, d.nodes_say, d.where, d.fix) for d in drift]
    widths = [max(len(row[i]) for row in [HEADERS, *rows]) for i in range(len(HEADERS) - 1)]
    for row in [HEADERS, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]), file=out)
    policies = len({d.policy for d in drift})
    print(
        f"policy drift: {len(drift)} disagreement{'s' if len(drift) != 1 else ''} in {policies} "
        f"polic{'ies' if policies != 1 else 'y'} ({count} nodes read); until fixed, memory fractions and MIG "
        "conversions are wrong for the pods on those nodes",
        file=out,
    )
