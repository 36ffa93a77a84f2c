"""A local stand-in for the Kubernetes API server's list endpoints, for testing `gpu-webhook audit`.

Plain HTTP on 127.0.0.1 with a bearer token. It serves the collections `audit` lists, cluster-wide and per
namespace, with real chunking: `limit` cuts a page, `metadata.continue` carries an opaque token, and the token
is only valid for the query it came from. Modes reproduce the errors a real cluster gives: a wrong token is
401, and `forbidden` resources answer 403 with a Kubernetes Status. Every request is recorded for assertions.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
}

TOKEN = "fake-token"


@dataclass
class FakeKubeAPI:
    """The server's state: objects by kind, the accepted token, forbidden resources, recorded requests."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    token: str = TOKEN
    forbidden: set[str] = field(default_factory=set)  # resource plurals that answer 403
    requests: list[str] = field(default_factory=list)  # "GET /api/v1/pods?limit=2"
    _server: ThreadingHTTPServer | None = None

    def add(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            self.objects.setdefault(obj["kind"], []).append(obj)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubeAPI:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.requests.append(f"GET {self.path}")
                status, body = api.handle(self.path, self.headers.get("Authorization", ""))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def write_kubeconfig(
        self, path: Path, *, token: str | None = None, context: str = "fake", user: dict[str, Any] | None = None
    ) -> Path:
        """A kubeconfig whose current context points at this server with a bearer token (or `user`'s credentials:
        an `exec` plugin, say)."""
        credentials = user if user is not None else {"token": token if token is not None else self.token}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-cluster", "cluster": {"server": self.url}}],
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
            return 404, _status(
                404, "NotFound", f"the server could not find the requested resource ({parts.path})"
            )
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
        items = [o for o in self.objects.get(kind, []) if namespace is None or _namespace(o) == namespace]
        items.sort(key=lambda o: (_namespace(o), o.get("metadata", {}).get("name", "")))
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
        metadata: dict[str, Any] = {"resourceVersion": "12345"}
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

    def list_requests(self, plural: str) -> Iterable[str]:
        return [r for r in self.requests if r.split("?")[0].endswith(f"/{plural}")]


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
