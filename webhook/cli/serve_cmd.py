"""`gpu-webhook serve`: the admission webhook over HTTPS (gunicorn, in process).

Everything that can be wrong before serving is checked first and said in one line, exit 2: a missing or
broken policy directory (the loader's lines), a missing, mismatched or expired certificate (or chain). Heavy imports
happen inside `run`, after PROMETHEUS_MULTIPROC_DIR is set: prometheus_client reads it at import time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
from pathlib import Path

from webhook.admission.cluster.nodes import STALE_AFTER_S
from webhook.cli.options import (
    POLICIES_HELP,
    add_custom_resources_argument,
    custom_kind_table,
    missing_policy_directory,
    policy_directory,
)
from webhook.server import GRACE_S, START_WAIT_S

DEV_CERTS_DIR = Path("certs/dev")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class ServeError(Exception):
    """A reason not to start, in one line for people."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the webhook (HTTPS: /mutate, /validate, /healthz, /readyz; metrics on --metrics-port)",
        description=(
            "Serve /mutate and /validate to the Kubernetes API server over HTTPS, with hot reload of the "
            "policy directory and the certificate files, and Prometheus metrics on a second port."
        ),
    )
    parser.add_argument("--host", default=None, help="address to listen on (default 0.0.0.0; 127.0.0.1 with --dev)")
    parser.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    parser.add_argument("--cert-file", metavar="FILE", help="serving certificate (PEM), e.g. tls.crt")
    parser.add_argument("--key-file", metavar="FILE", help="its private key (PEM), e.g. tls.key")
    parser.add_argument(
        "--dev",
        action="store_true",
        help=f"make (or reuse) a throw-away CA and certificate for localhost, 127.0.0.1 and --host in {DEV_CERTS_DIR}/",
    )
    parser.add_argument(
        "--policy-source",
        choices=("files", "cluster"),
        default="files",
        help="where the policies come from: files (default: the --policies directory, reloaded when it changes) or "
        "cluster (the GPUPolicy objects of the cluster, listed and watched with the --kubeconfig or in-cluster "
        "credentials; each object's status says whether it is served)",
    )
    parser.add_argument("--policies", metavar="DIR", default=None, help=POLICIES_HELP + " (--policy-source files)")
    parser.add_argument(
        "--policy-start-wait",
        metavar="SECONDS",
        type=float,
        default=START_WAIT_S,
        help=f"with --policy-source cluster, a starting worker accepts no connection until it has listed the "
        f"GPUPolicy objects, for at most this long; past it, it answers the probes (not ready, saying why) and "
        f"refuses reviews with 503 until the list completes; never the built-in defaults (default {START_WAIT_S:g})",
    )
    add_custom_resources_argument(parser)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker (default 8)")
    parser.add_argument(
        "--metrics-port", type=int, default=9090, help="plain-HTTP Prometheus metrics port (default 9090; 0: off)"
    )
    parser.add_argument(
        "--probe-port",
        type=int,
        default=0,
        help="plain-HTTP port for the kubelet's probes, GET /healthz and /readyz only, on a listener of their own "
        "(default 0: none; the HTTPS port serves them too)",
    )
    parser.add_argument(
        "--unready-before-expiry",
        metavar="DURATION",
        default="7d",
        help="fail /readyz this long before the certificate expires, so that it gets renewed (default 7d; 0d: "
        "only once expired; every replica shares the certificate, so all go unready together)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        default=None,
        help="for the cluster checks' node inventory when not running in a pod (default $KUBECONFIG; in a pod, "
        "its service account; with neither, the cluster checks are off)",
    )
    parser.add_argument(
        "--cluster-stale-after",
        metavar="SECONDS",
        type=float,
        default=STALE_AFTER_S,
        help="skip the cluster checks once the node watch has been broken this long (default 120)",
    )
    parser.add_argument(
        "--budget-namespace",
        metavar="NAMESPACE",
        default=None,
        help="where the GPU budget ledger's ConfigMaps live (default: the webhook pod's own namespace, else "
        "gpu-admission); the RBAC Role for them must be there",
    )
    parser.add_argument(
        "--budget-grace",
        metavar="SECONDS",
        type=float,
        default=GRACE_S,
        help=f"release a budget reservation whose pod never appeared (refused by a later admission step) this "
        f"long after it was made, once a GET confirms it (default {GRACE_S:g})",
    )
    parser.add_argument(
        "--budget-start-wait",
        metavar="SECONDS",
        type=float,
        default=START_WAIT_S,
        help=f"a starting worker takes no review until it has listed the ResourceQuotas and the ledger, while the "
        f"other workers serve; it waits at most this long, then serves and asks the API server for each "
        f"namespace's quotas until the list completes (default {START_WAIT_S:g})",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="the least severe log records written (JSON lines on stderr; default: info)",
    )
    # For tests: how often the certificate files are looked at (the default keeps rotation under 60 s).
    parser.add_argument("--cert-reload-interval", type=float, default=30.0, help=argparse.SUPPRESS)
    parser.add_argument("--policy-reload-interval", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _serve(args)
    except ServeError as exc:
        sys.stderr.write(f"gpu-webhook serve: {exc}\n")
        return 2


def _check_args(args: argparse.Namespace) -> None:
    if args.dev and (args.cert_file or args.key_file):
        raise ServeError("--dev makes its own certificate: drop --cert-file/--key-file, or drop --dev")
    if not args.dev and not (args.cert_file and args.key_file):
        raise ServeError(
            "the webhook serves HTTPS only: pass --cert-file FILE --key-file FILE "
            "(see `gpu-webhook certs generate`), or --dev for a local throw-away certificate"
        )
    for name in ("port", "metrics_port", "probe_port"):
        value = getattr(args, name)
        if not 0 <= value <= 65535 or (name == "port" and value == 0):
            raise ServeError(f"--{name.replace('_', '-')} {value}: not a TCP port (1-65535)")
    from webhook.certs import CertError, parse_duration

    try:
        args.unready_before = parse_duration(args.unready_before_expiry)
    except CertError as exc:
        raise ServeError(f"--unready-before-expiry: {exc}") from None
    if args.workers < 1 or args.threads < 1:
        raise ServeError("--workers and --threads must be at least 1")
    if args.cluster_stale_after <= 0:
        raise ServeError(f"--cluster-stale-after {args.cluster_stale_after:g}: must be more than 0 seconds")
    if args.budget_grace <= 0:
        raise ServeError(f"--budget-grace {args.budget_grace:g}: must be more than 0 seconds")
    if args.budget_start_wait < 0:
        raise ServeError(f"--budget-start-wait {args.budget_start_wait:g}: must be 0 seconds or more")
    if args.policy_start_wait < 0:
        raise ServeError(f"--policy-start-wait {args.policy_start_wait:g}: must be 0 seconds or more")
    if args.policy_source == "cluster" and args.policies is not None:
        raise ServeError(
            f"--policies {args.policies}: --policy-source cluster reads GPUPolicy objects from the API server, not "
            "files: drop --policies, or use --policy-source files"
        )
    if args.kubeconfig is not None and not os.path.isfile(args.kubeconfig):
        raise ServeError(f"--kubeconfig {args.kubeconfig}: no such file")
    if args.metrics_port and args.metrics_port == args.port:
        raise ServeError(f"--metrics-port {args.metrics_port} is the HTTPS port too: pick another")
    if args.probe_port and args.probe_port in (args.port, args.metrics_port):
        other = "HTTPS" if args.probe_port == args.port else "metrics"
        raise ServeError(f"--probe-port {args.probe_port} is the {other} port too: pick another")


def _certificate(args: argparse.Namespace, host: str) -> tuple[Path, Path]:
    from webhook import certs

    if args.dev:
        try:
            paths = certs.generate_dev_certs(DEV_CERTS_DIR, hosts=[host])  # clients connect to that address
        except (certs.CertError, OSError) as exc:
            raise ServeError(f"cannot make dev certificates in {DEV_CERTS_DIR}: {exc}") from None
        return paths.tls_cert, paths.tls_key
    from webhook.server.tls import expiry_notice

    cert_file, key_file = Path(args.cert_file), Path(args.key_file)
    try:
        certs.verify_key_pair(cert_file, key_file)
        validity = certs.chain_validity(cert_file)
    except certs.CertError as exc:
        raise ServeError(str(exc)) from None
    now = certs.utcnow()
    if validity.not_after <= now:  # the API server would refuse every handshake: the certificate's or the chain's
        raise ServeError(expiry_notice(cert_file, validity, now, dt.timedelta(0)))
    return cert_file, key_file


def _policy_dir(args: argparse.Namespace) -> Path | None:
    """The policy directory, or None with the cluster source."""
    if args.policy_source == "cluster":
        return None
    problem = missing_policy_directory(args.policies)
    if problem:
        raise ServeError(problem)
    return Path(policy_directory(args.policies))


def _multiproc_dir() -> str:
    """A fresh directory for the workers' metric files, made before anything imports prometheus_client."""
    parent = os.environ.get(MULTIPROC_ENV)
    if not parent:
        shm = Path("/dev/shm")
        parent = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    directory = tempfile.mkdtemp(prefix="gpu-webhook-metrics-", dir=parent)
    os.environ[MULTIPROC_ENV] = directory
    return directory


def _serve(args: argparse.Namespace) -> int:
    _check_args(args)
    policy_dir = _policy_dir(args)
    host = args.host or ("127.0.0.1" if args.dev else "0.0.0.0")
    cert_file, key_file = _certificate(args, host)

    metrics_dir, arbiter = _multiproc_dir(), os.getpid()
    try:
        return _start(args, host, policy_dir, cert_file, key_file)
    finally:
        # Workers are forked from inside _start and leave through here too: only the arbiter cleans up.
        if os.getpid() == arbiter:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _start(args: argparse.Namespace, host: str, policy_dir: Path | None, cert_file: Path, key_file: Path) -> int:
    import logging

    from webhook.admission.policy.loader import PolicyLoadError
    from webhook.server import logs

    logs.configure(getattr(logging, args.log_level.upper()))

    from webhook.admission.policy.model import PolicySet
    from webhook.server.app import create_app
    from webhook.server.inventory import find_credentials
    from webhook.server.policies import PolicyStore
    from webhook.server.runner import ServeOptions, WebhookServer
    from webhook.server.state import ServerState
    from webhook.server.tls import CertStore

    credentials = find_credentials(args.kubeconfig)  # each worker watches with these, after the fork
    if policy_dir is None and credentials.configuration is None:
        raise ServeError(
            f"--policy-source cluster reads GPUPolicy objects from the API server, but there are no credentials "
            f"({credentials.source.removeprefix('off: ')}): run in a pod, or pass --kubeconfig FILE"
        )
    try:
        # The cluster source: nothing is served before a worker's first list (wait_for_policies), not even this.
        policies = PolicyStore(PolicySet()) if policy_dir is None else PolicyStore.from_directory(policy_dir)
    except PolicyLoadError as exc:
        problems = getattr(exc, "problems", None) or [str(exc)]
        raise ServeError(f"invalid policies in {policy_dir}:\n  " + "\n  ".join(problems)) from None
    except OSError as exc:
        raise ServeError(f"cannot read policies in {policy_dir}: {exc.strerror or exc}") from None
    try:
        certificate = CertStore(cert_file, key_file, unready_before=args.unready_before)
    except Exception as exc:  # ssl.SSLError: a pair the TLS library refuses
        raise ServeError(f"cannot use {cert_file} with {key_file}: {exc}") from None
    from webhook.server.budgets import own_namespace

    try:
        kinds = custom_kind_table(args.custom_resources)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    from functools import partial

    from webhook.admission.customresources import evaluate

    state = ServerState(
        policies=policies,
        evaluate=partial(evaluate, kinds=kinds),  # custom resources judged by their templates
        certificate=certificate,
        policy_interval=args.policy_reload_interval,
        cert_interval=args.cert_reload_interval,
        credentials=credentials,
        cluster_stale_after=args.cluster_stale_after,
        budget_namespace=own_namespace(args.budget_namespace),
        budget_grace=args.budget_grace,
        budget_start_wait=args.budget_start_wait,
        policy_source=args.policy_source,
        policy_start_wait=args.policy_start_wait,
        shared_dir=Path(os.environ[MULTIPROC_ENV]),  # this server's own (made by _serve), removed as it exits
    )
    notice = certificate.expiry_notice()
    if notice:
        unready = "not ready: " if certificate.problem() else ""
        logs.log(logging.getLogger(logs.LOGGER), logging.WARNING, unready + notice, event="certificate-expiry")

    if args.metrics_port:
        _start_metrics(host, args.metrics_port)
    _banner(args, host, policy_dir, len(policies.current.policies), cert_file, credentials.source)
    options = ServeOptions(
        host=host,
        port=args.port,
        probe_port=args.probe_port,
        workers=args.workers,
        threads=args.threads,
        log_level=args.log_level,
    )
    WebhookServer(create_app(state), state, options).run()
    return 0


def _start_metrics(host: str, port: int) -> None:
    """The metrics endpoint: a thread in this (the arbiter) process, summing every worker's files."""
    from webhook.server.metrics import multiprocess_registry, serve_metrics

    try:
        serve_metrics(host, port, multiprocess_registry())
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port} for metrics: {exc.strerror or exc}") from None


def _banner(
    args: argparse.Namespace, host: str, policy_dir: Path | None, count: int, cert_file: Path, credentials: str
) -> None:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    source = f"{count} policies from {policy_dir}" if policy_dir is not None else "GPUPolicy objects of the cluster"
    lines = [f"gpu-webhook: serving https://{shown}:{args.port} ({source})"]
    if args.metrics_port:
        lines.append(f"  metrics: http://{shown}:{args.metrics_port}/metrics")
    if args.probe_port:
        lines.append(f"  probes:  http://{shown}:{args.probe_port}/healthz and /readyz")
    if args.dev:
        ca = DEV_CERTS_DIR / "ca.crt"
        lines.append(f"  dev CA: {ca}")
        lines.append(f"  try:    curl --cacert {ca} https://{shown}:{args.port}/healthz")
    else:
        lines.append(f"  certificate: {cert_file}")
    lines.append(f"  cluster checks: {credentials}")  # said once: the credentials, or why the checks are off
    print("\n".join(lines), flush=True)
