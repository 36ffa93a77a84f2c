"""The server benchmark's baseline: the webhook's own gunicorn and TLS settings around a constant answer.

`python -m bench.baseline_app --port P --cert-file F --key-file F --policies DIR [--workers 2 --threads 8]`
serves `POST /mutate` with a Flask endpoint that parses the review as JSON and answers `allowed: true`,
echoing its uid: the least any Python webhook does per review. Everything else is the real server's: the
same `WebhookServer` (worker class, workers, threads, keep-alive, TLS context and certificate, watcher
thread), so the difference from `gpu-webhook serve` is what the webhook does per review: checks, engine,
patch, metrics and the log line.

With `--webhook` it serves the real webhook app (engine, metrics in multiprocess mode and review log lines, as
`gpu-webhook serve` has them). With `--stock` the app runs under gunicorn's own `gthread` worker, with gunicorn's
own TLS handling, instead of the webhook's worker: the stock stack, for comparison.

With `--fixed-decision` it serves the real webhook app instead (metrics in multiprocess mode and review log
lines, as `gpu-webhook serve` has them), whose engine is replaced by the decision for the engine benchmark's
review (a), computed once: what the webhook costs without the engine, for review (a) only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from flask import Flask, Response, request
from gunicorn.app.base import BaseApplication


def create_app() -> Flask:
    app = Flask("gpu_admission_baseline")

    @app.post("/mutate")
    def mutate() -> Response:
        review = json.loads(request.get_data())
        answer = {
            "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True},
        }
        return Response(json.dumps(answer), mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        return Response('{"ready": true}', mimetype="application/json")

    return app


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_app", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-file", required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--policies", required=True, help="a policy directory (the watcher thread polls it)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--fixed-decision", action="store_true", help="the webhook app, without its engine")
    parser.add_argument("--webhook", action="store_true", help="the webhook app, engine included")
    parser.add_argument("--stock", action="store_true", help="gunicorn's own gthread worker, not the webhook's")
    args = parser.parse_args(argv)

    metrics_dir, arbiter = None, os.getpid()
    if args.fixed_decision or args.webhook:  # as `gpu-webhook serve` does, before anything imports prometheus_client
        metrics_dir = tempfile.mkdtemp(prefix="gpu-admission-bench-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        return _serve(args)
    finally:
        if metrics_dir and os.getpid() == arbiter:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _serve(args: argparse.Namespace) -> int:
    from webhook.server import logs
    from webhook.server.policies import PolicyStore
    from webhook.server.runner import ServeOptions, WebhookServer
    from webhook.server.state import ServerState
    from webhook.server.tls import CertStore

    logs.configure()
    state = ServerState(
        policies=PolicyStore.from_directory(Path(args.policies)),
        certificate=CertStore(args.cert_file, args.key_file),
    )
    app: Any = create_app()
    if args.webhook:
        from webhook.server.app import create_app as create_webhook_app

        app = create_webhook_app(state)
    if args.fixed_decision:
        from bench.engine import NAMESPACE, SCENARIOS
        from webhook.admission.engine import evaluate
        from webhook.server.app import create_app as create_webhook_app

        fixed = evaluate(SCENARIOS["a: 2 containers, mutate"], NAMESPACE, state.policies.current)
        state.evaluate = lambda obj, namespace, policies, old, nodes=None, claims=None: fixed
        app = create_webhook_app(state)
    options = ServeOptions(host=args.host, port=args.port, workers=args.workers, threads=args.threads)
    if args.stock:
        StockServer(app, args).run()
    else:
        WebhookServer(app, state, options).run()
    return 0


class StockServer(BaseApplication):
    """gunicorn as shipped: its own `gthread` worker and TLS, with the webhook's workers, threads and keep-alive."""

    def __init__(self, wsgi_app: Any, args: argparse.Namespace) -> None:
        self.wsgi_app = wsgi_app
        self.args = args
        super().__init__()

    def load_config(self) -> None:
        from webhook.server.runner import KEEPALIVE_SECONDS

        settings: dict[str, Any] = {
            "bind": [f"{self.args.host}:{self.args.port}"],
            "workers": self.args.workers,
            "worker_class": "gthread",
            "threads": self.args.threads,
            "keepalive": KEEPALIVE_SECONDS,
            "preload_app": True,
            "certfile": self.args.cert_file,
            "keyfile": self.args.key_file,
            "errorlog": "-",
            "accesslog": None,
            "control_socket_disable": True,
        }
        for key, value in settings.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return self.wsgi_app


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
