"""gunicorn, in process: the settings that make it fit an admission webhook, and its hooks.

- `WebhookWorker` (gthread, see worker.py): kept-alive connections wait in a poller, not a thread;
- a probe listener (plain HTTP, `--probe-port`) beside the HTTPS one, served by the same workers;
- worker_connections per worker within the open-files limit, which is raised to its hard limit first (a
  container's soft limit may be 1024): a worker out of descriptors could accept nothing;
- keepalive 120 s: longer than the API server's idle timeout (Go's 90 s), so the client always closes an
  idle connection first and never sends a review on a connection the server is closing;
- graceful_timeout 8 s: SIGTERM finishes the reviews in flight and exits within 10 s;
- TLS from `state.certificate.context`, which each worker's watcher replaces when the files change;
- the app is loaded before the fork (preload): workers share the loaded policies and start fast; the arbiter
  (`WebhookArbiter`) keeps its copy of the files' state fresh, since every later worker is forked from it.
"""

from __future__ import annotations

import os
import resource
import ssl
import sys
from dataclasses import dataclass
from typing import Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter

from webhook.server import metrics
from webhook.server.logs import JsonFormatter
from webhook.server.state import ServerState
from webhook.server.tls import BoundedSSLSocket
from webhook.server.worker import WebhookWorker

KEEPALIVE_SECONDS = 120
GRACEFUL_TIMEOUT_SECONDS = 8
REQUEST_TIMEOUT_SECONDS = 10.0
WORKER_CONNECTIONS = 1000  # per worker; beyond it, a new connection closes the oldest idle one (worker.py)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    host: str = "0.0.0.0"
    port: int = 8443
    probe_port: int = 0  # plain-HTTP /healthz and /readyz; 0: none (the HTTPS port serves them too)
    workers: int = 2
    threads: int = 8
    keepalive: int = KEEPALIVE_SECONDS
    graceful_timeout: int = GRACEFUL_TIMEOUT_SECONDS
    request_timeout: float = REQUEST_TIMEOUT_SECONDS
    log_level: str = "info"


class JsonLogger(glogging.Logger):
    """gunicorn's logger, writing the same JSON lines as the webhook."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter())


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def worker_connections() -> int:
    """WORKER_CONNECTIONS, or fewer where the open-files limit (raised to its hard limit here) is lower: each
    connection holds a descriptor, and so may each closing one (worker.MAX_LINGERING, capped to the same)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return WORKER_CONNECTIONS
    return max(16, min(WORKER_CONNECTIONS, (soft - 128) // 2))


def _worker_tmp_dir() -> str | None:
    """gunicorn's heartbeat files: /dev/shm (a tmpfs even with a read-only root filesystem) if usable."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class WebhookArbiter(Arbiter):
    """gunicorn's arbiter, following the policy and certificate files as the workers do (`ServerState.follow`).

    Its main loop runs `manage_workers` about once a second and before it forks a replacement worker. SIGHUP's
    `reload()` forks the new workers before calling it: they start from the last look's copy (about a second old
    at most), then look at the files themselves (`post_fork`).
    """

    def manage_workers(self) -> None:
        try:
            self.app.state.follow()
        except Exception:  # never stop the arbiter for it: a new worker also looks at the files itself
            self.log.exception("following the policy and certificate files failed")
        super().manage_workers()


class WebhookServer(BaseApplication):
    """`gunicorn` for one preloaded Flask app and its state."""

    def __init__(self, wsgi_app: Any, state: ServerState, options: ServeOptions) -> None:
        self.wsgi_app = wsgi_app
        self.state = state
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        state, o = self.state, self.options
        if state.certificate is None:
            raise ValueError("the webhook serves TLS only: the state needs a certificate")
        BoundedSSLSocket.request_timeout = o.request_timeout
        WebhookWorker.probe_port = o.probe_port
        credentials = state.credentials
        WebhookWorker.ledger_in_threads = credentials is not None and credentials.configuration is not None
        connections = worker_connections()
        WebhookWorker.max_lingering = connections

        def ssl_context(_config: Any, _default_factory: Any) -> ssl.SSLContext:
            assert state.certificate is not None
            return state.certificate.context

        def post_fork(_server: Any, _worker: Any) -> None:
            state.refresh()  # a worker respawned after a crash starts from what is on disk now

        def post_worker_init(_worker: Any) -> None:
            assert state.certificate is not None
            metrics.set_certificate_expiry(state.certificate.not_after.timestamp())
            state.start_policies()  # the cluster source: this worker's GPUPolicy list + watch
            state.start_inventory()  # one list + watch per worker: threads do not survive the fork
            state.start_watcher()
            state.wait_for_policies(_worker.notify)  # no review before the GPUPolicy list: the others serve
            state.wait_for_budgets(_worker.notify)  # no review before the budget lists: the others serve

        def worker_exit(_server: Any, _worker: Any) -> None:
            state.stop_watcher()

        def child_exit(_server: Any, worker: Any) -> None:
            metrics.mark_worker_dead(worker.pid)

        settings: dict[str, Any] = {
            "bind": [_bind(o.host, o.port)] + ([_bind(o.host, o.probe_port)] if o.probe_port else []),
            "workers": o.workers,
            "worker_class": WebhookWorker,
            "threads": o.threads,
            "worker_connections": connections,
            "keepalive": o.keepalive,
            "timeout": 30,
            "graceful_timeout": o.graceful_timeout,
            "preload_app": True,
            "certfile": str(state.certificate.cert_file),
            "keyfile": str(state.certificate.key_file),
            "ssl_context": ssl_context,
            "post_fork": post_fork,
            "post_worker_init": post_worker_init,
            "worker_exit": worker_exit,
            "child_exit": child_exit,
            "logger_class": JsonLogger,
            "loglevel": o.log_level,
            "errorlog": "-",
            "accesslog": None,  # the review log says more, once
            "proc_name": "gpu-webhook",
            "control_socket_disable": True,  # no socket file (read-only root filesystem, parallel servers)
            "worker_tmp_dir": _worker_tmp_dir(),
        }
        for key, value in settings.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return self.wsgi_app

    def run(self) -> None:
        """`BaseApplication.run`, with `WebhookArbiter`."""
        try:
            WebhookArbiter(self).run()
        except RuntimeError as exc:
            sys.stderr.write(f"\nError: {exc}\n\n")
            sys.stderr.flush()
            sys.exit(1)
