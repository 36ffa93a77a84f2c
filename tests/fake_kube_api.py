"""A local stand-in for the Kubernetes API server's list endpoints, for testing `gpu-webhook audit`.

Plain HTTP on 127.0.0.1 with a bearer token. It serves the collections `audit` lists, cluster-wide and per
namespace, with real chunking: `limit` cuts a page, `metadata.continue` carries an opaque token, and the token
is only valid for the query it came from. Modes reproduce the errors a real cluster gives: a wrong token is
401, and `forbidden` resources answer 403 with a Kubernetes Status. Every request is recorded for assertions.

Writes, as the budget ledger makes them: ConfigMaps are created (POST), replaced (PUT) and deleted, each write
giving the object a new `metadata.resourceVersion`; a PUT or DELETE that names an older version answers 409
Conflict and a POST of an existing name 409 AlreadyExists, with the API server's Status. One object (a Pod, a
ConfigMap) can be read by its path (GET), and `labelSelector` (equality and existence terms) filters lists and
watches. Every plural in `unavailable` answers 503, and one in `slow` answers its lists, writes and GETs that
late. Leases (coordination.k8s.io) are written as ConfigMaps are. GPUPolicies are cluster-scoped custom objects
with a status subresource (`apply`, `set_status`, and the API's GET, PUT, POST, DELETE and PUT of `NAME/status`).
`bytes_received` and `bytes_sent` count the bodies and watch events that crossed.

Nodes can also be watched, as the API server does it: `?watch=true&resourceVersion=N` answers a chunked
stream of JSON events (ADDED, MODIFIED, DELETED, BOOKMARK when `allowWatchBookmarks`), one per line, from the
change after N; a version older than the history kept (`compact`) answers one ERROR event holding a 410
Status; `timeoutSeconds` ends the stream; `disconnect` cuts every open watch without ending its chunks.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from time import monotonic as time_now
from typing import Any
from urllib.parse import parse_qs, urlsplit

# kind -> (API prefix, resource plural)
COLLECTIONS: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "PodTemplate": ("/api/v1", "podtemplates"),
    "ReplicationController": ("/api/v1", "replicationcontrollers"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "DaemonSet": ("/apis/apps/v1", "daemonsets"),
    "ReplicaSet": ("/apis/apps/v1", "replicasets"),
    "Job": ("/apis/batch/v1", "jobs"),
    "CronJob": ("/apis/batch/v1", "cronjobs"),
    "Node": ("/api/v1", "nodes"),
    "Namespace": ("/api/v1", "namespaces"),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims"),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1", "resourceclaimtemplates"),
    "ResourceSlice": ("/apis/resource.k8s.io/v1", "resourceslices"),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses"),
    "ResourceQuota": ("/api/v1", "resourcequotas"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases"),
    "GPUPolicy": ("/apis/gpu-admission.io/v1", "gpupolicies"),  # cluster-scoped
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies"),  # too
}

TOKEN = "fake-token"
# Watched as Nodes are (put, delete).
WATCHED = (
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "DeviceClass",
    "Pod",
    "ResourceQuota",
    "ConfigMap",
    "GPUPolicy",
    "Namespace",
)
# Cluster-scoped custom resources served as the API server serves a CRD with a status subresource: GET, PUT and
# DELETE of one object by name, POST to the collection, PUT of `NAME/status` (see `apply`).
CUSTOM = ("GPUPolicy",)
# Created, replaced and deleted through the API: the budget ledger, its Lease, and Pods (as a benchmark's client
# creates them).
WRITABLE = ("ConfigMap", "Lease", "Pod")


@dataclass
class FakeKubeAPI:
    """The server's state: objects by kind, the accepted token, forbidden resources, recorded requests."""

    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)  # kind -> (ns, name)
    token: str = TOKEN
    forbidden: set[str] = field(default_factory=set)  # resource plurals that answer 403
    unavailable: set[str] = field(default_factory=set)  # resource plurals that answer 503 (an API server in trouble)
    slow: dict[str, float] = field(default_factory=dict)  # resource plural -> seconds each write or GET of one waits
    conflicts: int = 0  # writes answered 409 because they named an older resourceVersion
    requests: list[str] = field(default_factory=list)  # "GET /api/v1/pods?limit=2"
    bytes_received: int = 0  # request bodies read (the writes)
    bytes_sent: int = 0  # response bodies and watch events written
    _server: ThreadingHTTPServer | None = None
    # The watch: every change to a Node, with the resourceVersion it made; history before `_oldest` is gone.
    version: int = 100
    _history: list[tuple[int, str, dict[str, Any], str]] = field(default_factory=list)  # (version, type, obj, kind)
    _oldest: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _cut: int = 0  # bumped by `disconnect`: open watches drop their connection
    _tls: bool = False  # serving HTTPS (`start(certificate=...)`)
    _sorted: dict[str, tuple[int, list[dict[str, Any]]]] = field(default_factory=dict)  # kind -> (version, objects)
    _created: float = 0.0  # the last creationTimestamp given (epoch seconds): each creation a second later at least

    # --- Nodes: changes that watches see ------------------------------------------------------------------

    def _record(self, kind: str, obj: dict[str, Any], resource: str = "Node") -> None:
        with self._changed:
            self.version += 1
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
            self._history.append((self.version, kind, obj, resource))
            self._changed.notify_all()

    def put_node(self, node: dict[str, Any]) -> None:
        """Add or replace a Node (by name): an ADDED or MODIFIED event."""
        with self._changed:
            nodes = self.objects.setdefault("Node", {})
            key = ("", node["metadata"]["name"])
            existing = key in nodes
            stored = copy.deepcopy(node)
            stored.setdefault("metadata", {})["resourceVersion"] = str(self.version + 1)
            nodes[key] = stored
            self._record("MODIFIED" if existing else "ADDED", node)

    def delete_node(self, name: str) -> None:
        with self._changed:
            gone = self.objects.setdefault("Node", {}).pop(("", name), None)
            if gone is not None:
                self._record("DELETED", gone)

    def put(self, obj: dict[str, Any]) -> None:
        """Add or replace a namespaced object (a ResourceClaim) by namespace and name, with its watch event."""
        with self._changed:
            stored = self.objects.setdefault(obj["kind"], {})
            key = (_namespace(obj), obj["metadata"]["name"])
            existing = key in stored
            kept = copy.deepcopy(obj)
            kept.setdefault("metadata", {})["resourceVersion"] = str(self.version + 1)
            stored[key] = kept
            self._record("MODIFIED" if existing else "ADDED", obj, obj["kind"])

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace a cluster-scoped custom object (a GPUPolicy) by name as the API server does for a CRD
        with a status subresource, around any admission webhook: created with generation 1, a uid and a
        creationTimestamp (a second after the last one given at least, so that the order of creation is the order
        of the calls); replaced keeping those and the status (a write of the main resource never changes it), the
        generation raised where the spec changed. Returns the stored object."""
        with self._changed:
            kind, name = obj["kind"], obj["metadata"]["name"]
            current = self.get(kind, "", name)
            stored = copy.deepcopy(obj)
            metadata = stored.setdefault("metadata", {})
            metadata.pop("namespace", None)
            stored.pop("status", None)
            if current is None:
                self._created = max(time.time(), self._created + 1)
                metadata["generation"] = 1
                metadata["uid"] = str(uuid.uuid4())
                metadata["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._created))
            else:
                was = current["metadata"]
                changed = current.get("spec") != stored.get("spec")
                metadata["generation"] = int(was.get("generation") or 1) + (1 if changed else 0)
                for key in ("uid", "creationTimestamp"):
                    metadata[key] = was.get(key)
                if "status" in current:
                    stored["status"] = current["status"]
            self.put(stored)
            return self.get(kind, "", name) or {}

    def set_status(self, kind: str, name: str, status: dict[str, Any]) -> None:
        """Replace a cluster-scoped custom object's status (the status subresource): a new resourceVersion, the
        same generation."""
        with self._changed:
            current = self.get(kind, "", name)
            assert current is not None, f"no {kind} {name}"
            self.put({**current, "status": copy.deepcopy(status)})

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with self._changed:
            gone = self.objects.setdefault(kind, {}).pop((namespace, name), None)
            if gone is not None:
                self._record("DELETED", gone, kind)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object (a copy), or None."""
        with self._changed:
            found = self.objects.get(kind, {}).get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def bookmark(self) -> None:
        """A BOOKMARK event on every open watch that asked for them."""
        self._record("BOOKMARK", {"kind": "Node", "apiVersion": "v1", "metadata": {}})

    def compact(self) -> None:
        """Forget the history: a watch from any version before now gets 410 Gone."""
        with self._changed:
            self._oldest = self.version
            self._history.clear()

    def disconnect(self) -> None:
        with self._changed:
            self._cut += 1
            self._changed.notify_all()

    def counters(self) -> dict[str, int]:
        """The bytes that crossed and the writes that lost a race, so far."""
        return {"bytesReceived": self.bytes_received, "bytesSent": self.bytes_sent, "conflicts": self.conflicts}

    def watch_requests(self) -> list[str]:
        return [r for r in self.requests if "watch=true" in r]

    def add(self, *objects: dict[str, Any]) -> None:
        with self._changed:
            for obj in objects:
                self.objects.setdefault(obj["kind"], {})[_namespace(obj), obj["metadata"]["name"]] = obj
                self._sorted.pop(obj["kind"], None)  # listed afresh: `add` changes no version

    def add_namespaces(self, *names: str) -> None:
        self.add(*({"kind": "Namespace", "metadata": {"name": name}} for name in names))

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{'https' if self._tls else 'http'}://{host}:{port}"

    def start(self, certificate: tuple[Path, Path] | None = None) -> FakeKubeAPI:
        """Serve on a free port; HTTPS with `certificate` (certificate file, key file)."""
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # connections kept alive, as the API server keeps them
            disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

            def do_GET(self) -> None:
                if self.path == "/debug/counters":  # for a benchmark that runs this server in a process of its own
                    self._answer(200, api.counters())
                    return
                api.requests.append(f"GET {self.path}")
                query = parse_qs(urlsplit(self.path).query)
                route = api._route(urlsplit(self.path).path)
                watch = query.get("watch") == ["true"] and route is not None
                watch = watch and route[1] not in api.forbidden  # type: ignore[index]
                if watch and self.headers.get("Authorization", "") == f"Bearer {api.token}":
                    assert route is not None
                    api.stream_watch(self, {k: v[-1] for k, v in query.items()}, route[0], route[2])
                    return
                path = urlsplit(self.path).path
                if api._object_route(path) is not None or api._custom_route(path) is not None:
                    self._answer(*api.write("GET", self.path, self.headers.get("Authorization", ""), None))
                    return
                self._answer(*api.handle(self.path, self.headers.get("Authorization", "")))

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                api.bytes_sent += len(data)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _write(self) -> None:
                api.requests.append(f"{self.command} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                api.bytes_received += length
                try:
                    body = json.loads(self.rfile.read(length)) if length else None
                except ValueError:
                    self._answer(400, _status(400, "BadRequest", "the request body is not JSON"))
                    return
                self._answer(*api.write(self.command, self.path, self.headers.get("Authorization", ""), body))

            do_POST = do_PUT = do_DELETE = _write

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # socketserver's 5 resets connections when many clients call at once

            def handle_error(self, request: Any, client_address: Any) -> None:
                """A client that went away before its answer (a timed-out or stopped server) is routine, as it
                is for the API server; anything else goes to the process's own stderr, never to a test's
                redirected sys.stderr (a thread of this server can outlive the test that started it)."""
                error = sys.exc_info()[1]
                if isinstance(error, ConnectionError | ssl.SSLError):
                    return
                traceback.print_exc(file=sys.__stderr__)

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if certificate is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*map(str, certificate))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self._tls = True
        # serve_forever looks for a shutdown request once per poll_interval (0.5 s by default): each stop()
        # would wait that long.
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.disconnect()  # open watches end with the server, as connections to a dead API server do
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def stream_watch(
        self,
        handler: BaseHTTPRequestHandler,
        query: dict[str, str],
        watched: str = "Node",
        namespace: str | None = None,
    ) -> None:
        """One watch (of one namespace's objects where `namespace` is given): a chunked HTTP/1.1 response of JSON
        events, as the API server streams them."""
        since = int(query.get("resourceVersion") or self.version)
        selected = _selector(query.get("labelSelector", ""))
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time_now() + float(query.get("timeoutSeconds") or 1800)
        handler.protocol_version = "HTTP/1.1"
        handler.close_connection = True
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def send(event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.bytes_sent += len(data)
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        try:
            with self._changed:
                cut = self._cut
                if since < self._oldest:
                    expired = _status(410, "Expired", f"too old resource version: {since} ({self._oldest})")
                    send({"type": "ERROR", "object": expired})
                    handler.wfile.write(b"0\r\n\r\n")
                    return
                sent = since
                seen, oldest = 0, self._oldest  # the history read so far: each wake reads only what is new
                while True:
                    if oldest != self._oldest:
                        seen, oldest = 0, self._oldest  # compacted: what it holds now is all newer than `sent`
                    fresh, seen = self._history[seen:], len(self._history)
                    for version, kind, obj, resource in fresh:
                        wanted = resource == watched and selected(obj)
                        wanted = wanted and (namespace is None or _namespace(obj) == namespace)
                        if version > sent and (kind == "BOOKMARK" or wanted):
                            sent = version
                            if kind == "BOOKMARK":
                                if bookmarks:
                                    mark = copy.deepcopy(obj)
                                    mark["metadata"]["resourceVersion"] = str(version)
                                    send({"type": "BOOKMARK", "object": mark})
                            else:
                                send({"type": kind, "object": obj})
                    if self._cut != cut:
                        return  # dropped: no closing chunk, as a broken connection
                    left = deadline - time_now()
                    if left <= 0:
                        handler.wfile.write(b"0\r\n\r\n")
                        return
                    self._changed.wait(left)  # every change and `disconnect` notify
        except (BrokenPipeError, ConnectionResetError):
            return

    def write_kubeconfig(
        self,
        path: Path,
        *,
        token: str | None = None,
        context: str = "fake",
        user: dict[str, Any] | None = None,
        insecure: bool = False,
    ) -> Path:
        """A kubeconfig whose current context points at this server with a bearer token (or `user`'s credentials:
        an `exec` plugin, say); `insecure`: `insecure-skip-tls-verify: true`."""
        credentials = user if user is not None else {"token": token if token is not None else self.token}
        server: dict[str, Any] = {"server": self.url}
        if insecure:
            server["insecure-skip-tls-verify"] = True
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-cluster", "cluster": server}],
            "users": [{"name": "auditor", "user": credentials}],
            "contexts": [
                {"name": context, "context": {"cluster": "fake-cluster", "user": "auditor"}},
            ],
            "current-context": context,
        }
        path.write_text(json.dumps(config))
        return path

    # --- the list API -------------------------------------------------------------------------------------

    def handle(self, raw_path: str, authorization: str) -> tuple[int, dict[str, Any]]:
        if authorization != f"Bearer {self.token}":
            return 401, _status(401, "Unauthorized", "Unauthorized")
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        route = self._route(parts.path)
        if route is None:
            return 404, _status(404, "NotFound", f"the server could not find the requested resource ({parts.path})")
        kind, plural, namespace = route
        if plural in self.forbidden:
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            group = COLLECTIONS[kind][0].split("/")[2] if COLLECTIONS[kind][0].startswith("/apis/") else ""
            qualified = f"{plural}.{group}" if group else plural  # as the API server names it: "deployments.apps"
            message = (
                f'{qualified} is forbidden: User "auditor" cannot list resource "{plural}" '
                f'in API group "{group}" {scope}'
            )
            return 403, _status(403, "Forbidden", message)
        if plural in self.slow:
            time.sleep(self.slow[plural])
        if plural in self.unavailable:
            return 503, _status(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        selected = _selector(query.get("labelSelector", ""))
        with self._changed:
            cached = self._sorted.get(kind)
            if cached is None or cached[0] != self.version:  # sorted once per change, not once per page
                ordered = sorted(self.objects.get(kind, {}).items())
                cached = self._sorted[kind] = (self.version, [obj for _, obj in ordered])
            listed = cached[1]
        items = [o for o in listed if (namespace is None or _namespace(o) == namespace) and selected(o)]
        start = 0
        token = query.get("continue")
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token))
                if decoded["path"] != parts.path:
                    raise ValueError("token from another query")
                start = int(decoded["start"])
            except (ValueError, KeyError, TypeError):
                return 400, _status(400, "BadRequest", "continue key is not valid: incorrect encoded start")
        limit = int(query["limit"]) if query.get("limit") else 0
        end = start + limit if limit > 0 else len(items)
        page = items[start:end]
        metadata: dict[str, Any] = {"resourceVersion": str(self.version) if kind in ("Node", *WATCHED) else "12345"}
        if end < len(items):
            metadata["continue"] = base64.urlsafe_b64encode(
                json.dumps({"path": parts.path, "start": end}).encode()
            ).decode()
            metadata["remainingItemCount"] = len(items) - end
        # As the real API: items carry no kind or apiVersion; the list does.
        stripped = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in page]
        group_version = COLLECTIONS[kind][0].removeprefix("/apis/").removeprefix("/api/")
        return 200, {
            "kind": f"{kind}List",
            "apiVersion": group_version,
            "metadata": metadata,
            "items": stripped,
        }

    @staticmethod
    def _route(path: str) -> tuple[str, str, str | None] | None:
        for kind, (prefix, plural) in COLLECTIONS.items():
            if path == f"{prefix}/{plural}":
                return kind, plural, None
            head = f"{prefix}/namespaces/"
            if path.startswith(head) and path.endswith(f"/{plural}"):
                namespace = path[len(head) : -len(plural) - 1]
                if namespace and "/" not in namespace:
                    return kind, plural, namespace
        return None

    @staticmethod
    def _object_route(path: str) -> tuple[str, str, str] | None:
        """(kind, namespace, name) for the path of one namespaced object, else None."""
        for kind, (prefix, plural) in COLLECTIONS.items():
            head = f"{prefix}/namespaces/"
            if path.startswith(head):
                parts = path[len(head) :].split("/")
                if len(parts) == 3 and parts[1] == plural and parts[0] and parts[2]:
                    return kind, parts[0], parts[2]
        return None

    @staticmethod
    def _custom_route(path: str) -> tuple[str, str, str] | None:
        """(kind, name, subresource or "") for the path of one cluster-scoped custom object, else None."""
        for kind in CUSTOM:
            if kind not in COLLECTIONS:  # a test took the kind away: no CRD, 404
                continue
            prefix, plural = COLLECTIONS[kind]
            head = f"{prefix}/{plural}/"
            if path.startswith(head):
                parts = path[len(head) :].split("/")
                if len(parts) == 1 and parts[0]:
                    return kind, parts[0], ""
                if len(parts) == 2 and parts[0] and parts[1] == "status":
                    return kind, parts[0], "status"
        return None

    def _write_custom(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        """A cluster-scoped custom object: GET, PUT or DELETE by name, PUT of its status, POST to the collection."""
        route = self._custom_route(path)
        kind = route[0] if route is not None else "GPUPolicy"
        plural = COLLECTIONS[kind][1]
        if plural in self.slow:
            time.sleep(self.slow[plural])
        if plural in self.unavailable:
            return 503, _status(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        with self._changed:
            if route is None:  # POST to the collection
                if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
                    return 400, _status(400, "BadRequest", "the object has no metadata")
                name = body["metadata"].get("name")
                if self.get(kind, "", name) is not None:
                    return 409, _status(409, "AlreadyExists", f'{plural}.gpu-admission.io "{name}" already exists')
                return 201, self.apply({**body, "kind": kind})
            _, name, subresource = route
            current = self.get(kind, "", name)
            if current is None:
                return 404, _status(404, "NotFound", f'{plural}.gpu-admission.io "{name}" not found')
            if method == "GET":
                return 200, current
            if method == "DELETE":
                self.delete(kind, "", name)
                return 200, _status(200, "", "") | {"status": "Success"}
            if method != "PUT" or not isinstance(body, dict):
                return 405, _status(405, "MethodNotAllowed", f"{method} is not served for {plural} here")
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                return self._conflict(f"{plural}.gpu-admission.io", name)
            if subresource == "status":
                self.set_status(kind, name, body.get("status") or {})
                return 200, self.get(kind, "", name) or {}
            return 200, self.apply({**body, "kind": kind})

    def write(self, method: str, raw_path: str, authorization: str, body: Any) -> tuple[int, dict[str, Any]]:
        """GET one object; POST, PUT or DELETE a writable one, with the API server's resourceVersion checks."""
        if authorization != f"Bearer {self.token}":
            return 401, _status(401, "Unauthorized", "Unauthorized")
        path = urlsplit(raw_path).path
        collection = self._route(path)
        if self._custom_route(path) is not None or (method == "POST" and collection and collection[0] in CUSTOM):
            return self._write_custom(method, path, body)
        target = self._object_route(path)
        kind = target[0] if target is not None else collection[0] if collection is not None else None
        if kind is None or (method == "POST") != (target is None):
            return 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")
        plural = COLLECTIONS[kind][1]
        if plural in self.slow:
            time.sleep(self.slow[plural])
        if plural in self.unavailable:
            return 503, _status(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        if method != "GET" and kind not in WRITABLE:
            return 405, _status(405, "MethodNotAllowed", f"{method} is not served for {plural} here")
        with self._changed:
            if method == "POST":
                assert collection is not None and collection[2] is not None
                if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
                    return 400, _status(400, "BadRequest", "the object has no metadata")
                name, namespace = body["metadata"].get("name"), collection[2]
                if self.get(kind, namespace, name) is not None:
                    return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
                obj = copy.deepcopy(body)
                obj["metadata"]["namespace"] = namespace
                obj["metadata"].pop("resourceVersion", None)
                self.put({**obj, "kind": kind})
                return 201, self.get(kind, namespace, name) or {}
            assert target is not None
            _, namespace, name = target
            current = self.get(kind, namespace, name)
            if current is None:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            if method == "GET":
                return 200, current
            wanted = ((body or {}).get("metadata") or {}).get("resourceVersion") if method == "PUT" else None
            if method == "DELETE":
                wanted = ((body or {}).get("preconditions") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                return self._conflict(plural, name)
            if method == "DELETE":
                self.delete(kind, namespace, name)
                return 200, _status(200, "", "") | {"status": "Success"}
            obj = copy.deepcopy(body)
            obj["metadata"]["namespace"] = namespace
            self.put({**obj, "kind": kind})
            return 200, self.get(kind, namespace, name) or {}

    def _conflict(self, resource: str, name: str) -> tuple[int, dict[str, Any]]:
        """A write that named an older resourceVersion: 409, in the API server's words."""
        self.conflicts += 1
        message = (
            f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; please apply your '
            "changes to the latest version and try again"
        )
        return 409, _status(409, "Conflict", message)

    def list_requests(self, plural: str) -> Iterable[str]:
        return [r for r in self.requests if r.split("?")[0].endswith(f"/{plural}")]


@dataclass(frozen=True)
class LoopbackCluster:
    """A started `FakeKubeAPI`, the policies directory written for it and a kubeconfig pointing at it."""

    api: FakeKubeAPI
    policies: Path  # the directory
    kubeconfig: str  # the file's path


@contextmanager
def loopback_cluster(
    tmp_path: Path,
    *,
    namespaces: Iterable[str] = (),
    nodes: Iterable[dict[str, Any]] = (),
    objects: Iterable[dict[str, Any]] = (),
    policies: dict[str, str] | None = None,
) -> Iterator[LoopbackCluster]:
    """A loopback Kubernetes API for running `gpu-webhook` (the CLI or the server) against: started, holding
    `namespaces`, then `nodes` (put as the watch sees them), then `objects` (ResourceSlices, DeviceClasses,
    claims: `put` in this order); `policies` ({file name: text}) written to `tmp_path/policies` and a kubeconfig
    to `tmp_path/kubeconfig`. The API is stopped on leaving, whatever happened inside."""
    api = FakeKubeAPI().start()
    try:
        api.add_namespaces(*namespaces)
        for node in nodes:
            api.put_node(node)
        for obj in objects:
            api.put(obj)
        directory = tmp_path / "policies"
        directory.mkdir()
        for name, text in (policies or {}).items():
            (directory / name).write_text(text)
        yield LoopbackCluster(api, directory, str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    finally:
        api.stop()


def _selector(text: str) -> Any:
    """A label selector's equality (`k=v`, `k==v`, `k!=v`) and existence (`k`, `!k`) terms, as a predicate."""
    terms = [term.strip() for term in text.split(",") if term.strip()]

    def selected(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        for term in terms:
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key) == value:
                    return False
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                if labels.get(key) != value:
                    return False
            elif term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif term not in labels:
                return False
        return True

    return selected


def _namespace(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("namespace", ""))


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
