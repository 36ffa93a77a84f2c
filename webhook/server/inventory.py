"""The Node inventory: a list + watch of Nodes that keeps an immutable `ClusterView` for the engine.

The protocol is the API server's (kubernetes.io/docs/reference/using-api/api-concepts, "Efficient detection
of changes"): list in pages, then watch from the list's resourceVersion with allowWatchBookmarks; every
event moves the resourceVersion on; a watch that ends is resumed from it; an ERROR event with a 410 Status
(the version is older than the API server keeps) means list again. Errors back off, doubling up to a cap.

A new view is published only when something admission reads changed (NodeInfo: managed allocatable, GFD
labels, cordoned): node heartbeats and condition updates arrive as MODIFIED events every few seconds per node
and change nothing it keeps. Reviews read `view()` and never wait: before the first list completes, or once
the watch has been broken for longer than `stale_after`, it is None and the cluster checks are skipped.

Under gunicorn each worker process runs its own inventory (a thread started after the fork): threads do not
survive a fork, and sharing one view across processes would need serialising 5,000 nodes to every worker on
each change. A watch is cheap for the API server (served from its watch cache), and the workers are few.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.admission.cluster.nodes import STALE_AFTER_S, ClusterView, NodeInfo, nodes_text
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.inventory")

NODES_PATH = "/api/v1/nodes"
PAGE_SIZE = 500
WATCH_TIMEOUT_S = (300, 600)  # the server ends each watch after a random time in this range (as client-go)
BACKOFF_S = (0.5, 30.0)  # first retry, cap
CONNECT_TIMEOUT_S = 10.0


class WatchExpired(Exception):
    """410 Gone: the resourceVersion is older than the API server keeps; list again."""


class APIError(Exception):
    """The API server refused or could not be reached: one line for the log."""


def watch_event(event: dict[str, Any], what: str) -> tuple[str, dict[str, Any], str] | None:
    """One watch event as (type, object, resourceVersion or ""); None for one without an object. An ERROR event
    raises: WatchExpired for 410 Gone (the caller lists again), APIError otherwise. Every watch here (nodes, DRA
    claims, slices and classes) reads its events through this."""
    kind, obj = event.get("type"), event.get("object")
    if not isinstance(obj, dict):
        return None
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise WatchExpired
        raise APIError(f"the {what} watch sent an error: {obj.get('message', obj)}")
    metadata = found if isinstance(found := obj.get("metadata"), dict) else {}
    version = metadata.get("resourceVersion")
    return str(kind), obj, version if isinstance(version, str) else ""


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where the inventory's credentials came from, for the start-up line and /readyz."""

    configuration: Any | None  # kubernetes.client.Configuration; None: the cluster checks are off
    source: str  # "in-cluster", "kubeconfig FILE", or why they are off


def find_credentials(kubeconfig: str | None) -> Credentials:
    """In-cluster credentials in a pod, else `--kubeconfig` or `$KUBECONFIG`, else none (checks off).

    `~/.kube/config` is not read: a server that finds someone's personal kubeconfig by accident would judge
    pods against another cluster's nodes.
    """
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and kubeconfig is None
    files = None if in_cluster else kubeconfig or os.environ.get("KUBECONFIG")
    if not in_cluster and not files:
        return Credentials(None, "off: not in a cluster, and neither --kubeconfig nor $KUBECONFIG is set")
    # Imported only with credentials to load: the client adds about 14 MB to every process that imports it.
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)
            return Credentials(configuration, "in-cluster service account")
        config.load_kube_config(config_file=files, client_configuration=configuration, persist_config=False)
        return Credentials(configuration, f"kubeconfig {files}")
    except Exception as exc:  # the client raises assorted exceptions on broken files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Credentials(None, f"off: cannot load credentials ({first})")


