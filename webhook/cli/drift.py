"""The node snapshot for the CLI (`check --cluster`, `policy lint --cluster`, `audit`) and the drift table.

One list of Nodes with the kubeconfig's credentials becomes the same `ClusterView` the server watches; the
drift of each policy (clusterdrift.drift) is printed as a table a person can act on: which policy field,
what it says, what the nodes say, which nodes, and the fix; or as JSON or YAML (`-o`), for a pipeline.
`policy lint --cluster` also lists the namespaces once, for the entries of the policies that match none
(clusterdrift.unmatched_namespaces).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from webhook.admission.checks import clusterdrift
from webhook.admission.cluster.nodes import ClusterView, NodeInfo, nodes_text

if TYPE_CHECKING:
    from webhook.cli.kube import KubeClient

HEADERS = ("POLICY", "FIELD", "POLICY SAYS", "NODES SAY", "NODES", "FIX")


def list_view(cluster: KubeClient, page_size: int = 500) -> ClusterView:
    """Every Node, as the server's inventory keeps them."""
    from webhook.cli.kube import NODES

    nodes = cluster.list_objects(NODES, None, page_size=page_size)
    infos = {info.name: info for info in map(NodeInfo.from_object, nodes) if info is not None}
    return _with_dra(cluster, infos, page_size)


def _with_dra(cluster: KubeClient, nodes: dict[str, NodeInfo], page_size: int) -> ClusterView:
    """The nodes with the devices DRA serves on them (ResourceSlices, DeviceClasses), as the server's view has
    them; the nodes alone where the cluster serves no DRA v1 or the identity may not list it."""
    from webhook.admission.cluster.devices import DraDevices
    from webhook.admission.cluster.slices import class_info, merge, sharing_of, slice_info, unread
    from webhook.cli.kube import DEVICE_CLASSES, RESOURCE_SLICES, Forbidden

    try:
        slices = cluster.list_objects(RESOURCE_SLICES, None, page_size=page_size)
        classes = cluster.list_objects(DEVICE_CLASSES, None, page_size=page_size)
    except Forbidden:
        return ClusterView(nodes)
    read = dict(found for found in map(class_info, classes) if found is not None)
    held = [found[1] for found in map(slice_info, slices) if found is not None]
    return ClusterView(merge(nodes, held, read), unread(read), sharing_of(read), dra=DraDevices(held, read))


def list_namespaces(cluster: KubeClient, page_size: int = 500) -> list[str]:
    """The name of every Namespace."""
    from webhook.cli.kube import NAMESPACES

    names = []
    for namespace in cluster.list_objects(NAMESPACES, None, page_size=page_size):
        metadata = namespace.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def drift_json(item: clusterdrift.Drift) -> dict[str, Any]:
    return {
        "policy": item.policy,
        "field": item.field,
        "policySays": item.policy_says,
        "nodesSay": item.nodes_say,
        "nodes": list(item.nodes),
        "effect": item.effect,
        "fix": item.fix,
        "line": item.line,
    }


def unmatched_json(item: clusterdrift.UnmatchedNamespace) -> dict[str, Any]:
    return {
        "policy": item.policy,
        "source": item.source,
        "entry": item.entry,
        "glob": item.glob,
        "meant": item.meant,
        "line": item.line,
    }


def print_drift(drift: Sequence[clusterdrift.Drift], view: ClusterView, out: TextIO) -> None:
    """The table, then one summary line (also when there is no drift: the reader knows it was looked at)."""
    read = nodes_text(len(view.nodes))
    if not drift:
        print(f"no policy drift: every policy agrees with the nodes its pods can land on ({read} read)", file=out)
        return
    rows = [(d.policy, d.field, d.policy_says, d.nodes_say, d.where, d.fix) for d in drift]
    widths = [max(len(row[i]) for row in [HEADERS, *rows]) for i in range(len(HEADERS) - 1)]
    for row in [HEADERS, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]), file=out)
    policies = len({d.policy for d in drift})
    print(
        f"policy drift: {len(drift)} disagreement{'s' if len(drift) != 1 else ''} in {policies} "
        f"polic{'ies' if policies != 1 else 'y'} ({read} read); until fixed, memory fractions and MIG "
        "conversions are wrong for the pods on those nodes",
        file=out,
    )


def print_unmatched(unmatched: Sequence[clusterdrift.UnmatchedNamespace], read: int, out: TextIO) -> None:
    """One line per entry, then a summary line (also when every entry matches)."""
    for item in unmatched:
        print(item.line, file=out)
    namespaces = f"{read} namespace{'s' if read != 1 else ''} read"
    if not unmatched:
        print(f"every namespace entry of the policies matches a namespace of the cluster ({namespaces})", file=out)
        return
    policies = len({item.policy for item in unmatched})
    count = len(unmatched)
    print(
        f"unmatched namespaces: {count} entr{'ies' if count != 1 else 'y'} in {policies} "
        f"polic{'ies' if policies != 1 else 'y'} match no namespace ({namespaces}); the namespaces they were "
        "meant for get another policy",
        file=out,
    )