class KubeNodes:
    """Nodes over the API, raw JSON (no model classes): one page of a list, or a watch's events."""

    def __init__(self, configuration: Any, path: str = NODES_PATH, what: str = "node", selector: str = "") -> None:
        from kubernetes import client

        self._path, self._what = path, what  # another list + watch (DRA claims) reads another path
        self._selector = selector  # a label selector (the budget ledger's ConfigMaps), or "" for every object
        configuration.retries = False  # retries are the inventory's, with backoff
        self._client = client.ApiClient(configuration)

    def _get(self, query: list[tuple[str, Any]], read_timeout: float) -> Any:
        from urllib3.exceptions import HTTPError

        if self._selector:
            query = [*query, ("labelSelector", self._selector)]
        request = self._client.param_serialize(
            method="GET",
            resource_path=self._path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response = self._client.call_api(*request, _request_timeout=(CONNECT_TIMEOUT_S, read_timeout))
        except (HTTPError, OSError) as exc:
            raise APIError(f"cannot reach the API server: {exc}") from None
        if response.status == 410:
            raise WatchExpired
        if response.status != 200:
            raise APIError(f"listing {self._what}s: HTTP {response.status} {_status_message(response.read())}")
        return response

    def list_page(self, token: str | None) -> dict[str, Any]:
        query: list[tuple[str, Any]] = [("limit", PAGE_SIZE)]
        if token:
            query.append(("continue", token))
        response = self._get(query, 60.0)
        try:
            return json.loads(response.read())
        except ValueError:
            raise APIError(f"the API server's {self._what} list is not JSON") from None

    def watch(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """The events of one watch, until the server ends it (after `timeout_s`) or the connection drops."""
        from urllib3.exceptions import HTTPError

        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_s),
        ]
        response = self._get(query, timeout_s + 30.0).response
        pending = b""
        try:
            for chunk in response.stream(65536, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        except (HTTPError, OSError, ValueError) as exc:
            raise APIError(f"the {self._what} watch broke: {exc}") from None
        finally:
            response.release_conn()


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        return ""
    return str(status.get("message", "")) if isinstance(status, dict) else ""


class NodeSource(Protocol):
    """What the inventory reads: KubeNodes, or anything else that pages a list and streams a watch."""

    def list_page(self, token: str | None) -> dict[str, Any]: ...

    def watch(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]: ...


class NodeInventory:
    """The latest trusted snapshot of the nodes, kept by a daemon thread."""

    what = "node"  # in log lines and errors (webhook/server/claims.py keeps DRA claims the same way)

    def __init__(
        self,
        source: NodeSource,
        *,
        stale_after: float = STALE_AFTER_S,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT_S,
        backoff: tuple[float, float] = BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self.stale_after = stale_after
        self._watch_timeout = watch_timeout
        self._backoff = backoff
        self._clock = clock
        self._view: ClusterView | None = None
        self._broken_since: float | None = None
        self._nodes: dict[str, NodeInfo] = {}
        self._version = ""
        self._listed_version = ""  # the resourceVersion of the last list read whole (`_paged`)
        self.lists = 0  # completed lists (the first, and relists after a 410)
        self.last_error = ""
        self._stop = threading.Event()
        self._dra: tuple[Any, ...] = ()  # the ResourceSlice and DeviceClass watches merged in (attach_dra)
        self._publishing = threading.Lock()  # those watches publish from their own threads

    # ------------------------------------------------------------------------------------ the hot path

    def view(self) -> ClusterView | None:
        """The snapshot, or None while it cannot be trusted (never listed; watch broken too long; a DRA watch
        listing for the first time, or broken too long)."""
        broken = self._broken_since
        if broken is not None and self._clock() - broken > self.stale_after:
            return None
        for watch in self._dra:
            if watch.state() in ("listing", "stale"):
                return None
        return self._view

    def attach_dra(self, *watches: Any) -> None:
        """Merge these watches' ResourceSlices and DeviceClasses (webhook/server/dra_watch.py) into the view."""
        self._dra = watches

    @property
    def last_view(self) -> ClusterView | None:
        """The latest snapshot, trusted or not (for /readyz's node count)."""
        return self._view

    def state(self) -> str:
        """listing (no list yet), current, or stale."""
        if self._view is None:
            return "listing"
        return "current" if self.view() is not None else "stale"

    # ------------------------------------------------------------------------------------ the thread

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="gpu-admission-inventory", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                if not self._version:
                    self._list()
                self._watch()
                delay = self._backoff[0]  # the watch ended as watches do: resume from the last version
            except WatchExpired:
                log(
                    _log, logging.INFO, f"{self.what} watch expired (410 Gone): listing again", event="inventory-relist"
                )
                self._version = ""
            except Exception as exc:  # never let the thread die: back off and try again
                self._broken(str(exc))
                self._stop.wait(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self._backoff[1])

    def _broken(self, why: str) -> None:
        if self._broken_since is None:
            self._broken_since = self._clock()
            log(_log, logging.WARNING, f"{self.what} inventory: {why}; retrying with backoff", event="inventory-broken")
        self.last_error = why

    def _healthy(self) -> None:
        if self._broken_since is not None:
            log(_log, logging.INFO, f"{self.what} inventory: watching again", event="inventory-recovered")
        self._broken_since = None
        self.last_error = ""

    def _paged(self) -> Iterator[Any]:
        """The items of a list, page after page (`limit` and `continue`), one at a time (a page is all that is held
        of them); once they are all read, `_listed_version` is the list's resourceVersion."""
        token: str | None = None
        while True:
            page = self._source.list_page(token)
            yield from page.get("items") or []
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                self._listed_version = str(metadata.get("resourceVersion") or "")
                return

    def _list(self) -> None:
        nodes: dict[str, NodeInfo] = {}
        for item in self._paged():
            info = NodeInfo.from_object(item)
            if info is not None:
                nodes[info.name] = info
        self._nodes = nodes
        self._version = self._listed_version
        self.lists += 1
        self._publish()
        self._healthy()
        log(
            _log,
            logging.INFO,
            f"node inventory: listed {nodes_text(len(nodes))}",
            event="inventory-listed",
            nodes=len(nodes),
        )

    def _watch(self) -> None:
        timeout = random.randint(*self._watch_timeout)
        events = self._source.watch(self._version, timeout)
        first = True
        for event in events:
            if first:
                self._healthy()
                first = False
            if self._stop.is_set():
                return
            self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        """One watch event: the resource version it carries is kept (bookmarks carry only that), then `_change`."""
        parsed = watch_event(event, self.what)
        if parsed is None:
            return
        kind, obj, version = parsed
        if version:
            self._version = version
        if kind != "BOOKMARK":
            self._change(kind, obj)

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        """An ADDED, MODIFIED or DELETED object: what each watch keeps of it (here, the node)."""
        info = NodeInfo.from_object(obj)
        if info is None:
            return
        if kind == "DELETED":
            if self._nodes.pop(info.name, None) is not None:
                self._publish()
        elif kind in ("ADDED", "MODIFIED") and self._nodes.get(info.name) != info:
            self._nodes[info.name] = info
            self._publish()

    def _publish(self) -> None:
        if not self.lists:
            return  # the nodes first: a DRA watch that lists sooner waits for them
        with self._publishing:
            nodes = dict(self._nodes)
            sharing: dict[str, str] = {}
            devices = None
            if self._dra:
                from webhook.admission.cluster.devices import DraDevices
                from webhook.admission.cluster.slices import merge, sharing_of

                slices, classes = self._dra
                held, read = list(slices.items.values()), dict(classes.items)
                nodes = merge(nodes, held, read)
                sharing = sharing_of(classes.items)
                devices = DraDevices(held, read)
            self._view = ClusterView(nodes, class_sharing=sharing, dra=devices)


def _name(obj: Any) -> str:
    """metadata.name of a listed or watched object, or ""."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""


class NamedWatch(NodeInventory):
    """A cluster-scoped kind's objects by name, each reduced by `keep` (None: not kept), kept by a daemon thread;
    `on_change()` after the first list and after every change of what is kept. The GPUPolicy objects and the
    namespaces' names (policy_watch.py, policy_status.py) and the DRA kinds (dra_watch.py) are kept this way."""

    def __init__(
        self,
        source: NodeSource,
        what: str,
        keep: Callable[[dict[str, Any]], Any],
        on_change: Callable[[], None],
        *,
        stale_after: float = STALE_AFTER_S,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT_S,
        backoff: tuple[float, float] = BACKOFF_S,
    ) -> None:
        super().__init__(source, stale_after=stale_after, watch_timeout=watch_timeout, backoff=backoff)
        self.what = what
        self._keep = keep
        self._on_change = on_change
        self.items: dict[str, Any] = {}  # replaced whole on a list; changed in place by events
        self.listed = threading.Event()  # set once the first list has completed
        self.list_error = ""  # why the first list has not completed, while it has not

    def state(self) -> str:
        """listing (no list yet), off (failing before any list: a kind the cluster does not serve, or no RBAC for
        it), current, or stale (the watch broken for longer than `stale_after`)."""
        broken = self._broken_since
        if not self.listed.is_set():
            return "off" if broken is not None else "listing"
        return "stale" if broken is not None and self._clock() - broken > self.stale_after else "current"

    def _broken(self, why: str) -> None:
        super()._broken(why)
        if not self.listed.is_set():
            self.list_error = why

    def _list(self) -> None:
        items: dict[str, Any] = {}
        for item in self._paged():
            name = _name(item)
            value = self._keep(item) if name else None
            if value is not None:
                items[name] = value
        self.items = items
        self._version = self._listed_version
        self.lists += 1
        self.list_error = ""
        self._healthy()
        self._on_change()
        self.listed.set()  # after the change is served: a worker waiting on it serves the listed set

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        name = _name(obj)
        if not name:
            return
        found = self._keep(obj) if kind != "DELETED" else None
        if found is None:
            if self.items.pop(name, None) is not None:
                self._on_change()
        elif self.items.get(name) != found:
            self.items[name] = found
            self._on_change()
